//! The state dict: a split checkpoint as the nested dict a PyTorch checkpoint stores.
//!
//! ```text
//! {"zephon": {"format": 3, "step": 120, "lanes": 8, "run": b"ZEPHON-RUN..."},   same on every rank
//!  "lanes":  {"lane_000004": b"ZEPHON-LANE...", "lane_000005": b"..."}}          this rank's lanes
//! ```
//!
//! Every value is an int or `bytes` in zephon's own sealed format (never a pickle), so any
//! store keeps it as it is; `torch.distributed.checkpoint` flattens it to keys such as
//! `dataloader.lanes.lane_000004`, writes the replicated `zephon` entry once, and on load hands
//! each rank the lane keys of its own template.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use zephon::lane_core::checkpoint::FORMAT_VERSION;
use zephon::{Lane, LanePart, SplitCheckpoint, Topology};

use crate::errors::CheckpointError;

/// A lane's key in the `lanes` entry.
pub(crate) fn lane_key(lane: u32) -> String {
    format!("lane_{lane:06}")
}

pub(crate) fn to_dict<'py>(py: Python<'py>, split: &SplitCheckpoint, lanes: u32) -> PyResult<Bound<'py, PyDict>> {
    let summary = SplitCheckpoint::summary(&split.run).map_err(|e| CheckpointError::new_err(e.to_string()))?;
    let run = PyDict::new(py);
    run.set_item("format", FORMAT_VERSION)?;
    run.set_item("step", summary.next_step)?;
    run.set_item("lanes", lanes)?;
    run.set_item("run", PyBytes::new(py, &split.run))?;
    let parts = PyDict::new(py);
    for p in &split.lanes {
        parts.set_item(lane_key(p.lane.0), PyBytes::new(py, &p.bytes))?;
    }
    let out = PyDict::new(py);
    out.set_item("zephon", run)?;
    out.set_item("lanes", parts)?;
    Ok(out)
}

fn bad(m: String) -> PyErr {
    CheckpointError::new_err(format!("state dict: {m}"))
}

/// `bytes` (or a bytes-like value a store handed back) of `value`, named `what` in errors.
fn bytes_of(value: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u8>> {
    let bytes: Vec<u8> = value
        .extract::<Vec<u8>>()
        .or_else(|_| value.call_method0("tobytes").and_then(|b| b.extract::<Vec<u8>>()))
        .map_err(|_| {
            bad(format!(
                "{what} is a {}, not bytes",
                value.get_type().name().map(|n| n.to_string()).unwrap_or_default()
            ))
        })?;
    if bytes.is_empty() {
        return Err(bad(format!(
            "{what} is empty: the checkpoint store did not fill it (it holds no state for this key)"
        )));
    }
    Ok(bytes)
}

/// The split checkpoint in `sd` for the lanes `topology` owns.
pub(crate) fn from_dict(sd: &Bound<'_, PyAny>, topology: &Topology) -> PyResult<SplitCheckpoint> {
    let sd = sd.cast::<PyDict>().map_err(|_| bad("not a dict".into()))?;
    let run = sd.get_item("zephon")?.ok_or_else(|| bad("no \"zephon\" entry (not a zephon_rs state?)".into()))?;
    let run = run.cast::<PyDict>().map_err(|_| bad("the \"zephon\" entry is not a dict".into()))?;
    let get = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        run.get_item(k)?.ok_or_else(|| bad(format!("the \"zephon\" entry has no \"{k}\"")))
    };
    let format: u32 = get("format")?.extract().map_err(|_| bad("zephon.format is not an integer".into()))?;
    if format != FORMAT_VERSION {
        return Err(bad(format!("format {format}; this zephon_rs reads format {FORMAT_VERSION}")));
    }
    let lanes: u32 = get("lanes")?.extract().map_err(|_| bad("zephon.lanes is not an integer".into()))?;
    if lanes != topology.lanes() {
        return Err(bad(format!(
            "it is of a run with {lanes} lanes, this loader's spec has {} (the lane count is fixed for a run's life)",
            topology.lanes()
        )));
    }
    let run_bytes = bytes_of(&get("run")?, "zephon.run")?;
    let parts = sd.get_item("lanes")?.ok_or_else(|| bad("no \"lanes\" entry".into()))?;
    let parts = parts.cast::<PyDict>().map_err(|_| bad("the \"lanes\" entry is not a dict".into()))?;
    let mut out = Vec::new();
    for lane in topology.owned_lanes() {
        let key = lane_key(lane.0);
        // A missing lane is left to the engine, which names every missing lane at once.
        if let Some(v) = parts.get_item(&key)? {
            out.push(LanePart { lane: Lane(lane.0), bytes: bytes_of(&v, &format!("lanes.{key}"))? });
        }
    }
    Ok(SplitCheckpoint { run: run_bytes, lanes: out })
}
