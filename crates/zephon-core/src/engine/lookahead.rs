//! The plan of reads ahead, for a cache that evicts by next use: as a lane loads its `n`-th
//! chunk, the datasets hear which samples its next chunks hold and when each will be read. The
//! work source is a pure function, so what is planned is what the lane will read; only when is
//! an estimate.
//!
//! Each plan says where its lane is (the chunk it reads, the step it makes, its steps per chunk
//! so far), so that the cache estimates when each read comes on a clock common to all lanes:
//! steps, which lanes make together (within the prefetch). Chunk numbers alone are not such a
//! clock: lanes whose documents are long read fewer chunks a step. And the estimate is made
//! when the cache evicts, from the lane's newest pace, not fixed when the chunk was planned: a
//! pace guessed early in the run would otherwise make reads planned then look past.
//!
//! A steered lane picks the dataset of each record by the tokens it delivered, so which of its
//! datasets it reads next is not known ahead; but within a dataset its chunks are
//! position-addressed. Each of its dataset streams is planned as a stream of its own (as a
//! lane is), from the moment the lane starts reading a chunk of it, at that stream's own pace:
//! a dataset with a small share reads its chunks slowly, and its blocks are kept accordingly.

use std::collections::HashMap;

use zephon_operator::Lane;

use super::schedule::{Dispatch, LaneProgress, Shared};
use crate::source::{Chunk, PlannedRead};

/// The most chunks a lane plans ahead: bounds the plan's memory and the work per load.
const MOST_CHUNKS: u64 = 4096;

/// Chunks planned per chunk loaded: the plan reaches its horizon early in the run, and a load
/// never computes more than a few chunks under the scheduler's lock.
const PER_LOAD: u64 = 4;

/// The clock's units per step.
const PER_STEP: u64 = 1000;

/// Each lane's next chunk not yet planned, and how far ahead to plan.
pub(crate) struct Lookahead {
    /// Bytes of reads ahead the datasets want planned; 0: none are planned.
    bytes: u64,
    bytes_per_row: u64,
    /// Per slot: the next chunk number not yet planned.
    next: Vec<u64>,
    /// Per dataset stream of a steered lane: the next chunk not yet planned.
    streams: HashMap<u64, u64>,
}

impl Lookahead {
    /// The plan for `slots` lanes, as far ahead as `datasets` want.
    pub(crate) fn new(datasets: &crate::source::Datasets, slots: usize) -> Self {
        Lookahead {
            bytes: datasets.plans_ahead(),
            bytes_per_row: datasets.bytes_per_row(),
            next: vec![0; slots],
            streams: HashMap::new(),
        }
    }

    /// Lane `lane` in slot `i` loaded `chunk`, its `n`-th: plans it (the reads under way) and
    /// its next few chunks up to the horizon. `lanes` and `progress` say where every lane of
    /// this process is.
    pub(crate) fn loaded(
        &mut self,
        (i, lane): (usize, Lane),
        chunk: &Chunk,
        n: u64,
        (lanes, progress): (&[Dispatch], &[LaneProgress]),
        shared: &Shared,
    ) {
        if self.bytes == 0 {
            return;
        }
        let made = progress[i].made.steps_made;
        // Steps per chunk: the lane's own pace once it has one, the process's before.
        let (steps, chunks) = if n >= 4 && made > 0 {
            (made, n)
        } else {
            lanes
                .iter()
                .zip(progress)
                .filter(|(d, _)| !d.ended && d.steered.is_none())
                .fold((0u64, 0u64), |(s, c), (d, p)| (s + p.made.steps_made, c + d.cursor.chunk))
        };
        let milli_per_chunk =
            if chunks > 0 && steps > 0 { (steps.saturating_mul(PER_STEP) / chunks).max(1) } else { PER_STEP };
        let read = |chunk: u64| PlannedRead {
            stream: u64::from(lane.0),
            chunk,
            chunk_now: n,
            step_milli: made.saturating_mul(PER_STEP),
            milli_per_chunk,
        };
        shared.datasets.plan(&chunk.samples, &read(n));
        let horizon = self.horizon(chunk.samples.len(), lanes.len() as u64);
        let source = |k| shared.source.chunk(lane, shared.topology.lanes(), k);
        self.next[i] = plan_ahead(self.next[i], n, horizon, source, |c, k| shared.datasets.plan(&c.samples, &read(k)));
    }

    /// A steered lane in slot `i` planned `entered`: the (dataset, chunk) of each dataset chunk
    /// it starts reading, having made `made` steps. Plans each such chunk and the next few of
    /// its dataset's stream.
    pub(crate) fn entered(&mut self, lane: Lane, entered: &[(u32, u64)], made: u64, slots: usize, shared: &Shared) {
        if self.bytes == 0 || entered.is_empty() {
            return;
        }
        let Some(steering) = shared.source.steering() else { return };
        let datasets = u64::from(steering.datasets()).max(1);
        let lanes = shared.topology.lanes();
        for &(d, k) in entered {
            let Ok(Some(chunk)) = steering.dataset_chunk(lane, lanes, d, k) else { continue };
            let stream = u64::from(lane.0).saturating_mul(datasets).saturating_add(u64::from(d));
            // The stream's pace: its chunks so far over the lane's steps (a chunk a step before
            // the first step is made).
            let milli_per_chunk = (made.max(1).saturating_mul(PER_STEP) / (k + 1)).max(1);
            let read = |chunk: u64| PlannedRead {
                stream,
                chunk,
                chunk_now: k,
                step_milli: made.saturating_mul(PER_STEP),
                milli_per_chunk,
            };
            shared.datasets.plan(&chunk.samples, &read(k));
            let horizon = self.horizon(chunk.samples.len(), (slots as u64).saturating_mul(datasets));
            let next = self.streams.get(&stream).copied().unwrap_or(0);
            let source = |j| steering.dataset_chunk(lane, lanes, d, j);
            let next = plan_ahead(next, k, horizon, source, |c, j| shared.datasets.plan(&c.samples, &read(j)));
            self.streams.insert(stream, next);
        }
    }

    /// How many chunks of `samples` each a stream plans ahead, when `streams` streams of this
    /// process share the bytes the datasets want planned.
    fn horizon(&self, samples: usize, streams: u64) -> u64 {
        let bytes = (samples as u64).max(1).saturating_mul(self.bytes_per_row).saturating_mul(streams.max(1));
        self.bytes.div_ceil(bytes.max(1)).clamp(1, MOST_CHUNKS)
    }
}

/// Plans the chunks after `n` of a stream, from `next` (the first not yet planned) up to
/// `horizon` ahead of `n`, at most [`PER_LOAD`] of them; the next chunk not yet planned after
/// (`u64::MAX` once the stream has ended).
fn plan_ahead(
    next: u64,
    n: u64,
    horizon: u64,
    chunk: impl Fn(u64) -> crate::Result<Option<Chunk>>,
    mut plan: impl FnMut(&Chunk, u64),
) -> u64 {
    let from = next.max(n + 1);
    let to = (n + 1 + horizon).min(from.saturating_add(PER_LOAD));
    for k in from..to {
        match chunk(k) {
            Ok(Some(c)) => plan(&c, k),
            // Its end (or an error its read will report): nothing further to plan.
            _ => return u64::MAX,
        }
    }
    next.max(to)
}
