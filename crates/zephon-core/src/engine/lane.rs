//! One lane's ordered part: accumulators, row assembly into steps, snapshots.
//!
//! A `LaneRun` is only ever touched by one thread at a time (it sits behind the lane's own
//! mutex); everything here is sequential and deterministic.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::checkpoint::{Cursor, LaneState, Skips, SteerState, TailDropped};
use crate::error::{Error, OpError, record_error};
use crate::plan::{Plan, apply_chain};
use crate::source::{Chunk, WorkSource};
use crate::step::{LaneDigest, LaneStep, lane_digest};
use zephon_operator::{Accumulator, AccumulatorState, Lane, Lineage, Record, Step};

use super::settings::Tail;

/// A lane's state right after one step, as a checkpoint saves it.
///
/// Snapshots taken at one input boundary share one core (accumulator states, the lineage of
/// every row not yet delivered) and differ only in where their pending rows start: a document
/// that fills thousands of steps at once costs memory in proportion to its rows, not to their
/// square.
#[derive(Clone, Debug)]
pub(crate) struct Snapshot {
    core: Arc<SnapshotCore>,
    pending_from: usize,
}

#[derive(Debug)]
struct SnapshotCore {
    lane: Lane,
    cursor: Cursor,
    input_progress: u64,
    rows_emitted: u64,
    skips: Skips,
    finished: bool,
    tail_dropped: TailDropped,
    steer: Option<SteerState>,
    accumulators: Vec<AccumulatorState>,
    pending: Vec<Lineage>,
}

impl Snapshot {
    /// The state a checkpoint holds.
    pub fn state(&self) -> LaneState {
        let c = &*self.core;
        LaneState {
            lane: c.lane,
            cursor: c.cursor,
            input_progress: c.input_progress,
            rows_emitted: c.rows_emitted,
            skips: c.skips.clone(),
            finished: c.finished,
            tail_dropped: c.tail_dropped.clone(),
            steer: c.steer.clone(),
            accumulators: c.accumulators.clone(),
            pending: c.pending.get(self.pending_from..).unwrap_or_default().to_vec(),
        }
    }

    /// Records skipped so far under the skip policy, by dataset.
    pub fn skips(&self) -> &Skips {
        &self.core.skips
    }
}

/// What a worker produced for one unit of a lane's input, before ordering.
pub(crate) enum UnitOutput {
    /// Samples `start..start + ends.len()` of the lane's chunk `chunk` (of `chunk_len` samples).
    Samples {
        chunk: u64,
        start: u64,
        chunk_len: u64,
        /// Outputs of all inputs, concatenated.
        records: Vec<Record>,
        /// `ends[j]`: number of outputs of inputs `0..=j`.
        ends: Vec<usize>,
        /// Each input's dataset, and why it was skipped under the skip policy (if it was).
        inputs: Vec<(u32, Option<String>)>,
        /// A failure at input `.0`: inputs before it are good, the lane stops there.
        failure: Option<(usize, Error)>,
    },
    /// The lane's input has ended.
    End,
    /// The work source failed for this lane.
    Failed(Error),
}

/// How far a lane has got, as the scheduler and consumer see it.
#[derive(Copy, Clone, Debug, Default)]
pub(crate) struct Progress {
    /// Steps finalized so far (absolute: the next step to finalize).
    pub steps_made: u64,
    /// No more steps will come (input ended, or the lane failed).
    pub done: bool,
}

