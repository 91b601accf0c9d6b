//! The exception hierarchy: `zephon_rs.Error`, and beneath it what the user has to fix.
//!
//! Every Rust error keeps its message (dataset, shard, row, setting, part of a checkpoint);
//! the class says which kind of thing to look at.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(zephon_rs, Error, PyException, "Every error zephon_rs raises.");
create_exception!(
    zephon_rs,
    DataError,
    Error,
    "A dataset cannot be read, or a record is bad (the message names dataset, shard and row)."
);
create_exception!(
    zephon_rs,
    SpecError,
    Error,
    "The spec or a setting is wrong (the message names the key), or the ranks cannot be told."
);
create_exception!(
    zephon_rs,
    CheckpointError,
    Error,
    "A state dict or checkpoint is damaged, incomplete, or belongs to another run."
);

/// A facade error on its way to Python.
pub(crate) struct PyZephonError(zephon::Error);

impl From<zephon::Error> for PyZephonError {
    fn from(e: zephon::Error) -> Self {
        PyZephonError(e)
    }
}

impl From<zephon::lane_core::Error> for PyZephonError {
    fn from(e: zephon::lane_core::Error) -> Self {
        PyZephonError(e.into())
    }
}

impl From<PyZephonError> for PyErr {
    fn from(e: PyZephonError) -> PyErr {
        use zephon::Error as E;
        use zephon::lane_core::Error as C;
        let msg = e.0.to_string();
        match e.0 {
            E::Spec { .. } | E::Build(_) | E::Pack(_) | E::Text(_) => SpecError::new_err(msg),
            E::Mix(zephon::mix::Error::Config(_)) => SpecError::new_err(msg),
            E::Mix(_) | E::Io(_) | E::FileSystem(_) => DataError::new_err(msg),
            // The dp rank and size given do not fit the spec's lanes: an argument to fix.
            E::Core(C::Topology(_)) => pyo3::exceptions::PyValueError::new_err(msg),
            E::Core(C::Config(_)) => SpecError::new_err(msg),
            E::Core(C::CheckpointFile { .. } | C::CheckpointMismatch { .. }) => CheckpointError::new_err(msg),
            E::Core(C::WorkerPanic(_)) => Error::new_err(msg),
            E::Core(_) => DataError::new_err(msg),
        }
    }
}
