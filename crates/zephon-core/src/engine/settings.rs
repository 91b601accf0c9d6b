//! What a run computes (everything fingerprinted) and how it executes (nothing that changes
//! a byte).

use std::sync::Arc;

use crate::checkpoint::{self, DatasetPrint, OperatorPrint, RunFingerprint};
use crate::error::{Error, Result};
use crate::plan::Operators;
use crate::source::{Datasets, WorkSource};
use crate::topology::Topology;

pub use crate::policy::{BadRecords, Tail};

/// What the run computes: everything here is part of the checkpoint fingerprint.
#[derive(Clone)]
pub struct RunSpec {
    /// The operators.
    pub operators: Operators,
    /// Which samples each lane processes.
    pub source: Arc<dyn WorkSource>,
    /// Where samples are read from.
    pub datasets: Datasets,
    /// The seed accumulators derive their randomness from.
    pub seed: u64,
    /// The bad-record policy.
    pub bad_records: BadRecords,
    /// The end-of-input policy.
    pub tail: Tail,
    /// The token estimates the run planned with (empty when it planned none): saved in every
    /// checkpoint ([`checkpoint::RunMetadata`]) and read back with [`checkpoint::metadata`]
    /// before building the restored run, so that it plans with the same numbers. Their effect
    /// on the data is covered by the other parts' fingerprints.
    pub token_estimates: Vec<crate::TokenEstimate>,
}

impl RunSpec {
    /// The run's identity, part by part, for the given lane layout.
    pub fn fingerprint(&self, topology: &Topology) -> RunFingerprint {
        RunFingerprint {
            format: checkpoint::FORMAT_VERSION,
            row_encoding: zephon_operator::ENCODING_VERSION,
            settings_encoding: zephon_operator::SETTINGS_VERSION,
            operators: self
                .operators
                .operators()
                .iter()
                .map(|op| {
                    let settings = op.fingerprint();
                    OperatorPrint {
                        name: op.name().to_string(),
                        kind: op.kind().as_str().to_string(),
                        settings: settings.to_text(),
                        digest: settings.digest(),
                    }
                })
                .collect(),
            work_source: self.source.fingerprint().digest(),
            datasets: self
                .datasets
                .manifests()
                .iter()
                .map(|m| DatasetPrint { name: m.name.clone(), digest: m.fingerprint() })
                .collect(),
            lanes: topology.lanes(),
            rows_per_step: topology.rows_per_step().clone(),
            shares: self.source.steering().map(|s| s.shares().clone()),
            seed: self.seed,
            bad_records: self.bad_records,
            tail: self.tail,
        }
    }

    /// What a checkpoint keeps beside the fingerprint: the token estimates, and every
    /// dataset's shard listing, so that a changed dataset names the shard.
    pub fn metadata(&self) -> checkpoint::RunMetadata {
        checkpoint::RunMetadata {
            shard_listings: self.datasets.manifests().iter().map(|m| (m.name.clone(), m.shard_listing())).collect(),
            token_estimates: self.token_estimates.clone(),
        }
    }
}

/// How the run executes: none of this changes a byte of the output.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ExecOptions {
    /// Worker threads.
    pub threads: usize,
    /// Steps each lane may prepare ahead of the consumer.
    pub prefetch_steps: u64,
    /// Samples per unit of work, at most: beyond 128 lanes a lane's units hold fewer (one
    /// unit of each lane together about 128 × `unit_samples`), since a lane that pauses
    /// inside a unit keeps the rest of it in memory.
    pub unit_samples: usize,
    /// Take lane snapshots (for checkpoints) every this many steps.
    pub snapshot_every: u64,
    /// A position (steps delivered) at which lanes snapshot too, whatever `snapshot_every`:
    /// where a run that knows its length stops, so that what it reports there (documents
    /// `ensure_mixture` dropped, for one) is as of its last step, not of an earlier snapshot.
    pub snapshot_at: Option<u64>,
    /// Workers digest each lane step as they make it (the default), in parallel. Off, a lane
    /// step's digest is computed where it is first asked for ([`crate::LaneStep::digest`],
    /// [`crate::LocalStep::local_fingerprint`]), on the asking thread: a consumer that never
    /// asks (most training loops, `zephon run` without `--hash-log`) saves the hashing of
    /// every byte it trains on (~8 % of the CPU of a GPT-2 text pipeline). Either way the
    /// digests are the same.
    pub digests_by_workers: bool,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            threads: DefaultThreads::from_env().threads,
            prefetch_steps: 2,
            unit_samples: 16,
            snapshot_every: 1,
            snapshot_at: None,
            digests_by_workers: true,
        }
    }
}

