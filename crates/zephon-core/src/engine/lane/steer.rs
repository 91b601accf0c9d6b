//! A steered lane's closed loop: before each record it picks the dataset the record comes
//! from, by what it delivered of each; and the reads it plans ahead of that loop.
//!
//! Two sides, kept apart because only one of them decides data:
//! - the **push side** ([`SteerState`], checkpointed) is where the lane is in each dataset's
//!   stream and what it delivered. [`Steering::next_dataset`] on it names the dataset of the
//!   next record; the lane pushes that dataset's next record: the next piece of the input it
//!   is inside, or the first of its next input. So a long document split into pieces moves the
//!   shares by a piece at a time, and its pieces interleave with the other datasets' records.
//!   A pure function of the lane's stream.
//! - the **read side** ([`ReadAhead`], never checkpointed) plans which inputs to read before
//!   the push side asks for them: the same rule, counting inputs read but not pushed at their
//!   estimated tokens, up to a budget of inputs. Its units mix datasets; their processed inputs
//!   wait in one queue per dataset. A wrong guess costs a wait or memory, never a byte.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::checkpoint::SteerState;
use crate::error::Error;
use crate::source::{Chunk, Steering, WorkSource};
use zephon_operator::{Lane, Record, SampleId};

use super::LaneRun;

/// A steered lane's closed loop and its reads ahead.
pub(super) struct LaneSteer {
    source: Arc<dyn WorkSource>,
    lanes: u32,
    /// The push side: where the lane is in each dataset, what it delivered.
    pub(super) state: SteerState,
    /// Per dataset, its processed inputs not yet begun, in stream order.
    ready: Vec<VecDeque<ReadyInput>>,
    /// Per dataset, the rest of the input the lane is inside.
    open: Vec<Option<OpenInput>>,
    /// The lane stopped at the step the consumer may take (plus the prefetch).
    paused: bool,
    /// The push side's chunk of each dataset (its index and the chunk), to look up inputs.
    push_chunks: Vec<Option<(u64, Arc<Chunk>)>>,
    reads: ReadAhead,
    /// Scratch: the tokens delivered since the share segment took effect.
    since: Vec<u64>,
}

/// One input of a steered lane, read and through the stateless part.
pub(crate) struct ReadyInput {
    pub(crate) sample: SampleId,
    pub(crate) outcome: InputOutcome,
}

/// What the stateless part made of one input.
pub(crate) enum InputOutcome {
    /// Its records (possibly none).
    Made(Vec<Record>),
    /// Skipped under the skip policy, and why.
    Skipped(String),
    /// The error that stops the lane when it reaches this input.
    Failed(Error),
}

/// The rest of an input a steered lane is inside.
struct OpenInput {
    records: std::vec::IntoIter<Record>,
    skipped: Option<String>,
}

/// A unit of reading a steered lane asks for: inputs of any of its datasets, each dataset's in
/// stream order.
pub(crate) struct SteeredUnit {
    /// Its place in the lane's reorder ring: the order the lane planned it in. Two drainers
    /// of one lane may hand their plans to the scheduler in either order; the ring puts the
    /// units back in the order each dataset's inputs were asked for.
    pub(crate) seq: u64,
    pub(crate) ids: Vec<SampleId>,
    /// The dataset chunks (dataset, chunk) whose first input this unit reads: where each of
    /// the lane's dataset streams has moved, for the plan of reads ahead.
    pub(crate) entered: Vec<(u32, u64)>,
}

/// The read side: which inputs to read before the loop asks for them.
struct ReadAhead {
    /// Per dataset, the next input not yet asked for: its chunk index and offset.
    next: Vec<(u64, u64)>,
    chunks: Vec<Option<(u64, Arc<Chunk>)>>,
    /// Per dataset, whether its stream has no more inputs to ask for.
    ended: Vec<bool>,
    /// Per dataset, inputs asked for and not yet pushed.
    outstanding: Vec<u64>,
    total: u64,
    /// The most inputs asked for and not yet pushed, beyond the unit that fills a stall.
    budget: u64,
    unit_cap: usize,
    /// Units planned so far (the next one's sequence number): a lane's first units are small
    /// (1, 2, 4, ... inputs), so that the first step does not wait for whole units.
    units: u64,
    /// The loop waits for an input of this dataset that nobody has asked for yet.
    stalled: Option<usize>,
    planned: Vec<SteeredUnit>,
    /// Dataset chunks entered since the last unit was planned.
    entered: Vec<(u32, u64)>,
    /// Scratch: tokens counted per dataset when choosing what to read.
    counted: Vec<u64>,
}

/// What the read-ahead of a steered lane may hold, in inputs: `budget` asked for ahead, in
/// units of at most `unit_cap`.
#[derive(Copy, Clone, Debug)]
pub(crate) struct ReadBudget {
    pub(crate) budget: usize,
    pub(crate) unit_cap: usize,
}

