//! A running pipeline: steps in order, checkpoints, the plan.

use std::path::{Path, PathBuf};

use zephon_core::{Engine, LocalStep, Step, Topology};
use zephon_mix::TokenEstimate;

use crate::assembled::Assembled;
use crate::error::Result;

/// This rank's view of a running pipeline: local steps in order, each a slice of a global
/// step that is the same at every world size.
pub struct Loader {
    engine: Engine,
    assembled: Assembled,
    exec: zephon_core::ExecOptions,
}

impl Loader {
    pub(crate) fn new(engine: Engine, assembled: Assembled, exec: zephon_core::ExecOptions) -> Self {
        Loader { engine, assembled, exec }
    }

    /// This rank's part of the next global step, or `None` when finite data has ended.
    pub fn next_step(&mut self) -> Result<Option<LocalStep>> {
        Ok(self.engine.next_step()?)
    }

    /// Writes this rank's lanes after the last delivered step into `dir` (one file, written
    /// atomically; every rank writes its own, no coordination).
    pub fn checkpoint(&self, dir: &Path) -> Result<PathBuf> {
        Ok(self.engine.checkpoint(dir)?)
    }

    /// The next step to be delivered.
    pub fn position(&self) -> Step {
        self.engine.position()
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        self.engine.topology()
    }

    /// Records skipped under the skip policy so far on this rank.
    pub fn skipped(&self) -> u64 {
        self.engine.skipped()
    }

    /// The token estimates the mixture was planned with (measured, or from the checkpoint).
    pub fn token_estimates(&self) -> Option<&[TokenEstimate]> {
        self.assembled.estimates.as_deref()
    }

    /// Dataset names, by index (as `SampleId::dataset` numbers them).
    pub fn dataset_names(&self) -> Vec<String> {
        self.assembled.spec.datasets.names()
    }

    /// Shard paths of dataset `d`, by shard index.
    pub fn shard_paths(&self, d: usize) -> Vec<String> {
        self.assembled
            .spec
            .datasets
            .manifests()
            .get(d)
            .map_or(Vec::new(), |m| m.shards.iter().map(|s| s.path.clone()).collect())
    }

    /// The plan as text.
    pub fn explain(&self) -> String {
        self.assembled.describe(self.engine.topology(), &self.exec)
    }

    /// The run's fingerprint, part by part.
    pub fn fingerprint(&self) -> &zephon_core::RunFingerprint {
        self.engine.fingerprint()
    }
}

impl Iterator for Loader {
    type Item = Result<LocalStep>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_step().transpose()
    }
}