pub(crate) struct LaneRun {
    pub lane: Lane,
    plan: Arc<Plan>,
    accs: Vec<Box<dyn Accumulator>>,
    names: Arc<[String]>,
    rows_per_step: usize,
    tail: Tail,
    snapshot_every: u64,
    snapshot_at: Option<u64>,
    digests_by_workers: bool,
    cursor: Cursor,
    rows_emitted: u64,
    skips: Skips,
    tail_dropped: TailDropped,
    /// Per dataset: bad records skipped in a row (reset by a good one), and the most that may
    /// come in a row before the lane stops: a dataset whose rows are all bad would otherwise
    /// make a repeating run spin forever, delivering nothing.
    bad_in_a_row: Vec<u64>,
    bad_limit: Arc<[u64]>,
    finished: bool,
    /// Rows of the step being filled.
    current: Vec<Record>,
    /// Finalized steps not yet moved to the consumer's queue.
    pub steps: VecDeque<LaneStep>,
    next_step: u64,
    /// Steps finalized since the last input boundary (they still need their snapshot).
    unsnapped: usize,
    /// The error that stopped the lane, until the consumer's queue takes it.
    error: Option<Error>,
    /// Set once the lane has failed; stays set after the error is taken, so that no later
    /// input (and no later error) follows the first one.
    failed: bool,
    scratch: Vec<Vec<Record>>,
    /// Per stage, whether its accumulator watches the next one ([`Accumulator::watches_next_stage`]).
    watches_next: Vec<bool>,
    paused: Option<PausedUnit>,
    /// Records of the first input to drop unpushed (restored inside that input).
    skip_outputs: u64,
    /// Thread time of the accumulators, digests and snapshots since the drainer last added
    /// them to the run's totals.
    pub times: super::timing::LaneTimes,
    /// Whether the unit being pushed times its records through the accumulators: the weight
    /// of its time, or 0.
    unit_timed: u64,
    /// A steered lane's closed loop (see [`crate::Steering`]); `None` for a position-addressed
    /// source.
    steer: Option<LaneSteer>,
}

/// A steered lane's closed loop: what it delivered of each dataset, and the chunks it chose
/// to read next, waiting for the scheduler.
struct LaneSteer {
    source: Arc<dyn WorkSource>,
    lanes: u32,
    state: SteerState,
    chosen: Vec<SteeredChunk>,
}

/// A chunk a steered lane chose to read (from `start` on), or the end of its input.
pub(crate) enum SteeredChunk {
    Chunk { chunk: Arc<Chunk>, k: u64, start: u64 },
    End,
}

/// A unit whose records are only partly pushed: where it stopped.
struct PausedUnit {
    chunk: u64,
    start: u64,
    chunk_len: u64,
    records: std::vec::IntoIter<Record>,
    ends: Vec<usize>,
    inputs: Vec<(u32, Option<String>)>,
    failure: Option<(usize, Error)>,
    /// The input being pushed, and how many records of the unit were pushed.
    j: usize,
    done: usize,
}

pub(crate) struct LaneSetup {
    pub lane: Lane,
    pub plan: Arc<Plan>,
    pub accs: Vec<Box<dyn Accumulator>>,
    pub names: Arc<[String]>,
    pub rows_per_step: usize,
    pub tail: Tail,
    pub snapshot_every: u64,
    pub snapshot_at: Option<u64>,
    pub digests_by_workers: bool,
    /// Per dataset, the most bad records a lane may skip in a row (see `LaneRun`).
    pub bad_limit: Arc<[u64]>,
    /// The run's work source and lane count, when it steers its lanes.
    pub steering: Option<(Arc<dyn WorkSource>, u32)>,
}

impl LaneRun {
    /// A lane at the start of its input, at step `next_step`.
    pub fn new(setup: LaneSetup, next_step: u64) -> Self {
        let stages = setup.accs.len();
        let watches_next = setup.accs.iter().map(|a| a.watches_next_stage()).collect();
        LaneRun {
            lane: setup.lane,
            plan: setup.plan,
            accs: setup.accs,
            names: setup.names,
            rows_per_step: setup.rows_per_step,
            tail: setup.tail,
            snapshot_every: setup.snapshot_every,
            snapshot_at: setup.snapshot_at,
            digests_by_workers: setup.digests_by_workers,
            cursor: Cursor::default(),
            rows_emitted: 0,
            skips: Skips::default(),
            tail_dropped: TailDropped::default(),
            bad_in_a_row: vec![0; setup.bad_limit.len()],
            bad_limit: setup.bad_limit,
            finished: false,
            current: Vec::new(),
            steps: VecDeque::new(),
            next_step,
            unsnapped: 0,
            error: None,
            failed: false,
            times: super::timing::LaneTimes::default(),
            scratch: (0..stages).map(|_| Vec::new()).collect(),
            watches_next,
            paused: None,
            skip_outputs: 0,
            unit_timed: 0,
            steer: setup.steering.map(|(source, lanes)| {
                let datasets = source.steering().map_or(0, |s| s.datasets());
                LaneSteer { source, lanes, state: SteerState::start(datasets), chosen: Vec::new() }
            }),
        }
    }

