//! The ordered parallel executor.
//!
//! Work is cut into units (a few samples of one lane's chunk), each tagged with a per-lane
//! sequence number. Any worker thread may process any unit's stateless part. The finished unit
//! goes into its lane's reorder ring; whichever worker finds the lane's next unit ready (and
//! the lane free) pushes it through the lane's accumulators. Lanes thus progress in parallel,
//! each strictly in order, with no serial pump. Backpressure: a lane gets new units only while
//! it has fewer than `prefetch_steps` steps ready beyond what the consumer took, and units in
//! flight are bounded per lane and in total.

mod lane;
mod restore;

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::checkpoint::{self, Cursor, LaneState, RunFingerprint};
use crate::digest::Digest;
use crate::error::{Error, OpError, Result, record_error};
use crate::id::{Lane, Step};
use crate::operator::LaneContext;
use crate::operators::{Operators, Plan, apply_chain};
use crate::source::{Chunk, Datasets, WorkSource};
use crate::step::{LaneStep, LocalStep, lane_digest};
use crate::topology::Topology;

use lane::{LaneRun, LaneSetup, Progress, UnitOutput};
use restore::{Level, Rebuilder};

/// What to do with a record that is malformed (an [`OpError::Data`] from a reader or a
/// stateless part).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum BadRecords {
    /// Stop the run with an error naming dataset, shard and row.
    #[default]
    Fail,
    /// Skip the record and count it. The skip is a function of the record alone, so it is the
    /// same on every topology and after every restore.
    Skip,
}

/// What happens when the input ends and a lane cannot fill a whole step.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum Tail {
    /// The run ends at the first step some lane cannot fill (steps stay fixed-shape).
    #[default]
    Drop,
    /// Steps continue while any lane has rows; lanes give what they have (every sample is
    /// delivered).
    Partial,
}

/// What the run computes: everything here is part of the checkpoint fingerprint.
#[derive(Clone)]
pub struct RunSpec {
    /// The operators.
    pub operators: Operators,
    /// Which samples each lane processes.
    pub source: Arc<dyn WorkSource>,
    /// Where samples are read from.
    pub datasets: Datasets,
    /// The seed accumulators derive their randomness from.
    pub seed: u64,
    /// The bad-record policy.
    pub bad_records: BadRecords,
    /// The end-of-input policy.
    pub tail: Tail,
    /// Facts the run was built from that must not be measured again on restore (token
    /// estimates, for one). Saved in every checkpoint file; read back with
    /// [`checkpoint::metadata`] before building the restored run. Their effect on the data is
    /// covered by the other parts' fingerprints.
    pub metadata: std::collections::BTreeMap<String, String>,
}

impl RunSpec {
    /// The run's identity, part by part, for the given lane layout.
    pub fn fingerprint(&self, topology: &Topology) -> RunFingerprint {
        let mut f = RunFingerprint::new();
        f.insert("format".into(), checkpoint::FORMAT_VERSION.to_string());
        f.insert("pipeline".into(), self.operators.fingerprint().to_hex());
        f.insert("work source".into(), Digest::of(self.source.fingerprint().as_bytes()).to_hex());
        f.insert("datasets".into(), self.datasets.names().join(", "));
        for m in self.datasets.manifests() {
            f.insert(format!("dataset {}", m.name), m.fingerprint().to_hex());
        }
        f.insert("lanes".into(), topology.lanes().to_string());
        f.insert("rows per step".into(), topology.global_rows().to_string());
        f.insert("seed".into(), self.seed.to_string());
        f.insert("bad records".into(), format!("{:?}", self.bad_records));
        f.insert("tail".into(), format!("{:?}", self.tail));
        f
    }
}

/// How the run executes: none of this changes a byte of the output.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ExecOptions {
    /// Worker threads.
    pub threads: usize,
    /// Steps each lane may prepare ahead of the consumer.
    pub prefetch_steps: u64,
    /// Samples per unit of work.
    pub unit_samples: usize,
    /// Take lane snapshots (for checkpoints) every this many steps.
    pub snapshot_every: u64,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            prefetch_steps: 2,
            unit_samples: 16,
            snapshot_every: 1,
        }
    }
}

