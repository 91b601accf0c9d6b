//! `zephon_rs.ValidationLoader`: one rank of a spec's validation pass.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;

use crate::errors::{PyZephonError, SpecError};
use crate::loader::{dp_topology, parse_spec};
use crate::step::Step;

/// One rank of the spec's `[validation]` pass: every held-out record once, in order, one a
/// row, the same steps at every dp size; every rank stops after the same step (the last ones
/// are padded, `loss_mask` 0). Iterate it like a `Loader`.
///
/// `ValidationLoader(spec, *, dp_rank=None, dp_world_size=None, threads=None, base_dir=None)`
#[pyclass(module = "zephon_rs")]
pub struct ValidationLoader {
    inner: Arc<Mutex<zephon::ValidationLoader>>,
    datasets: Arc<[String]>,
    /// This rank's rows of a step.
    local_rows: u32,
    /// Tokens a row.
    seq_len: Option<usize>,
}

#[pymethods]
impl ValidationLoader {
    #[new]
    #[pyo3(signature = (spec, *, dp_rank = None, dp_world_size = None, threads = None, base_dir = None))]
    fn new(
        py: Python<'_>,
        spec: &Bound<'_, PyAny>,
        dp_rank: Option<u32>,
        dp_world_size: Option<u32>,
        threads: Option<usize>,
        base_dir: Option<PathBuf>,
    ) -> PyResult<ValidationLoader> {
        crate::no_panic(|| {
            let mut spec = parse_spec(py, spec, base_dir)?;
            if let Some(t) = threads {
                spec.run.threads = Some(t);
            }
            let topology = dp_topology(&spec, dp_rank, dp_world_size)?;
            let datasets: Arc<[String]> =
                spec.validation.iter().flat_map(|v| v.datasets.iter().map(|d| d.name.clone())).collect();
            crate::warn_all(py, &spec.warnings())?;
            let seq_len = spec.pack.as_ref().map(|p| p.seq_len);
            let loader = crate::interruptible(py, move || -> zephon::Result<_> {
                let v = spec
                    .validation()?
                    .ok_or_else(|| zephon::Error::Build("the spec has no [validation] table".into()))?;
                v.build(topology)
            })?
            .map_err(|e| match e {
                zephon::Error::Build(m) if m.contains("no [validation]") => SpecError::new_err(m),
                e => PyZephonError::from(e).into(),
            })?;
            let local_rows = loader.topology().local_rows_at(0);
            Ok(ValidationLoader { inner: Arc::new(Mutex::new(loader)), datasets, local_rows, seq_len })
        })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The next step, waiting interruptibly (Ctrl-C).
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Step>> {
        let inner = self.inner.clone();
        let got = crate::interruptible(py, move || inner.lock().unwrap_or_else(|p| p.into_inner()).next_step())?;
        Ok(got.map_err(PyZephonError::from)?.map(|s| Step::new(s, self.datasets.clone())))
    }

    /// This rank's rows of a step.
    #[getter]
    fn local_rows(&self) -> u32 {
        self.local_rows
    }

    /// Tokens a row (the spec's `[pack] seq_len`).
    #[getter]
    fn seq_len(&self) -> Option<usize> {
        self.seq_len
    }

    /// Steps of the whole pass (the same on every rank).
    #[getter]
    fn steps(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).steps()
    }

    /// Padding rows this rank delivered so far.
    #[getter]
    fn padding_rows(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).padding_rows()
    }

    /// What this rank's lanes left out (records skipped as bad, conversations truncated or
    /// skipped), as a dict.
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let report = self.inner.lock().unwrap_or_else(|p| p.into_inner()).report();
        let json = serde_json::to_string(&report).map_err(|e| crate::errors::Error::new_err(e.to_string()))?;
        py.import("json")?.call_method1("loads", (json,))
    }
}
