//! Token shares held by a closed loop per lane: each dataset is a stream of its own, and a
//! lane's next input comes from the dataset furthest behind its share of the tokens the lane
//! has delivered.

use zephon_core::{Chunk, DatasetManifest, ShareSchedule, Steering, WorkSource};
use zephon_operator::{Lane, Settings};

use crate::error::{Error, Result};
use crate::source::{Exhaustion, MixtureSource, SourceOptions};

/// Estimated tokens per chunk of a dataset's stream when the mixture does not say how to cut
/// chunks. A chunk is what is dealt to one lane (its documents are read by that lane, in
/// order); the closed loop picks a dataset per input, so the chunk size does not move the
/// shares.
pub const STEERED_CHUNK_TOKENS: u64 = 2048;

/// A mixture by token shares whose lanes choose the dataset of each record by what they
/// delivered.
///
/// Dataset d is a stream of its own, a [`MixtureSource`] of that one dataset (its order,
/// passes, exhaustion and the deal of its chunks to lanes as for any mixture): lane l's k-th
/// chunk of dataset d is position-addressed. The dataset of a lane's next record (a document,
/// or a piece of one that tokenize split) is chosen by [`Steering::next_dataset`], record by
/// record, as start-time fair queueing chooses the next packet: the dataset d whose
/// `delivered_d / share_d` is least, with `delivered_d` the tokens the lane's records of d
/// made (ties to the larger share, then the lower index). So every dataset is served in
/// proportion to its share from the first records on, a dataset with a small share included:
/// a lane's tokens of a dataset run ahead of its share by at most one record, and fall behind
/// it by at most its share of one record of each dataset, whatever the documents' lengths.
/// Nothing has to be dropped, and `ensure_mixture` then orders the pieces so that the
/// packer's rows hold the shares within its slack.
///
/// Finite data: under [`Exhaustion::Stop`] a lane's input ends when it runs out of a dataset
/// that has a share; under [`Exhaustion::Redistribute`] an exhausted dataset leaves the lane's
/// mixture and the others share the targets in proportion to their shares. Given each row's
/// tokens ([`SteeredSource::balance_by_rows`]), every lane gets the same tokens of each dataset,
/// so the lanes run out together.
pub struct SteeredSource {
    streams: Vec<MixtureSource>,
    shares: ShareSchedule,
    exhaustion: Exhaustion,
    /// Estimated tokens of one row (document) of each dataset.
    row_tokens: Vec<f64>,
}

impl SteeredSource {
    /// Token `shares` over `manifests` (any positive scale), each dataset's stream cut into
    /// chunks of `config.chunk_tokens` estimated tokens ([`STEERED_CHUNK_TOKENS`] without it)
    /// or, with `max_samples`, of that many samples where they hold fewer tokens: chunks by
    /// samples alone would hold a hundred times the tokens on a dataset of long documents as
    /// on one of short ones, and a lane's shares would swing by that. The rest of `config`
    /// orders and deals them; `tokens_per_row` is each dataset's estimate.
    pub fn new(
        manifests: &[DatasetManifest],
        shares: &[f64],
        mut config: SourceOptions,
        tokens_per_row: &[f64],
        max_samples: Option<u32>,
    ) -> Result<Self> {
        if manifests.is_empty() || manifests.len() != shares.len() || shares.len() != tokens_per_row.len() {
            return Err(Error::Config(format!(
                "{} datasets, {} shares and {} token estimates",
                manifests.len(),
                shares.len(),
                tokens_per_row.len()
            )));
        }
        let sum: f64 = shares.iter().sum();
        if !(sum.is_finite() && sum > 0.0) || shares.iter().any(|s| !(s.is_finite() && *s >= 0.0)) {
            return Err(Error::Config(format!("token shares {shares:?} must be non-negative with a positive sum")));
        }
        if let Some((d, t)) = tokens_per_row.iter().enumerate().find(|(_, t)| !(t.is_finite() && **t > 0.0)) {
            return Err(Error::Config(format!("dataset #{d}: estimated tokens per row {t} must be positive")));
        }
        let limit = *config.chunk_tokens.get_or_insert(STEERED_CHUNK_TOKENS);
        let mut streams = Vec::with_capacity(manifests.len());
        for (d, (m, &t)) in manifests.iter().zip(tokens_per_row).enumerate() {
            let mut c = config;
            if let Some(n) = max_samples.filter(|&n| f64::from(n) * t <= limit as f64) {
                (c.chunk_size, c.chunk_tokens) = (n, None);
            }
            streams.push(MixtureSource::of_dataset(d as u32, m, c)?.with_row_tokens(&[t])?);
        }
        Ok(SteeredSource {
            streams,
            shares: ShareSchedule::constant(shares).map_err(|e| Error::Config(e.to_string()))?,
            exhaustion: config.exhaustion,
            row_tokens: tokens_per_row.to_vec(),
        })
    }