    /// A new lane: a steered one chooses its first chunk.
    pub fn start(setup: LaneSetup, next_step: u64) -> Self {
        let mut run = LaneRun::new(setup, next_step);
        if run.steer.is_some() {
            run.choose_next();
        }
        run
    }

    /// Whether the lane reads its datasets by a closed loop ([`crate::Steering`]).
    pub fn is_steered(&self) -> bool {
        self.steer.is_some()
    }

    /// The chunks a steered lane chose since the last call, for the scheduler.
    pub fn take_chosen(&mut self) -> Vec<SteeredChunk> {
        self.steer.as_mut().map_or_else(Vec::new, |s| std::mem::take(&mut s.chosen))
    }

    /// A steered lane's next chunk: of the dataset the closed loop names, skipping datasets
    /// the lane has no more of and empty chunks; the end of the input when it names none.
    fn choose_next(&mut self) {
        let lane = self.lane;
        let Some(s) = self.steer.as_mut() else { return };
        let Some(steering) = s.source.steering() else {
            self.error = Some(Error::Source { lane, message: "a steered lane's work source does not steer".into() });
            return;
        };
        let st = &mut s.state;
        loop {
            let Some(d) = steering.next_dataset(&st.delivered, &st.exhausted) else {
                st.current = None;
                s.chosen.push(SteeredChunk::End);
                return;
            };
            let Some(k) = st.chunks.get(d as usize).copied() else {
                self.error = Some(Error::Source {
                    lane,
                    message: format!("the closed loop chose dataset #{d}, which it does not have"),
                });
                return;
            };
            match steering.dataset_chunk(lane, s.lanes, d, k) {
                Ok(Some(c)) if c.samples.is_empty() => st.chunks[d as usize] += 1,
                Ok(Some(c)) => {
                    st.current = Some(d);
                    self.cursor = Cursor { chunk: k, offset: 0 };
                    s.chosen.push(SteeredChunk::Chunk { chunk: Arc::new(c), k, start: 0 });
                    return;
                }
                Ok(None) => {
                    st.exhausted[d as usize] = true;
                    for a in &mut self.accs {
                        a.dataset_ended(d);
                    }
                }
                Err(message) => {
                    self.error = Some(Error::Source { lane, message });
                    return;
                }
            }
        }
    }

    /// A steered lane's chunk at its restored cursor, for the scheduler.
    fn rechoose_current(&mut self) {
        let (lane, cursor) = (self.lane, self.cursor);
        let Some(s) = self.steer.as_mut() else { return };
        let Some(d) = s.state.current else {
            s.chosen.push(SteeredChunk::End);
            return;
        };
        let found = s.source.steering().map(|st| st.dataset_chunk(lane, s.lanes, d, cursor.chunk));
        match found {
            Some(Ok(Some(c))) => {
                s.chosen.push(SteeredChunk::Chunk { chunk: Arc::new(c), k: cursor.chunk, start: cursor.offset })
            }
            Some(Ok(None)) => {
                self.error = Some(Error::Source {
                    lane,
                    message: format!("the checkpoint's chunk {} of dataset #{d} does not exist", cursor.chunk),
                })
            }
            Some(Err(message)) => self.error = Some(Error::Source { lane, message }),
            None => self.error = Some(Error::Source { lane, message: "the work source does not steer".into() }),
        }
    }

