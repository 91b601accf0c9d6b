//! A running pipeline: steps in order, checkpoints, the plan.

use std::path::{Path, PathBuf};

use zephon_core::{Engine, LocalStep, Topology};
use zephon_mix::TokenEstimate;
use zephon_operator::Step;
use zephon_operator::Tally;

use crate::assembled::Assembled;
use crate::error::Result;

/// What a rank's lanes left out, per dataset (see [`Loader::report`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DataReport {
    /// One entry per dataset, in order.
    pub datasets: Vec<DatasetReport>,
    /// Rows of a final partial step the end of finite data left out (`tail = "drop"`).
    pub tail_dropped_rows: u64,
    /// Lanes that still had data when the run ended under `tail = "drop"` (one of this
    /// rank's lanes ran out first); what they held from then on was not delivered.
    pub lanes_cut_off: Vec<u32>,
    /// The most tokens `ensure_mixture` held at once in one of this rank's lanes, as of the
    /// lanes' last snapshot (its cap is in `explain`).
    #[serde(default)]
    pub held_tokens_peak: u64,
    /// Other operators' high-water marks ([`Tally::Peak`]), by name: the largest over this
    /// rank's lanes.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub peaks: std::collections::BTreeMap<String, u64>,
}

/// What was left out of one dataset.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DatasetReport {
    /// The dataset.
    pub name: String,
    /// Records skipped as bad under `bad_records = "skip"`.
    pub skipped: u64,
    /// Why the first skipped record was bad (dataset, shard, row, operator and message).
    pub first_skip: Option<String>,
    /// Tokens `ensure_mixture` let through.
    pub mixed_tokens: u64,
    /// Records `ensure_mixture` dropped because an explicit `hold` cap overflowed: whole
    /// documents, or pieces of documents `tokenize` split (the document then misses that
    /// piece). Without a cap nothing is dropped.
    pub dropped_documents: u64,
    /// Their tokens.
    pub dropped_tokens: u64,
    /// Documents or pieces `ensure_mixture` holds now (at the lanes' last snapshot), waiting
    /// for the other datasets to catch up: not lost, delivered later.
    pub held_pieces: u64,
    /// Their tokens.
    pub held_tokens: u64,
    /// Tokens `ensure_mixture` let through before their dataset's turn because what it held
    /// reached its cap (`max_held_tokens`): nothing lost, the shares ran further off for a
    /// while. 0 unless the data defeats the closed loop.
    #[serde(default)]
    pub released_tokens: u64,
    /// Bytes this rank fetched from the object store the dataset is in (0 on local disk).
    #[serde(default)]
    pub bytes_fetched: u64,
    /// Requests it made there (reads, listings, metadata).
    #[serde(default)]
    pub requests: u64,
    /// Blocks of it found in the node's block cache (fetched earlier, or by another process).
    #[serde(default)]
    pub cache_hits: u64,
    /// Blocks of it fetched into the cache.
    #[serde(default)]
    pub cache_misses: u64,
    /// Of those, blocks fetched ahead of their read, by the schedule.
    #[serde(default)]
    pub prefetched: u64,
    /// Requests to it tried again after a fault (a 5xx or 429 answer, a reset, a body cut
    /// short, a stall); retries never change bytes.
    #[serde(default)]
    pub retries: u64,
    /// Of those, requests cut by the stall timeout (`[storage] stall_timeout_s`).
    #[serde(default)]
    pub stalls: u64,
    /// Tokens of this dataset in rows the end of finite data left out (`tail = "drop"`).
    pub tail_dropped_tokens: u64,
    /// The documents (shard, row) those rows held pieces of: each came in part or not at all.
    pub tail_dropped_documents: Vec<(u32, u64)>,
    /// Pieces of this dataset's documents that lanes cut off at the end of the data held (in
    /// their buffers, rows made ahead and the step not delivered), under `tail = "drop"`.
    pub cut_off_pieces: u64,
    /// Their tokens.
    pub cut_off_tokens: u64,
    /// The documents (shard, row) those pieces belong to, and any a cut-off lane had pushed
    /// only in part: each came in part or not at all, and every one of this dataset's
    /// documents that came in part is listed.
    pub cut_off_documents: Vec<(u32, u64)>,
    /// Conversations `[chat] long_conversations = "split_at_turns"` cut into pieces.
    pub conversations_split: u64,
    /// Conversations `"truncate"` cut short.
    pub conversations_truncated: u64,
    /// The tokens those truncations left out.
    pub truncated_tokens: u64,
    /// Conversations `"skip"` left out.
    pub conversations_skipped: u64,
    /// Other operators' counts ([`Tally::PerDataset`]) by name, over this rank's lanes.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub counts: std::collections::BTreeMap<String, u64>,
}

