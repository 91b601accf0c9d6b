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
//! Only position-addressed lanes are planned: a steered lane's next inputs depend on the tokens
//! it delivers, so its blocks are evicted as blocks nobody planned (least recently used).

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
}

impl Lookahead {
    /// The plan for `slots` lanes, as far ahead as `datasets` want.
    pub(crate) fn new(datasets: &crate::source::Datasets, slots: usize) -> Self {
        Lookahead { bytes: datasets.plans_ahead(), bytes_per_row: datasets.bytes_per_row(), next: vec![0; slots] }
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
            lane: lane.0,
            chunk,
            chunk_now: n,
            step_milli: made.saturating_mul(PER_STEP),
            milli_per_chunk,
        };
        shared.datasets.plan(&chunk.samples, &read(n));
        // The bytes all lanes of this process read in one chunk each.
        let bytes =
            (chunk.samples.len() as u64).max(1).saturating_mul(self.bytes_per_row).saturating_mul(lanes.len() as u64);
        let horizon = self.bytes.div_ceil(bytes.max(1)).clamp(1, MOST_CHUNKS);
        let from = self.next[i].max(n + 1);
        let to = (n + 1 + horizon).min(from.saturating_add(PER_LOAD));
        for k in from..to {
            match shared.source.chunk(lane, shared.topology.lanes(), k) {
                Ok(Some(c)) => shared.datasets.plan(&c.samples, &read(k)),
                // Its end (or an error its read will report): nothing further to plan.
                _ => {
                    self.next[i] = u64::MAX;
                    return;
                }
            }
        }
        self.next[i] = self.next[i].max(to);
    }
}
