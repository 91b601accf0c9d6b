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
mod sections;
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

/// Runs `f` on a thread of its own while the caller waits with the GIL released, looking for
/// signals every 50 ms: Ctrl-C interrupts the wait (`KeyboardInterrupt`) and `f` runs on to its
/// end in the background, its result dropped. For the long calls that cannot wait in slices: a
/// first build that measures the datasets, a validation step.
pub(crate) fn interruptible<T: Send + 'static>(py: Python<'_>, f: impl FnOnce() -> T + Send + 'static) -> PyResult<T> {
    use std::sync::mpsc::RecvTimeoutError;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("zephon-call".into())
        .spawn(move || {
            let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
        })
        .map_err(|e| errors::Error::new_err(format!("cannot start a thread: {e}")))?;
    // A receiver is not `Sync`: the wait owns it for its slice and hands it back.
    let mut rx = Some(rx);
    loop {
        let waiting = rx.take().ok_or_else(|| errors::Error::new_err("internal error: the result was lost"))?;
        let (got, back) = py.detach(move || {
            let got = waiting.recv_timeout(std::time::Duration::from_millis(50));
            (got, waiting)
        });
        rx = Some(back);
        match got {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(_)) => return Err(errors::Error::new_err("internal error (a Rust panic; please report it)")),
            Err(RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(RecvTimeoutError::Disconnected) => {
                return Err(errors::Error::new_err("internal error: a call ended without a result"));
            }
        }
    }
}

/// Says `warnings` through Python's `warnings.warn` (a `UserWarning` each), as the CLI says
/// them on stderr.
pub(crate) fn warn_all(py: Python<'_>, warnings: &[String]) -> PyResult<()> {
    let w = py.import("warnings")?;
    for m in warnings {
        w.call_method1("warn", (format!("zephon: {m}"),))?;
    }
    Ok(())
}
