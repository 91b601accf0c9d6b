//! `zephon_rs.Step`: this rank's part of one global step, its columns as numpy arrays.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use zephon::lane_core::{Batch, ColumnData, LocalStep};
use zephon::operator::{Array, ArrayData, Extent};

use crate::arrays::{to_numpy, vec_to_numpy};
use crate::errors::PyZephonError;

/// This rank's part of one global step: the rows of the lanes it owns, in lane order.
///
/// `batch()` stacks the rows into columns (`input_ids`, `labels`, `positions`, `segment_ids`,
/// `cu_seqlens`, `max_seqlen`, `loss_mask`, and for images `image.pixel_values`,
/// `image.image_grid_thw` with their `.offsets` and `.row_offsets`), each a numpy array over
/// the Rust buffer (no copy). `microbatches(n)` does the same per slice of n rows: a view of
/// the step, never a different set of rows.
#[pyclass(frozen, module = "zephon_rs._native", name = "Step")]
pub struct Step {
    step: Arc<LocalStep>,
    datasets: Arc<[String]>,
}

impl Step {
    pub(crate) fn new(step: LocalStep, datasets: Arc<[String]>) -> Self {
        Step { step: Arc::new(step), datasets }
    }
}

#[pymethods]
impl Step {
    /// The global step number.
    #[getter]
    fn index(&self) -> u64 {
        self.step.step().0
    }

    /// Rows in this rank's part.
    fn __len__(&self) -> usize {
        self.step.len()
    }

    /// The lanes this part holds, in order.
    #[getter]
    fn lanes(&self) -> Vec<u32> {
        self.step.lanes().iter().map(|l| l.lane().0).collect()
    }

    /// Whether this is a final partial step of finite data (some lane gave fewer rows).
    #[getter]
    fn is_partial(&self) -> bool {
        self.step.is_partial()
    }

    /// All rows stacked into columns: a `zephon_rs.Batch` (a dict of numpy arrays, lists for
    /// text and bytes fields) whose `label_convention` says how its `labels` are meant. With
    /// `int64=True`, integer token columns (`input_ids`, `labels`, `positions`, `segment_ids`,
    /// `cu_seqlens`, `source_ids`) are widened to int64 in Rust, as PyTorch wants them.
    ///
    /// `layout="zephon"` (the default): every column, `labels` already shifted to the next
    /// token (`label_convention == "next_token"`: for models that do not shift, as
    /// TorchTitan's). `layout="hf"`: what a Hugging Face causal LM takes, `input_ids`,
    /// `labels` as it expects them (the tokens themselves, -100 at each row's and document's
    /// first token and where the loss mask is 0: the model shifts) and `position_ids`
    /// restarting at every document, int64 (`label_convention == "hf"`). `layout="hf_flat"`:
    /// the same with every row's tokens in one row of `[1, tokens]` without padding, as
    /// `DataCollatorWithFlattening` makes it for FlashAttention's packed sequences.
    #[pyo3(signature = (*, int64 = false, layout = "zephon"))]
    fn batch<'py>(&self, py: Python<'py>, int64: bool, layout: &str) -> PyResult<Bound<'py, PyAny>> {
        let columns = crate::no_panic(|| {
            let step = self.step.clone();
            let batch = py.detach(move || step.to_batch().map(|b| widen(b, int64))).map_err(PyZephonError::from)?;
            batch_dict(py, batch)
        })?;
        finish(py, columns, layout)
    }

    /// The step cut into microbatches of `size` rows, in order, each as `batch()` gives it.
    /// `size` must divide this rank's rows.
    #[pyo3(signature = (size, *, int64 = false, layout = "zephon"))]
    fn microbatches<'py>(
        &self,
        py: Python<'py>,
        size: usize,
        int64: bool,
        layout: &str,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let rows = self.step.rows().count();
        if size == 0 || (!rows.is_multiple_of(size) && !self.step.is_partial()) {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "microbatch size {size} does not divide this rank's {rows} rows of step {}",
                self.step.step().0
            )));
        }
        crate::no_panic(|| {
            let step = self.step.clone();
            let batches = py
                .detach(move || -> zephon::lane_core::Result<Vec<Batch>> {
                    step.microbatches(size)?.iter().map(|m| m.to_batch().map(|b| widen(b, int64))).collect()
                })
                .map_err(PyZephonError::from)?;
            batches.into_iter().map(|b| finish(py, batch_dict(py, b)?, layout)).collect()
        })
    }

    /// `(lane, SHA-256 digest)` of each lane's rows in the canonical row encoding: the hash log
    /// the `zephon` command writes. The global step fingerprint is the SHA-256 over every
    /// lane's 32 bytes in lane order, whichever ranks computed them.
    fn lane_digests<'py>(&self, py: Python<'py>) -> PyResult<Vec<(u32, Bound<'py, PyBytes>)>> {
        let step = self.step.clone();
        let digests: Vec<(u32, [u8; 32])> = py.detach(move || step.lane_digests().map(|(l, d)| (l.0, d.0)).collect());
        Ok(digests.into_iter().map(|(l, d)| (l, PyBytes::new(py, &d))).collect())
    }

    /// Which documents made each row: per row, `(dataset, shard, row, start, end)` for each
    /// piece, where `start..end` is the token range taken (`None, None` for a whole record).
    #[allow(clippy::type_complexity)]
    fn provenance(&self) -> Vec<Vec<(String, u32, u64, Option<u32>, Option<u32>)>> {
        self.step
            .rows()
            .map(|r| {
                r.lineage()
                    .fragments()
                    .iter()
                    .map(|f| {
                        let name = self.datasets.get(f.sample.dataset as usize).cloned().unwrap_or_default();
                        let (a, b) = match &f.extent {
                            Extent::Whole => (None, None),
                            Extent::Span(s) => (Some(s.start()), Some(s.end())),
                        };
                        (name, f.sample.shard, f.sample.row, a, b)
                    })
                    .collect()
            })
            .collect()
    }

    fn __repr__(&self) -> String {
        format!("<zephon_rs Step {}: {} rows of lanes {:?}>", self.index(), self.__len__(), self.lanes())
    }

    fn __reduce__(&self) -> PyResult<Py<PyAny>> {
        Err(pyo3::exceptions::PyTypeError::new_err(
            "a Step cannot be pickled; take its batch() (a dict of numpy arrays) instead",
        ))
    }
}