impl ExecOptions {
    fn check(&self) -> Result<()> {
        let bad = |m: &str| Err(Error::Config(m.to_string()));
        if self.threads == 0 {
            return bad("threads must be at least 1");
        }
        if self.prefetch_steps == 0 {
            return bad("prefetch_steps must be at least 1");
        }
        if self.unit_samples == 0 {
            return bad("unit_samples must be at least 1");
        }
        if self.snapshot_every == 0 {
            return bad("snapshot_every must be at least 1");
        }
        Ok(())
    }
}

/// Runs a pipeline for this rank's lanes and hands out local steps in order.
pub struct Engine {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    next_step: u64,
    /// Lane states after the last delivered step (or at start), when snapshotted.
    states: Option<Vec<Arc<LaneState>>>,
    fingerprint: RunFingerprint,
    metadata: std::collections::BTreeMap<String, String>,
}

struct Shared {
    plan: Arc<Plan>,
    source: Arc<dyn WorkSource>,
    datasets: Datasets,
    names: Arc<[String]>,
    topology: Topology,
    opts: ExecOptions,
    bad_records: BadRecords,
    tail: Tail,
    slots: Vec<Slot>,
    sched: Mutex<Sched>,
    work_cv: Condvar,
    step_cv: Condvar,
    lane_window: usize,
    total_window: usize,
}

struct Slot {
    lane: Lane,
    inbox: Mutex<Inbox>,
    /// The lane's ordered part. Only drainers lock it, and only with `try_lock`: holding it is
    /// the token that says "I am draining this lane" (the consumer never touches it).
    run: Mutex<LaneRun>,
    /// What the lane has finished, for the consumer.
    out: Mutex<Output>,
}

/// A lane's finished steps and, once it can make no more, its end.
#[derive(Default)]
struct Output {
    steps: VecDeque<LaneStep>,
    /// Why the lane stopped, if it failed.
    error: Option<Error>,
    /// The lane's state once its input has ended (what a partial step of an empty lane saves).
    end_state: Option<Arc<LaneState>>,
}

impl Output {
    /// Moves what the lane finished into the consumer's queue.
    fn collect(&mut self, run: &mut LaneRun) {
        self.steps.extend(run.steps.drain(..));
        if let Some(e) = run.error.take() {
            self.error = Some(e);
        }
        if run.is_finished() && self.end_state.is_none() {
            self.end_state = Some(Arc::new(run.state_now()));
        }
    }
}

/// A lane's reorder ring: finished units waiting for their turn.
#[derive(Default)]
struct Inbox {
    next: u64,
    ring: VecDeque<Option<UnitOutput>>,
}

impl Inbox {
    fn put(&mut self, seq: u64, out: UnitOutput) {
        let i = (seq - self.next) as usize;
        if self.ring.len() <= i {
            self.ring.resize_with(i + 1, || None);
        }
        self.ring[i] = Some(out);
    }

    fn take_next(&mut self) -> Option<UnitOutput> {
        if matches!(self.ring.front(), Some(Some(_))) {
            self.next += 1;
            self.ring.pop_front().flatten()
        } else {
            None
        }
    }

    fn next_ready(&self) -> bool {
        matches!(self.ring.front(), Some(Some(_)))
    }
}

/// The dispatch side of a lane.
struct Dispatch {
    cursor: Cursor,
    chunk: Option<Arc<Chunk>>,
    seq: u64,
    in_flight: usize,
    ended: bool,
    queued: bool,
}

#[derive(Copy, Clone, Default)]
struct LaneProgress {
    made: Progress,
    failed: bool,
}

struct Sched {
    lanes: Vec<Dispatch>,
    progress: Vec<LaneProgress>,
    /// Lanes that have not yet made the step the consumer waits for (and are not done): the
    /// consumer sleeps until this reaches 0, instead of rescanning every lane at each wake.
    behind: usize,
    queue: VecDeque<usize>,
    consumed: u64,
    in_flight: usize,
    /// Workers asleep on `work_cv`, and whether the consumer sleeps on `step_cv`: a notify is
    /// a system call even with nobody waiting, so it is only made for a sleeper.
    idle_workers: usize,
    consumer_waiting: bool,
    shutdown: bool,
    fault: Option<String>,
}