impl LaneSteer {
    pub(super) fn new(source: Arc<dyn WorkSource>, lanes: u32, read: ReadBudget) -> Self {
        let n = source.steering().map_or(0, |s| s.datasets()) as usize;
        let state = SteerState::start(n as u32);
        LaneSteer {
            source,
            lanes,
            reads: ReadAhead {
                next: vec![(0, 0); n],
                chunks: vec![None; n],
                ended: vec![false; n],
                outstanding: vec![0; n],
                total: 0,
                budget: read.budget.max(1) as u64,
                unit_cap: read.unit_cap.max(1),
                units: 0,
                stalled: None,
                planned: Vec::new(),
                entered: Vec::new(),
                counted: Vec::with_capacity(n),
            },
            state,
            ready: (0..n).map(|_| VecDeque::new()).collect(),
            open: (0..n).map(|_| None).collect(),
            paused: false,
            push_chunks: vec![None; n],
            since: Vec::with_capacity(n),
        }
    }

    /// Continues from a checkpointed state: reading resumes at each dataset's next input.
    pub(super) fn restore(&mut self, saved: &SteerState) -> bool {
        let n = self.ready.len();
        let mut saved = saved.clone();
        if saved.offsets.is_empty() {
            saved.offsets = vec![0; saved.chunks.len()];
        }
        if saved.progress.is_empty() {
            saved.progress = vec![0; saved.chunks.len()];
        }
        if !saved.fits(n) {
            return false;
        }
        self.reads.next = saved.chunks.iter().copied().zip(saved.offsets.iter().copied()).collect();
        self.state = saved;
        true
    }
}

/// The closed loop of a steered lane's work source.
fn steering_of(source: &Arc<dyn WorkSource>, lane: Lane) -> Result<&dyn Steering, Error> {
    source
        .steering()
        .ok_or_else(|| Error::Source { lane, message: "a steered lane's work source does not steer".into() })
}

/// Chunk `k` of dataset `d` for `lane`, from a one-chunk cache per dataset.
fn chunk_at(
    cache: &mut [Option<(u64, Arc<Chunk>)>],
    steering: &dyn Steering,
    lane: Lane,
    lanes: u32,
    d: usize,
    k: u64,
) -> Result<Option<Arc<Chunk>>, Error> {
    if let Some((at, c)) = &cache[d]
        && *at == k
    {
        return Ok(Some(c.clone()));
    }
    match steering.dataset_chunk(lane, lanes, d as u32, k)? {
        Some(c) => {
            let c = Arc::new(c);
            cache[d] = Some((k, c.clone()));
            Ok(Some(c))
        }
        None => Ok(None),
    }
}

impl LaneRun {
    /// Whether the lane reads its datasets by a closed loop ([`crate::Steering`]).
    pub fn is_steered(&self) -> bool {
        self.steer.is_some()
    }

    /// The units of reading a steered lane planned since the last call, for the scheduler.
    pub fn take_chosen(&mut self) -> Vec<SteeredUnit> {
        self.steer.as_mut().map_or_else(Vec::new, |s| std::mem::take(&mut s.reads.planned))
    }

    /// Whether a steered lane stopped at the step the consumer may take.
    pub(super) fn steered_paused(&self) -> bool {
        self.steer.as_ref().is_some_and(|s| s.paused)
    }

    /// Takes a unit of a steered lane's inputs, read and processed, into its datasets' queues,
    /// then pushes what the loop can.
    pub(super) fn take_inputs(&mut self, inputs: Vec<ReadyInput>, until: u64) {
        if let Some(s) = self.steer.as_mut() {
            for input in inputs {
                if let Some(q) = s.ready.get_mut(input.sample.dataset as usize) {
                    q.push_back(input);
                }
            }
            if s.paused {
                return;
            }
        }
        self.run_steered(until);
    }

    /// Pushes records in the closed loop's order until the next one's input is not read yet,
    /// the lane has made step `until` (it pauses), its input ends or it fails; then plans more
    /// reading.
    pub(super) fn run_steered(&mut self, until: u64) {
        self.unit_timed = self.times.units_timed.weight();
        if let Some(s) = self.steer.as_mut() {
            s.paused = false;
        }
        while !self.has_failed() && !self.finished {
            let d = match self.pick() {
                Ok(Some(d)) => d,
                Ok(None) => {
                    self.end_of_input();
                    break;
                }
                Err(e) => {
                    self.error = Some(e);
                    break;
                }
            };
            if self.next_step >= until {
                if let Some(s) = self.steer.as_mut() {
                    s.paused = true;
                }
                break;
            }
            match self.push_next(d) {
                Ok(true) => {}
                Ok(false) => break, // not read yet: the loop waits for it
                Err(e) => self.error = Some(e),
            }
        }
        if let Err(e) = self.plan_reads() {
            self.error.get_or_insert(e);
        }
    }

