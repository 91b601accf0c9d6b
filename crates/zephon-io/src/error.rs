//! The crate's error type: what can go wrong opening a dataset.

use std::path::PathBuf;

/// A dataset that cannot be opened, with the file and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A path that does not exist or cannot be read.
    #[error("dataset {dataset}: {path}: {message}")]
    Open {
        /// The dataset's name.
        dataset: String,
        /// The file or folder.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A folder with no shard files of a known format.
    #[error(
        "dataset {dataset}: {path}: no shard files (*.jsonl, *.json, *.ndjson, plain or .gz / .zst; *.parquet; *.tar) \
         in it or its subfolders"
    )]
    NoShards {
        /// The dataset's name.
        dataset: String,
        /// The folder.
        path: PathBuf,
    },
    /// Shards of several formats in one dataset.
    #[error("dataset {dataset}: shards mix formats ({first} and {second}); give each format its own dataset")]
    MixedFormats {
        /// The dataset's name.
        dataset: String,
        /// One shard.
        first: PathBuf,
        /// A shard of another format.
        second: PathBuf,
    },
    /// A file whose name says no format zephon reads.
    #[error(
        "dataset {dataset}: {path}: unknown format (expected .jsonl, .json or .ndjson, plain or .gz / .zst; .parquet; \
         .tar)"
    )]
    UnknownFormat {
        /// The dataset's name.
        dataset: String,
        /// The file.
        path: PathBuf,
    },
    /// A Parquet shard without a requested column.
    #[error("dataset {dataset}: {path}: no column {column:?} (columns: {available})")]
    MissingColumn {
        /// The dataset's name.
        dataset: String,
        /// The shard.
        path: PathBuf,
        /// The column asked for.
        column: String,
        /// The columns the file has.
        available: String,
    },
    /// A Parquet column of a type that cannot hold what its field is for.
    #[error("dataset {dataset}: {path}: column {column:?} is {found}; {expected}")]
    ColumnType {
        /// The dataset's name.
        dataset: String,
        /// The shard.
        path: PathBuf,
        /// The column.
        column: String,
        /// Its type, as Arrow names it.
        found: String,
        /// What the field needs.
        expected: String,
    },
    /// Shards that cannot make one dataset as given: several splits without a choice, a file
    /// named twice, a split no shard is of.
    #[error("dataset {dataset}: {message}")]
    Layout {
        /// The dataset's name.
        dataset: String,
        /// What is wrong and what to change.
        message: String,
    },
    /// Fields that cannot be read as configured (whatever the files hold).
    #[error("dataset {dataset}: {message}")]
    Fields {
        /// The dataset's name.
        dataset: String,
        /// What is wrong with the configuration.
        message: String,
    },
}

/// Result of opening a dataset.
pub type Result<T> = std::result::Result<T, Error>;
