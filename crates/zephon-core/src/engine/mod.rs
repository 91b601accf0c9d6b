//! The ordered parallel executor.
//!
//! Work is cut into units (a few samples of one lane's chunk), each tagged with a per-lane
//! sequence number. Any worker thread may process any unit's stateless part. The finished unit
//! goes into its lane's reorder ring; whichever worker finds the lane's next unit ready (and
//! the lane free) pushes it through the lane's accumulators. Lanes thus progress in parallel,
//! each strictly in order, with no serial pump. Backpressure: a lane gets new units only while
//! it has fewer than `prefetch_steps` steps ready beyond what the consumer took, and units in
//! flight are bounded per lane and in total.
//!
//! Modules: `settings` (what a run computes and how it executes), `schedule` (the shared
//! state and the scheduler), `worker` (what a worker thread does), `lane` (one lane's ordered
//! part), `restore` (rebuilding buffered records from a checkpoint); this file is the
//! consumer's side, the [`Engine`].

mod lane;
mod lookahead;
mod restore;
mod schedule;
mod settings;
mod timing;
mod worker;

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::checkpoint::{self, LaneState, LaneStreams, Loaded, RunFingerprint, Skips, SplitCheckpoint};
use crate::error::{Error, Result};
use crate::plan::Plan;
use crate::snapshot::Snapshot;
use crate::source::WorkSource;
use crate::step::{LaneDigest, LaneStep, LocalStep, lane_digest};
use crate::topology::Topology;
use zephon_operator::{Lane, LaneContext, Record, Step};

use lane::{LaneRun, LaneSetup, ReadBudget};
use schedule::{Dispatch, Inbox, LaneProgress, Output, Sched, Shared, Slot, lock};

pub use settings::{BadRecords, DefaultThreads, ExecOptions, RunSpec, Tail};
pub use timing::StageTime;

/// Runs a pipeline for this rank's lanes and hands out local steps in order.
pub struct Engine {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    next_step: u64,
    /// Lane states after the last delivered step (or at start), when snapshotted.
    states: Option<Vec<Snapshot>>,
    fingerprint: RunFingerprint,
    metadata: checkpoint::RunMetadata,
    /// Lanes that still had data when this rank's input ended under `Tail::Drop`.
    cut_off: Vec<Lane>,
    cut_off_pieces: BTreeMap<u32, CutOff>,
    /// Whether this rank's data has ended (a step returned `None`).
    ended: bool,
    /// What the restore reported (see [`Engine::notices`]).
    notices: Vec<String>,
}

/// Pieces of one dataset's documents that lanes cut off at the end of the data still held
/// (see [`Engine::cut_off_pieces`]), their tokens, and which documents they are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CutOff {
    /// Fragments of documents: whole short documents, or pieces of split or packed ones.
    pub pieces: u64,
    /// Their positions (tokens).
    pub tokens: u64,
    /// The documents of those pieces, and the one a lane had pushed only part of: each of
    /// them came in part or not at all. With the [`TailDropped::documents`] of the lanes that
    /// ended, every document that came in part is listed, provided the step not delivered
    /// has a snapshot (`snapshot_every` divides its number; without one only its rows count).
    ///
    /// [`TailDropped::documents`]: crate::checkpoint::TailDropped::documents
    pub documents: std::collections::BTreeSet<zephon_operator::SampleId>,
}

impl Engine {
    /// Starts a run from its beginning.
    pub fn start(spec: RunSpec, topology: Topology, opts: ExecOptions) -> Result<Engine> {
        opts.check()?;
        let plan = Arc::new(Plan::new(spec.operators.clone()));
        let setups = lane_setups(&spec, &plan, &topology, &opts)?;
        let runs: Vec<LaneRun> = setups.into_iter().map(|s| LaneRun::start(s, 0)).collect();
        Engine::launch(spec, plan, topology, opts, runs, 0)
    }

    /// Continues a run from the checkpoint in `dir`, at this topology's world size and rank.
    ///
    /// Reads the owned lanes' states from whichever files hold them, rebuilds only the records
    /// the accumulators held, and continues exactly as the uninterrupted run would.
    pub fn restore(spec: RunSpec, topology: Topology, opts: ExecOptions, dir: &Path) -> Result<Engine> {
        opts.check()?;
        let owned: Vec<Lane> = topology.owned_lanes().collect();
        let streams = LaneStreams::new(spec.source.clone(), topology.lanes());
        let loaded = checkpoint::load(dir, &spec.fingerprint(&topology), &spec.metadata(), &owned, &streams)?;
        Engine::resume(spec, topology, opts, loaded, &dir.display().to_string())
    }