    /// The dataset of the lane's next record, by the closed loop (skipping datasets the lane
    /// has no more of); `None` when its input ends.
    fn pick(&mut self) -> Result<Option<usize>, Error> {
        let (lane, next_step) = (self.lane, self.next_step);
        let Some(s) = self.steer.as_mut() else { return Ok(None) };
        let steering = steering_of(&s.source, lane)?;
        // The shares in force at the step this lane is making rows for; a new segment counts
        // what the lane delivers afresh and retargets the accumulators.
        let schedule = steering.shares();
        let segment = schedule.segment_start(next_step);
        let shares = schedule.at(next_step);
        let st = &mut s.state;
        if segment != st.segment {
            st.segment = segment;
            st.segment_base = st.delivered.clone();
            for a in &mut self.accs {
                a.targets_changed(shares);
            }
        }
        let inside = |st: &SteerState, d: usize| st.progress[d] > 0;
        // An input of a dataset the shares no longer read is finished first: its pieces would
        // otherwise wait for ever.
        if let Some(d) = (0..st.progress.len()).find(|&d| inside(st, d) && shares.get(d).is_none_or(|&w| w <= 0.0)) {
            return Ok(Some(d));
        }
        loop {
            st.delivered_in_segment(&mut s.since);
            let Some(d) = steering.next_dataset(shares, &s.since, &st.exhausted) else {
                // The input ends (under `stop`, when one dataset runs out): inputs the lane is
                // inside are finished first, so that no document ends half-way.
                return Ok((0..st.progress.len()).find(|&d| inside(st, d)));
            };
            let d = d as usize;
            if d >= st.chunks.len() {
                return Err(Error::Source {
                    lane,
                    message: format!("the closed loop chose dataset #{d}, which it does not have"),
                });
            }
            if inside(st, d) {
                return Ok(Some(d));
            }
            match chunk_at(&mut s.push_chunks, steering, lane, s.lanes, d, st.chunks[d])? {
                Some(c) if st.offsets[d] < c.samples.len() as u64 => return Ok(Some(d)),
                // That chunk is read (or empty): the input is the first of the next one.
                Some(_) => (st.chunks[d], st.offsets[d]) = (st.chunks[d] + 1, 0),
                None => {
                    st.exhausted[d] = true;
                    for a in &mut self.accs {
                        a.dataset_ended(d as u32);
                    }
                }
            }
        }
    }

    /// Pushes dataset `d`'s next record: of the input the lane is inside, else of its next
    /// input (which ends at once if it made none). False when that input is not read yet (it
    /// is asked for).
    fn push_next(&mut self, d: usize) -> Result<bool, Error> {
        let Some(s) = self.steer.as_mut() else { return Ok(false) };
        if s.open[d].is_none() && !self.open_input(d)? {
            return Ok(false);
        }
        let Some(s) = self.steer.as_mut() else { return Ok(false) };
        let Some(open) = s.open[d].as_mut() else { return Ok(false) };
        if let Some(rec) = open.records.next() {
            s.state.progress[d] += 1;
            s.state.delivered[d] += rec.lineage().fragments().iter().map(|f| u64::from(f.len())).sum::<u64>();
            self.push_stage(0, rec)?;
        }
        let Some(s) = self.steer.as_mut() else { return Ok(false) };
        if s.open[d].as_ref().is_some_and(|o| o.records.len() == 0) {
            let skipped = s.open[d].take().and_then(|o| o.skipped);
            s.state.offsets[d] += 1;
            s.state.progress[d] = 0;
            self.count_input(d as u32, skipped.as_deref())?;
        }
        // The state is consistent after every record: steps finalized by it get their
        // snapshot here.
        self.boundary();
        Ok(true)
    }