    /// Shares out the end of the datasets' streams by each row's tokens
    /// ([`MixtureSource::balance_by_rows`]); `row_tokens[d][r]` is row r of dataset d.
    ///
    /// Under [`Exhaustion::Stop`] a lane ends when it runs out of one dataset, so each
    /// dataset's stream is evened out on its own: every lane gets the same tokens of it. Under
    /// [`Exhaustion::Redistribute`] a lane reads everything it was dealt, so what counts is each
    /// lane's total: the streams are planned one after another, datasets of long documents
    /// first, each against what the lanes already hold of the ones before, so that the short
    /// documents of the last even out what whole long ones cannot.
    pub fn balance_by_rows(mut self, row_tokens: &[Vec<u32>], lanes: u32) -> Result<Self> {
        if row_tokens.len() != self.streams.len() {
            return Err(Error::Config(format!(
                "{} datasets but row sizes of {}",
                self.streams.len(),
                row_tokens.len()
            )));
        }
        let mean = |t: &Vec<u32>| t.iter().map(|&x| u64::from(x)).sum::<u64>() as f64 / t.len().max(1) as f64;
        let mut order: Vec<usize> = (0..self.streams.len()).collect();
        if self.exhaustion == Exhaustion::Redistribute {
            order.sort_by(|&a, &b| mean(&row_tokens[b]).total_cmp(&mean(&row_tokens[a])).then(a.cmp(&b)));
        }
        let mut held = vec![0u64; lanes as usize];
        let mut streams: Vec<Option<MixtureSource>> = self.streams.drain(..).map(Some).collect();
        for d in order {
            let Some(stream) = streams[d].take() else { continue };
            let offset: &[u64] = if self.exhaustion == Exhaustion::Redistribute { &held } else { &[] };
            let (stream, totals) = stream.balance_against(std::slice::from_ref(&row_tokens[d]), lanes, offset)?;
            for (h, t) in held.iter_mut().zip(totals) {
                *h += t;
            }
            streams[d] = Some(stream);
        }
        self.streams = streams.into_iter().flatten().collect();
        Ok(self)
    }

    /// Changes the targets at set steps: `schedule` (over the same datasets) replaces the
    /// shares given to [`SteeredSource::new`].
    pub fn with_schedule(mut self, schedule: ShareSchedule) -> Result<Self> {
        let k = schedule.at(0).len();
        if k != self.streams.len() {
            return Err(Error::Config(format!(
                "a share schedule over {k} datasets for a mixture of {}",
                self.streams.len()
            )));
        }
        self.shares = schedule;
        Ok(self)
    }

    /// Whether the streams end (finite data).
    pub fn is_finite(&self) -> bool {
        self.streams.iter().any(|s| s.len().is_some())
    }
}

impl WorkSource for SteeredSource {
    fn chunk(&self, lane: Lane, _: u32, _: u64) -> zephon_core::Result<Option<Chunk>> {
        Err(zephon_core::Error::Source {
            lane,
            message: "it reads a steered mixture: its chunks depend on what it delivered (Steering)".into(),
        })
    }

    fn fingerprint(&self) -> Settings {
        let streams: Vec<Settings> = self.streams.iter().map(WorkSource::fingerprint).collect();
        // The shares from step 0 only: the run's fingerprint compares the whole schedule step by
        // step, so that a checkpoint may continue under one that changes after its step.
        Settings::new("steered", 2)
            .set("picks", "per input, least (delivered + estimated input) / share")
            .set("shares", self.shares.at(0).to_vec())
            .set("exhaustion", self.exhaustion.as_str())
            .set("streams", streams)
    }

    fn describe(&self) -> String {
        let shares: Vec<String> = self
            .streams
            .iter()
            .zip(self.shares.at(0))
            .map(|(s, w)| format!("{} {:.1}%", s.names().first().map_or("?", String::as_str), 100.0 * w))
            .collect();
        let later: String = self.shares.segments()[1..]
            .iter()
            .map(|(step, w)| {
                let w: Vec<String> = w.iter().map(|x| format!("{:.1}%", 100.0 * x)).collect();
                format!(", then {} from step {step}", w.join(" / "))
            })
            .collect();
        let first = self.streams.first().map(WorkSource::describe).unwrap_or_default();
        format!(
            "token shares {}{later} held by each lane's delivered tokens (each input from the dataset furthest \
             behind its share); each dataset a stream of its own, e.g. {first}",
            shares.join(", ")
        )
    }

    fn steering(&self) -> Option<&dyn Steering> {
        Some(self)
    }
}

impl Steering for SteeredSource {
    fn datasets(&self) -> u32 {
        self.streams.len() as u32
    }

    fn dataset_chunk(&self, lane: Lane, lanes: u32, d: u32, k: u64) -> zephon_core::Result<Option<Chunk>> {
        match self.streams.get(d as usize) {
            Some(s) => s.chunk(lane, lanes, k),
            None => Err(zephon_core::Error::Source {
                lane,
                message: format!("no dataset #{d} (the mixture has {})", self.streams.len()),
            }),
        }
    }

