//! The crate's error type.

/// Why a work source or an estimate could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Invalid settings (weights, chunk size, passes).
    #[error("mixture: {0}")]
    Config(String),
    /// A sampled row could not be read or measured during token estimation.
    #[error("token estimation, dataset {dataset}: {message}")]
    Estimate {
        /// The dataset.
        dataset: String,
        /// What went wrong (with the row).
        message: String,
    },
}

/// Result of this crate.
pub type Result<T> = std::result::Result<T, Error>;