    /// Continues a run from a split checkpoint (a run part and a part per lane, as a trainer's
    /// distributed checkpoint hands them to this rank), at this topology's world size and rank.
    /// `key` names a lane's part in errors as the caller stores it.
    pub fn restore_split(
        spec: RunSpec,
        topology: Topology,
        opts: ExecOptions,
        split: &SplitCheckpoint,
        key: &dyn Fn(Lane) -> String,
    ) -> Result<Engine> {
        opts.check()?;
        let owned: Vec<Lane> = topology.owned_lanes().collect();
        let streams = LaneStreams::new(spec.source.clone(), topology.lanes());
        let loaded = SplitCheckpoint::load(
            &split.run,
            &split.lanes,
            &spec.fingerprint(&topology),
            &spec.metadata(),
            &owned,
            &streams,
            key,
        )?;
        Engine::resume(spec, topology, opts, loaded, "the split checkpoint")
    }

    /// The split checkpoint of this rank's lanes before the first step, without starting the
    /// run: what a trainer's checkpoint store asks for as the template it loads into.
    pub fn initial_split(spec: &RunSpec, topology: &Topology, opts: &ExecOptions) -> Result<SplitCheckpoint> {
        opts.check()?;
        let plan = Arc::new(Plan::new(spec.operators.clone()));
        let states: Vec<LaneState> = lane_setups(spec, &plan, topology, opts)?
            .into_iter()
            .map(|s| LaneRun::start(s, 0).snapshot_now().state())
            .collect();
        let metadata = spec.metadata();
        let streams = LaneStreams::new(spec.source.clone(), topology.lanes());
        SplitCheckpoint::encode(&spec.fingerprint(topology), &metadata, 0, topology.lanes(), states, Some(&streams))
    }

    fn resume(spec: RunSpec, topology: Topology, opts: ExecOptions, loaded: Loaded, whole: &str) -> Result<Engine> {
        let plan = Arc::new(Plan::new(spec.operators.clone()));
        let setups = lane_setups(&spec, &plan, &topology, &opts)?;
        let mismatch = |m: String| Error::CheckpointMismatch { dir: whole.into(), message: m };
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
        for notice in &loaded.notices {
            eprintln!("zephon: {notice}");
        }
        let runs = restore::resume_lanes(&spec, &plan, setups, loaded.lanes, loaded.next_step, opts.threads)?;
        let mut engine = Engine::launch(spec, plan, topology, opts, runs, loaded.next_step)?;
        engine.notices = loaded.notices;
        Ok(engine)
    }

