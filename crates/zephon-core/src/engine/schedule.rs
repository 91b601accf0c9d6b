//! The shared state of a running engine: lanes' slots, reorder rings, outputs, and the
//! scheduler that decides which lane gets the next unit of work.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::checkpoint::Cursor;
use crate::error::Error;
use crate::plan::Plan;
use crate::snapshot::Snapshot;
use crate::source::{Chunk, Datasets, WorkSource};
use crate::step::LaneStep;
use crate::topology::Topology;
use zephon_operator::Lane;

use super::lane::{LaneRun, Progress, SteeredUnit, UnitOutput};
use super::settings::{BadRecords, ExecOptions, Tail};

pub(crate) struct Shared {
    pub(crate) plan: Arc<Plan>,
    pub(crate) source: Arc<dyn WorkSource>,
    pub(crate) datasets: Datasets,
    pub(crate) names: Arc<[String]>,
    pub(crate) topology: Topology,
    pub(crate) opts: ExecOptions,
    pub(crate) bad_records: BadRecords,
    pub(crate) tail: Tail,
    pub(crate) slots: Vec<Slot>,
    pub(crate) sched: Mutex<Sched>,
    pub(crate) work_cv: Condvar,
    pub(crate) step_cv: Condvar,
    pub(crate) lane_window: usize,
    pub(crate) total_window: usize,
    /// The most samples in one unit: `unit_samples`, fewer with many lanes (see `Engine::launch`).
    pub(crate) unit_cap: usize,
    /// The consumer's position (the step it waits for next), readable without the scheduler's
    /// lock: drainers pause a lane this far plus the prefetch ahead.
    pub(crate) consumed: std::sync::atomic::AtomicU64,
    /// CPU time per part of the pipeline.
    pub(crate) timings: super::timing::Timings,
}

pub(crate) struct Slot {
    pub(crate) lane: Lane,
    pub(crate) inbox: Mutex<Inbox>,
    /// The lane's ordered part. Only drainers lock it, and only with `try_lock`: holding it is
    /// the token that says "I am draining this lane" (the consumer never touches it).
    pub(crate) run: Mutex<LaneRun>,
    /// What the lane has finished, for the consumer.
    pub(crate) out: Mutex<Output>,
}

/// A lane's finished steps and, once it can make no more, its end.
#[derive(Default)]
pub(crate) struct Output {
    pub(crate) steps: VecDeque<LaneStep>,
    /// Why the lane stopped, if it failed.
    pub(crate) error: Option<Error>,
    /// The lane's state once its input has ended (what a partial step of an empty lane saves).
    pub(crate) end_state: Option<Snapshot>,
}

impl Output {
    /// Moves what the lane finished into the consumer's queue.
    pub(crate) fn collect(&mut self, run: &mut LaneRun) {
        self.steps.extend(run.steps.drain(..));
        if let Some(e) = run.take_error() {
            self.error = Some(e);
        }
        if run.is_finished() && self.end_state.is_none() {
            self.end_state = Some(run.snapshot_now());
        }
    }
}

/// A lane's reorder ring: finished units waiting for their turn.
#[derive(Default)]
pub(crate) struct Inbox {
    pub(crate) next: u64,
    pub(crate) ring: VecDeque<Option<UnitOutput>>,
}

impl Inbox {
    pub(crate) fn put(&mut self, seq: u64, out: UnitOutput) {
        let i = (seq - self.next) as usize;
        if self.ring.len() <= i {
            self.ring.resize_with(i + 1, || None);
        }
        self.ring[i] = Some(out);
    }

    pub(crate) fn take_next(&mut self) -> Option<UnitOutput> {
        if matches!(self.ring.front(), Some(Some(_))) {
            self.next += 1;
            self.ring.pop_front().flatten()
        } else {
            None
        }
    }

    pub(crate) fn next_ready(&self) -> bool {
        matches!(self.ring.front(), Some(Some(_)))
    }
}

/// The dispatch side of a lane.
pub(crate) struct Dispatch {
    pub(crate) cursor: Cursor,
    pub(crate) chunk: Option<Arc<Chunk>>,
    /// For a steered lane: the units of reading its ordered part planned; `None` for a
    /// position-addressed lane.
    pub(crate) steered: Option<VecDeque<SteeredUnit>>,
    pub(crate) seq: u64,
    pub(crate) in_flight: usize,
    pub(crate) ended: bool,
    pub(crate) queued: bool,
}

#[derive(Copy, Clone, Default)]
pub(crate) struct LaneProgress {
    pub(crate) made: Progress,
    pub(crate) failed: bool,
}