    /// Continues a lane from a checkpointed state whose accumulators were already imported,
    /// given its pending rows rebuilt in order.
    pub fn resume(setup: LaneSetup, state: &LaneState, next_step: u64, pending: Vec<Record>) -> Result<Self, Error> {
        let mut run = LaneRun::new(setup, next_step);
        run.cursor = state.cursor;
        match (&mut run.steer, &state.steer) {
            (Some(s), Some(saved)) if saved.chunks.len() == s.state.chunks.len() => s.state = saved.clone(),
            (None, None) => {}
            _ => {
                return Err(Error::Rebuild {
                    lane: state.lane,
                    lineage: "(lane state)".into(),
                    message: "the state's steering does not fit the work source (steered or not, datasets)".into(),
                });
            }
        }
        if !state.finished {
            run.rechoose_current();
        }
        run.skip_outputs = state.input_progress;
        run.skips = state.skips.clone();
        run.tail_dropped = state.tail_dropped.clone();
        run.finished = state.finished;
        // A checkpoint is checksummed, not trusted: a crafted one could claim fewer rows than
        // it lists as pending.
        run.rows_emitted = state.rows_emitted.checked_sub(pending.len() as u64).ok_or_else(|| Error::Rebuild {
            lane: state.lane,
            lineage: "(lane state)".into(),
            message: format!(
                "{} rows emitted but {} pending: the state is inconsistent",
                state.rows_emitted,
                pending.len()
            ),
        })?;
        for row in pending {
            run.emit(row);
        }
        if run.finished {
            run.finish_tail();
        }
        // Steps the pending rows fill are at the restored position, which may be inside an input.
        run.snapshot_unsnapped(run.cursor, run.skip_outputs);
        Ok(run)
    }

    pub fn progress(&self) -> Progress {
        Progress { steps_made: self.next_step, done: self.finished || self.has_failed() }
    }

    /// Whether the lane stopped at an error (taken or not).
    pub fn has_failed(&self) -> bool {
        self.failed || self.error.is_some()
    }

    /// The error that stopped the lane, once: the lane stays stopped.
    pub fn take_error(&mut self) -> Option<Error> {
        let e = self.error.take();
        self.failed |= e.is_some();
        e
    }

    pub fn cursor(&self) -> Cursor {
        self.cursor
    }

    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The state now, as a checkpoint would hold it: every row not yet handed to the consumer
    /// is pending (used for the start-of-run snapshot and for ended lanes).
    pub fn snapshot_now(&self) -> Snapshot {
        // A lane restored inside an input has not pushed anything past that input's first
        // `skip_outputs` records yet: that is still its position.
        self.snapshot_core(0, self.cursor, self.skip_outputs)
    }

    /// A snapshot at the current input position whose pending rows are those of the queued
    /// steps from `first` on plus the step being filled.
    fn snapshot_core(&self, first: usize, cursor: Cursor, input_progress: u64) -> Snapshot {
        let pending = (self.steps.iter().skip(first).flat_map(|s| &s.rows))
            .chain(&self.current)
            .map(|r| r.lineage().clone())
            .collect();
        let core = Arc::new(SnapshotCore {
            lane: self.lane,
            cursor,
            input_progress,
            rows_emitted: self.rows_emitted,
            skips: self.skips.clone(),
            finished: self.finished,
            tail_dropped: self.tail_dropped.clone(),
            steer: self.steer.as_ref().map(|s| s.state.clone()),
            accumulators: self.accs.iter().map(|a| a.export()).collect(),
            pending,
        });
        Snapshot { core, pending_from: 0 }
    }

    /// Feeds one ordered unit. Errors stop the lane (kept in `self.error`).
    ///
    /// Pauses, keeping the rest of the unit, once the lane has finalized step `until` (what the
    /// consumer may take plus the prefetch): one input that makes thousands of rows (a huge
    /// document) then waits for the consumer instead of holding every row in memory.
    /// [`LaneRun::continue_paused`] continues it.
    pub fn accumulate(&mut self, unit: UnitOutput, until: u64) {
        if self.has_failed() || self.finished {
            return;
        }
        match unit {
            UnitOutput::Samples { chunk, start, chunk_len, records, ends, inputs, failure } => {
                let unit = PausedUnit {
                    chunk,
                    start,
                    chunk_len,
                    records: records.into_iter(),
                    ends,
                    inputs,
                    failure,
                    j: 0,
                    done: 0,
                };
                self.run_samples(unit, until);
            }
            UnitOutput::End => {
                if let Err(e) = self.finish_all() {
                    self.error = Some(e);
                    return;
                }
                self.finished = true;
                self.finish_tail();
                self.boundary();
            }
            UnitOutput::Failed(e) => self.error = Some(e),
        }
    }

