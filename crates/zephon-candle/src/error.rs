//! The crate's error type.

use std::path::PathBuf;

use zephon_operator::Step;

/// A boxed error from a [`crate::StepSource`], kept whole so the caller sees what failed.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong turning steps into tensors or prefetching them.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// candle refused an operation on a column (allocation, upload, dtype conversion).
    #[error("column {column}: {source}")]
    Candle {
        /// The column (or derived tensor) being built.
        column: String,
        /// What candle said.
        #[source]
        source: candle_core::Error,
    },

    /// A column whose values cannot become the tensors asked for.
    #[error("column {column}: {message}")]
    Column {
        /// The column.
        column: String,
        /// What was wrong.
        message: String,
    },

    /// A tensor the caller asked for by name is not in the batch.
    #[error("no tensor {name}; the batch has {available}")]
    Missing {
        /// The name asked for.
        name: String,
        /// The names there are, comma-separated.
        available: String,
    },

    /// The loader core failed (stacking rows into a batch, microbatching, a checkpoint write).
    #[error(transparent)]
    Core(#[from] zephon_core::Error),

    /// The step source failed while producing a step.
    #[error("step source, at step {step}: {source}")]
    Source {
        /// The step it was producing.
        step: Step,
        /// What it said.
        #[source]
        source: BoxError,
    },

    /// An invalid setting.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// The prefetch worker is gone: it panicked, or it stopped after an error already
    /// returned.
    #[error("prefetch worker: {0}")]
    Worker(String),

    /// A checkpoint was asked for at a step that has no lane snapshot.
    #[error("no checkpoint can be written into {dir} before {next_step}: {message}")]
    NoSnapshot {
        /// The directory asked for.
        dir: PathBuf,
        /// The step a restore would deliver first.
        next_step: Step,
        /// Why.
        message: String,
    },
}

/// This crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Wraps a candle error with the column it happened on.
pub(crate) fn candle(column: &str) -> impl FnOnce(candle_core::Error) -> Error + '_ {
    move |source| Error::Candle { column: column.to_string(), source }
}
