//! Every row of every dataset once, in order: the work source of a validation pass.

use zephon_core::{Chunk, DatasetManifest, RowIndex, WorkSource};
use zephon_operator::{Lane, SampleId, Settings};

/// Every row of the datasets exactly once, in a fixed order (datasets, then shards, then rows,
/// as listed), dealt to the lanes in turn: row `i` of that order is row `i / L` of lane
/// `i mod L`. A global step of `R` rows a lane therefore holds rows that follow each other
/// in that order, lane by lane, and the rows each lane gets, and how many, depend on the lane
/// count alone: the same at every world size.
///
/// A lane's `n`-th chunk is its rows `n·C .. (n+1)·C` (C = `chunk_size`), computed directly.
#[derive(Clone, Debug)]
pub struct OnceInOrder {
    rows: RowIndex,
    chunk_size: u64,
}

impl OnceInOrder {
    /// All rows of `manifests` once, `chunk_size` rows a chunk.
    pub fn new(manifests: &[DatasetManifest], chunk_size: u32) -> Self {
        OnceInOrder { rows: RowIndex::new(manifests), chunk_size: u64::from(chunk_size.max(1)) }
    }

    /// The rows of all datasets.
    pub fn rows(&self) -> u64 {
        self.rows.len()
    }

    /// The rows lane `lane` of `lanes` gets: the most any lane gets is `ceil(rows / lanes)`.
    pub fn lane_rows(&self, lane: Lane, lanes: u32) -> u64 {
        let (l, n, total) = (u64::from(lane.0), u64::from(lanes.max(1)), self.rows.len());
        if total > l { (total - l).div_ceil(n) } else { 0 }
    }
}

impl WorkSource for OnceInOrder {
    fn chunk(&self, lane: Lane, lanes: u32, n: u64) -> zephon_core::Result<Option<Chunk>> {
        let own = self.lane_rows(lane, lanes);
        let start = n.saturating_mul(self.chunk_size);
        if start >= own {
            return Ok(None);
        }
        let end = (start + self.chunk_size).min(own);
        let at = |k: u64| k * u64::from(lanes) + u64::from(lane.0);
        let samples: Option<Vec<SampleId>> = (start..end).map(|k| self.rows.sample_at(at(k))).collect();
        let samples = samples.ok_or_else(|| zephon_core::Error::Source {
            lane,
            message: format!("row {} of {} is past the data", at(end - 1), self.rows.len()),
        })?;
        Ok(Some(Chunk { index: n * u64::from(lanes) + u64::from(lane.0), samples }))
    }

    fn fingerprint(&self) -> Settings {
        Settings::new("once_in_order", 1).set("shards", self.rows.settings()).set("chunk_size", self.chunk_size)
    }

    fn describe(&self) -> String {
        format!(
            "every row once, in order ({} rows), row i to lane i mod L, chunks of {} rows a lane",
            self.rows.len(),
            self.chunk_size
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zephon_core::ShardManifest;

    fn ds(name: &str, shards: &[u64]) -> DatasetManifest {
        DatasetManifest {
            name: name.into(),
            shards: shards
                .iter()
                .enumerate()
                .map(|(i, &rows)| ShardManifest {
                    path: format!("{name}{i}"),
                    name: String::new(),
                    rows,
                    bytes: rows,
                    version: "v".into(),
                })
                .collect(),
        }
    }

    #[test]
    fn every_row_once_in_order_dealt_in_turn() {
        let s = OnceInOrder::new(&[ds("a", &[3, 0, 2]), ds("b", &[4])], 2);
        assert_eq!(s.rows(), 9);
        for lanes in [1u32, 2, 3, 4, 16] {
            let mut seen = Vec::new();
            for l in 0..lanes {
                let mut n = 0;
                let mut lane_rows = 0;
                while let Some(c) = s.chunk(Lane(l), lanes, n).unwrap() {
                    for (k, id) in c.samples.iter().enumerate() {
                        seen.push(((n * 2 + k as u64) * u64::from(lanes) + u64::from(l), *id));
                    }
                    lane_rows += c.samples.len() as u64;
                    n += 1;
                }
                assert_eq!(lane_rows, s.lane_rows(Lane(l), lanes));
            }
            seen.sort();
            let ids: Vec<SampleId> = seen.iter().map(|(_, id)| *id).collect();
            let want =
                [(0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 2, 0), (0, 2, 1), (1, 0, 0), (1, 0, 1), (1, 0, 2), (1, 0, 3)];
            assert_eq!(ids, want.iter().map(|&(d, s, r)| SampleId::new(d, s, r)).collect::<Vec<_>>(), "L={lanes}");
            assert_eq!(seen.iter().map(|(i, _)| *i).collect::<Vec<_>>(), (0..9).collect::<Vec<_>>());
        }
    }
}
