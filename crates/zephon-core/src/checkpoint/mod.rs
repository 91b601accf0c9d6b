//! Checkpoints: per-lane state, versioned, checksummed and fingerprinted, never payloads.
//!
//! A lane's state is a few integers (its cursor, counters, accumulator settings) plus the
//! lineage of the records its accumulators hold; a restore re-reads and re-processes only those
//! records. Two shapes carry the same states:
//!
//! - **Files** ([`write()`], [`load()`]): each rank writes one file holding the lanes it owns,
//!   atomically (temporary name, fsync, rename), with no collective. A restore at any world size
//!   reads whichever files hold the lanes it now owns.
//! - **Split** ([`SplitCheckpoint`]): one part replicated on every rank (the run's fingerprint
//!   and step) and one part per lane, the shape a distributed checkpoint of a trainer stores, so
//!   that after a change of world size each rank asks for the lanes it now owns.
//!
//! Every part travels in the same envelope (`seal.rs`: magic, format version, length, SHA-256,
//! deflated body). Nearly all of a checkpoint is the lineage of buffered records, so that is
//! what the body is shaped around: a sample is named by how far back in its lane's input it
//! came, which the run's work source can list again ([`LaneStreams`], `lineage_code.rs`).

mod files;
mod fingerprint;
mod lineage_code;
mod seal;
mod split;

pub use files::{Resolved, Summary, file_name, inspect, load, metadata, resolve, write};
pub use fingerprint::{DatasetPrint, OperatorPrint, RunFingerprint};
pub use lineage_code::{LaneStreams, WINDOW};
pub use split::{LanePart, RunSummary, SplitCheckpoint};

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use zephon_operator::{AccumulatorState, Lane, Lineage, SampleId};

/// The checkpoint format this build writes and reads.
pub const FORMAT_VERSION: u32 = 6;
/// File name extension of checkpoint files.
pub const EXTENSION: &str = "zck";

/// What a checkpoint keeps about the run beside its fingerprint: facts it was built from that
/// a restore must not measure again, and what names a change when the fingerprint differs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunMetadata {
    /// Each dataset's shard listing (file, rows, bytes, content version a line), by dataset
    /// name: a changed dataset is reported by the shards that changed.
    pub shard_listings: BTreeMap<String, String>,
    /// Tokens per row of each dataset as the run planned with them (empty when it planned
    /// none). A restore plans with these: measuring again could give other numbers.
    pub token_estimates: Vec<crate::TokenEstimate>,
}

/// A lane's position in its chunk stream: the next sample to push is sample `offset` of the
/// lane's chunk `chunk`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// The lane's chunk number (its n-th chunk, not the global chunk index).
    pub chunk: u64,
    /// The sample within that chunk.
    pub offset: u64,
}

/// Everything needed to continue one lane exactly: a few integers and lineage keys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaneState {
    /// The lane.
    pub lane: Lane,
    /// Where the lane's input continues.
    pub cursor: Cursor,
    /// How many of the cursor's input's records (the outputs of its stateless part) were
    /// already pushed: non-zero when the checkpoint's step ended inside one input that made
    /// many rows (a huge document). Restore re-runs that input's stateless part and skips them.
    pub input_progress: u64,
    /// Rows the lane has emitted so far (delivered in steps or pending).
    pub rows_emitted: u64,
    /// Records skipped under the skip policy so far, by dataset.
    pub skips: Skips,
    /// Whether the lane's input has ended and its accumulators are flushed.
    pub finished: bool,
    /// What the end of the input left out under `Tail::Drop`: the rows of a final partial
    /// step (with the token positions of each dataset they held).
    pub tail_dropped: TailDropped,
    /// Where a steered lane is in each dataset and what it delivered (see
    /// [`crate::Steering`]); `None` for a lane of a position-addressed source. With it,
    /// `cursor` and `input_progress` are unused: the lane's place is per dataset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steer: Option<SteerState>,
    /// One state per accumulator stage, in pipeline order.
    pub accumulators: Vec<AccumulatorState>,
    /// Rows emitted after the checkpoint's step but before the state was taken, by lineage.
    pub pending: Vec<Lineage>,
}

