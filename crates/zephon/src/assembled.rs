//! A pipeline with its data opened and its weights planned: what a [`crate::Loader`] runs and
//! what `explain` describes.

use std::fmt::Write as _;

use zephon_core::{ExecOptions, RunSpec, Topology};
use zephon_mix::TokenEstimate;

/// A pipeline with its data opened and its weights planned.
pub(crate) struct Assembled {
    pub spec: RunSpec,
    pub estimates: Option<Vec<TokenEstimate>>,
    pub weights: Vec<f64>,
    pub shares: Option<Vec<f64>>,
    /// Which accumulator stage is `ensure_mixture`, to report what it dropped.
    pub ensure_stage: Option<usize>,
}

impl Assembled {
    pub fn describe(&self, topology: &Topology, exec: &ExecOptions) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "datasets:");
        let sum: f64 = self.weights.iter().sum();
        for (i, m) in self.spec.datasets.manifests().iter().enumerate() {
            let _ = writeln!(
                s,
                "  [{i}] {:<12} {} shard(s), {} rows, {:.1} MB, sample weight {:.4}{}",
                m.name,
                m.shards.len(),
                m.rows(),
                m.bytes() as f64 / 1e6,
                self.weights[i] / sum,
                self.shares
                    .as_ref()
                    .map_or(String::new(), |sh| format!(", token share {:.3}", sh[i] / sh.iter().sum::<f64>()))
            );
            if let Some(e) = self.estimates.as_ref().and_then(|e| e.get(i)) {
                let _ = writeln!(
                    s,
                    "       estimate: {:.1} bytes/row × {:.4} tokens/byte + {} added{} = {:.1} tokens/row ({} rows measured, {} windows tokenized)",
                    e.bytes_per_row,
                    e.tokens_per_byte,
                    e.added_per_row,
                    e.max_tokens_per_row.map_or(String::new(), |m| format!(", each row cut to at most {m}")),
                    e.tokens_per_row(),
                    e.rows_measured,
                    e.rows_tokenized
                );
            }
        }
        let _ = writeln!(s, "work source: {}", self.spec.source.describe());
        let _ = writeln!(
            s,
            "topology: {} lanes, {} rows per global step ({} per lane), world size {}, rank {} (lanes {:?})",
            topology.lanes(),
            topology.rows_per_step(),
            topology.rows_per_lane(),
            topology.world_size(),
            topology.rank(),
            topology.owned_range()
        );
        let _ = writeln!(s, "operators:");
        s.push_str(&self.spec.operators.explain());
        let _ = writeln!(
            s,
            "execution: {} worker threads, prefetch {} steps per lane, units of {} samples, snapshots every {} steps",
            exec.threads, exec.prefetch_steps, exec.unit_samples, exec.snapshot_every
        );
        let _ = writeln!(
            s,
            "policies: bad records {:?}, tail {:?}, seed {}",
            self.spec.bad_records, self.spec.tail, self.spec.seed
        );
        s
    }
}