    /// Begins dataset `d`'s next input if it is read (skipping the records a restored lane
    /// had pushed of it); otherwise asks for it. False when it is not read yet.
    fn open_input(&mut self, d: usize) -> Result<bool, Error> {
        let lane = self.lane;
        let Some(s) = self.steer.as_mut() else { return Ok(false) };
        let Some(input) = s.ready[d].pop_front() else {
            if s.reads.outstanding[d] == 0 {
                s.reads.stalled = Some(d);
            }
            return Ok(false);
        };
        s.reads.outstanding[d] = s.reads.outstanding[d].saturating_sub(1);
        s.reads.total = s.reads.total.saturating_sub(1);
        let (k, offset) = (s.state.chunks[d], s.state.offsets[d]);
        let steering = steering_of(&s.source, lane)?;
        let expected = chunk_at(&mut s.push_chunks, steering, lane, s.lanes, d, k)?
            .and_then(|c| usize::try_from(offset).ok().and_then(|i| c.samples.get(i).copied()));
        if expected != Some(input.sample) {
            return Err(Error::Source {
                lane,
                message: format!(
                    "read {} for input {offset} of chunk {k} of dataset #{d}, which is {expected:?}",
                    input.sample
                ),
            });
        }
        let (records, skipped) = match input.outcome {
            InputOutcome::Made(r) => (r, None),
            InputOutcome::Skipped(why) => (Vec::new(), Some(why)),
            InputOutcome::Failed(e) => return Err(e),
        };
        let mut records = records.into_iter();
        // Restored inside this input: its first records were pushed before the checkpoint.
        let pushed = s.state.progress[d];
        if pushed > 0 {
            let have = records.len() as u64;
            if pushed >= have {
                return Err(Error::Rebuild {
                    lane,
                    lineage: input.sample.to_string(),
                    message: format!(
                        "the checkpoint had pushed {pushed} records of this input, which now makes {have}: did an operator change?"
                    ),
                });
            }
            records.nth(pushed as usize - 1);
        }
        s.open[d] = Some(OpenInput { records, skipped });
        Ok(true)
    }

    /// Plans units of reading: the inputs the loop will most likely ask for next, by the same
    /// rule over what the lane delivered plus what it asked for and has not pushed (at each
    /// dataset's estimated tokens an input), up to the budget; and always the input the loop
    /// waits for.
    pub(super) fn plan_reads(&mut self) -> Result<(), Error> {
        let (lane, next_step) = (self.lane, self.next_step);
        if self.finished || self.has_failed() {
            return Ok(());
        }
        let Some(s) = self.steer.as_mut() else { return Ok(()) };
        let steering = steering_of(&s.source, lane)?;
        let shares = steering.shares().at(next_step);
        let r = &mut s.reads;
        let mut unit: Vec<SampleId> = Vec::new();
        if let Some(d) = r.stalled.take()
            && let Some(id) = next_read(r, steering, lane, s.lanes, d)?
        {
            unit.push(id);
        }
        let mut size = unit_size(r);
        loop {
            if unit.len() >= size {
                let entered = std::mem::take(&mut r.entered);
                r.planned.push(SteeredUnit { seq: r.units, ids: std::mem::take(&mut unit), entered });
                r.units += 1;
                size = unit_size(r);
            }
            if unit.is_empty() && r.total >= r.budget {
                break;
            }
            s.state.delivered_in_segment(&mut r.counted);
            for (d, c) in r.counted.iter_mut().enumerate() {
                *c += (r.outstanding[d] as f64 * steering.input_tokens(d as u32)) as u64;
            }
            let Some(d) = steering.next_dataset(shares, &r.counted, &r.ended) else { break };
            if let Some(id) = next_read(r, steering, lane, s.lanes, d as usize)? {
                unit.push(id);
            }
        }
        if !unit.is_empty() {
            let entered = std::mem::take(&mut r.entered);
            r.planned.push(SteeredUnit { seq: r.units, ids: unit, entered });
            r.units += 1;
        }
        Ok(())
    }

    /// After the lane's input ended: flushes the accumulators and the final partial step.
    pub(super) fn end_of_input(&mut self) {
        if let Err(e) = self.finish_all() {
            self.error = Some(e);
            return;
        }
        self.finished = true;
        self.finish_tail();
        self.boundary();
    }
}

/// The size of the next unit: 1, 2, 4, ... inputs for a lane's first units, then `unit_cap`.
fn unit_size(r: &ReadAhead) -> usize {
    r.unit_cap.min(1 << r.units.min(20))
}

/// Asks for dataset `d`'s next input not asked for yet; `None` (and the dataset marked ended on
/// the read side) when its stream has no more.
fn next_read(
    r: &mut ReadAhead,
    steering: &dyn Steering,
    lane: Lane,
    lanes: u32,
    d: usize,
) -> Result<Option<SampleId>, Error> {
    if r.ended[d] {
        return Ok(None);
    }
    loop {
        let (k, offset) = r.next[d];
        let Some(c) = chunk_at(&mut r.chunks, steering, lane, lanes, d, k)? else {
            r.ended[d] = true;
            return Ok(None);
        };
        if let Some(&id) = usize::try_from(offset).ok().and_then(|i| c.samples.get(i)) {
            if offset == 0 {
                r.entered.push((d as u32, k));
            }
            r.next[d] = (k, offset + 1);
            r.outstanding[d] += 1;
            r.total += 1;
            return Ok(Some(id));
        }
        r.next[d] = (k + 1, 0);
    }
}