/// A steered lane's place in its datasets (see [`crate::Steering`]): a few integers a dataset.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SteerState {
    /// Per dataset, the index of the lane's chunk of it that holds its next input.
    pub chunks: Vec<u64>,
    /// Per dataset, where that input is in that chunk (at or past the chunk's end: the next
    /// input is the first of a later chunk).
    #[serde(default)]
    pub offsets: Vec<u64>,
    /// Per dataset, how many records (pieces) of that input the lane has pushed: the lane
    /// picks a dataset per record, so a long document's pieces interleave with the others'
    /// records and several datasets can be inside an input at once. A restore re-runs those
    /// inputs' stateless part and skips what was pushed.
    #[serde(default)]
    pub progress: Vec<u64>,
    /// Per dataset, the tokens (positions) the lane's inputs of it made, counted as pushed.
    pub delivered: Vec<u64>,
    /// Per dataset, whether the lane has no more inputs of it.
    pub exhausted: Vec<bool>,
    /// The first step of the share segment the lane reads by (see [`crate::Steering::shares`]).
    pub segment: u64,
    /// Per dataset, what the lane had delivered when that segment took effect: the closed loop
    /// steers by what it delivered since.
    pub segment_base: Vec<u64>,
}

impl SteerState {
    /// A lane before its first input, over `datasets` datasets.
    pub fn start(datasets: u32) -> Self {
        let n = datasets as usize;
        SteerState {
            chunks: vec![0; n],
            offsets: vec![0; n],
            progress: vec![0; n],
            delivered: vec![0; n],
            exhausted: vec![false; n],
            segment: 0,
            segment_base: vec![0; n],
        }
    }

    /// Whether it is a state over `datasets` datasets (every list that long).
    pub fn fits(&self, datasets: usize) -> bool {
        [
            self.chunks.len(),
            self.offsets.len(),
            self.progress.len(),
            self.delivered.len(),
            self.exhausted.len(),
            self.segment_base.len(),
        ]
        .iter()
        .all(|&n| n == datasets)
    }

    /// Per dataset, what the lane delivered since its share segment took effect, into `out`.
    pub fn delivered_in_segment(&self, out: &mut Vec<u64>) {
        out.clear();
        out.extend(self.delivered.iter().zip(&self.segment_base).map(|(d, b)| d.saturating_sub(*b)));
    }
}

impl LaneState {
    /// The inputs the lane is inside (it pushed some of their records, not all), from
    /// `source` with `lanes` lanes: the one at its cursor, or for a steered lane each
    /// dataset's next input that it has pushed records of.
    pub fn inputs_in_progress(&self, source: &dyn crate::WorkSource, lanes: u32) -> crate::Result<Vec<SampleId>> {
        let at = |c: Option<crate::Chunk>, offset: u64| {
            c.and_then(|c| usize::try_from(offset).ok().and_then(|i| c.samples.get(i).copied()))
        };
        match (&self.steer, source.steering()) {
            (Some(st), Some(s)) => {
                let mut out = Vec::new();
                for (d, _) in st.progress.iter().enumerate().filter(|(_, p)| **p > 0) {
                    let (Some(&k), Some(&offset)) = (st.chunks.get(d), st.offsets.get(d)) else { continue };
                    out.extend(at(s.dataset_chunk(self.lane, lanes, d as u32, k)?, offset));
                }
                Ok(out)
            }
            (None, None) if self.input_progress > 0 => {
                Ok(at(source.chunk(self.lane, lanes, self.cursor.chunk)?, self.cursor.offset).into_iter().collect())
            }
            (None, None) => Ok(Vec::new()),
            _ => Err(crate::Error::Source {
                lane: self.lane,
                message: "the lane state and the work source disagree on whether lanes are steered".into(),
            }),
        }
    }
}

/// Rows the end of finite data left out (a final partial step under `Tail::Drop`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TailDropped {
    /// Rows left out.
    pub rows: u64,
    /// Positions (tokens) of each dataset those rows held, by dataset index.
    pub positions: BTreeMap<u32, u64>,
    /// The documents those rows held pieces of: each came in part or not at all. Left out of
    /// the file when there are none.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub documents: std::collections::BTreeSet<zephon_operator::SampleId>,
}

/// Records skipped under the skip policy, by dataset index: how many, and why the first was.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skips(pub BTreeMap<u32, SkipTally>);