enum UnitKind {
    Samples { chunk: Arc<Chunk>, n: u64, start: usize, end: usize },
    End,
    SourceFailed(String),
}

struct Unit {
    slot: usize,
    seq: u64,
    kind: UnitKind,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock means a worker panicked; the panic is reported as a fault, and the data
    // behind the lock is only read to shut down.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Sched {
    fn is_behind(&self, i: usize) -> bool {
        let p = &self.progress[i];
        p.made.steps_made <= self.consumed && !p.made.done && !p.failed
    }

    fn count_behind(&mut self) {
        self.behind = (0..self.progress.len()).filter(|&i| self.is_behind(i)).count();
    }

    fn eligible(&self, i: usize, shared: &Shared) -> bool {
        let d = &self.lanes[i];
        let p = &self.progress[i];
        !d.ended
            && !p.made.done
            && d.in_flight < shared.lane_window
            && p.made.steps_made < self.consumed + shared.opts.prefetch_steps
    }

    fn enqueue(&mut self, i: usize, shared: &Shared) {
        if !self.lanes[i].queued && self.eligible(i, shared) {
            self.lanes[i].queued = true;
            self.queue.push_back(i);
        }
    }

    fn next_unit(&mut self, shared: &Shared) -> Option<Unit> {
        if self.in_flight >= shared.total_window {
            return None;
        }
        while let Some(i) = self.queue.pop_front() {
            self.lanes[i].queued = false;
            if !self.eligible(i, shared) {
                continue;
            }
            let kind = self.cut(i, shared);
            let d = &mut self.lanes[i];
            let unit = Unit { slot: i, seq: d.seq, kind };
            d.seq += 1;
            d.in_flight += 1;
            self.in_flight += 1;
            self.enqueue(i, shared);
            return Some(unit);
        }
        None
    }

    /// The lane's next unit of input: up to `unit_samples` samples of its current chunk, or
    /// the end of its input.
    fn cut(&mut self, i: usize, shared: &Shared) -> UnitKind {
        let lane = shared.slots[i].lane;
        let d = &mut self.lanes[i];
        loop {
            let chunk = match &d.chunk {
                Some(c) => c.clone(),
                None => match shared.source.chunk(lane, shared.topology.lanes(), d.cursor.chunk) {
                    Ok(Some(c)) => {
                        let c = Arc::new(c);
                        d.chunk = Some(c.clone());
                        c
                    }
                    Ok(None) => {
                        d.ended = true;
                        return UnitKind::End;
                    }
                    Err(m) => {
                        d.ended = true;
                        return UnitKind::SourceFailed(m);
                    }
                },
            };
            let len = chunk.samples.len();
            let start = d.cursor.offset as usize;
            if start >= len {
                d.cursor = Cursor { chunk: d.cursor.chunk + 1, offset: 0 };
                d.chunk = None;
                continue;
            }
            let end = (start + shared.opts.unit_samples).min(len);
            let n = d.cursor.chunk;
            if end == len {
                d.cursor = Cursor { chunk: n + 1, offset: 0 };
                d.chunk = None;
            } else {
                d.cursor.offset = end as u64;
            }
            return UnitKind::Samples { chunk, n, start, end };
        }
    }
}

impl Shared {
    /// The stateless part of one unit: read, then the parallel maps. No locks held.
    fn process(&self, unit: &Unit) -> UnitOutput {
        let lane = self.slots[unit.slot].lane;
        match &unit.kind {
            UnitKind::End => UnitOutput::End,
            UnitKind::SourceFailed(m) => UnitOutput::Failed(Error::Source { lane, message: m.clone() }),
            UnitKind::Samples { chunk, n, start, end } => {
                let ids = &chunk.samples[*start..*end];
                let reads = self.datasets.read(ids);
                let mut records = Vec::with_capacity(ids.len());
                let mut ends = Vec::with_capacity(ids.len());
                let mut skipped = Vec::with_capacity(ids.len());
                let mut failure = None;
                for (j, (id, read)) in ids.iter().zip(reads).enumerate() {
                    let before = records.len();
                    let res = match read {
                        Ok(rec) => apply_chain(&self.plan.parallel, rec, &mut records),
                        Err(e) => Err(("read", e)),
                    };
                    match res {
                        Ok(()) => skipped.push(false),
                        Err((_, OpError::Data(_))) if self.bad_records == BadRecords::Skip => {
                            records.truncate(before);
                            skipped.push(true);
                        }
                        Err((op, e)) => {
                            records.truncate(before);
                            failure = Some((j, record_error(&self.names, *id, lane, op, e.to_string())));
                            break;
                        }
                    }
                    ends.push(records.len());
                }
                UnitOutput::Samples {
                    chunk: *n,
                    start: *start as u64,
                    chunk_len: chunk.samples.len() as u64,
                    records,
                    ends,
                    skipped,
                    failure,
                }
            }
        }
    }