    /// Whether a unit is paused half-way (see [`LaneRun::accumulate`]).
    pub fn is_paused(&self) -> bool {
        self.paused.is_some()
    }

    /// Continues a paused unit, up to step `until` again.
    pub fn continue_paused(&mut self, until: u64) {
        if let Some(unit) = self.paused.take() {
            self.run_samples(unit, until);
        }
    }

    /// Pushes a unit's records in order, input by input, until it ends or the lane reaches
    /// step `until` (then it is kept in `self.paused`).
    fn run_samples(&mut self, mut u: PausedUnit, until: u64) {
        self.unit_timed = self.times.units_timed.weight();
        let good = u.failure.as_ref().map_or(u.ends.len(), |(j, _)| *j);
        // The first input after a restore taken inside it: its first records were pushed
        // before the checkpoint.
        if self.skip_outputs > 0 && u.j == 0 && u.done == 0 {
            let skip = std::mem::take(&mut self.skip_outputs);
            let have = u.ends.first().copied().unwrap_or(0) as u64;
            if skip > have || good == 0 {
                self.error = Some(Error::Rebuild {
                    lane: self.lane,
                    lineage: "(input in progress)".into(),
                    message: format!(
                        "the checkpoint had pushed {skip} records of this input, which now makes {have}: did an operator change?"
                    ),
                });
                return;
            }
            u.records.nth(skip as usize - 1);
            u.done = skip as usize;
        }
        while u.j < good {
            while u.done < u.ends[u.j] {
                if self.next_step >= until {
                    // Steps made inside this input are handed out before it ends: give them
                    // their state now, as a position inside the input.
                    let input_start = if u.j == 0 { 0 } else { u.ends[u.j - 1] };
                    let at = Cursor { chunk: u.chunk, offset: u.start + u.j as u64 };
                    self.snapshot_unsnapped(at, (u.done - input_start) as u64);
                    self.paused = Some(u);
                    return;
                }
                let Some(rec) = u.records.next() else { break };
                u.done += 1;
                if let Some(s) = self.steer.as_mut()
                    && let Some(t) = s.state.delivered.get_mut(u.inputs[u.j].0 as usize)
                {
                    *t += rec.lineage().fragments().iter().map(|f| u64::from(f.len())).sum::<u64>();
                }
                if let Err(e) = self.push_stage(0, rec) {
                    self.error = Some(e);
                    return;
                }
            }
            let (dataset, skip) = &u.inputs[u.j];
            if let Err(e) = self.count_input(*dataset, skip.as_deref()) {
                self.error = Some(e);
                return;
            }
            let next = u.start + u.j as u64 + 1;
            if next < u.chunk_len {
                self.cursor = Cursor { chunk: u.chunk, offset: next };
            } else if let Some(s) = self.steer.as_mut() {
                // The chunk is pushed whole: what it delivered decides the next.
                if let Some(d) = s.state.current {
                    s.state.chunks[d as usize] = u.chunk + 1;
                }
                self.choose_next();
            } else {
                self.cursor = Cursor { chunk: u.chunk + 1, offset: 0 };
            }
            self.boundary();
            u.j += 1;
        }
        if let Some((_, e)) = u.failure {
            self.error = Some(e);
        }
    }

    /// Pushes `rec` into accumulator stage `k` (or out as a row past the last stage).
    fn push_stage(&mut self, k: usize, rec: Record) -> Result<(), Error> {
        if k == self.accs.len() {
            return self.emit_through_tail(rec);
        }
        let origin = rec.lineage().first_sample();
        let mut out = std::mem::take(&mut self.scratch[k]);
        let t = self.stage_clock();
        let pushed = self.accs[k].push(rec, &mut out);
        self.add_stage_time(k, t);
        let res = match pushed {
            Ok(()) => self.forward(k, &mut out),
            Err(e) => Err(self.op_error(self.plan.stages[k].op.name(), origin, e)),
        };
        out.clear();
        self.scratch[k] = out;
        res
    }

