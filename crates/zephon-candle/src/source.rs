//! Where steps come from, and what a checkpoint after each of them holds.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use zephon_core::checkpoint::{self, LaneStreams};
use zephon_core::{Engine, ExecOptions, LaneState, LocalStep, RunFingerprint, RunSpec, Topology};
use zephon_operator::Step;

use crate::error::{BoxError, Error, Result};

/// A rank's stream of local steps that can say, after each step, what a checkpoint after it
/// holds. [`crate::Prefetcher`] runs one on its own thread.
///
/// Implemented for [`EngineSource`]; a loader that wraps an engine implements it by handing
/// out the engine's steps and [`ResumePoint`]s.
pub trait StepSource: Send + 'static {
    /// The next local step, or `None` where the rank's input has ended (which still counts as
    /// a step, as in [`Engine::next_step`]).
    fn next_step(&mut self) -> Result<Option<LocalStep>, BoxError>;

    /// What a checkpoint taken now holds: the lanes' states after the last step delivered.
    /// The prefetcher calls it right after each `next_step`, so it must be cheap (the engine's
    /// costs a few small vectors per lane).
    fn resume_point(&self) -> ResumePoint;
}

/// What a run writes beside the lanes in every checkpoint file: its fingerprint and metadata,
/// and the lanes' sample streams that name buffered samples compactly.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointHeader {
    /// The run's identity, part by part.
    pub fingerprint: RunFingerprint,
    /// Facts saved for restores (dataset shard listings, token estimates).
    pub metadata: zephon_core::RunMetadata,
    /// The run's lane streams; without them, files name every buffered sample in full.
    pub streams: Option<LaneStreams>,
}

/// A rank's checkpoint after some step, held in memory: the lanes' states, a few small
/// vectors each (cursors, accumulator counters, lineage of buffered records), never payloads.
#[derive(Clone, Debug)]
pub struct ResumePoint {
    next_step: Step,
    world_size: u32,
    rank: u32,
    lanes: Option<Vec<LaneState>>,
    header: Arc<CheckpointHeader>,
}

impl ResumePoint {
    /// The state of `topology`'s lanes before `next_step`; `lanes` is `None` where no
    /// snapshot was taken at that step (`ExecOptions::snapshot_every`).
    pub fn new(
        next_step: Step,
        topology: &Topology,
        lanes: Option<Vec<LaneState>>,
        header: Arc<CheckpointHeader>,
    ) -> Self {
        ResumePoint { next_step, world_size: topology.world_size(), rank: topology.rank(), lanes, header }
    }

    /// The first step a restore from this point delivers.
    pub fn next_step(&self) -> Step {
        self.next_step
    }

    /// The lanes' states, if a snapshot was taken at this step.
    pub fn lanes(&self) -> Option<&[LaneState]> {
        self.lanes.as_deref()
    }

    /// Writes this rank's checkpoint file into `dir` (atomically, as `Engine::checkpoint`
    /// does; every rank writes its own file, no coordination).
    pub fn write(&self, dir: &Path) -> Result<PathBuf> {
        let Some(lanes) = &self.lanes else {
            return Err(Error::NoSnapshot {
                dir: dir.to_path_buf(),
                next_step: self.next_step,
                message: "the source took no lane snapshot after this step (see ExecOptions::snapshot_every)".into(),
            });
        };
        Ok(checkpoint::write(
            dir,
            &self.header.fingerprint,
            &self.header.metadata,
            self.next_step.0,
            self.world_size,
            self.rank,
            lanes.clone(),
            self.header.streams.as_ref(),
        )?)
    }
}

/// An [`Engine`] as a [`StepSource`].
pub struct EngineSource {
    engine: Engine,
    header: Arc<CheckpointHeader>,
}

impl EngineSource {
    /// A running engine as a source.
    pub fn new(engine: Engine) -> Self {
        let header = Arc::new(CheckpointHeader {
            fingerprint: engine.fingerprint().clone(),
            metadata: engine.metadata().clone(),
            streams: Some(engine.streams()),
        });
        EngineSource { engine, header }
    }

    /// Starts `spec` from its beginning at `topology`.
    pub fn start(spec: RunSpec, topology: Topology, opts: ExecOptions) -> Result<Self> {
        Ok(EngineSource::new(Engine::start(spec, topology, opts)?))
    }

    /// Continues `spec` from the checkpoint in `dir` at `topology` (any world size dividing
    /// the lanes).
    pub fn restore(spec: RunSpec, topology: Topology, opts: ExecOptions, dir: &Path) -> Result<Self> {
        Ok(EngineSource::new(Engine::restore(spec, topology, opts, dir)?))
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }
}

impl StepSource for EngineSource {
    fn next_step(&mut self) -> Result<Option<LocalStep>, BoxError> {
        Ok(self.engine.next_step()?)
    }

    fn resume_point(&self) -> ResumePoint {
        let lanes = self.engine.lane_states();
        // The engine reports no lanes where it took no snapshot after the step.
        let lanes = (!lanes.is_empty()).then_some(lanes);
        ResumePoint::new(self.engine.position(), self.engine.topology(), lanes, self.header.clone())
    }
}

impl std::fmt::Debug for EngineSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineSource").field("engine", &self.engine).finish_non_exhaustive()
    }
}