    /// Puts a finished unit in its lane's ring and, if the lane is free, pushes every unit
    /// that is now next in order through its accumulators.
    fn deposit(&self, i: usize, seq: u64, out: UnitOutput) {
        let slot = &self.slots[i];
        lock(&slot.inbox).put(seq, out);
        loop {
            let mut run = match slot.run.try_lock() {
                Ok(g) => g,
                // Another worker is draining this lane; it re-checks the ring after it lets go.
                Err(std::sync::TryLockError::WouldBlock) => return,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            };
            let mut drained = 0;
            loop {
                let next = lock(&slot.inbox).take_next();
                match next {
                    Some(unit) => {
                        run.accumulate(unit);
                        drained += 1;
                    }
                    None => break,
                }
            }
            let made = run.progress();
            let failed = run.error.is_some();
            if drained > 0 {
                lock(&slot.out).collect(&mut run);
            }
            drop(run);
            if drained > 0 {
                let mut s = lock(&self.sched);
                s.lanes[i].in_flight -= drained;
                s.in_flight -= drained;
                let was_behind = s.is_behind(i);
                // Two drainers of one lane may publish out of order: keep the newest.
                let p = &mut s.progress[i];
                p.made.steps_made = p.made.steps_made.max(made.steps_made);
                p.made.done |= made.done;
                p.failed |= failed;
                let caught_up = was_behind && !s.is_behind(i);
                if caught_up {
                    s.behind -= 1;
                }
                s.enqueue(i, self);
                let wake_consumer = caught_up && s.behind == 0 && s.consumer_waiting;
                let wake_workers = !s.queue.is_empty() && s.idle_workers > 0;
                drop(s);
                if wake_workers {
                    self.work_cv.notify_all();
                }
                if wake_consumer {
                    self.step_cv.notify_all();
                }
            }
            if !lock(&slot.inbox).next_ready() {
                return;
            }
        }
    }

    fn worker(self: Arc<Self>) {
        loop {
            let unit = {
                let mut s = lock(&self.sched);
                loop {
                    if s.shutdown || s.fault.is_some() {
                        return;
                    }
                    if let Some(u) = s.next_unit(&self) {
                        break u;
                    }
                    s.idle_workers += 1;
                    s = self.work_cv.wait(s).unwrap_or_else(|p| p.into_inner());
                    s.idle_workers -= 1;
                }
            };
            let (slot, seq) = (unit.slot, unit.seq);
            let res = catch_unwind(AssertUnwindSafe(|| {
                let out = self.process(&unit);
                drop(unit);
                self.deposit(slot, seq, out);
            }));
            if let Err(p) = res {
                let msg = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                lock(&self.sched).fault = Some(format!("{}: {msg}", self.slots[slot].lane));
                self.work_cv.notify_all();
                self.step_cv.notify_all();
                return;
            }
        }
    }
}

impl Engine {
    /// Starts a run from its beginning.
    pub fn start(spec: RunSpec, topology: Topology, opts: ExecOptions) -> Result<Engine> {
        opts.check()?;
        let plan = Arc::new(Plan::new(spec.operators.clone()));
        let setups = lane_setups(&spec, &plan, &topology, &opts)?;
        let runs: Vec<LaneRun> = setups.into_iter().map(|s| LaneRun::new(s, 0)).collect();
        Engine::launch(spec, plan, topology, opts, runs, 0)
    }

