//! The plan of reads ahead, for a cache that evicts by next use: as a lane loads its `n`-th
//! chunk, the datasets hear which samples its next chunks hold and when each is read (its
//! chunk number: every lane reads its `n`-th chunk at about the same time, so the numbers
//! order the reads of all lanes). The work source is a pure function, so the plan is what the
//! lane will read, not a guess.
//!
//! Only position-addressed lanes are planned: a steered lane's next inputs depend on the tokens
//! it delivers, so its blocks are evicted as blocks nobody planned (least recently used).

use zephon_operator::Lane;

use super::schedule::{Dispatch, Shared};
use crate::source::Chunk;

/// The most chunks a lane plans ahead: bounds the plan's memory and the work per load.
const MOST_CHUNKS: u64 = 4096;

/// Chunks planned per chunk loaded: the plan reaches its horizon early in the run, and a load
/// never computes more than a few chunks under the scheduler's lock.
const PER_LOAD: u64 = 4;

/// Each lane's next chunk not yet planned, and how far ahead to plan.
pub(crate) struct Lookahead {
    /// Bytes of reads ahead the datasets want planned; 0: none are planned.
    bytes: u64,
    bytes_per_row: u64,
    /// Per slot: the next chunk number not yet planned.
    next: Vec<u64>,
}

impl Lookahead {
    /// The plan for `slots` lanes, as far ahead as `shared`'s datasets want.
    pub(crate) fn new(datasets: &crate::source::Datasets, slots: usize) -> Self {
        Lookahead { bytes: datasets.plans_ahead(), bytes_per_row: datasets.bytes_per_row(), next: vec![0; slots] }
    }

    /// Lane `lane` in slot `i` loaded `chunk`, its `n`-th: plans it (the reads under way) and
    /// its next few chunks up to the horizon. `lanes` says where every lane of this process is.
    pub(crate) fn loaded(&mut self, i: usize, lane: Lane, chunk: &Chunk, n: u64, lanes: &[Dispatch], shared: &Shared) {
        if self.bytes == 0 {
            return;
        }
        let now = lanes.iter().filter(|d| !d.ended && d.steered.is_none()).map(|d| d.cursor.chunk).min().unwrap_or(n);
        shared.datasets.plan(&chunk.samples, n, now);
        // The bytes all lanes of this process read in one chunk number.
        let per_chunk =
            (chunk.samples.len() as u64).max(1).saturating_mul(self.bytes_per_row).saturating_mul(lanes.len() as u64);
        let horizon = self.bytes.div_ceil(per_chunk.max(1)).clamp(1, MOST_CHUNKS);
        let from = self.next[i].max(n + 1);
        let to = (n + 1 + horizon).min(from.saturating_add(PER_LOAD));
        for k in from..to {
            match shared.source.chunk(lane, shared.topology.lanes(), k) {
                Ok(Some(c)) => shared.datasets.plan(&c.samples, k, now),
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
