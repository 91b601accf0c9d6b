//! What a worker thread does: takes a unit, runs its stateless part with no lock held, puts
//! it in its lane's reorder ring, and drains the lane if nobody else is.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::error::{Error, OpError, record_error};
use crate::plan::{apply_chain, apply_chain_timed};

use super::lane::{InputOutcome, ReadyInput, UnitOutput};
use super::schedule::{Shared, Unit, UnitKind, lock};
use super::settings::BadRecords;

impl Shared {
    /// The stateless part of one unit: read, then the parallel maps. No locks held.
    pub(crate) fn process(&self, unit: &Unit) -> UnitOutput {
        let lane = self.slots[unit.slot].lane;
        match &unit.kind {
            UnitKind::End => UnitOutput::End,
            // The worker drains the lane for these; they carry no input to process.
            UnitKind::Resume(_) => {
                UnitOutput::Failed(Error::WorkerPanic(format!("{lane}: a resume reached the reader")))
            }
            UnitKind::SourceFailed(m) => UnitOutput::Failed(Error::Source { lane, message: m.clone() }),
            UnitKind::Inputs(u) => UnitOutput::Inputs(self.process_inputs(&u.ids, unit.timed, lane)),
            UnitKind::Samples { chunk, n, start, end } => {
                let ids = &chunk.samples[*start..*end];
                let timed = unit.timed;
                let t = (timed > 0).then(std::time::Instant::now);
                let reads = self.datasets.read(ids);
                if let Some(t) = t {
                    self.timings.add_read(timed * super::timing::since(t));
                }
                let mut nanos = vec![0u64; self.plan.parallel.len()];
                let mut records = Vec::with_capacity(ids.len());
                let mut ends = Vec::with_capacity(ids.len());
                let mut inputs = Vec::with_capacity(ids.len());
                let mut failure = None;
                for (j, (id, read)) in ids.iter().zip(reads).enumerate() {
                    let before = records.len();
                    let res = match read {
                        Ok(rec) if timed > 0 => apply_chain_timed(&self.plan.parallel, rec, &mut records, &mut nanos),
                        Ok(rec) => apply_chain(&self.plan.parallel, rec, &mut records),
                        Err(e) => Err(("read", e)),
                    };
                    match res {
                        Ok(()) => inputs.push((id.dataset, None)),
                        Err((op, OpError::Data(m))) if self.bad_records == BadRecords::Skip => {
                            records.truncate(before);
                            let why = record_error(&self.names, *id, lane, op, m).to_string();
                            inputs.push((id.dataset, Some(why)));
                        }
                        Err((op, e)) => {
                            records.truncate(before);
                            failure = Some((j, record_error(&self.names, *id, lane, op, e.to_string())));
                            break;
                        }
                    }
                    ends.push(records.len());
                }
                if timed > 0 {
                    self.timings.add_parallel(&nanos, timed);
                }
                UnitOutput::Samples {
                    chunk: *n,
                    start: *start as u64,
                    chunk_len: chunk.samples.len() as u64,
                    records,
                    ends,
                    inputs,
                    failure,
                }
            }
        }
    }

    /// A steered lane's inputs, each read and through the parallel maps on its own: a failure
    /// stops the lane only when its closed loop reaches that input, so the others go on.
    fn process_inputs(
        &self,
        ids: &[zephon_operator::SampleId],
        timed: u64,
        lane: zephon_operator::Lane,
    ) -> Vec<ReadyInput> {
        let t = (timed > 0).then(std::time::Instant::now);
        let reads = self.datasets.read(ids);
        if let Some(t) = t {
            self.timings.add_read(timed * super::timing::since(t));
        }
        let mut nanos = vec![0u64; self.plan.parallel.len()];
        let out = ids
            .iter()
            .zip(reads)
            .map(|(id, read)| {
                let mut records = Vec::new();
                let res = match read {
                    Ok(rec) if timed > 0 => apply_chain_timed(&self.plan.parallel, rec, &mut records, &mut nanos),
                    Ok(rec) => apply_chain(&self.plan.parallel, rec, &mut records),
                    Err(e) => Err(("read", e)),
                };
                let outcome = match res {
                    Ok(()) => InputOutcome::Made(records),
                    Err((op, OpError::Data(m))) if self.bad_records == BadRecords::Skip => {
                        InputOutcome::Skipped(record_error(&self.names, *id, lane, op, m).to_string())
                    }
                    Err((op, e)) => InputOutcome::Failed(record_error(&self.names, *id, lane, op, e.to_string())),
                };
                ReadyInput { sample: *id, outcome }
            })
            .collect();
        if timed > 0 {
            self.timings.add_parallel(&nanos, timed);
        }
        out
    }

    /// Puts a finished unit in its lane's ring and drains the lane.
    pub(crate) fn deposit(&self, i: usize, seq: u64, out: UnitOutput) {
        lock(&self.slots[i].inbox).put(seq, out);
        self.drain(i);
    }

