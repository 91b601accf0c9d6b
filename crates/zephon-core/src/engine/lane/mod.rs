//! One lane's ordered part: accumulators, row assembly into steps, snapshots.
//!
//! A `LaneRun` is only ever touched by one thread at a time (it sits behind the lane's own
//! mutex); everything here is sequential and deterministic.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::checkpoint::{Cursor, LaneState, Skips, TailDropped};
use crate::error::{Error, OpError, record_error};
use crate::plan::{Plan, apply_chain};
use crate::source::WorkSource;
use crate::step::{LaneDigest, LaneStep, lane_digest};
use crate::step_schedule::RowsPerStep;
use zephon_operator::{Accumulator, Lane, Record, Step};

use crate::engine::settings::Tail;

mod snapshot;
mod steer;

use steer::LaneSteer;
pub(crate) use steer::{InputOutcome, ReadBudget, ReadyInput, SteeredUnit};

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
    /// A steered lane's inputs, each read and through the stateless part (see
    /// [`crate::Steering`]): they go to their datasets' queues until the closed loop takes them.
    Inputs(Vec<ReadyInput>),
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
    /// G(step), and the lanes that share each step's rows.
    rows: RowsPerStep,
    lanes: u32,
    /// Rows the step being filled takes from this lane: G(next_step)/L.
    step_rows: usize,
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
    /// G(step), the schedule of rows per global step.
    pub rows: RowsPerStep,
    /// L, the run's lane count.
    pub lanes: u32,
    pub tail: Tail,
    pub snapshot_every: u64,
    pub snapshot_at: Option<u64>,
    pub digests_by_workers: bool,
    /// Per dataset, the most bad records a lane may skip in a row (see `LaneRun`).
    pub bad_limit: Arc<[u64]>,
    /// The run's work source and lane count, when it steers its lanes.
    pub steering: Option<(Arc<dyn WorkSource>, u32)>,
    /// What a steered lane reads ahead.
    pub read: ReadBudget,
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
            step_rows: rows_per_lane(&setup.rows, setup.lanes, next_step),
            rows: setup.rows,
            lanes: setup.lanes,
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
            steer: setup.steering.map(|(source, lanes)| LaneSteer::new(source, lanes, setup.read)),
        }
    }

    /// A new lane: a steered one plans its first reads.
    pub fn start(setup: LaneSetup, next_step: u64) -> Self {
        let mut run = LaneRun::new(setup, next_step);
        if let Err(e) = run.plan_reads() {
            run.error = Some(e);
        }
        run
    }

    /// Continues a lane from a checkpointed state whose accumulators were already imported,
    /// given its pending rows rebuilt in order.
    pub fn resume(setup: LaneSetup, state: &LaneState, next_step: u64, pending: Vec<Record>) -> Result<Self, Error> {
        let mut run = LaneRun::new(setup, next_step);
        run.cursor = state.cursor;
        let fits = match (&mut run.steer, &state.steer) {
            (Some(s), Some(saved)) => s.restore(saved),
            (None, None) => true,
            _ => false,
        };
        if !fits {
            return Err(Error::Rebuild {
                lane: state.lane,
                lineage: "(lane state)".into(),
                message: "the state's steering does not fit the work source (steered or not, datasets)".into(),
            });
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
        if !run.finished {
            run.plan_reads()?;
        }
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
            UnitOutput::Inputs(inputs) => self.take_inputs(inputs, until),
            UnitOutput::End => self.end_of_input(),
            UnitOutput::Failed(e) => self.error = Some(e),
        }
    }

    /// Whether a unit (or a steered lane's input) is paused half-way (see
    /// [`LaneRun::accumulate`]).
    pub fn is_paused(&self) -> bool {
        self.paused.is_some() || self.steered_paused()
    }

    /// Continues a paused unit, up to step `until` again.
    pub fn continue_paused(&mut self, until: u64) {
        if let Some(unit) = self.paused.take() {
            self.run_samples(unit, until);
        } else if self.steered_paused() {
            self.run_steered(until);
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
        if self.current.len() >= self.step_rows {
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
        self.step_rows = rows_per_lane(&self.rows, self.lanes, self.next_step + 1);
        let rows = std::mem::replace(&mut self.current, Vec::with_capacity(self.step_rows));
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
}

/// The rows one lane gives step `step`: a lane's rows are one stream, whatever the schedule;
/// G(step) only says where each step's rows end.
fn rows_per_lane(rows: &RowsPerStep, lanes: u32, step: u64) -> usize {
    (rows.at(step) / lanes.max(1)) as usize
}

#[cfg(test)]
mod tests;
