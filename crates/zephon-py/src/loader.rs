//! `zephon_rs.Loader`: one data-parallel rank of a run, as a Python iterator of steps.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use zephon::lane_core::RankEnv;
use zephon::{Pipeline, Spec, Topology};

use crate::errors::{Error, PyZephonError};
use crate::state;
use crate::step::Step;

/// How long a wait for the engine lasts before Python gets to handle a signal (Ctrl-C).
const SIGNAL_SLICE: Duration = Duration::from_millis(50);

/// One data-parallel rank of a zephon run: iterate it for this rank's part of every global
/// step, in order.
///
/// `spec` is a spec file's path, a TOML string, or a dict with the same keys. `dp_rank` and
/// `dp_world_size` are this process's data-parallel rank and size (with tensor or pipeline
/// parallelism they are not `RANK` and `WORLD_SIZE`); left out, they are read from torchrun,
/// Slurm, Open MPI, MPICH or PMIx variables, and it is an error when none is set. The data of
/// every global step is the same at every dp size dividing the spec's lanes.
///
/// `snapshot_every` is how often the lanes keep the state a checkpoint needs: `state_dict()`
/// after step s works when `snapshot_every` divides s + 1 (1, the default: after any step).
/// Keeping it costs a copy of the lineage of what the lanes hold per step; a trainer that
/// checkpoints every N steps should pass N.
///
/// `state_dict()` / `load_state_dict()` follow PyTorch's `Stateful` protocol: one entry
/// replicated on every rank (`zephon`: format, step, the run's fingerprint) and one per lane
/// (`lanes`), so that a checkpoint store hands each rank the lanes it owns after a change of dp
/// size, and the run continues byte for byte. The engine runs on Rust threads with the GIL
/// released; nothing here is picklable (build a Loader in each process).
#[pyclass(frozen, module = "zephon_rs._native", name = "Loader")]
pub struct Loader {
    inner: Mutex<Inner>,
    topology: Topology,
    datasets: Arc<[String]>,
    /// Tokens a row, when the spec packs rows to a fixed length.
    seq_len: Option<usize>,
    /// w(step), when the mixture is by token shares.
    shares: Option<zephon::lane_core::ShareSchedule>,
    /// The process that made it: a Loader copied by `fork` has no engine threads.
    pid: u32,
    /// Engine worker threads.
    threads: usize,
}

struct Inner {
    pipeline: Pipeline,
    running: Option<zephon::Loader>,
    /// The step the next `__next__` delivers (before the engine starts: where it will start).
    position: u64,
}

impl Inner {
    /// The running loader, built from the start if nothing started it yet.
    fn running(&mut self, topology: &Topology) -> zephon::Result<&mut zephon::Loader> {
        if self.running.is_none() {
            self.running = Some(self.pipeline.clone().build(topology.clone())?);
        }
        self.running.as_mut().ok_or_else(|| zephon::Error::Build("the loader did not start".into()))
    }
}

pub(crate) fn parse_spec(py: Python<'_>, spec: &Bound<'_, PyAny>, base_dir: Option<PathBuf>) -> PyResult<Spec> {
    let here = || base_dir.clone().unwrap_or_else(|| std::env::current_dir().unwrap_or_default());
    let sections = crate::sections::sections().map_err(PyZephonError::from)?;
    if spec.is_instance_of::<PyDict>() {
        let json: String = py.import("json")?.call_method1("dumps", (spec,))?.extract()?;
        return Ok(Spec::from_json_with(&json, "<dict>", &here(), &sections).map_err(PyZephonError::from)?);
    }
    let path: Option<PathBuf> = if spec.is_instance_of::<PyString>() {
        let s: String = spec.extract()?;
        if s.contains('\n') || s.contains('=') {
            return Ok(Spec::parse_with(&s, "<string>", &here(), &sections).map_err(PyZephonError::from)?);
        }
        Some(PathBuf::from(s))
    } else {
        spec.extract::<PathBuf>().ok()
    };
    match path {
        Some(p) if p.exists() => {
            let parsed = Spec::from_file_with(&p, &sections).map_err(PyZephonError::from)?;
            Ok(match base_dir {
                Some(b) => Spec { base_dir: b, ..parsed },
                None => parsed,
            })
        }
        Some(p) => Err(pyo3::exceptions::PyFileNotFoundError::new_err(format!(
            "spec {}: no such file (give a spec file's path, a TOML string or a dict)",
            p.display()
        ))),
        None => Err(PyTypeError::new_err("spec must be a path, a TOML string or a dict")),
    }
}

