//! zephon for Python: the `zephon_rs._native` extension module that maturin builds into the
//! `zephon-rs` wheel.
//!
//! The one design decision: **Python sees the Rust loader, not a copy of it.** A step's columns
//! are numpy arrays over the buffers the Rust engine made (their `.base` is the Rust owner,
//! nothing is copied), every wait for the engine happens with the GIL released, and the state a
//! trainer saves is the engine's own split checkpoint: one replicated entry and one entry per
//! lane, so that a checkpoint store hands each rank the lanes it owns at any data-parallel size.
//!
//! What this crate is not: a PyTorch integration. `zephon_rs.torch` (Python, in `python/`)
//! adapts the loader to torchdata and TorchTitan on top of this module, and torch is never a
//! dependency of the wheel.

#![deny(missing_docs)]

mod arrays;
mod errors;
mod loader;
mod state;
mod step;
mod validation;

use pyo3::prelude::*;

/// The native part of zephon_rs: `Loader`, `Step`, the exceptions. Import `zephon_rs` instead.
#[pymodule(name = "_native")]
mod native {
    #[pymodule_export]
    use super::arrays::RustBuffer;
    #[pymodule_export]
    use super::errors::{CheckpointError, DataError, Error, SpecError};
    #[pymodule_export]
    use super::loader::Loader;
    #[pymodule_export]
    use super::step::Step;
    #[pymodule_export]
    use super::validation::ValidationLoader;

    /// The version of the zephon crates this module was built from.
    #[allow(non_upper_case_globals)]
    #[pymodule_export]
    const __version__: &str = env!("CARGO_PKG_VERSION");

    /// The checkpoint format this module reads and writes (the `format` of a state dict).
    #[pymodule_export]
    const CHECKPOINT_FORMAT: u32 = zephon::lane_core::checkpoint::FORMAT_VERSION;
}

/// Runs `f`, turning a panic into a `zephon_rs.Error` instead of pyo3's `PanicException` (a
/// `BaseException` that `except Exception` would not catch).
pub(crate) fn no_panic<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(errors::Error::new_err(format!("internal error (a Rust panic; please report it): {msg}")))
        }
    }
}