    fn shares(&self) -> &ShareSchedule {
        &self.shares
    }

    fn next_dataset(&self, shares: &[f64], delivered: &[u64], exhausted: &[bool]) -> Option<u32> {
        let k = shares.len().min(self.streams.len());
        let wanted = |d: usize| shares[d] > 0.0;
        let live = |d: usize| wanted(d) && !exhausted.get(d).copied().unwrap_or(true);
        if self.exhaustion == Exhaustion::Stop && (0..k).any(|d| wanted(d) && !live(d)) {
            return None;
        }
        // Start-time fair queueing: the dataset that has delivered least for its share goes
        // next (ties to the larger share, then the lower index). It runs ahead of its share by
        // at most the record it is given. Scale-free in the shares, so datasets that have left
        // (finite data) need no renormalising.
        let key = |d: usize| delivered.get(d).copied().unwrap_or(0) as f64 / shares[d];
        let mut best: Option<(usize, f64)> = None;
        for d in (0..k).filter(|&d| live(d)) {
            let f = key(d);
            let better = match best {
                None => true,
                Some((b, fb)) => f < fb || (f == fb && shares[d] > shares[b]),
            };
            if better {
                best = Some((d, f));
            }
        }
        best.map(|(d, _)| d as u32)
    }

    fn input_tokens(&self, d: u32) -> f64 {
        self.row_tokens.get(d as usize).copied().unwrap_or(1.0)
    }
}

impl std::fmt::Debug for SteeredSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SteeredSource")
            .field("shares", &self.shares)
            .field("exhaustion", &self.exhaustion)
            .field("streams", &self.streams)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zephon_core::ShardManifest;

    fn ds(name: &str, rows: u64) -> DatasetManifest {
        DatasetManifest {
            name: name.into(),
            shards: vec![ShardManifest {
                path: name.into(),
                name: String::new(),
                rows,
                bytes: rows * 100,
                version: "v1".into(),
            }],
        }
    }

    #[test]
    fn the_dataset_furthest_behind_its_share_gives_the_next_record() {
        let config = SourceOptions { seed: 3, exhaustion: Exhaustion::Repeat, ..SourceOptions::default() };
        let s = SteeredSource::new(&[ds("a", 100), ds("b", 100)], &[0.7, 0.3], config, &[10.0, 1000.0], None).unwrap();
        assert_eq!(s.next_dataset(s.shares().at(0), &[0, 0], &[false, false]), Some(0), "a tie: the larger share");
        assert_eq!(s.next_dataset(s.shares().at(0), &[7000, 2000], &[false, false]), Some(1), "b is behind its 30 %");
        assert_eq!(s.next_dataset(s.shares().at(0), &[6000, 4000], &[false, false]), Some(0), "a is behind its 70 %");
        // A lane that delivered a huge document of b reads a until a is back to its share.
        assert_eq!(s.next_dataset(s.shares().at(0), &[100, 100_000], &[false, false]), Some(0));
        // Equal shares at a tie: the lower index.
        let even =
            SteeredSource::new(&[ds("a", 100), ds("b", 100)], &[0.5, 0.5], config, &[9000.0, 20.0], None).unwrap();
        assert_eq!(even.next_dataset(even.shares().at(0), &[0, 0], &[false, false]), Some(0));
        assert_eq!(even.next_dataset(even.shares().at(0), &[9000, 20], &[false, false]), Some(1));
        // A chunk holds ~2048 estimated tokens: a few of the long documents, ~200 of the short ones.
        let a = s.dataset_chunk(Lane(0), 4, 0, 0).unwrap().unwrap();
        let b = s.dataset_chunk(Lane(0), 4, 1, 0).unwrap().unwrap();
        assert!(a.samples.iter().all(|x| x.dataset == 0) && b.samples.iter().all(|x| x.dataset == 1));
        assert!(a.samples.len() > 100 && b.samples.len() <= 3, "{} {}", a.samples.len(), b.samples.len());
        assert!(s.chunk(Lane(0), 4, 0).is_err(), "a steered source has no position-addressed chunks");
    }

    #[test]
    fn finite_data_ends_a_lane_by_the_exhaustion_policy() {
        for (policy, want) in [(Exhaustion::Stop, None), (Exhaustion::Redistribute, Some(1))] {
            let config = SourceOptions { exhaustion: policy, ..SourceOptions::default() };
            let s = SteeredSource::new(&[ds("a", 10), ds("b", 10)], &[0.5, 0.5], config, &[5.0, 5.0], Some(4)).unwrap();
            assert_eq!(s.next_dataset(s.shares().at(0), &[100, 0], &[true, false]), want, "{policy:?}");
            assert_eq!(s.next_dataset(s.shares().at(0), &[100, 100], &[true, true]), None, "{policy:?}");
        }
    }
}