impl DatasetReport {
    /// Adds `value` to the count `name` (an operator's [`Tally::PerDataset`]).
    fn add(&mut self, name: &str, value: u64) {
        let field = match name {
            "mixed_tokens" => &mut self.mixed_tokens,
            "dropped_documents" => &mut self.dropped_documents,
            "dropped_tokens" => &mut self.dropped_tokens,
            "released_tokens" => &mut self.released_tokens,
            "held_pieces" => &mut self.held_pieces,
            "held_tokens" => &mut self.held_tokens,
            "conversations_split" => &mut self.conversations_split,
            "conversations_truncated" => &mut self.conversations_truncated,
            "truncated_tokens" => &mut self.truncated_tokens,
            "conversations_skipped" => &mut self.conversations_skipped,
            other => self.counts.entry(other.to_string()).or_insert(0),
        };
        *field += value;
    }
}

impl DataReport {
    /// Whether nothing was left out.
    pub fn is_clean(&self) -> bool {
        self.tail_dropped_rows == 0
            && self.lanes_cut_off.is_empty()
            && self.datasets.iter().all(|d| {
                d.skipped == 0
                    && d.dropped_documents == 0
                    && d.conversations_truncated == 0
                    && d.conversations_skipped == 0
            })
    }

    /// One line per dataset that lost something, saying how much and why.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for d in &self.datasets {
            if d.skipped > 0 {
                let why = d.first_skip.as_deref().unwrap_or("?");
                out.push(format!("dataset {}: {} bad records skipped (the first: {why})", d.name, d.skipped));
            }
            if d.conversations_split + d.conversations_truncated + d.conversations_skipped > 0 {
                out.push(format!(
                    "dataset {}: [chat] long_conversations split {} conversations at turn boundaries, truncated {} \
                     ({} tokens left out) and skipped {}",
                    d.name,
                    d.conversations_split,
                    d.conversations_truncated,
                    d.truncated_tokens,
                    d.conversations_skipped
                ));
            }
            if d.dropped_documents > 0 {
                out.push(format!(
                    "dataset {}: ensure_mixture dropped {} documents or pieces of documents split by tokenize \
                     ({} tokens) past its [ensure_mixture] hold cap; a split document then misses a piece. \
                     Without hold (or hold_total) nothing is dropped",
                    d.name, d.dropped_documents, d.dropped_tokens
                ));
            }
        }
        if self.tail_dropped_rows > 0 {
            let per: Vec<String> = self
                .datasets
                .iter()
                .filter(|d| d.tail_dropped_tokens > 0)
                .map(|d| format!("{} {} tokens", d.name, d.tail_dropped_tokens))
                .collect();
            out.push(format!(
                "the end of the data left out {} rows of a final partial step ({}; their documents are listed \
                 in the report as tail_dropped_documents); tail = \"partial\" delivers them",
                self.tail_dropped_rows,
                per.join(", ")
            ));
        }
        if !self.lanes_cut_off.is_empty() {
            let lanes: Vec<String> = self.lanes_cut_off.iter().map(u32::to_string).collect();
            let held: Vec<String> = self
                .datasets
                .iter()
                .filter(|d| d.cut_off_pieces > 0)
                .map(|d| {
                    format!(
                        "{} {} pieces of {} documents, {} tokens",
                        d.name,
                        d.cut_off_pieces,
                        d.cut_off_documents.len(),
                        d.cut_off_tokens
                    )
                })
                .collect();
            out.push(format!(
                "the data ended on one lane while lanes {} still had data, which was not delivered: \
                 what they held ({}) and the input they had not read; the documents listed in the \
                 report (cut_off_documents) came in part or not at all (lanes end apart when the end of the data \
                 is not shared out by row tokens, [source] balance = \"row_tokens\", or when ensure_mixture drops \
                 documents or packing fills rows differently on each lane); tail = \"partial\" delivers it",
                lanes.join(", "),
                if held.is_empty() { "nothing".to_string() } else { held.join("; ") }
            ));
        }
        out
    }
}

/// This rank's view of a running pipeline: local steps in order, each a slice of a global
/// step that is the same at every world size.
pub struct Loader {
    engine: Engine,
    assembled: Assembled,
    exec: zephon_core::ExecOptions,
}

