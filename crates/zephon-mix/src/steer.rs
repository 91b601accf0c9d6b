//! Token shares held by a closed loop per lane: each dataset is a stream of its own, and a lane
//! reads next the dataset furthest behind its share of the tokens the lane has delivered.

use zephon_core::{Chunk, DatasetManifest, Lane, Settings, ShareSchedule, Steering, WorkSource};

use crate::error::{Error, Result};
use crate::source::{Exhaustion, MixtureSource, SourceOptions};

/// Estimated tokens per chunk of a dataset's stream when the mixture does not say how to cut
/// chunks: small enough that one chunk moves a lane's shares by about a row, large enough that
/// a chunk of short documents is several units of work.
pub const STEERED_CHUNK_TOKENS: u64 = 2048;

/// A mixture by token shares whose lanes choose their next chunk by what they delivered.
///
/// Dataset d is a stream of its own, a [`MixtureSource`] of that one dataset (its order,
/// passes, exhaustion and the deal of its chunks to lanes as for any mixture): lane l's k-th
/// chunk of dataset d is position-addressed. Which dataset a lane reads next is chosen, once it
/// has pushed its current chunk whole, by [`Steering::next_dataset`]: the dataset with the
/// largest deficit `share × delivered total − delivered`, ties to the lower index, among those
/// the lane has chunks of. The deficit is over what the lane delivered (the tokens its inputs
/// made), so the shares hold within about a chunk of tokens a lane, whatever the documents'
/// lengths, and nothing has to be dropped to hold them; `ensure_mixture` then orders the pieces
/// so that the packer's rows hold them within its slack.
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
    /// Estimated tokens of one chunk of each dataset.
    chunk_tokens: Vec<f64>,
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
        let limit = *config.chunk_tokens.get_or_insert(STEERED_CHUNK_TOKENS);
        let mut chunk_tokens = Vec::with_capacity(manifests.len());
        let mut streams = Vec::with_capacity(manifests.len());
        for (d, (m, &t)) in manifests.iter().zip(tokens_per_row).enumerate() {
            let mut c = config;
            match max_samples {
                Some(n) if f64::from(n) * t <= limit as f64 => {
                    (c.chunk_size, c.chunk_tokens) = (n, None);
                    chunk_tokens.push(f64::from(n) * t);
                }
                // A chunk holds the rows that start inside its tokens: at least a row.
                _ => chunk_tokens.push((limit as f64).max(t)),
            }
            streams.push(MixtureSource::of_dataset(d as u32, m, c)?.with_row_tokens(&[t])?);
        }
        Ok(SteeredSource {
            streams,
            shares: ShareSchedule::constant(shares).map_err(|e| Error::Config(e.to_string()))?,
            exhaustion: config.exhaustion,
            chunk_tokens,
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
        Settings::new("steered", 1)
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
            "token shares {}{later} held by each lane's delivered tokens (the dataset furthest behind its share \
             reads next); each dataset a stream of its own, e.g. {first}",
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
        let live: Vec<usize> =
            (0..k).filter(|&d| shares[d] > 0.0 && !exhausted.get(d).copied().unwrap_or(true)).collect();
        if self.exhaustion == Exhaustion::Stop && live.len() < (0..k).filter(|&d| shares[d] > 0.0).count() {
            return None;
        }
        let share: f64 = live.iter().map(|&d| shares[d]).sum();
        let got = |d: usize| delivered.get(d).copied().unwrap_or(0) as f64;
        let total: f64 = live.iter().map(|&d| got(d)).sum();
        // The chunk that leaves the lane's worst deviation from its shares smallest, counting
        // the chunk at its estimated tokens; ties to the dataset furthest behind, then the
        // lower index. At the start that reads the dataset of small chunks first, instead of
        // one whose first chunk alone would put the lane far off.
        let worst_after = |d: usize| {
            let t = total + self.chunk_tokens[d];
            live.iter()
                .map(|&e| {
                    let after = got(e) + if e == d { self.chunk_tokens[d] } else { 0.0 };
                    (after - shares[e] / share * t).abs()
                })
                .fold(0.0f64, f64::max)
        };
        let deficit = |d: usize| shares[d] / share * total - got(d);
        live.iter()
            .copied()
            .fold(None, |best: Option<usize>, d| match best {
                Some(b) => {
                    let (wb, wd) = (worst_after(b), worst_after(d));
                    if wd < wb || (wd == wb && deficit(d) > deficit(b)) { Some(d) } else { Some(b) }
                }
                None => Some(d),
            })
            .map(|d| d as u32)
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
            shards: vec![ShardManifest { path: name.into(), rows, bytes: rows * 100, version: "v1".into() }],
        }
    }

    #[test]
    fn the_dataset_furthest_behind_its_share_reads_next() {
        let config = SourceOptions { seed: 3, exhaustion: Exhaustion::Repeat, ..SourceOptions::default() };
        let s = SteeredSource::new(&[ds("a", 100), ds("b", 100)], &[0.7, 0.3], config, &[10.0, 1000.0], None).unwrap();
        // Chunks hold ~2048 estimated tokens of a, ~2048 (at least a row, 1000) of b.
        assert_eq!(
            s.next_dataset(s.shares().at(0), &[0, 0], &[false, false]),
            Some(0),
            "equal chunks: the lower index"
        );
        assert_eq!(s.next_dataset(s.shares().at(0), &[7000, 2000], &[false, false]), Some(1), "b is behind its 30 %");
        assert_eq!(s.next_dataset(s.shares().at(0), &[6000, 4000], &[false, false]), Some(0), "a is behind its 70 %");
        // A lane that delivered a huge document of b reads a until a is back to its share.
        assert_eq!(s.next_dataset(s.shares().at(0), &[100, 100_000], &[false, false]), Some(0));
        // At the start, a dataset of small chunks goes first.
        let long =
            SteeredSource::new(&[ds("a", 100), ds("b", 100)], &[0.5, 0.5], config, &[9000.0, 20.0], None).unwrap();
        assert_eq!(long.next_dataset(long.shares().at(0), &[0, 0], &[false, false]), Some(1));
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