    /// Continues a run from the checkpoint in `dir`, at this topology's world size and rank.
    ///
    /// Reads the owned lanes' states from whichever files hold them, rebuilds only the records
    /// the accumulators held, and continues exactly as the uninterrupted run would.
    pub fn restore(spec: RunSpec, topology: Topology, opts: ExecOptions, dir: &Path) -> Result<Engine> {
        opts.check()?;
        let plan = Arc::new(Plan::new(spec.operators.clone()));
        let fingerprint = spec.fingerprint(&topology);
        let owned: Vec<Lane> = topology.owned_lanes().collect();
        let loaded = checkpoint::load(dir, &fingerprint, &owned)?;
        let setups = lane_setups(&spec, &plan, &topology, &opts)?;
        let mismatch = |m: String| Error::CheckpointMismatch { dir: dir.to_path_buf(), message: m };
        for st in &loaded.lanes {
            if st.accumulators.len() != plan.stages.len() {
                return Err(mismatch(format!(
                    "{} has {} accumulator states, the operators have {} accumulators",
                    st.lane,
                    st.accumulators.len(),
                    plan.stages.len()
                )));
            }
        }
        // Lanes are independent: rebuild them in parallel. Their costs differ a lot (a lane
        // holding rows of long documents re-reads more), so threads take lanes from a shared
        // counter rather than fixed groups.
        let next_step = loaded.next_step;
        let jobs: Vec<Mutex<Option<(LaneSetup, LaneState)>>> =
            setups.into_iter().zip(loaded.lanes).map(|j| Mutex::new(Some(j))).collect();
        let results: Vec<Mutex<Option<Result<LaneRun>>>> = jobs.iter().map(|_| Mutex::new(None)).collect();
        let counter = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..opts.threads.min(jobs.len()).max(1) {
                scope.spawn(|| {
                    loop {
                        let i = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(job) = jobs.get(i).and_then(|j| lock(j).take()) else { break };
                        let (setup, st) = job;
                        let run = catch_unwind(AssertUnwindSafe(|| resume_lane(&spec, &plan, setup, st, next_step)))
                            .unwrap_or_else(|_| Err(Error::WorkerPanic("a restore thread panicked".into())));
                        *lock(&results[i]) = Some(run);
                    }
                });
            }
        });
        let runs: Vec<Result<LaneRun>> = results
            .into_iter()
            .map(|r| {
                r.into_inner()
                    .unwrap_or_else(|p| p.into_inner())
                    .unwrap_or_else(|| Err(Error::WorkerPanic("a lane was not restored".into())))
            })
            .collect();
        let runs = runs.into_iter().collect::<Result<Vec<_>>>()?;
        Engine::launch(spec, plan, topology, opts, runs, next_step)
    }

    fn launch(
        spec: RunSpec,
        plan: Arc<Plan>,
        topology: Topology,
        opts: ExecOptions,
        runs: Vec<LaneRun>,
        next_step: u64,
    ) -> Result<Engine> {
        let fingerprint = spec.fingerprint(&topology);
        let states: Vec<Arc<LaneState>> = runs.iter().map(|r| Arc::new(r.state_now())).collect();
        let n = runs.len();
        let lanes = runs
            .iter()
            .map(|r| Dispatch {
                cursor: r.cursor(),
                chunk: None,
                seq: 0,
                in_flight: 0,
                ended: r.is_finished(),
                queued: false,
            })
            .collect();
        let progress = runs.iter().map(|r| LaneProgress { made: r.progress(), failed: false }).collect();
        let slots = runs
            .into_iter()
            .map(|mut r| {
                let mut out = Output::default();
                out.collect(&mut r);
                Slot { lane: r.lane, inbox: Mutex::new(Inbox::default()), run: Mutex::new(r), out: Mutex::new(out) }
            })
            .collect();
        let total_window = 4 * opts.threads;
        let shared = Arc::new(Shared {
            plan,
            source: spec.source.clone(),
            names: spec.datasets.names().into(),
            datasets: spec.datasets.clone(),
            topology,
            opts,
            bad_records: spec.bad_records,
            tail: spec.tail,
            slots,
            sched: Mutex::new(Sched {
                lanes,
                progress,
                queue: VecDeque::new(),
                behind: 0,
                consumed: next_step,
                in_flight: 0,
                idle_workers: 0,
                consumer_waiting: false,
                shutdown: false,
                fault: None,
            }),
            work_cv: Condvar::new(),
            step_cv: Condvar::new(),
            lane_window: total_window.div_ceil(n.max(1)).max(2),
            total_window,
        });
        {
            let mut s = lock(&shared.sched);
            s.count_behind();
            for i in 0..n {
                s.enqueue(i, &shared);
            }
        }
        let workers = (0..opts.threads)
            .map(|i| {
                let sh = shared.clone();
                std::thread::Builder::new()
                    .name(format!("zephon-worker-{i}"))
                    .spawn(move || sh.worker())
                    .map_err(|e| Error::Config(format!("cannot start worker thread: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Engine { shared, workers, next_step, states: Some(states), fingerprint, metadata: spec.metadata })
    }

    /// The topology this engine runs under.
    pub fn topology(&self) -> &Topology {
        &self.shared.topology
    }

    /// The next step [`Engine::next_step`] will deliver.
    pub fn position(&self) -> Step {
        Step(self.next_step)
    }

    /// The run's fingerprint, part by part.
    pub fn fingerprint(&self) -> &RunFingerprint {
        &self.fingerprint
    }

    /// The plan: which operators run in parallel and which per lane.
    pub fn explain(&self) -> String {
        self.shared.plan.operators.explain()
    }

    /// Records skipped so far on this rank's lanes (as of the last delivered step).
    pub fn skipped(&self) -> u64 {
        self.states.as_ref().map_or(0, |s| s.iter().map(|l| l.skipped).sum())
    }

    /// Waits for and returns this rank's part of the next global step, or `None` when this
    /// rank's input has ended (see [`Tail`]).
    ///
    /// A rank sees only its own lanes, so with finite data ranks can reach their ends at
    /// different steps: combine the `None`s across ranks (an all-reduce) to stop together. A
    /// `None` still counts as a step, so ranks that keep calling in lockstep stay at one
    /// position and checkpoint at one step.
    pub fn next_step(&mut self) -> Result<Option<LocalStep>> {
        let s = self.next_step;
        let sh = &*self.shared;
        let mut failed_slot = None;
        let mut end_of_data = false;
        {
            let mut g = lock(&sh.sched);
            loop {
                if let Some(f) = &g.fault {
                    return Err(Error::WorkerPanic(f.clone()));
                }
                if g.behind > 0 {
                    g.consumer_waiting = true;
                    g = sh.step_cv.wait(g).unwrap_or_else(|p| p.into_inner());
                    g.consumer_waiting = false;
                    continue;
                }
                let (mut waiting, mut any, mut ended) = (false, false, false);
                for (i, p) in g.progress.iter().enumerate() {
                    if p.made.steps_made > s {
                        any = true;
                    } else if p.failed {
                        failed_slot = Some(i);
                    } else if p.made.done {
                        ended = true;
                    } else {
                        waiting = true;
                    }
                }
                if failed_slot.is_some() {
                    break;
                }
                // `behind == 0` means no lane is still working towards this step.
                debug_assert!(!waiting);
                end_of_data = ended && (sh.tail == Tail::Drop || !any);
                break;
            }
        }
        if let Some(i) = failed_slot {
            let mut out = lock(&sh.slots[i].out);
            return Err(out.error.take().unwrap_or_else(|| Error::Operator {
                operator: "engine".into(),
                lane: sh.slots[i].lane,
                message: "the lane failed earlier".into(),
            }));
        }
        let mut lanes = Vec::with_capacity(sh.slots.len());
        for slot in &sh.slots {
            let mut out = lock(&slot.out);
            let ls = match out.steps.front() {
                Some(f) if f.step.0 == s => out.steps.pop_front(),
                _ => None,
            };
            lanes.push(ls.unwrap_or_else(|| LaneStep {
                // A finished lane in a partial step gives nothing.
                lane: slot.lane,
                step: Step(s),
                rows: Vec::new(),
                digest: lane_digest(&[]),
                state: out.end_state.clone(),
            }));
        }
        {
            let mut g = lock(&sh.sched);
            g.consumed = s + 1;
            g.count_behind();
            for i in 0..sh.slots.len() {
                g.enqueue(i, sh);
            }
            if g.idle_workers > 0 && !g.queue.is_empty() {
                sh.work_cv.notify_all();
            }
        }
        self.states = lanes.iter().map(|l| l.state.clone()).collect();
        self.next_step = s + 1;
        if end_of_data {
            // This rank's lanes have ended. The step still counts, so that ranks that call in
            // lockstep stay at one position (and their checkpoints at one step); whether the
            // run as a whole has ended is for the caller to combine across ranks.
            return Ok(None);
        }
        Ok(Some(LocalStep { step: Step(s), topology: sh.topology, lanes }))
    }

    /// Writes this rank's lanes' states after the last delivered step into `dir` (one file,
    /// atomically). Every rank writes its own file into the same directory; no coordination.
    pub fn checkpoint(&self, dir: &Path) -> Result<PathBuf> {
        let Some(states) = &self.states else {
            return Err(Error::Config(format!(
                "no lane snapshot after step {}: snapshots are taken every {} steps",
                self.next_step.saturating_sub(1),
                self.shared.opts.snapshot_every
            )));
        };
        let t = &self.shared.topology;
        checkpoint::write(
            dir,
            &self.fingerprint,
            &self.metadata,
            self.next_step,
            t.world_size(),
            t.rank(),
            states.iter().map(|s| (**s).clone()).collect(),
        )
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        lock(&self.shared.sched).shutdown = true;
        self.shared.work_cv.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

fn lane_setups(spec: &RunSpec, plan: &Arc<Plan>, topology: &Topology, opts: &ExecOptions) -> Result<Vec<LaneSetup>> {
    let names: Arc<[String]> = spec.datasets.names().into();
    topology
        .owned_lanes()
        .map(|lane| {
            Ok(LaneSetup {
                lane,
                plan: plan.clone(),
                accs: plan.accumulators(LaneContext { lane, seed: spec.seed })?,
                names: names.clone(),
                rows_per_step: topology.rows_per_lane() as usize,
                tail: spec.tail,
                snapshot_every: opts.snapshot_every,
            })
        })
        .collect()
}

/// Rebuilds one lane from its checkpointed state.
fn resume_lane(spec: &RunSpec, plan: &Plan, mut setup: LaneSetup, st: LaneState, next_step: u64) -> Result<LaneRun> {
    let lane = st.lane;
    let rebuild_err = |lineage: &dyn std::fmt::Display, e: OpError| Error::Rebuild {
        lane,
        lineage: lineage.to_string(),
        message: e.to_string(),
    };
    let mut accs = std::mem::take(&mut setup.accs);
    let mut rebuilt: Vec<Vec<crate::record::Record>> = Vec::new();
    let pending;
    {
        let mut rb = Rebuilder::new(plan, &accs, &spec.datasets);
        let all = st.accumulators.iter().flat_map(|a| a.buffered.iter()).chain(st.pending.iter());
        rb.prefetch(all).map_err(|(id, e)| Error::Rebuild {
            lane,
            lineage: id.to_string(),
            message: format!("cannot re-read: {e}"),
        })?;
        for (k, acc) in st.accumulators.iter().enumerate() {
            let recs = acc
                .buffered
                .iter()
                .map(|l| {
                    rb.covering(Level::AccIn(k), l)
                        .and_then(|r| r.narrow_to(l).map_err(OpError::Fatal))
                        .map_err(|e| rebuild_err(l, e))
                })
                .collect::<Result<Vec<_>>>()?;
            rebuilt.push(recs);
        }
        pending = st
            .pending
            .iter()
            .map(|l| {
                rb.covering(Level::Row, l)
                    .and_then(|r| r.narrow_to(l).map_err(OpError::Fatal))
                    .map_err(|e| rebuild_err(l, e))
            })
            .collect::<Result<Vec<_>>>()?;
    }
    for ((acc, state), recs) in accs.iter_mut().zip(st.accumulators.iter()).zip(rebuilt) {
        acc.import(state.clone(), recs).map_err(|e| Error::Rebuild {
            lane,
            lineage: "(accumulator state)".into(),
            message: e.to_string(),
        })?;
    }
    setup.accs = accs;
    Ok(LaneRun::resume(setup, &st, next_step, pending))
}
