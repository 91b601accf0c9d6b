//! The facade's error type: every layer's errors, plus spec errors.

/// Anything that can go wrong building or running a pipeline.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec file cannot be read, does not parse, has an unknown key or an invalid value.
    #[error("spec {path}: {message}")]
    Spec {
        /// The spec file (or `<inline>`).
        path: String,
        /// What is wrong, with the line where the parser knows it.
        message: String,
    },
    /// An invalid combination of builder settings.
    #[error("pipeline: {0}")]
    Build(String),
    /// From the lane core: topology, records, checkpoints.
    #[error(transparent)]
    Core(#[from] zephon_core::Error),
    /// A dataset could not be opened.
    #[error(transparent)]
    Io(#[from] zephon_io::Error),
    /// Mixture settings or token estimation.
    #[error(transparent)]
    Mix(#[from] zephon_mix::Error),
    /// Packing settings.
    #[error(transparent)]
    Pack(#[from] zephon_pack::PackError),
    /// Tokenizer loading or settings.
    #[cfg(feature = "text")]
    #[error(transparent)]
    Text(#[from] zephon_text::Error),
    /// A file the caller handed over could not be read or written.
    #[error(transparent)]
    FileSystem(#[from] std::io::Error),
}

/// Result of the facade.
pub type Result<T, E = Error> = std::result::Result<T, E>;