    fn launch(
        spec: RunSpec,
        plan: Arc<Plan>,
        topology: Topology,
        opts: ExecOptions,
        mut runs: Vec<LaneRun>,
        next_step: u64,
    ) -> Result<Engine> {
        let fingerprint = spec.fingerprint(&topology);
        let states: Vec<Snapshot> = runs.iter().map(LaneRun::snapshot_now).collect();
        let n = runs.len();
        let lanes = runs
            .iter_mut()
            .map(|r| Dispatch {
                cursor: r.cursor(),
                chunk: None,
                steered: r.is_steered().then(|| {
                    let chosen = r.take_chosen();
                    for unit in &chosen {
                        spec.datasets.prefetch(&unit.ids);
                    }
                    chosen.into()
                }),
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
        let total_window = opts.total_window();
        let timings = timing::Timings::new(&plan);
        let shared = Arc::new(Shared {
            timings,
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
                ahead: VecDeque::new(),
                behind: 0,
                consumed: next_step,
                in_flight: 0,
                idle_workers: 0,
                consumer_waiting: false,
                shutdown: false,
                fault: None,
                paused: vec![false; n],
                resumes: VecDeque::new(),
                units_timed: timing::Sampler::first(64),
                lookahead: lookahead::Lookahead::new(&spec.datasets, n),
            }),
            work_cv: Condvar::new(),
            step_cv: Condvar::new(),
            lane_window: opts.lane_window(n),
            total_window,
            unit_cap: opts.unit_cap(n),
            consumed: std::sync::atomic::AtomicU64::new(next_step),
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
        let metadata = spec.metadata();
        Ok(Engine {
            shared,
            workers,
            next_step,
            states: Some(states),
            fingerprint,
            metadata,
            cut_off: Vec::new(),
            cut_off_pieces: BTreeMap::new(),
            ended: false,
            notices: Vec::new(),
        })
    }

    /// The topology this engine runs under.
    pub fn topology(&self) -> &Topology {
        &self.shared.topology
    }

    /// What the restore reported, also said on stderr: a schedule that changes after the
    /// checkpoint's step. Empty for a run started from its beginning.
    pub fn notices(&self) -> &[String] {
        &self.notices
    }

    /// The next step [`Engine::next_step`] will deliver.
    pub fn position(&self) -> Step {
        Step(self.next_step)
    }

    /// The run's fingerprint, part by part.
    pub fn fingerprint(&self) -> &RunFingerprint {
        &self.fingerprint
    }

    /// What every checkpoint file holds beside the lanes and the fingerprint: the token
    /// estimates and the shard listings.
    pub fn metadata(&self) -> &checkpoint::RunMetadata {
        &self.metadata
    }

    /// The plan: which operators run in parallel and which per lane.
    pub fn explain(&self) -> String {
        self.shared.plan.operators.explain()
    }

    /// Records skipped so far on this rank's lanes (as of the last delivered step).
    pub fn skipped(&self) -> u64 {
        self.skips().total()
    }

    /// Records skipped so far on this rank's lanes, by dataset, with the first reason (as of
    /// the last delivered step).
    pub fn skips(&self) -> Skips {
        let mut all = Skips::default();
        for s in self.states.iter().flatten() {
            all.merge(s.skips());
        }
        all
    }

    /// This rank's lanes' states after the last delivered step (what a checkpoint would
    /// hold), for reports: accumulator counters such as what `ensure_mixture` dropped.
    pub fn lane_states(&self) -> Vec<LaneState> {
        self.states.iter().flatten().map(Snapshot::state).collect()
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
                // Only where the data first ended: a caller that goes on calling (another rank
                // still had steps) must not have the count replaced by a later one, which no
                // longer holds the step that was not delivered.
                if end_of_data && any && !self.ended {
                    self.cut_off = (g.progress.iter().enumerate())
                        .filter(|(_, p)| p.made.steps_made > s)
                        .map(|(i, _)| sh.slots[i].lane)
                        .collect();
                }
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
                digest: LaneDigest::made(lane_digest(&[])),
                state: out.end_state.clone(),
            }));
        }
        {
            let mut g = lock(&sh.sched);
            g.consumed = s + 1;
            sh.consumed.store(s + 1, std::sync::atomic::Ordering::Release);
            g.count_behind();
            g.requeue_ahead();
            g.wake_paused(sh);
            for i in 0..sh.slots.len() {
                g.enqueue(i, sh);
            }
            if g.idle_workers > 0 && g.has_work() {
                sh.work_cv.notify_all();
            }
        }
        if end_of_data && !self.ended && !self.cut_off.is_empty() {
            self.cut_off_pieces = held_by(&lanes, &self.cut_off, &*sh.source, sh.topology.lanes());
        }
        self.ended |= end_of_data;
        self.states = lanes.iter().map(|l| l.state.clone()).collect();
        self.next_step = s + 1;
        if end_of_data {
            // This rank's lanes have ended. The step still counts, so that ranks that call in
            // lockstep stay at one position (and their checkpoints at one step); whether the
            // run as a whole has ended is for the caller to combine across ranks.
            return Ok(None);
        }
        Ok(Some(LocalStep { step: Step(s), topology: sh.topology.clone(), lanes }))
    }

    /// CPU time so far per part of the pipeline (reading, each operator, digests, snapshots),
    /// summed over this rank's threads: which part limits the run.
    pub fn timings(&self) -> Vec<StageTime> {
        self.shared.timings.report(&self.shared.plan)
    }

    /// The lanes of this rank that still had data when its input ended: under
    /// [`Tail::Drop`] the run ends at the first step one of its lanes cannot fill, and what
    /// the others hold from that step on is not delivered. Empty while running, and when
    /// every lane ended at the same step.
    pub fn lanes_cut_off(&self) -> &[Lane] {
        &self.cut_off
    }

    /// What the lanes cut off held when the data ended, by dataset index: the pieces of
    /// documents in their accumulators, in rows they had made beyond the last step, and in
    /// the step that was not delivered. A document of which some pieces were delivered and
    /// some are counted here came in part. Not counted: input not yet read, and the rest of
    /// a long document a lane paused inside (its pieces are made as the lane goes on); that
    /// document is listed in [`CutOff::documents`] all the same.
    pub fn cut_off_pieces(&self) -> &BTreeMap<u32, CutOff> {
        &self.cut_off_pieces
    }

    /// The lanes' sample streams, which checkpoint files use to name buffered samples
    /// compactly (see [`checkpoint::write`]).
    pub fn streams(&self) -> LaneStreams {
        LaneStreams::new(self.shared.source.clone(), self.shared.topology.lanes())
    }

    /// The lanes' snapshots after the last delivered step; an error naming the setting when the
    /// run took none there.
    fn snapshots(&self) -> Result<&[Snapshot]> {
        let Some(states) = &self.states else {
            let every = match self.shared.opts.snapshot_every {
                u64::MAX => "never (ExecOptions::snapshot_every is u64::MAX)".to_string(),
                k => format!("every {k} steps (ExecOptions::snapshot_every)"),
            };
            return Err(Error::Config(format!(
                "no lane snapshot after step {}: this run takes snapshots {every}",
                self.next_step.saturating_sub(1)
            )));
        };
        Ok(states)
    }

    /// Writes this rank's lanes' states after the last delivered step into `dir` (one file,
    /// atomically). Every rank writes its own file into the same directory; no coordination.
    pub fn checkpoint(&self, dir: &Path) -> Result<PathBuf> {
        let t = &self.shared.topology;
        checkpoint::write(
            dir,
            &self.fingerprint,
            &self.metadata,
            self.next_step,
            t.world_size(),
            t.rank(),
            self.snapshots()?.iter().map(Snapshot::state).collect(),
            Some(&self.streams()),
        )
    }

    /// This rank's lanes after the last delivered step as a split checkpoint: one run part, the
    /// same on every rank, and one part per lane (see [`SplitCheckpoint`]).
    pub fn checkpoint_split(&self) -> Result<SplitCheckpoint> {
        let states = self.snapshots()?.iter().map(Snapshot::state).collect();
        SplitCheckpoint::encode(
            &self.fingerprint,
            &self.metadata,
            self.next_step,
            self.shared.topology.lanes(),
            states,
            Some(&self.streams()),
        )
    }

    /// Waits at most `timeout` until [`Engine::next_step`] would return without waiting (the
    /// step is made, the data has ended, or a lane failed); whether it would. Lets a caller
    /// that must stay responsive (to a signal, say) wait in slices.
    pub fn wait_ready(&self, timeout: std::time::Duration) -> bool {
        let sh = &*self.shared;
        let deadline = std::time::Instant::now() + timeout;
        let mut g = lock(&sh.sched);
        loop {
            if g.fault.is_some() || g.behind == 0 {
                return true;
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return false;
            }
            g.consumer_waiting = true;
            g = sh.step_cv.wait_timeout(g, deadline - now).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
            g.consumer_waiting = false;
        }
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

/// The pieces the `cut` lanes of `lanes` (the step not delivered) hold, by dataset.
fn held_by(lanes: &[LaneStep], cut: &[Lane], source: &dyn WorkSource, lane_count: u32) -> BTreeMap<u32, CutOff> {
    let mut held: BTreeMap<u32, CutOff> = BTreeMap::new();
    for ls in lanes.iter().filter(|l| cut.contains(&l.lane)) {
        let state = ls.state.as_ref().map(Snapshot::state);
        let buffered = state.iter().flat_map(|st| st.accumulators.iter().flat_map(|a| &a.buffered).chain(&st.pending));
        for lineage in ls.rows.iter().map(Record::lineage).chain(buffered) {
            for f in lineage.fragments() {
                let h = held.entry(f.sample.dataset).or_default();
                h.pieces += 1;
                h.tokens += u64::from(f.positions().map_or(0, |p| p.len()));
                h.documents.insert(f.sample);
            }
        }
        // A lane that stopped inside an input had pushed only its first records: the rest of
        // that document was never made, so no piece of it is held, yet it came in part.
        if let Some(st) = state {
            for sample in st.inputs_in_progress(source, lane_count).unwrap_or_default() {
                held.entry(sample.dataset).or_default().documents.insert(sample);
            }
        }
    }
    held
}

/// What a steered lane of `lanes` reads ahead.
fn read_budget(opts: &ExecOptions, lanes: usize) -> ReadBudget {
    ReadBudget { budget: opts.read_ahead(lanes), unit_cap: opts.unit_cap(lanes) }
}

fn lane_setups(spec: &RunSpec, plan: &Arc<Plan>, topology: &Topology, opts: &ExecOptions) -> Result<Vec<LaneSetup>> {
    let owned = topology.owned_lanes().count();
    let names: Arc<[String]> = spec.datasets.names().into();
    // More bad records in a row than the dataset has rows (and at least 1024) means a whole
    // pass of it was bad: stop rather than spin.
    let bad_limit: Arc<[u64]> = spec.datasets.manifests().iter().map(|m| m.rows().max(1024)).collect();
    topology
        .owned_lanes()
        .map(|lane| {
            Ok(LaneSetup {
                lane,
                plan: plan.clone(),
                accs: plan.accumulators(LaneContext { lane, seed: spec.seed })?,
                names: names.clone(),
                rows: topology.rows_per_step().clone(),
                lanes: topology.lanes(),
                tail: spec.tail,
                snapshot_every: opts.snapshot_every,
                snapshot_at: opts.snapshot_at,
                digests_by_workers: opts.digests_by_workers,
                bad_limit: bad_limit.clone(),
                steering: spec.source.steering().is_some().then(|| (spec.source.clone(), topology.lanes())),
                read: read_budget(opts, owned),
            })
        })
        .collect()
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("topology", self.topology())
            .field("position", &self.position())
            .finish_non_exhaustive()
    }
}