/// The skips of one dataset.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkipTally {
    /// Records skipped.
    pub count: u64,
    /// The error of the first one (sample and message), as an example of why.
    pub first: String,
}

impl Skips {
    /// Records skipped over all datasets.
    pub fn total(&self) -> u64 {
        self.0.values().map(|t| t.count).sum()
    }

    /// Counts one skip of `dataset` for `reason`.
    pub fn add(&mut self, dataset: u32, reason: impl FnOnce() -> String) {
        let t = self.0.entry(dataset).or_default();
        if t.count == 0 {
            t.first = reason();
        }
        t.count += 1;
    }

    /// Adds another tally to this one (counts summed; the first reason kept where there is one).
    pub fn merge(&mut self, other: &Skips) {
        for (d, t) in &other.0 {
            let mine = self.0.entry(*d).or_default();
            if mine.count == 0 {
                mine.first = t.first.clone();
            }
            mine.count += t.count;
        }
    }
}

/// What a restore needs from a checkpoint: the states of some lanes, all at one step.
#[derive(Debug)]
pub struct Loaded {
    /// The first step the restored run delivers.
    pub next_step: u64,
    /// The requested lanes' states, in the requested order.
    pub lanes: Vec<LaneState>,
    /// What the restore should report: a schedule that changes after the checkpoint's step.
    pub notices: Vec<String>,
}

/// Lane states gathered from the parts of a checkpoint (files or split parts), each checked
/// against the others: one step for all, one state per lane.
struct Gathered {
    /// What the error of a mismatch names (the folder, or "the state dict").
    whole: String,
    /// What a part is called in errors ("file", "lane part").
    part: &'static str,
    step: Option<(u64, String)>,
    found: BTreeMap<Lane, (LaneState, String)>,
    notices: Vec<String>,
}

impl Gathered {
    fn new(whole: String, part: &'static str) -> Self {
        Gathered { whole, part, step: None, found: BTreeMap::new(), notices: Vec::new() }
    }

    /// Checks the schedules of a part written under `saved` before `next_step` against the
    /// run's `now`: a change before that step is a mismatch, one after it a notice.
    fn check_schedules(&mut self, saved: &RunFingerprint, now: &RunFingerprint, next_step: u64) -> Result<()> {
        for notice in now.schedule_check(saved, next_step).map_err(|m| self.mismatch(m))? {
            if !self.notices.contains(&notice) {
                self.notices.push(notice);
            }
        }
        Ok(())
    }

    fn mismatch(&self, message: String) -> Error {
        Error::CheckpointMismatch { dir: self.whole.clone().into(), message }
    }

    /// Adds the lanes of one part, named `origin`, taken at `next_step`.
    fn add(&mut self, origin: &str, next_step: u64, lanes: Vec<LaneState>) -> Result<()> {
        match &self.step {
            Some((s, other)) if *s != next_step => {
                return Err(self.mismatch(format!(
                    "{origin} is at step {next_step} but {other} is at step {s}: {}s of different checkpoints are \
                     mixed",
                    self.part
                )));
            }
            _ => self.step = Some((next_step, origin.to_string())),
        }
        for st in lanes {
            if let Some((prev, prev_origin)) = self.found.get(&st.lane) {
                if *prev != st {
                    return Err(self
                        .mismatch(format!("{} is in both {prev_origin} and {origin} with different states", st.lane)));
                }
                continue;
            }
            self.found.insert(st.lane, (st, origin.to_string()));
        }
        Ok(())
    }

    /// The states of `wanted`, in order; an error naming every lane no part holds.
    fn finish(mut self, wanted: &[Lane]) -> Result<Loaded> {
        let missing: Vec<String> =
            wanted.iter().filter(|l| !self.found.contains_key(l)).map(|l| l.0.to_string()).collect();
        if !missing.is_empty() {
            return Err(self.mismatch(format!("no {} holds lane(s) {}", self.part, missing.join(", "))));
        }
        let lanes = wanted.iter().filter_map(|l| self.found.remove(l).map(|(s, _)| s)).collect();
        Ok(Loaded { next_step: self.step.map(|s| s.0).unwrap_or(0), lanes, notices: self.notices })
    }
}