/// The worker threads a process takes when none are asked for: its cores shared among the
/// ranks a launcher started on the node, at least one. Eight ranks of a node that each took
/// every core would run eight times as many threads as cores, beside the trainer's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefaultThreads {
    /// The threads.
    pub threads: usize,
    /// The cores this process may run on.
    pub cores: usize,
    /// The launcher variable that gave the ranks of this node, and their number.
    pub local_ranks: Option<(&'static str, usize)>,
}

impl DefaultThreads {
    /// Variables launchers set to the number of ranks on this node, in the order read.
    pub const LOCAL_RANK_VARS: [&'static str; 4] =
        ["LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"];

    /// From the cores of this process and the launcher's variables.
    pub fn from_env() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        DefaultThreads::of(cores, |k| std::env::var(k).ok())
    }

    /// From `cores` and the variables `var` reads.
    pub fn of(cores: usize, var: impl Fn(&str) -> Option<String>) -> Self {
        let local_ranks = Self::LOCAL_RANK_VARS
            .iter()
            .find_map(|&k| var(k).and_then(|v| v.trim().parse::<usize>().ok()).filter(|&n| n > 0).map(|n| (k, n)));
        let threads = (cores / local_ranks.map_or(1, |(_, n)| n)).max(1);
        DefaultThreads { threads, cores, local_ranks }
    }

    /// In words: `16 cores / LOCAL_WORLD_SIZE 8`.
    pub fn describe(&self) -> String {
        match self.local_ranks {
            Some((k, n)) => format!("{} cores / {k} {n}", self.cores),
            None => format!("{} cores", self.cores),
        }
    }
}

impl ExecOptions {
    /// Units in flight for all lanes together.
    pub(crate) fn total_window(&self) -> usize {
        4 * self.threads
    }

    /// Units in flight for one of `lanes` lanes (the lanes of this rank).
    pub(crate) fn lane_window(&self, lanes: usize) -> usize {
        self.total_window().div_ceil(lanes.max(1)).max(2)
    }

    /// The most samples in one unit of one of `lanes` lanes. Units shrink when lanes are many
    /// (beyond 128): a lane that pauses inside a unit keeps the rest of it tokenized until the
    /// consumer catches up, one unit per lane. At L = 1024 (one row a lane a step) 16-sample
    /// units hold ~15 MiB more at the first batches than 2-sample ones, and 8 do not slow
    /// L = 256 (`benches/lanes.sh`). Units only divide work: the data is the same at any size.
    pub fn unit_cap(&self, lanes: usize) -> usize {
        (128 * self.unit_samples / lanes.max(1)).clamp(1, self.unit_samples)
    }

    /// The most inputs (documents) a steered lane of `lanes` (the lanes of this rank) reads
    /// ahead of its closed loop, beyond one a dataset it waits for: as many as its units in
    /// flight hold.
    pub fn read_ahead(&self, lanes: usize) -> usize {
        self.lane_window(lanes) * self.unit_cap(lanes)
    }

    pub(crate) fn check(&self) -> Result<()> {
        let bad = |m: &str| Err(Error::Config(m.to_string()));
        if self.threads == 0 {
            return bad("threads must be at least 1");
        }
        if self.prefetch_steps == 0 {
            return bad("prefetch_steps must be at least 1");
        }
        if self.unit_samples == 0 {
            return bad("unit_samples must be at least 1");
        }
        if self.snapshot_every == 0 {
            return bad("snapshot_every must be at least 1");
        }
        Ok(())
    }
}

impl std::fmt::Debug for RunSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunSpec")
            .field("operators", &self.operators)
            .field("source", &self.source.describe())
            .field("datasets", &self.datasets)
            .field("seed", &self.seed)
            .field("bad_records", &self.bad_records)
            .field("tail", &self.tail)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_threads_share_the_cores_among_the_ranks_of_the_node() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        assert_eq!(DefaultThreads::of(16, env(&[])).threads, 16);
        let torchrun = DefaultThreads::of(16, env(&[("LOCAL_WORLD_SIZE", "8")]));
        assert_eq!((torchrun.threads, torchrun.describe().as_str()), (2, "16 cores / LOCAL_WORLD_SIZE 8"));
        assert_eq!(DefaultThreads::of(4, env(&[("SLURM_NTASKS_PER_NODE", "8")])).threads, 1, "at least one");
        assert_eq!(DefaultThreads::of(16, env(&[("OMPI_COMM_WORLD_LOCAL_SIZE", "4")])).threads, 4);
        assert_eq!(DefaultThreads::of(16, env(&[("LOCAL_WORLD_SIZE", "zero")])).threads, 16, "not a number");
    }
}