/// The data-parallel rank and size, given or read from the launcher's variables.
pub(crate) fn dp_topology(spec: &Spec, dp_rank: Option<u32>, dp_world_size: Option<u32>) -> PyResult<Topology> {
    let (world, rank) = match (dp_world_size, dp_rank) {
        (Some(w), Some(r)) => (w, r),
        (None, None) => {
            let env = RankEnv::detect(|k| std::env::var(k).ok()).map_err(|e| PyValueError::new_err(e.to_string()))?;
            if env.launcher.is_none() {
                return Err(PyValueError::new_err(
                    "no dp_rank/dp_world_size given and no launcher variables set (RANK/WORLD_SIZE, \
                     SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/PMI_SIZE, PMIX_RANK/PMIX_SIZE): \
                     pass dp_rank=0, dp_world_size=1 for a single process",
                ));
            }
            (env.world_size, env.rank)
        }
        _ => return Err(PyValueError::new_err("give dp_rank and dp_world_size together")),
    };
    Ok(spec.topology(world, rank).map_err(PyZephonError::from)?)
}

impl Loader {
    /// Builds the run if nothing started it yet: the first build opens and measures the data
    /// (minutes on a large corpus), so it waits interruptibly.
    fn start(&self, py: Python<'_>) -> PyResult<()> {
        let (pipeline, topology) = {
            let inner = self.inner()?;
            if inner.running.is_some() {
                return Ok(());
            }
            (inner.pipeline.clone(), self.topology.clone())
        };
        let built = crate::interruptible(py, move || pipeline.build(topology))?.map_err(PyZephonError::from)?;
        let notices = built.notices().to_vec();
        let mut inner = self.inner()?;
        if inner.running.is_none() {
            inner.running = Some(built);
        }
        drop(inner);
        crate::warn_all(py, &notices)
    }

    fn inner(&self) -> PyResult<MutexGuard<'_, Inner>> {
        if std::process::id() != self.pid {
            return Err(Error::new_err(format!(
                "this Loader was made in process {} and copied into process {} by fork (a DataLoader worker?); \
                 its engine threads do not exist here. Use num_workers=0 (zephon parallelises in Rust) or make the \
                 Loader inside the worker",
                self.pid,
                std::process::id()
            )));
        }
        // A panic inside the lock becomes an error there; the state is still whole.
        Ok(self.inner.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Runs `f` on the inner state with the GIL released.
    fn detached<T: Send>(&self, py: Python<'_>, f: impl FnOnce(&mut Inner, &Topology) -> T + Send) -> PyResult<T> {
        let topology = self.topology.clone();
        let me = &self;
        crate::no_panic(|| py.detach(move || me.inner().map(|mut g| f(&mut g, &topology))))
    }
}

#[pymethods]
impl Loader {
    #[new]
    #[pyo3(signature = (spec, *, dp_rank = None, dp_world_size = None, threads = None, prefetch_steps = None, snapshot_every = 1, base_dir = None, resume_from = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        spec: &Bound<'_, PyAny>,
        dp_rank: Option<u32>,
        dp_world_size: Option<u32>,
        threads: Option<usize>,
        prefetch_steps: Option<u64>,
        snapshot_every: u64,
        base_dir: Option<PathBuf>,
        resume_from: Option<PathBuf>,
    ) -> PyResult<Loader> {
        crate::no_panic(|| {
            let spec = parse_spec(py, spec, base_dir)?;
            let topology = dp_topology(&spec, dp_rank, dp_world_size)?;
            let mut exec = spec.exec();
            if let Some(t) = threads {
                exec.threads = t;
            }
            if let Some(p) = prefetch_steps {
                exec.prefetch_steps = p;
            }
            if snapshot_every == 0 {
                return Err(PyValueError::new_err(
                    "snapshot_every must be at least 1 (steps between checkpointable states)",
                ));
            }
            if threads == Some(0) {
                return Err(PyValueError::new_err("threads must be at least 1"));
            }
            crate::warn_all(py, &spec.warnings())?;
            exec.snapshot_every = snapshot_every;
            let for_build = spec.clone();
            let pipeline =
                crate::interruptible(py, move || for_build.pipeline())?.map_err(PyZephonError::from)?.exec(exec);
            let datasets: Arc<[String]> = spec.datasets.iter().map(|d| d.name.clone()).collect();
            let mut inner = Inner { pipeline, running: None, position: 0 };
            if let Some(dir) = resume_from {
                let root = resolve_checkpoint(&dir, topology.lanes())?;
                let (pipeline, t) = (inner.pipeline.clone(), topology.clone());
                let loader =
                    crate::interruptible(py, move || pipeline.restore(t, &root))?.map_err(PyZephonError::from)?;
                crate::warn_all(py, loader.notices())?;
                inner.position = loader.position().0;
                inner.running = Some(loader);
            }
            let seq_len = spec.pack.as_ref().map(|p| p.seq_len);
            let shares = inner.pipeline.share_schedule().map_err(PyZephonError::from)?;
            Ok(Loader {
                inner: Mutex::new(inner),
                topology,
                datasets,
                seq_len,
                shares,
                pid: std::process::id(),
                threads: exec.threads,
            })
        })
    }

