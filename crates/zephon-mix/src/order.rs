//! The order of one dataset's rows in each pass: pure functions of (seed, dataset, pass).

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use zephon_core::DatasetManifest;
use zephon_operator::{Permutation, RngKey, SampleId};

/// How rows are ordered within a pass over a dataset.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum RowOrder {
    /// Rows in stored order.
    Sequential,
    /// Each shard's rows in a random order.
    Shuffled,
    /// Each shard cut into blocks of `size` rows; blocks in a random order, rows within a
    /// block in stored order. Keeps reads within few Parquet row groups.
    Blocks {
        /// Rows per block (match the Parquet row-group size for the best locality).
        size: u64,
    },
    /// One permutation over all rows of the dataset, ignoring shards.
    Global,
}

/// How a dataset is ordered in each pass.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    /// Visit shards in a random order (each pass anew). Ignored by [`RowOrder::Global`].
    pub shuffle_shards: bool,
    /// The order of rows.
    pub rows: RowOrder,
}

impl Default for Order {
    fn default() -> Self {
        Order { shuffle_shards: true, rows: RowOrder::Shuffled }
    }
}

/// Shards in one pass's order, as (first position, shard) pairs.
type Layout = Arc<Vec<(u64, u32)>>;

/// Maps (pass, index within the pass) to a sample of one dataset.
pub(crate) struct DatasetOrder {
    dataset: u32,
    shard_rows: Vec<u64>,
    /// Row prefix sums in stored shard order.
    prefix: Vec<u64>,
    rows: u64,
    order: Order,
    key: RngKey,
    /// The shard layout of recent passes (shard permutation prefix sums), by pass.
    layouts: Mutex<Vec<(u64, Layout)>>,
}

impl DatasetOrder {
    pub fn new(dataset: u32, manifest: &DatasetManifest, order: Order, seed: u64) -> Self {
        let shard_rows: Vec<u64> = manifest.shards.iter().map(|s| s.rows).collect();
        let mut prefix = vec![0u64];
        for r in &shard_rows {
            prefix.push(prefix.last().copied().unwrap_or(0) + r);
        }
        let rows = prefix.last().copied().unwrap_or(0);
        DatasetOrder {
            dataset,
            shard_rows,
            prefix,
            rows,
            order,
            key: RngKey::new(seed, "dataset-order").with(dataset as u64),
            layouts: Mutex::new(Vec::new()),
        }
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The index of `sample`'s row among all the dataset's rows in stored order.
    pub fn stored_row(&self, sample: &SampleId) -> u64 {
        self.prefix.get(sample.shard as usize).copied().unwrap_or(0) + sample.row
    }

    /// Shards in this pass's order, as (first position, shard) pairs.
    fn layout(&self, pass: u64) -> Layout {
        let mut cache = self.layouts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, l)) = cache.iter().find(|(p, _)| *p == pass) {
            return l.clone();
        }
        let n = self.shard_rows.len() as u64;
        let perm = Permutation::new(n, self.key.with(pass).with(0x5a));
        let mut pos = 0;
        let mut layout = Vec::with_capacity(n as usize);
        for j in 0..n {
            let s = if self.order.shuffle_shards { perm.apply(j) } else { j } as u32;
            layout.push((pos, s));
            pos += self.shard_rows[s as usize];
        }
        let layout = Arc::new(layout);
        if cache.len() >= 4 {
            cache.remove(0);
        }
        cache.push((pass, layout.clone()));
        layout
    }

    /// The sample at position `i` (< rows) of pass `pass`.
    pub fn sample(&self, pass: u64, i: u64) -> SampleId {
        let pass_key = self.key.with(pass);
        if let RowOrder::Global = self.order.rows {
            let j = Permutation::new(self.rows, pass_key).apply(i);
            let s = self.prefix.partition_point(|&p| p <= j) - 1;
            return SampleId::new(self.dataset, s as u32, j - self.prefix[s]);
        }
        let layout = self.layout(pass);
        let slot = layout.partition_point(|&(start, _)| start <= i) - 1;
        let (start, shard) = layout[slot];
        let r = i - start;
        let n = self.shard_rows[shard as usize];
        let shard_key = pass_key.with(1 + shard as u64);
        let row = match self.order.rows {
            RowOrder::Sequential | RowOrder::Global => r,
            RowOrder::Shuffled => Permutation::new(n, shard_key).apply(r),
            RowOrder::Blocks { size } => {
                let size = size.max(1);
                let full = n / size;
                if r < full * size { Permutation::new(full, shard_key).apply(r / size) * size + r % size } else { r }
            }
        };
        SampleId::new(self.dataset, shard, row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zephon_core::ShardManifest;

    fn manifest(rows: &[u64]) -> DatasetManifest {
        DatasetManifest {
            name: "t".into(),
            shards: rows
                .iter()
                .enumerate()
                .map(|(i, &r)| ShardManifest {
                    path: format!("s{i}"),
                    name: String::new(),
                    rows: r,
                    bytes: r,
                    version: String::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn every_order_is_a_permutation_of_all_rows() {
        let m = manifest(&[10, 0, 37, 5, 64]);
        for rows in [RowOrder::Sequential, RowOrder::Shuffled, RowOrder::Blocks { size: 8 }, RowOrder::Global] {
            for shuffle_shards in [false, true] {
                let o = DatasetOrder::new(3, &m, Order { shuffle_shards, rows }, 9);
                for pass in 0..3 {
                    let mut seen: Vec<SampleId> = (0..o.rows()).map(|i| o.sample(pass, i)).collect();
                    seen.sort();
                    seen.dedup();
                    assert_eq!(seen.len() as u64, o.rows(), "{rows:?} shuffle_shards={shuffle_shards}");
                    assert!(seen.iter().all(|s| s.dataset == 3 && s.row < m.shards[s.shard as usize].rows));
                }
            }
        }
    }

    #[test]
    fn passes_are_reshuffled_and_blocks_stay_contiguous() {
        let m = manifest(&[1000]);
        let o = DatasetOrder::new(0, &m, Order { shuffle_shards: false, rows: RowOrder::Shuffled }, 1);
        let a: Vec<_> = (0..1000).map(|i| o.sample(0, i)).collect();
        let b: Vec<_> = (0..1000).map(|i| o.sample(1, i)).collect();
        assert_ne!(a, b);
        let o = DatasetOrder::new(0, &m, Order { shuffle_shards: false, rows: RowOrder::Blocks { size: 100 } }, 1);
        for blk in 0..10 {
            let first = o.sample(0, blk * 100).row;
            assert_eq!(first % 100, 0);
            for k in 0..100 {
                assert_eq!(o.sample(0, blk * 100 + k).row, first + k);
            }
        }
    }
}