pub(crate) struct Sched {
    pub(crate) lanes: Vec<Dispatch>,
    pub(crate) progress: Vec<LaneProgress>,
    /// Lanes that have not yet made the step the consumer waits for (and are not done): the
    /// consumer sleeps until this reaches 0, instead of rescanning every lane at each wake.
    pub(crate) behind: usize,
    /// Lanes waiting for a unit: those that had not made the step the consumer waits for
    /// when queued, served first, then those already past it (prefetching). With L as large
    /// as the rows of a step, one document is several steps of a lane; served in one round,
    /// lanes far ahead would take turns while others have not made the first step, and the
    /// first batch would wait for the prefetch of every lane.
    pub(crate) queue: VecDeque<usize>,
    pub(crate) ahead: VecDeque<usize>,
    pub(crate) consumed: u64,
    pub(crate) in_flight: usize,
    /// Workers asleep on `work_cv`, and whether the consumer sleeps on `step_cv`: a notify is
    /// a system call even with nobody waiting, so it is only made for a sleeper.
    pub(crate) idle_workers: usize,
    pub(crate) consumer_waiting: bool,
    pub(crate) shutdown: bool,
    pub(crate) fault: Option<String>,
    /// Lanes whose accumulation paused half-way through a unit, waiting for the consumer.
    pub(crate) paused: Vec<bool>,
    /// Paused lanes the consumer has made room for: a worker continues each.
    pub(crate) resumes: VecDeque<usize>,
    /// Which units are timed.
    pub(crate) units_timed: super::timing::Sampler,
    /// The plan of reads ahead, for a cache that evicts by next use.
    pub(crate) lookahead: super::lookahead::Lookahead,
}

pub(crate) enum UnitKind {
    Samples {
        chunk: Arc<Chunk>,
        n: u64,
        start: usize,
        end: usize,
    },
    /// Inputs a steered lane planned to read (any of its datasets).
    Inputs(SteeredUnit),
    End,
    SourceFailed(String),
    /// Continue these lanes' paused units (no new input): one worker takes a batch of them, so
    /// that with as many lanes as rows each step's resumes do not each cost a round trip
    /// through the scheduler.
    Resume(Vec<usize>),
}

pub(crate) struct Unit {
    pub(crate) slot: usize,
    pub(crate) seq: u64,
    pub(crate) kind: UnitKind,
    /// Whether its reading and operators are timed: the weight of its time, or 0 (see
    /// [`super::timing::Sampler`]).
    pub(crate) timed: u64,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock means a worker panicked; the panic is reported as a fault, and the data
    // behind the lock is only read to shut down.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Sched {
    pub(crate) fn is_behind(&self, i: usize) -> bool {
        let p = &self.progress[i];
        p.made.steps_made <= self.consumed && !p.made.done && !p.failed
    }

    pub(crate) fn count_behind(&mut self) {
        self.behind = (0..self.progress.len()).filter(|&i| self.is_behind(i)).count();
    }

    pub(crate) fn eligible(&self, i: usize, shared: &Shared) -> bool {
        let d = &self.lanes[i];
        let p = &self.progress[i];
        !d.ended
            && !p.made.done
            && d.steered.as_ref().is_none_or(|q| !q.is_empty())
            && d.in_flight < shared.lane_window
            && p.made.steps_made < self.consumed + shared.opts.prefetch_steps
    }

    pub(crate) fn enqueue(&mut self, i: usize, shared: &Shared) {
        if !self.lanes[i].queued && self.eligible(i, shared) {
            self.lanes[i].queued = true;
            if self.is_behind(i) { self.queue.push_back(i) } else { self.ahead.push_back(i) }
        }
    }

    /// Whether a lane waits for a unit (or a paused lane for its continuation).
    pub(crate) fn has_work(&self) -> bool {
        !self.queue.is_empty() || !self.ahead.is_empty() || !self.resumes.is_empty()
    }

    /// The consumer took a step: lanes that were ahead of it may now be behind, and queue as
    /// such.
    pub(crate) fn requeue_ahead(&mut self) {
        let ahead = std::mem::take(&mut self.ahead);
        self.queue.extend(ahead);
    }

    /// Whether lane `i` may finalize more steps now (a paused lane then resumes).
    pub(crate) fn may_advance(&self, i: usize, shared: &Shared) -> bool {
        self.progress[i].made.steps_made < self.consumed + shared.opts.prefetch_steps + 1
    }

    /// Records that lane `i` paused (or continues it at once if the consumer already made
    /// room: both happen under the scheduler's lock, so no wake-up is lost).
    pub(crate) fn note_paused(&mut self, i: usize, shared: &Shared) {
        if self.may_advance(i, shared) {
            self.resumes.push_back(i);
        } else {
            self.paused[i] = true;
        }
    }

    /// After the consumer took a step: paused lanes with room again get a worker.
    pub(crate) fn wake_paused(&mut self, shared: &Shared) {
        for i in 0..self.paused.len() {
            if self.paused[i] && self.may_advance(i, shared) {
                self.paused[i] = false;
                self.resumes.push_back(i);
            }
        }
    }

