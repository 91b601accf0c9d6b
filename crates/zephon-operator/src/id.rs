//! Identifiers: which sample, which lane, which step.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The address of one stored sample: row `row` of shard `shard` of dataset `dataset`.
///
/// Datasets are numbered by their position in the run's dataset list; shards by their
/// position in the dataset's manifest. Any combination is a valid id; whether it exists is
/// the reader's question.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SampleId {
    /// Position of the dataset in the run's dataset list.
    pub dataset: u32,
    /// Position of the shard in the dataset's manifest.
    pub shard: u32,
    /// Row within the shard, from 0.
    pub row: u64,
}

impl SampleId {
    /// The id of row `row` of shard `shard` of dataset `dataset`.
    pub const fn new(dataset: u32, shard: u32, row: u64) -> Self {
        SampleId { dataset, shard, row }
    }
}

impl fmt::Display for SampleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "dataset {} shard {} row {}", self.dataset, self.shard, self.row)
    }
}

/// One of the run's L logical sample streams. Fixed for the life of a run.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Lane(pub u32);

impl Lane {
    /// The lane's index as a `usize`, for indexing.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for Lane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lane {}", self.0)
    }
}

/// A global training step, counted from 0.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Step(pub u64);

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "step {}", self.0)
    }
}