    /// If no other worker is draining lane `i`: continues its paused unit, then pushes every
    /// unit that is next in order through its accumulators, until the ring has none ready or the
    /// lane pauses (it has made every step the consumer may take plus the prefetch).
    pub(crate) fn drain(&self, i: usize) {
        while let Some(mut d) = self.drain_once(i) {
            self.publish(std::slice::from_mut(&mut d));
            if !d.more(self) {
                return;
            }
        }
    }

    /// Continues paused lanes, publishing their progress together, then drains any of them
    /// whose ring has more ready.
    pub(crate) fn resume(&self, lanes: &[usize]) {
        let mut done: Vec<Drained> = lanes.iter().filter_map(|&i| self.drain_once(i)).collect();
        self.publish(&mut done);
        for d in done {
            if d.more(self) {
                self.drain(d.lane);
            }
        }
    }

    /// One pass of draining lane `i`, without publishing it; `None` when another worker is
    /// draining it (that one re-checks the ring after it lets go).
    fn drain_once(&self, i: usize) -> Option<Drained> {
        let slot = &self.slots[i];
        let mut run = match slot.run.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::WouldBlock) => return None,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        };
        let until = self.consumed.load(Ordering::Acquire) + self.opts.prefetch_steps + 1;
        let resumed = run.is_paused();
        run.continue_paused(until);
        let mut drained = 0;
        while !run.is_paused() {
            let next = lock(&slot.inbox).take_next();
            match next {
                Some(unit) => {
                    run.accumulate(unit, until);
                    drained += 1;
                }
                None => break,
            }
        }
        self.timings.add_lane(&mut run.times);
        let chosen = run.take_chosen();
        let changed = drained > 0 || resumed || !chosen.is_empty();
        if changed {
            lock(&slot.out).collect(&mut run);
        }
        Some(Drained {
            lane: i,
            chosen,
            drained,
            changed,
            made: run.progress(),
            failed: run.has_failed(),
            paused: run.is_paused(),
        })
    }

    /// Tells the scheduler what drain passes did (under one lock), and wakes whoever it may
    /// concern.
    fn publish(&self, done: &mut [Drained]) {
        if !done.iter().any(|d| d.changed) {
            return;
        }
        // What the lanes planned to read is on its way before the scheduler hands it out.
        for unit in done.iter().flat_map(|d| &d.chosen) {
            self.datasets.prefetch(&unit.ids);
        }
        let mut s = lock(&self.sched);
        let mut wake_consumer = false;
        for d in done.iter_mut().filter(|d| d.changed) {
            let i = d.lane;
            if s.lanes[i].steered.is_some() {
                let (lane, slots) = (self.slots[i].lane, self.slots.len());
                for unit in &d.chosen {
                    s.lookahead.entered(lane, &unit.entered, d.made.steps_made, slots, self);
                }
                if let Some(q) = s.lanes[i].steered.as_mut() {
                    q.extend(d.chosen.drain(..));
                }
            }
            s.lanes[i].in_flight -= d.drained;
            s.in_flight -= d.drained;
            let was_behind = s.is_behind(i);
            // Two drainers of one lane may publish out of order: keep the newest.
            let p = &mut s.progress[i];
            p.made.steps_made = p.made.steps_made.max(d.made.steps_made);
            p.made.done |= d.made.done;
            p.failed |= d.failed;
            if was_behind && !s.is_behind(i) {
                s.behind -= 1;
                wake_consumer |= s.behind == 0;
            }
            if d.paused {
                s.note_paused(i, self);
            }
            s.enqueue(i, self);
        }
        let wake_consumer = wake_consumer && s.behind == 0 && s.consumer_waiting;
        let wake_workers = s.has_work() && s.idle_workers > 0;
        drop(s);
        if wake_workers {
            self.work_cv.notify_all();
        }
        if wake_consumer {
            self.step_cv.notify_all();
        }
    }

    pub(crate) fn worker(self: Arc<Self>) {
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
                if let UnitKind::Resume(lanes) = &unit.kind {
                    self.resume(lanes);
                } else {
                    let out = self.process(&unit);
                    drop(unit);
                    self.deposit(slot, seq, out);
                }
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

/// What one drain pass did to a lane, for the scheduler.
struct Drained {
    lane: usize,
    /// The units of reading a steered lane planned.
    chosen: Vec<super::lane::SteeredUnit>,
    /// Units taken from the ring (no longer in flight).
    drained: usize,
    /// Whether the lane moved at all (units drained, or a paused unit continued).
    changed: bool,
    made: super::lane::Progress,
    failed: bool,
    paused: bool,
}

impl Drained {
    /// Whether the lane may have more to drain now: it did not pause, and its ring has the
    /// next unit ready.
    fn more(&self, shared: &Shared) -> bool {
        !self.paused && lock(&shared.slots[self.lane].inbox).next_ready()
    }
}