    pub(crate) fn next_unit(&mut self, shared: &Shared) -> Option<Unit> {
        // A paused lane's continuation takes no new input, so no window holds it back.
        if let Some(&i) = self.resumes.front() {
            // A share for each worker, so that all of them continue lanes at once.
            let n = self.resumes.len().div_ceil(shared.opts.threads.max(1));
            let lanes = self.resumes.drain(..n).collect();
            return Some(Unit { slot: i, seq: 0, kind: UnitKind::Resume(lanes), timed: 0 });
        }
        if self.in_flight >= shared.total_window {
            // The window bounds the work ahead of the consumer, but never holds back a lane
            // the consumer waits for: lanes that ran ahead and paused keep their undrained
            // units in flight until the consumer moves, and they can fill the window. Waiting
            // for the window then waits for ever.
            let pos = self.queue.iter().position(|&i| self.is_behind(i) && self.eligible(i, shared))?;
            let i = self.queue.remove(pos)?;
            self.lanes[i].queued = false;
            return Some(self.dispatch(i, shared));
        }
        while let Some(i) = self.queue.pop_front() {
            if self.behind > 0 && !self.is_behind(i) && self.eligible(i, shared) {
                // It made the step since it queued: others come first.
                self.ahead.push_back(i);
                continue;
            }
            self.lanes[i].queued = false;
            if self.eligible(i, shared) {
                return Some(self.dispatch(i, shared));
            }
        }
        while let Some(i) = self.ahead.pop_front() {
            self.lanes[i].queued = false;
            if self.eligible(i, shared) {
                return Some(self.dispatch(i, shared));
            }
        }
        None
    }

    /// Cuts lane `i`'s next unit and counts it in flight.
    fn dispatch(&mut self, i: usize, shared: &Shared) -> Unit {
        let kind = self.cut(i, shared);
        let timed = self.units_timed.weight();
        let d = &mut self.lanes[i];
        // A steered lane numbered its units when it planned them.
        let seq = match &kind {
            UnitKind::Inputs(u) => u.seq,
            _ => d.seq,
        };
        let unit = Unit { slot: i, seq, kind, timed };
        d.seq += 1;
        d.in_flight += 1;
        self.in_flight += 1;
        self.enqueue(i, shared);
        unit
    }

    /// The lane's next unit of input: up to `unit_samples` samples of its current chunk (fewer
    /// for its first units), or the end of its input.
    pub(crate) fn cut(&mut self, i: usize, shared: &Shared) -> UnitKind {
        let d = &mut self.lanes[i];
        if let Some(q) = d.steered.as_mut() {
            return match q.pop_front() {
                Some(ids) => UnitKind::Inputs(ids),
                // `eligible` holds a steered lane back until it has planned a unit.
                None => {
                    d.ended = true;
                    UnitKind::SourceFailed("a steered lane was scheduled with no reading planned".into())
                }
            };
        }
        loop {
            let chunk = match self.lanes[i].chunk.clone() {
                Some(c) => c,
                None => match self.load(i, shared) {
                    Ok(Some(c)) => c,
                    Ok(None) => {
                        self.lanes[i].ended = true;
                        return UnitKind::End;
                    }
                    Err(e) => {
                        self.lanes[i].ended = true;
                        return UnitKind::SourceFailed(match e {
                            crate::Error::Source { message, .. } => message,
                            other => other.to_string(),
                        });
                    }
                },
            };
            let d = &mut self.lanes[i];
            let len = chunk.samples.len();
            let start = d.cursor.offset as usize;
            if start >= len {
                d.cursor = Cursor { chunk: d.cursor.chunk + 1, offset: 0 };
                d.chunk = None;
                continue;
            }
            // A lane's first units are small (1, 2, 4, ... samples, up to `unit_samples`): the
            // first step needs only a row or two a lane, and with as many lanes as rows, whole
            // first units would tokenize 4x what the first step uses. Units only divide work; the
            // data is the same at any size.
            let size = shared.unit_cap.min(1 << d.seq.min(20));
            let end = (start + size).min(len);
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

    /// Loads lane `i`'s chunk at its cursor; `None` at the end of its input.
    fn load(&mut self, i: usize, shared: &Shared) -> crate::Result<Option<Arc<Chunk>>> {
        let lane = shared.slots[i].lane;
        let n = self.lanes[i].cursor.chunk;
        let Some(chunk) = shared.source.chunk(lane, shared.topology.lanes(), n)? else { return Ok(None) };
        // The schedule knows the whole chunk now: its bytes can be on their way while its
        // first units are processed, and a cache that evicts by next use hears of the next.
        shared.datasets.prefetch(&chunk.samples);
        self.lookahead.loaded((i, lane), &chunk, n, (&self.lanes, &self.progress), shared);
        let chunk = Arc::new(chunk);
        self.lanes[i].chunk = Some(chunk.clone());
        Ok(Some(chunk))
    }
}