/// `batch` with its 16- and 32-bit integer dense columns widened to i64.
fn widen(batch: Batch, int64: bool) -> Batch {
    if !int64 {
        return batch;
    }
    batch.map_dense(|a| {
        let wide: Option<Vec<i64>> = match a.data() {
            ArrayData::U32(b) => Some(b.iter().map(|&x| i64::from(x)).collect()),
            ArrayData::I32(b) => Some(b.iter().map(|&x| i64::from(x)).collect()),
            ArrayData::U16(b) => Some(b.iter().map(|&x| i64::from(x)).collect()),
            _ => None,
        };
        match wide {
            Some(v) => Array::with_shape(v, a.shape().clone()).unwrap_or(a),
            None => a,
        }
    })
}

/// A batch's columns as a `zephon_rs.Batch` in `layout` (see `Step.batch`).
fn finish<'py>(py: Python<'py>, columns: Bound<'py, PyDict>, layout: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("zephon_rs._batch")?.getattr("finish")?.call1((columns, layout))
}

/// The columns of `batch` as a dict of numpy arrays.
fn batch_dict(py: Python<'_>, batch: Batch) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    for column in batch.into_columns() {
        let name = column.name.as_str().to_string();
        match column.data {
            ColumnData::Dense(a) => out.set_item(&name, to_numpy(py, a)?)?,
            ColumnData::Ragged(r) => {
                let layout = r.into_layout();
                let n_offsets = layout.offsets.len();
                let n_rows = layout.row_offsets.len();
                out.set_item(&name, to_numpy(py, layout.values)?)?;
                out.set_item(format!("{name}.offsets"), vec_to_numpy(py, layout.offsets, &[n_offsets])?)?;
                out.set_item(format!("{name}.row_offsets"), vec_to_numpy(py, layout.row_offsets, &[n_rows])?)?;
                if let Some((items, ndim, table)) = layout.shapes {
                    out.set_item(format!("{name}.shapes"), vec_to_numpy(py, table, &[items, ndim])?)?;
                }
            }
            ColumnData::Str(v) => out.set_item(&name, PyList::new(py, v.iter().map(|s| s.as_ref()))?)?,
            ColumnData::Bytes(v) => {
                out.set_item(&name, PyList::new(py, v.iter().map(|b| PyBytes::new(py, b.as_slice())))?)?
            }
        }
    }
    Ok(out)
}
