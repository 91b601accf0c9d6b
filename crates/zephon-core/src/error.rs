//! The engine's error type.

use std::path::PathBuf;

pub use zephon_operator::OpError;
use zephon_operator::{Lane, SampleId, Step};

/// Everything that can go wrong in the lane core, with the context needed to act on it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An invalid combination of lanes, rows per step, world size and rank.
    #[error("invalid topology: {0}")]
    Topology(String),

    /// An invalid engine or pipeline setting.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// A record that could not be read or processed.
    #[error("{dataset} shard {shard} row {row} ({lane}, operator {operator}): {message}")]
    Record {
        /// Dataset name.
        dataset: String,
        /// Shard index within the dataset.
        shard: u32,
        /// Row within the shard.
        row: u64,
        /// The lane that was processing it.
        lane: Lane,
        /// The operator (or `read`) that failed.
        operator: String,
        /// What was wrong.
        message: String,
    },

    /// A dataset gave a lane nothing but bad records for longer than it has rows: under the
    /// skip policy the run would spin without delivering anything.
    #[error(
        "dataset {dataset}: {lane} skipped {count} bad records of it in a row and none was good; \
         is every row bad? The first: {first}"
    )]
    AllBad {
        /// Dataset name.
        dataset: String,
        /// The lane that noticed.
        lane: Lane,
        /// Bad records in a row.
        count: u64,
        /// The first skip's error.
        first: String,
    },

    /// The work source failed (a chunk could not be computed).
    #[error("work source, {lane}: {message}")]
    Source {
        /// The lane whose chunk failed.
        lane: Lane,
        /// What was wrong.
        message: String,
    },

    /// An operator failed outside any one record (a bad setting found at run time).
    #[error("operator {operator}, {lane}: {message}")]
    Operator {
        /// The operator.
        operator: String,
        /// The lane.
        lane: Lane,
        /// What was wrong.
        message: String,
    },

    /// A checkpoint file is unreadable, corrupt, truncated or of another version.
    #[error("checkpoint {path}: {message}")]
    CheckpointFile {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },

    /// Rank processes that could not be started, failed, or left no readable hash log.
    #[error("rank processes: {0}")]
    Launch(String),

    /// A checkpoint does not fit the run it is restored into.
    #[error("checkpoint {dir}: {message}")]
    CheckpointMismatch {
        /// The checkpoint directory.
        dir: PathBuf,
        /// What does not fit.
        message: String,
    },

    /// A buffered record named in a checkpoint could not be rebuilt.
    #[error("restore, {lane}: cannot rebuild {lineage}: {message}")]
    Rebuild {
        /// The lane being restored.
        lane: Lane,
        /// The record's lineage.
        lineage: String,
        /// Why.
        message: String,
    },

    /// A step could not be assembled (a row of the wrong shape for a batch, a bad microbatch).
    #[error("{step}: {message}")]
    Step {
        /// The step.
        step: Step,
        /// What was wrong.
        message: String,
    },

    /// Arrays that do not make a valid batch column (a ragged layout whose offsets and shapes
    /// disagree, rows that cannot be stacked).
    #[error("batch: {0}")]
    Batch(String),

    /// A hash log line that does not parse, a lane logged twice, a step missing lanes.
    #[error("hash log: {0}")]
    HashLog(String),

    /// A file-system operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },

    /// The engine stopped because a worker thread panicked (a bug, reported rather than hung).
    #[error("engine worker panicked: {0}")]
    WorkerPanic(String),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
}

/// Where a record failed, before the engine adds lane and dataset names.
pub(crate) fn record_error(names: &[String], sample: SampleId, lane: Lane, operator: &str, message: String) -> Error {
    let dataset = names.get(sample.dataset as usize).cloned().unwrap_or_else(|| format!("dataset #{}", sample.dataset));
    Error::Record { dataset, shard: sample.shard, row: sample.row, lane, operator: operator.to_string(), message }
}

/// Result of a core operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;