impl Loader {
    pub(crate) fn new(engine: Engine, mut assembled: Assembled, exec: zephon_core::ExecOptions) -> Self {
        assembled.notices.extend(engine.notices().iter().cloned());
        Loader { engine, assembled, exec }
    }

    /// The records of the datasets, when the work source reads each once in order (a
    /// validation pass); `None` for a mixture.
    pub fn records(&self) -> Option<u64> {
        self.assembled.records
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

    /// This rank's lanes after the last delivered step as a split checkpoint: one run part, the
    /// same bytes on every rank, and one part per lane, for a trainer's distributed checkpoint
    /// (`Pipeline::restore_split` continues from it at any world size).
    pub fn checkpoint_split(&self) -> Result<zephon_core::SplitCheckpoint> {
        Ok(self.engine.checkpoint_split()?)
    }

    /// Waits at most `timeout` until `next_step` would return at once; whether it would.
    pub fn wait_ready(&self, timeout: std::time::Duration) -> bool {
        self.engine.wait_ready(timeout)
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

    /// What this rank's lanes left out so far, per dataset and why: records skipped as bad
    /// (under the skip policy) and documents `ensure_mixture` dropped to hold the shares.
    /// The drops are counted as of the lanes' last snapshot (`ExecOptions::snapshot_every`,
    /// `ExecOptions::snapshot_at`): a run that snapshots rarely should set `snapshot_at` to
    /// the step it stops at.
    pub fn report(&self) -> DataReport {
        let names = self.assembled.spec.datasets.names();
        let skips = self.engine.skips();
        let mut datasets: Vec<DatasetReport> = names
            .iter()
            .enumerate()
            .map(|(d, name)| {
                let tally = skips.0.get(&(d as u32));
                DatasetReport {
                    name: name.clone(),
                    skipped: tally.map_or(0, |t| t.count),
                    first_skip: tally.map(|t| t.first.clone()),
                    ..DatasetReport::default()
                }
            })
            .collect();
        for (r, layout) in datasets.iter_mut().zip(&self.assembled.layouts) {
            if let Some(s) = layout.stats() {
                (r.bytes_fetched, r.requests, r.cache_hits, r.cache_misses, r.prefetched, r.retries, r.stalls) =
                    (s.bytes_fetched, s.requests, s.cache_hits, s.cache_misses, s.prefetched, s.retries, s.stalls);
            }
        }
        let lanes = self.engine.lane_states();
        let mut peaks = std::collections::BTreeMap::new();
        let mut tail_dropped_rows = 0;
        for lane in &lanes {
            tail_dropped_rows += lane.tail_dropped.rows;
            for (d, n) in &lane.tail_dropped.positions {
                if let Some(r) = datasets.get_mut(*d as usize) {
                    r.tail_dropped_tokens += n;
                }
            }
            for s in &lane.tail_dropped.documents {
                if let Some(r) = datasets.get_mut(s.dataset as usize) {
                    r.tail_dropped_documents.push((s.shard, s.row));
                }
            }
        }
        // What each operator says of its lanes' states, through the operator interface.
        let mut held_tokens_peak = 0;
        let accumulating: Vec<_> =
            self.assembled.spec.operators.operators().iter().filter(|op| op.kind().accumulates()).collect();
        for lane in &lanes {
            for (op, state) in accumulating.iter().zip(&lane.accumulators) {
                for tally in op.report(state, names.len()) {
                    match tally {
                        Tally::PerDataset { name, values } => {
                            for (r, v) in datasets.iter_mut().zip(values) {
                                r.add(name, v);
                            }
                        }
                        Tally::Peak { name: "held_tokens_peak", value } => {
                            held_tokens_peak = held_tokens_peak.max(value);
                        }
                        Tally::Peak { name, value } => {
                            let peak = peaks.entry(name.to_string()).or_insert(0);
                            *peak = (*peak).max(value);
                        }
                    }
                }
            }
        }
        for (d, held) in self.engine.cut_off_pieces() {
            if let Some(r) = datasets.get_mut(*d as usize) {
                r.cut_off_pieces += held.pieces;
                r.cut_off_tokens += held.tokens;
                r.cut_off_documents.extend(held.documents.iter().map(|s| (s.shard, s.row)));
            }
        }
        let lanes_cut_off = self.engine.lanes_cut_off().iter().map(|l| l.0).collect();
        DataReport { datasets, tail_dropped_rows, lanes_cut_off, held_tokens_peak, peaks }
    }

    /// The lineage of every record this rank's lanes hold after the last delivered step (in
    /// their accumulators, or in rows made ahead of the consumer), as of their last snapshot:
    /// with what was delivered, it accounts for every piece read so far.
    pub fn in_flight(&self) -> Vec<zephon_operator::Lineage> {
        self.engine
            .lane_states()
            .into_iter()
            .flat_map(|l| l.accumulators.into_iter().flat_map(|a| a.buffered).chain(l.pending))
            .collect()
    }

    /// The worker threads this rank runs (by default its cores shared among the ranks of its
    /// node, [`zephon_core::DefaultThreads`]).
    pub fn threads(&self) -> usize {
        self.exec.threads
    }

    /// The most one lane of this rank holds, part by part, as `explain` states it.
    pub fn memory_bound(&self) -> crate::MemoryBound {
        self.assembled.memory(self.engine.topology(), &self.exec)
    }

    /// What each of this rank's lanes holds as of its last snapshot, in positions (tokens):
    /// `(lane, in its accumulators, in rows made and not yet delivered)`. What
    /// [`Loader::memory_bound`] bounds.
    pub fn held_positions(&self) -> Vec<(zephon_operator::Lane, u64, u64)> {
        let positions = |l: &zephon_operator::Lineage| l.fragments().iter().map(|f| u64::from(f.len())).sum::<u64>();
        self.engine
            .lane_states()
            .into_iter()
            .map(|st| {
                let buffered = st.accumulators.iter().flat_map(|a| &a.buffered).map(positions).sum();
                (st.lane, buffered, st.pending.iter().map(positions).sum())
            })
            .collect()
    }

    /// The token estimates the mixture was planned with (measured, or from the checkpoint).
    pub fn token_estimates(&self) -> Option<&[TokenEstimate]> {
        self.assembled.estimates.as_deref()
    }

    /// CPU time so far per part of the pipeline (reading, each operator, digests,
    /// snapshots), summed over this rank's threads: which part limits the run.
    pub fn timings(&self) -> Vec<zephon_core::StageTime> {
        self.engine.timings()
    }

    /// w(step): the datasets' target token shares (summing to 1) in force at global step
    /// `step`, when the mixture was given shares; a schedule changes them at set steps.
    pub fn token_shares(&self, step: u64) -> Option<Vec<f64>> {
        Some(self.assembled.shares.as_ref()?.at(step).to_vec())
    }

    /// The token shares by step, when the mixture was given shares.
    pub fn share_schedule(&self) -> Option<&zephon_core::ShareSchedule> {
        self.assembled.shares.as_ref()
    }

    /// G(step): the rows of global step `step` (the run's schedule, constant unless it ramps
    /// its batch), for a trainer whose learning rate follows the batch size.
    pub fn rows_per_step(&self, step: u64) -> u32 {
        self.engine.topology().rows_at(step)
    }

    /// What the run does with its settings as given that a user should know: token shares
    /// used relative to a sum that is not exactly 1, and, after a restore, a step schedule
    /// that changes after the checkpoint's step (also said on stderr).
    pub fn notices(&self) -> &[String] {
        &self.assembled.notices
    }

    /// Dataset names, by index (as `SampleId::dataset` numbers them).
    pub fn dataset_names(&self) -> Vec<String> {
        self.assembled.spec.datasets.names()
    }

    /// Shard names of dataset `d` (their paths relative to the dataset's root), by shard
    /// index: the order the dataset is read in.
    pub fn shard_names(&self, d: usize) -> Vec<String> {
        let manifests = self.assembled.spec.datasets.manifests();
        manifests.get(d).map_or(Vec::new(), |m| m.shards.iter().map(|s| s.name().to_string()).collect())
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
        self.assembled.plan(self.engine.topology(), &self.exec).indent()
    }

    /// The run's fingerprint, part by part.
    pub fn fingerprint(&self) -> &zephon_core::RunFingerprint {
        self.engine.fingerprint()
    }

    /// The running engine as a step source for the candle sink's
    /// [`Prefetcher`](zephon_candle::Prefetcher), which builds tensors of the next steps in the
    /// background and checkpoints exactly after the last step the trainer took.
    #[cfg(feature = "candle")]
    pub fn into_source(self) -> zephon_candle::EngineSource {
        zephon_candle::EngineSource::new(self.engine)
    }
}

impl Iterator for Loader {
    type Item = Result<LocalStep>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_step().transpose()
    }
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader").field("engine", &self.engine).field("exec", &self.exec).finish_non_exhaustive()
    }
}