    /// Engine worker threads: by default this process's cores shared among the ranks its
    /// launcher started on the node (`LOCAL_WORLD_SIZE`, Slurm's tasks per node), at least 1.
    #[getter]
    fn threads(&self) -> usize {
        self.threads
    }

    /// L, the run's lane count (fixed for its life).
    #[getter]
    fn lanes(&self) -> u32 {
        self.topology.lanes()
    }

    /// G, the rows of the global step the next iteration delivers (a `[schedule]` may change
    /// it at set steps: `rows_per_step_at`).
    #[getter]
    fn rows_per_step(&self) -> PyResult<u32> {
        Ok(self.topology.rows_at(self.inner()?.position))
    }

    /// This rank's rows of the step the next iteration delivers (G / dp_world_size).
    #[getter]
    fn local_rows(&self) -> PyResult<u32> {
        Ok(self.topology.local_rows_at(self.inner()?.position))
    }

    /// G as a schedule: `(first step, rows per global step)` for each segment, from step 0.
    #[getter]
    fn rows_schedule(&self) -> Vec<(u64, u32)> {
        self.topology.rows_per_step().segments().to_vec()
    }

    /// G(step), the rows of global step `step`: for a learning rate that follows the batch size.
    fn rows_per_step_at(&self, step: u64) -> u32 {
        self.topology.rows_at(step)
    }

    /// This rank's rows of global step `step`.
    fn local_rows_at(&self, step: u64) -> u32 {
        self.topology.local_rows_at(step)
    }

    /// w(step): each dataset's target token share at global step `step` (default: the step the
    /// next iteration delivers), as `{name: share}`; `None` for a mixture by sample weights.
    #[pyo3(signature = (step = None))]
    fn token_shares(&self, step: Option<u64>) -> PyResult<Option<std::collections::BTreeMap<String, f64>>> {
        let step = match step {
            Some(s) => s,
            None => self.inner()?.position,
        };
        Ok(self.shares.as_ref().map(|w| self.datasets.iter().cloned().zip(w.at(step).iter().copied()).collect()))
    }

    /// What the restore reported, one sentence each: a `[schedule]` that changes after the
    /// checkpoint's step. Empty for a run from its beginning.
    #[getter]
    fn notices(&self) -> PyResult<Vec<String>> {
        Ok(self.inner()?.running.as_ref().map_or(Vec::new(), |l| l.notices().to_vec()))
    }

    /// Tokens a row, when the spec packs rows (`[pack] seq_len`); else `None`.
    #[getter]
    fn seq_len(&self) -> Option<usize> {
        self.seq_len
    }

    /// This process's data-parallel rank.
    #[getter]
    fn dp_rank(&self) -> u32 {
        self.topology.rank()
    }

    /// The data-parallel size.
    #[getter]
    fn dp_world_size(&self) -> u32 {
        self.topology.world_size()
    }

    /// The lanes this rank owns.
    #[getter]
    fn owned_lanes(&self) -> Vec<u32> {
        self.topology.owned_lanes().map(|l| l.0).collect()
    }

    /// The dataset names, by index (as provenance and reports name them).
    #[getter]
    fn dataset_names(&self) -> Vec<String> {
        self.datasets.to_vec()
    }