    /// Sends the outputs of stage `k` on: through the next stage's inline maps into it.
    fn forward(&mut self, k: usize, out: &mut Vec<Record>) -> Result<(), Error> {
        if k > 0 && self.watches_next[k - 1] {
            for r in out.iter() {
                self.accs[k - 1].next_stage_out(r);
            }
        }
        // The plan is read through `self` each time, not through a clone of its `Arc`: a clone
        // per call would write the reference count that every worker shares.
        let has_pre = self.plan.stages.get(k + 1).is_some_and(|s| !s.pre.is_empty());
        for r in out.drain(..) {
            if !has_pre {
                self.push_stage(k + 1, r)?;
            } else {
                let origin = r.lineage().first_sample();
                let mut mapped = Vec::new();
                let t = self.stage_clock();
                let res = apply_chain(&self.plan.stages[k + 1].pre, r, &mut mapped)
                    .map_err(|(op, e)| self.op_error(op, origin, e));
                self.add_stage_time(k + 1, t);
                res?;
                for m in mapped {
                    self.push_stage(k + 1, m)?;
                }
            }
        }
        Ok(())
    }

    fn emit_through_tail(&mut self, rec: Record) -> Result<(), Error> {
        if self.plan.tail.is_empty() {
            self.emit(rec);
            return Ok(());
        }
        let origin = rec.lineage().first_sample();
        let mut rows = Vec::new();
        apply_chain(&self.plan.tail, rec, &mut rows).map_err(|(op, e)| self.op_error(op, origin, e))?;
        for r in rows {
            self.emit(r);
        }
        Ok(())
    }

    /// Flushes every accumulator in order, each one's leftovers flowing into the next.
    fn finish_all(&mut self) -> Result<(), Error> {
        for k in 0..self.accs.len() {
            let mut out = Vec::new();
            if let Err(e) = self.accs[k].finish(&mut out) {
                return Err(self.op_error(self.plan.stages[k].op.name(), None, e));
            }
            self.forward(k, &mut out)?;
        }
        Ok(())
    }

    /// Counts one input of `dataset`: a skip (with its reason) or a good record. Fails when the
    /// dataset's bad records in a row reach its limit.
    fn count_input(&mut self, dataset: u32, skip: Option<&str>) -> Result<(), Error> {
        let d = dataset as usize;
        let Some(reason) = skip else {
            if let Some(n) = self.bad_in_a_row.get_mut(d) {
                *n = 0;
            }
            return Ok(());
        };
        self.skips.add(dataset, || reason.to_string());
        let (Some(n), Some(&limit)) = (self.bad_in_a_row.get_mut(d), self.bad_limit.get(d)) else { return Ok(()) };
        *n += 1;
        if *n < limit {
            return Ok(());
        }
        let name = self.names.get(d).cloned().unwrap_or_else(|| format!("#{d}"));
        let first = self.skips.0.get(&dataset).map_or(String::new(), |t| t.first.clone());
        Err(Error::AllBad { dataset: name, lane: self.lane, count: *n, first })
    }

    fn op_error(&self, op: &str, origin: Option<zephon_operator::SampleId>, e: OpError) -> Error {
        match origin {
            Some(s) => record_error(&self.names, s, self.lane, op, e.to_string()),
            None => Error::Operator { operator: op.to_string(), lane: self.lane, message: e.to_string() },
        }
    }

    fn emit(&mut self, row: Record) {
        self.rows_emitted += 1;
        self.current.push(row);
        if self.current.len() == self.rows_per_step {
            self.finalize();
        }
    }

    /// The start of a timed push, when this unit is timed.
    fn stage_clock(&self) -> Option<std::time::Instant> {
        (self.unit_timed > 0).then(std::time::Instant::now)
    }

    fn add_stage_time(&mut self, k: usize, since: Option<std::time::Instant>) {
        let Some(since) = since else { return };
        let n = self.unit_timed * super::timing::since(since);
        let stages = &mut self.times.stages;
        if stages.len() <= k {
            stages.resize(k + 1, 0);
        }
        stages[k] += n;
    }

