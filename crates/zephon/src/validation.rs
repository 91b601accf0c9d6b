//! A validation pass: every record of the held-out datasets exactly once, in a fixed order,
//! one record a row, the same steps at every world size, and the same number of steps on
//! every rank, the last ones padded.

use std::path::{Path, PathBuf};

use zephon_core::{LocalStep, Topology};
use zephon_operator::Record;

use crate::error::{Error, Result};
use crate::loader::{DataReport, Loader};
use crate::pipeline::Pipeline;

/// A pipeline to run as a validation pass (see [`Pipeline::validation`]): its datasets read
/// once, in order, one record a row (a one-per-row packer; the record is truncated to the row).
///
/// Row `i` of the datasets' order goes to lane `i mod L`, so a lane's rows, and their number,
/// depend on the lane count alone. The pass has `ceil(ceil(N / L) / R)` steps for N records
/// and R rows a lane a step, on every rank: a lane whose records ran out fills its part of a
/// step with padding rows (`loss_mask` 0, labels `ignore_index`, no lineage), and every rank
/// returns `None` after the same step. No rank waits for another, and none needs to know
/// another's progress.
#[derive(Clone, Debug)]
pub struct Validation {
    pipeline: Pipeline,
    pad: Record,
}

impl Validation {
    pub(crate) fn new(pipeline: Pipeline, pad: Record) -> Self {
        Validation { pipeline, pad }
    }

    /// Starts this rank's part of the pass from its beginning.
    pub fn build(self, topology: Topology) -> Result<ValidationLoader> {
        let loader = self.pipeline.clone().build(topology)?;
        ValidationLoader::new(loader, self.pad)
    }

    /// Continues the pass from a checkpoint taken by [`ValidationLoader::checkpoint`], at any
    /// world size dividing the lanes.
    pub fn restore(self, topology: Topology, dir: &Path) -> Result<ValidationLoader> {
        let loader = self.pipeline.clone().restore(topology, dir)?;
        ValidationLoader::new(loader, self.pad)
    }

    /// The plan, as `explain` prints it.
    pub fn explain(&self, topology: &Topology) -> Result<String> {
        self.pipeline.explain(topology)
    }
}

/// This rank's part of a validation pass (see [`Validation`]).
#[derive(Debug)]
pub struct ValidationLoader {
    loader: Loader,
    pad: Record,
    /// Steps of the whole pass, the same on every rank.
    steps: u64,
    /// The step the next call delivers.
    position: u64,
    /// Whether this rank's data has ended (every step from here is padding).
    ended: bool,
    /// Padding rows delivered.
    padding_rows: u64,
}

impl ValidationLoader {
    fn new(loader: Loader, pad: Record) -> Result<Self> {
        let records = loader.records().ok_or_else(|| {
            Error::Build("a validation pass reads every record once; this pipeline's work source does not".into())
        })?;
        let t = loader.topology();
        let per_lane = records.div_ceil(u64::from(t.lanes()));
        let rows = u64::from(t.rows_per_lane_at(0));
        if !t.rows_per_step().is_constant() {
            return Err(Error::Build("a validation pass has one number of rows per step, not a schedule".into()));
        }
        let position = loader.position().0;
        Ok(ValidationLoader { steps: per_lane.div_ceil(rows), position, pad, ended: false, padding_rows: 0, loader })
    }

    /// This rank's part of the next step, its lanes filled up with padding rows where their
    /// records ran out, or `None` once the pass is over (at the same step on every rank).
    pub fn next_step(&mut self) -> Result<Option<LocalStep>> {
        if self.position >= self.steps {
            if !self.ended && self.loader.next_step()?.is_some() {
                return Err(Error::Build(
                    "the validation pipeline made more rows than it has records: each record must make one row".into(),
                ));
            }
            self.ended = true;
            return Ok(None);
        }
        let rows = self.loader.topology().rows_per_lane_at(0) as usize;
        let next = if self.ended { None } else { self.loader.next_step()? };
        let step = match next {
            Some(s) => {
                let before = s.len();
                let s = s.padded(rows, &self.pad);
                self.padding_rows += (s.len() - before) as u64;
                s
            }
            None => {
                self.ended = true;
                let s =
                    LocalStep::padding(zephon_operator::Step(self.position), self.loader.topology(), rows, &self.pad);
                self.padding_rows += s.len() as u64;
                s
            }
        };
        self.position += 1;
        Ok(Some(step))
    }

    /// Steps of the whole pass (the same on every rank).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The records of the pass (every record of its datasets once).
    pub fn records(&self) -> u64 {
        self.loader.records().unwrap_or(0)
    }

    /// Shard names of dataset `d`, in the order they are read (see [`Loader::shard_names`]).
    pub fn shard_names(&self, d: usize) -> Vec<String> {
        self.loader.shard_names(d)
    }

    /// The step the next call delivers.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Padding rows this rank has delivered so far.
    pub fn padding_rows(&self) -> u64 {
        self.padding_rows
    }

    /// What this rank's lanes left out (bad records skipped, conversations truncated or
    /// skipped), as for a training run.
    pub fn report(&self) -> DataReport {
        self.loader.report()
    }

    /// Writes this rank's lanes into `dir`, to continue the pass at any world size. Refused
    /// once this rank's records have run out (only padding is left; finishing the pass costs
    /// nothing).
    pub fn checkpoint(&self, dir: &Path) -> Result<PathBuf> {
        if self.ended {
            return Err(Error::Build(format!(
                "this rank's records have all been delivered (step {} of {}); only padding steps are left: finish \
                 the pass instead of checkpointing it",
                self.position, self.steps
            )));
        }
        self.loader.checkpoint(dir)
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        self.loader.topology()
    }
}