    /// The global step the next iteration delivers.
    #[getter]
    fn position(&self) -> PyResult<u64> {
        Ok(self.inner()?.position)
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Step>> {
        self.next_step(py)
    }

    /// This rank's part of the next global step, or `None` when finite data has ended (the
    /// step still counts: ranks that keep calling stay in step). Waits with the GIL released,
    /// and returns promptly on Ctrl-C.
    fn next_step(&self, py: Python<'_>) -> PyResult<Option<Step>> {
        self.start(py)?;
        loop {
            let ready = self
                .detached(py, |inner, t| -> zephon::Result<bool> { Ok(inner.running(t)?.wait_ready(SIGNAL_SLICE)) })?;
            if ready.map_err(PyZephonError::from)? {
                break;
            }
            py.check_signals()?;
        }
        let got = self.detached(py, |inner, t| -> zephon::Result<_> {
            let step = inner.running(t)?.next_step()?;
            inner.position += 1;
            Ok(step)
        })?;
        Ok(got.map_err(PyZephonError::from)?.map(|s| Step::new(s, self.datasets.clone())))
    }

    /// The state after the last step delivered, for a checkpoint: `{"zephon": {"format",
    /// "step", "lanes", "run"}, "lanes": {"lane_000000": bytes, ...}}` with an entry for each
    /// lane this rank owns. The `zephon` entry is the same on every rank. Before the first
    /// step it is the run's first state (what a checkpoint store loads into).
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let split = self
            .detached(py, |inner, t| match &inner.running {
                Some(l) => l.checkpoint_split(),
                None => inner.pipeline.initial_split(t),
            })?
            .map_err(PyZephonError::from)?;
        state::to_dict(py, &split, self.topology.lanes())
    }

    /// Continues from a `state_dict()` of this run, taken at any dp size dividing the lanes:
    /// the next step is the one after the state's. The dict needs the `zephon` entry and an
    /// entry for each lane this rank owns (others are ignored).
    fn load_state_dict(&self, py: Python<'_>, state_dict: &Bound<'_, PyAny>) -> PyResult<()> {
        let split = state::from_dict(state_dict, &self.topology)?;
        self.detached(py, move |inner, t| -> zephon::Result<()> {
            // The old engine stops before the new one starts.
            inner.running = None;
            let loader = inner.pipeline.clone().restore_split(t.clone(), &split, &|l| state::lane_key(l.0))?;
            inner.position = loader.position().0;
            inner.running = Some(loader);
            Ok(())
        })?
        .map_err(PyZephonError::from)?;
        Ok(())
    }

    /// Writes this rank's lanes after the last delivered step into the folder `dir`, as the
    /// `zephon` command does (one file a rank, atomically); `Loader(..., resume_from=...)`
    /// continues from such folders at any dp size.
    fn checkpoint(&self, py: Python<'_>, dir: PathBuf) -> PyResult<PathBuf> {
        Ok(self
            .detached(py, move |inner, t| -> zephon::Result<PathBuf> { inner.running(t)?.checkpoint(&dir) })?
            .map_err(PyZephonError::from)?)
    }

    /// What this rank's lanes left out so far, per dataset and why (records skipped as bad,
    /// what the end of finite data cut), as a dict.
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let json = self.detached(py, |inner, _| inner.running.as_ref().map(|l| serde_json::to_string(&l.report())))?;
        let json = match json {
            Some(j) => j.map_err(|e| Error::new_err(e.to_string()))?,
            None => "{\"datasets\": []}".to_string(),
        };
        let report = py.import("json")?.call_method1("loads", (json,))?;
        report.set_item("threads", self.threads)?;
        Ok(report)
    }

    /// The plan: datasets, estimates, work source, operators, buffers.
    fn explain(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self
            .detached(py, |inner, t| match &inner.running {
                Some(l) => Ok(l.explain()),
                None => inner.pipeline.explain(t),
            })?
            .map_err(PyZephonError::from)?)
    }

    /// Stops the engine's threads now (iterating again starts from the last state).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.detached(py, |inner, _| {
            inner.running = None;
        })
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _a: &Bound<'_, PyAny>,
        _b: &Bound<'_, PyAny>,
        _c: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "<zephon_rs Loader: rank {} of {}, lanes {:?} of {}, {} rows a step>",
            self.topology.rank(),
            self.topology.world_size(),
            self.topology.owned_range(),
            self.topology.lanes(),
            self.topology.rows_per_step().describe()
        )
    }

    fn __reduce__(&self) -> PyResult<Py<PyAny>> {
        Err(PyTypeError::new_err(
            "a zephon_rs.Loader cannot be pickled: it runs Rust threads. Use it with num_workers=0 (it parallelises \
             in Rust), or build one Loader per process from the spec",
        ))
    }
}

/// The checkpoint folder to resume from under `dir`, as `zephon run --resume-from` picks it.
fn resolve_checkpoint(dir: &Path, lanes: u32) -> PyResult<PathBuf> {
    let found = zephon::lane_core::checkpoint::resolve(dir, lanes).map_err(PyZephonError::from)?;
    Ok(found.dir)
}