    fn finalize(&mut self) {
        let rows = std::mem::replace(&mut self.current, Vec::with_capacity(self.rows_per_step));
        let digest = if self.digests_by_workers {
            let timed = self.times.digests_timed.start();
            let digest = lane_digest(&rows);
            if let Some((t, weight)) = timed {
                self.times.digest += weight * super::timing::since(t);
            }
            LaneDigest::made(digest)
        } else {
            LaneDigest::later()
        };
        self.steps.push_back(LaneStep { lane: self.lane, step: Step(self.next_step), rows, digest, state: None });
        self.next_step += 1;
        self.unsnapped += 1;
    }

    /// After the input has ended: a final partial step, if the tail policy keeps one.
    fn finish_tail(&mut self) {
        if self.current.is_empty() {
            return;
        }
        if self.tail == Tail::Partial {
            self.finalize();
            return;
        }
        // Left out, but counted: the run reports what the end of the data dropped.
        for row in std::mem::take(&mut self.current) {
            self.tail_dropped.rows += 1;
            for f in row.lineage().fragments() {
                *self.tail_dropped.positions.entry(f.sample.dataset).or_default() += u64::from(f.len());
                self.tail_dropped.documents.insert(f.sample);
            }
        }
    }

    /// An input boundary: the state is consistent, so steps finalized since the last boundary
    /// get their snapshots now.
    fn boundary(&mut self) {
        self.snapshot_unsnapped(self.cursor, 0);
    }

    /// Snapshots the steps finalized since the last snapshot, as at input `cursor` with
    /// `input_progress` of its records already pushed (0 at an input boundary).
    fn snapshot_unsnapped(&mut self, cursor: Cursor, input_progress: u64) {
        if self.unsnapped == 0 {
            return;
        }
        let timed = self.times.snapshots_timed.start();
        self.snapshot_steps(cursor, input_progress);
        if let Some((t, weight)) = timed {
            self.times.snapshot += weight * super::timing::since(t);
        }
    }

