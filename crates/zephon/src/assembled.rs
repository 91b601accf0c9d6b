//! A pipeline with its data opened and its weights planned: what a [`crate::Loader`] runs and
//! what `explain` describes.

use zephon_core::{ExecOptions, PlanNode, RunSpec, Topology};
use zephon_mix::TokenEstimate;

use crate::memory::MemoryBound;

/// A pipeline with its data opened and its weights planned.
pub(crate) struct Assembled {
    pub spec: RunSpec,
    pub estimates: Option<Vec<TokenEstimate>>,
    pub weights: Vec<f64>,
    /// The token shares by step, when the mixture is by token shares.
    pub shares: Option<zephon_core::ShareSchedule>,
    /// The records of the datasets, when the work source reads each once (a validation pass).
    pub records: Option<u64>,
    /// What the run does with the settings as given that a user should know.
    pub notices: Vec<String>,
    /// Per dataset, where its shards were found.
    pub layouts: Vec<zephon_io::Layout>,
    /// How object stores are read, when a dataset is in one.
    pub storage: Option<String>,
}

impl Assembled {
    /// The most one lane of this rank holds (see [`MemoryBound`]).
    pub fn memory(&self, topology: &Topology, exec: &ExecOptions) -> MemoryBound {
        MemoryBound::of(&self.spec.operators, topology, exec, self.spec.source.steering().is_some())
    }

    /// The run as a tree: datasets, work source, topology, operators, execution, policies.
    pub fn plan(&self, topology: &Topology, exec: &ExecOptions) -> PlanNode {
        let sum: f64 = self.weights.iter().sum();
        let manifests = self.spec.datasets.manifests();
        let datasets = manifests.iter().enumerate().map(|(i, m)| {
            let share = self.shares.as_ref().map_or(String::new(), |w| {
                let later: String =
                    w.segments()[1..].iter().map(|(s, sh)| format!(", {:.3} from step {s}", sh[i])).collect();
                format!(", token share {:.3}{later}", w.at(0)[i])
            });
            let node = PlanNode::new(
                format!("[{i}] {}", m.name),
                format!(
                    "{} shard(s), {} rows, {:.1} MB, sample weight {:.4}{share}",
                    m.shards.len(),
                    m.rows(),
                    m.bytes() as f64 / 1e6,
                    self.weights[i] / sum
                ),
            );
            let files = self.layouts.get(i).map(zephon_io::Layout::describe).unwrap_or_default();
            let files = files.into_iter().map(|l| PlanNode::new("files", l));
            let node = node.with_all(files);
            match self.estimates.as_ref().and_then(|e| e.get(i)) {
                Some(e) => node.with(PlanNode::new(
                    "estimate",
                    format!(
                        "{:.1} bytes/row × {:.4} tokens/byte + {} added{} = {:.1} tokens/row ({} rows measured, {} \
                         windows tokenized)",
                        e.bytes_per_row,
                        e.tokens_per_byte,
                        e.added_per_row,
                        e.max_tokens_per_row.map_or(String::new(), |m| format!(", each row cut to at most {m}")),
                        e.tokens_per_row(),
                        e.rows_measured,
                        e.rows_tokenized
                    ),
                )),
                None => node,
            }
        });
        PlanNode::new("run", "")
            .with(PlanNode::new("datasets", "").with_all(datasets))
            .with(PlanNode::new("work source", self.spec.source.describe()))
            .with(PlanNode::new(
                "topology",
                format!(
                    "{} lanes, {}, world size {}, rank {} (lanes {:?})",
                    topology.lanes(),
                    rows_per_step(topology),
                    topology.world_size(),
                    topology.rank(),
                    topology.owned_range()
                ),
            ))
            .with(self.spec.operators.plan())
            .with(PlanNode::new(
                "execution",
                format!(
                    "{} worker threads{}, prefetch {} steps per lane, units of {} samples, snapshots every {} steps",
                    exec.threads,
                    {
                        let d = zephon_core::DefaultThreads::from_env();
                        if d.threads == exec.threads { format!(" ({})", d.describe()) } else { String::new() }
                    },
                    exec.prefetch_steps,
                    exec.unit_samples,
                    exec.snapshot_every
                ),
            ))
            .with(PlanNode::new("memory", self.memory(topology, exec).describe()))
            .with_all(self.storage.clone().map(|s| PlanNode::new("storage", s)))
            .with(PlanNode::new(
                "policies",
                format!(
                    "bad records {}, tail {}, seed {}",
                    self.spec.bad_records.as_str(),
                    self.spec.tail.as_str(),
                    self.spec.seed
                ),
            ))
    }
}

/// G in words: `16 rows per global step (2 per lane)`, or its schedule.
pub(crate) fn rows_per_step(topology: &Topology) -> String {
    let g = topology.rows_per_step();
    if g.is_constant() {
        format!("{} rows per global step ({} per lane)", g.at(0), topology.rows_per_lane_at(0))
    } else {
        let parts: Vec<String> = g
            .segments()
            .iter()
            .map(|&(s, rows)| format!("{rows} ({} per lane) from step {s}", rows / topology.lanes()))
            .collect();
        format!("rows per global step {}", parts.join(", "))
    }
}
