//! What a worker thread does: takes a unit, runs its stateless part with no lock held, puts
//! it in its lane's reorder ring, and drains the lane if nobody else is.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::error::{Error, OpError, record_error};
use crate::operators::apply_chain_timed;

use super::lane::UnitOutput;
use super::schedule::{Shared, Unit, UnitKind, lock};
use super::settings::BadRecords;

impl Shared {
    /// The stateless part of one unit: read, then the parallel maps. No locks held.
    pub(crate) fn process(&self, unit: &Unit) -> UnitOutput {
        let lane = self.slots[unit.slot].lane;
        match &unit.kind {
            UnitKind::End => UnitOutput::End,
            // The worker drains the lane for these; they carry no input to process.
            UnitKind::Resume => UnitOutput::Failed(Error::WorkerPanic(format!("{lane}: a resume reached the reader"))),
            UnitKind::SourceFailed(m) => UnitOutput::Failed(Error::Source { lane, message: m.clone() }),
            UnitKind::Samples { chunk, n, start, end } => {
                let ids = &chunk.samples[*start..*end];
                let t = std::time::Instant::now();
                let reads = self.datasets.read(ids);
                self.timings.add_read(super::timing::since(t));
                let mut nanos = vec![0u64; self.plan.parallel.len()];
                let mut records = Vec::with_capacity(ids.len());
                let mut ends = Vec::with_capacity(ids.len());
                let mut inputs = Vec::with_capacity(ids.len());
                let mut failure = None;
                for (j, (id, read)) in ids.iter().zip(reads).enumerate() {
                    let before = records.len();
                    let res = match read {
                        Ok(rec) => apply_chain_timed(&self.plan.parallel, rec, &mut records, &mut nanos),
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
                self.timings.add_parallel(&nanos);
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

    /// Puts a finished unit in its lane's ring and drains the lane.
    pub(crate) fn deposit(&self, i: usize, seq: u64, out: UnitOutput) {
        lock(&self.slots[i].inbox).put(seq, out);
        self.drain(i);
    }

    /// If no other worker is draining lane `i`: continues its paused unit, then pushes every
    /// unit that is next in order through its accumulators, until the ring has none ready or the
    /// lane pauses (it has made every step the consumer may take plus the prefetch).
    pub(crate) fn drain(&self, i: usize) {
        let slot = &self.slots[i];
        loop {
            let mut run = match slot.run.try_lock() {
                Ok(g) => g,
                // Another worker is draining this lane; it re-checks the ring after it lets go.
                Err(std::sync::TryLockError::WouldBlock) => return,
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
            let made = run.progress();
            let failed = run.has_failed();
            let paused = run.is_paused();
            if drained > 0 || resumed {
                lock(&slot.out).collect(&mut run);
            }
            drop(run);
            if drained > 0 || resumed {
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
                if paused {
                    s.note_paused(i, self);
                }
                s.enqueue(i, self);
                let wake_consumer = caught_up && s.behind == 0 && s.consumer_waiting;
                let wake_workers = s.has_work() && s.idle_workers > 0;
                drop(s);
                if wake_workers {
                    self.work_cv.notify_all();
                }
                if wake_consumer {
                    self.step_cv.notify_all();
                }
            }
            if paused || !lock(&slot.inbox).next_ready() {
                return;
            }
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
                if let UnitKind::Resume = unit.kind {
                    self.drain(slot);
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