    fn snapshot_steps(&mut self, cursor: Cursor, input_progress: u64) {
        let first = self.steps.len() - self.unsnapped;
        self.unsnapped = 0;
        let (every, at) = (self.snapshot_every, self.snapshot_at);
        let wanted = |s: &LaneStep| (s.step.0 + 1).is_multiple_of(every) || at == Some(s.step.0 + 1);
        let Some(lowest) = (first..self.steps.len()).find(|&i| wanted(&self.steps[i])) else { return };
        // One core for all of them, pending from the first step after the lowest: the rows
        // pending after step i are those of the steps after it, so each snapshot starts its
        // pending rows where step i's successors begin. With one row a step (as many lanes
        // as rows), no step's own rows are ever copied.
        let base = self.snapshot_core(lowest + 1, cursor, input_progress);
        let mut pending_from = 0;
        for i in lowest..self.steps.len() {
            if i > lowest {
                pending_from += self.steps[i].rows.len();
            }
            if wanted(&self.steps[i]) {
                self.steps[i].state = Some(Snapshot { core: base.core.clone(), pending_from });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::plan::Operators;
    use zephon_operator::{Fragment, SampleId, Span, Value};

    fn lane() -> LaneRun {
        lane_snapshotting_every(1)
    }

    fn lane_snapshotting_every(every: u64) -> LaneRun {
        let plan = Arc::new(Plan::new(Operators::new()));
        LaneRun::new(
            LaneSetup {
                lane: Lane(0),
                plan,
                accs: Vec::new(),
                names: vec!["d".to_string()].into(),
                rows_per_step: 2,
                tail: Tail::Drop,
                snapshot_every: every,
                snapshot_at: None,
                digests_by_workers: true,
                bad_limit: vec![1024].into(),
                steering: None,
            },
            0,
        )
    }

    /// One input that makes 1,000 rows (a huge document) and a second input.
    fn big_unit() -> UnitOutput {
        let sample = SampleId::new(0, 0, 0);
        let records: Vec<Record> = (0..1001u32)
            .map(|i| {
                Record::new(Lineage::single(Fragment::span(sample, Span::at(i, 1).unwrap())))
                    .with(&"x".into(), Value::Int(i64::from(i)))
            })
            .collect();
        UnitOutput::Samples {
            chunk: 0,
            start: 0,
            chunk_len: 2,
            records,
            ends: vec![1000, 1001],
            inputs: vec![(0, None), (0, None)],
            failure: None,
        }
    }

    #[test]
    fn each_snapshot_holds_as_pending_exactly_the_rows_after_its_step() {
        for every in [1, 2, 3, 7] {
            let mut run = lane_snapshotting_every(every);
            // The first input makes 1,000 rows of 2 a step: 500 steps finalized at once, all
            // snapshotted at the boundary after it. The second input's row comes later and
            // is in none of them.
            run.accumulate(big_unit(), u64::MAX);
            assert_eq!((run.steps.len(), run.current.len()), (500, 1));
            let lineages: Vec<Vec<Lineage>> =
                run.steps.iter().map(|s| s.rows.iter().map(|r| r.lineage().clone()).collect()).collect();
            for (i, step) in run.steps.iter().enumerate() {
                let wanted = (step.step.0 + 1).is_multiple_of(every);
                assert_eq!(step.state.is_some(), wanted, "step {} with snapshots every {every}", step.step.0);
                if let Some(snap) = &step.state {
                    let pending = snap.state().pending;
                    let after: Vec<Lineage> = lineages[i + 1..].iter().flatten().cloned().collect();
                    assert!(pending == after, "step {}, snapshots every {every}: wrong pending rows", step.step.0);
                }
            }
        }
    }

    /// Passes records on; counts the records the next stage emitted.
    struct Watcher(Arc<AtomicU64>);

    impl Accumulator for Watcher {
        fn push(&mut self, record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
            out.push(record);
            Ok(())
        }
        fn export(&self) -> AccumulatorState {
            AccumulatorState::default()
        }
        fn import(&mut self, _: AccumulatorState, _: Vec<Record>) -> Result<(), OpError> {
            Ok(())
        }
        fn watches_next_stage(&self) -> bool {
            true
        }
        fn next_stage_out(&mut self, _: &Record) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Holds records and lets them out three at a time.
    struct Threes(Vec<Record>);

    impl Accumulator for Threes {
        fn push(&mut self, record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
            self.0.push(record);
            if self.0.len() == 3 {
                out.append(&mut self.0);
            }
            Ok(())
        }
        fn export(&self) -> AccumulatorState {
            AccumulatorState::default()
        }
        fn import(&mut self, _: AccumulatorState, _: Vec<Record>) -> Result<(), OpError> {
            Ok(())
        }
    }

    #[test]
    fn a_watching_accumulator_sees_what_the_next_stage_emits_and_the_last_one_sees_nothing() {
        let (first, last) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let mut run = lane();
        run.accs =
            vec![Box::new(Watcher(first.clone())), Box::new(Threes(Vec::new())), Box::new(Watcher(last.clone()))];
        run.watches_next = run.accs.iter().map(|a| a.watches_next_stage()).collect();
        run.scratch = (0..3).map(|_| Vec::new()).collect();
        run.accumulate(big_unit(), u64::MAX);
        let seen = |c: &AtomicU64| c.load(Ordering::Relaxed);
        assert_eq!(seen(&first), 999, "1,001 records in, 333 threes out; 2 still held");
        assert_eq!(run.rows_emitted, 999);
        assert_eq!(seen(&last), 0, "the last stage has no next one");
    }

    #[test]
    fn a_lane_pauses_inside_a_huge_input_and_continues_where_it_stopped() {
        let mut run = lane();
        run.accumulate(big_unit(), 3);
        assert!(run.is_paused());
        assert_eq!(run.progress().steps_made, 3, "stops at the step it may make, not at 500");
        assert_eq!(run.steps.len(), 3);
        run.steps.clear();
        run.continue_paused(10);
        assert_eq!(run.progress().steps_made, 10);
        run.continue_paused(u64::MAX);
        assert!(!run.is_paused());
        assert_eq!(run.progress().steps_made, 500, "1,001 rows of 2 a step");
        assert_eq!(run.cursor(), Cursor { chunk: 1, offset: 0 }, "both inputs consumed");
        // The rows are the same as without a pause.
        let mut straight = lane();
        straight.accumulate(big_unit(), u64::MAX);
        let digests = |r: &LaneRun| r.steps.iter().map(LaneStep::digest).collect::<Vec<_>>();
        assert_eq!(digests(&run), digests(&straight)[3..]);
    }
}
