//! The mixture work source: datasets interleaved by weight, cut into chunks, dealt to lanes.

use serde::{Deserialize, Serialize};
use zephon_core::{Chunk, DatasetManifest, WorkSource};
use zephon_operator::{Lane, Settings, SettingsValue};

use crate::balance::{self, Balance, TailPlan};
use crate::error::{Error, Result};
use crate::interleave::Interleave;
use crate::order::{DatasetOrder, Order};

/// What happens when a dataset has been read `passes` times.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Exhaustion {
    /// The stream ends when the first dataset is exhausted (shares hold to the end).
    Stop,
    /// An exhausted dataset leaves the mixture; the others share its weight in proportion,
    /// until all are exhausted (every row is used `passes` times).
    Redistribute,
    /// Datasets never run out: each pass is reshuffled, for ever.
    Repeat,
}

/// The work source's settings (everything but the datasets and weights).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceOptions {
    /// Seed of every shuffle and of the chunk deal.
    pub seed: u64,
    /// Samples per chunk (unless `chunk_tokens` is set).
    pub chunk_size: u32,
    /// Estimated tokens per chunk, instead of a count of samples: chunks of a long-document
    /// dataset then hold few documents and those of a short-document one many. Each sample
    /// counts its dataset's estimated tokens per row ([`MixtureSource::with_row_tokens`]). This
    /// keeps a lane from drawing one chunk that holds far more tokens than the others' (the
    /// end of a `Redistribute` pass, when only long documents are left); it cannot balance
    /// the spread of document lengths within a dataset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_tokens: Option<u64>,
    /// Row order within each pass.
    pub order: Order,
    /// The exhaustion policy.
    pub exhaustion: Exhaustion,
    /// Passes over each dataset before it is exhausted (ignored by `Repeat`).
    pub passes: u64,
    /// How the end of a finite stream is shared among lanes. `RowSizes` and `RowTokens` take
    /// effect once each row's tokens are given ([`MixtureSource::balance_by_rows`]).
    #[serde(default, skip_serializing_if = "is_estimates")]
    pub balance: Balance,
}

fn is_estimates(b: &Balance) -> bool {
    *b == Balance::Estimates
}

impl SourceOptions {
    /// The configuration as fingerprint settings (enums by their names in specs).
    pub fn settings(&self) -> Settings {
        let mut s = Settings::new("source", 1)
            .set("seed", self.seed)
            .set("chunk_size", self.chunk_size)
            .set("order", serde_name(&self.order))
            .set("exhaustion", self.exhaustion.as_str())
            .set("passes", self.passes);
        // Left out at their defaults, as in the spec, so that adding them changed nothing.
        if let Some(t) = self.chunk_tokens {
            s = s.set("chunk_tokens", t);
        }
        if self.balance != Balance::Estimates {
            s = s.set("balance", serde_name(&self.balance));
        }
        s
    }
}

impl Exhaustion {
    /// The policy's name in specs and fingerprints.
    pub fn as_str(self) -> &'static str {
        match self {
            Exhaustion::Stop => "stop",
            Exhaustion::Redistribute => "redistribute",
            Exhaustion::Repeat => "repeat",
        }
    }
}

/// The name serde gives a unit enum variant in specs (its snake_case name).
fn serde_name<T: Serialize>(v: &T) -> SettingsValue {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s.into(),
        Ok(other) => other.to_string().into(),
        Err(e) => format!("unnamed ({e})").into(),
    }
}

impl Default for SourceOptions {
    fn default() -> Self {
        SourceOptions {
            seed: 0,
            chunk_size: 256,
            chunk_tokens: None,
            order: Order::default(),
            exhaustion: Exhaustion::Repeat,
            passes: 1,
            balance: Balance::Estimates,
        }
    }
}

/// A stretch of the stream with one set of active datasets.
#[derive(Clone, Debug)]
struct Phase {
    /// First global position.
    start: u64,
    /// One past the last position (`u64::MAX` for an endless phase).
    end: u64,
    /// Draws of each dataset before `start`.
    base: Vec<u64>,
    interleave: Interleave,
}

/// The mixture work source: a pure function of (datasets, weights, config).
///
/// Global position p of the stream is a draw of one dataset, chosen by the smooth weighted
/// interleave; draw k of dataset d is row `k mod rows_d` of pass `k / rows_d` in that pass's
/// order. Chunk g is positions `[g·C, (g+1)·C)`, or, with `chunk_tokens = T`, the positions
/// from the first whose estimated tokens before it reach g·T up to the first reaching
/// (g+1)·T (found by binary search over the closed-form draw counts: a seek costs O(log n)).
/// Lane l's n-th chunk is chunk
/// `n·L + π_n(l)`, where π_n is a seeded permutation of the lanes: each block of L chunks goes
/// one to each lane, and any lane finds its n-th chunk in O(1), whatever L. When a finite
/// stream's last block has fewer than L chunks, that stretch is cut again into L pieces of
/// equal estimated tokens, piece π_n(l) for lane l: every lane draws the same number of
/// chunks, and the lanes end closer together. Given each row's tokens
/// ([`MixtureSource::balance_by_rows`]), the end is shared out document by document instead,
/// and the lanes end within a few tokens of each other.
pub struct MixtureSource {
    config: SourceOptions,
    names: Vec<String>,
    weights: Vec<f64>,
    m: Vec<u64>,
    orders: Vec<DatasetOrder>,
    phases: Vec<Phase>,
    /// One past the last position, if the stream ends.
    total: Option<u64>,
    /// Estimated tokens per row of each dataset (at least 1), for `chunk_tokens`.
    row_tokens: Vec<u64>,
    /// The end of a finite stream shared out by row sizes or tokens.
    tail: Option<TailPlan>,
    /// The run's index of the first dataset (its samples carry `first + d`).
    first: u32,
}

/// Weights are turned into integers with this resolution (exact arithmetic from there on).
const WEIGHT_SCALE: f64 = (1u64 << 24) as f64;

impl MixtureSource {
    /// A source over `manifests` mixed by `weights` (any positive scale; 0 leaves a dataset
    /// out).
    pub fn new(manifests: &[DatasetManifest], weights: &[f64], config: SourceOptions) -> Result<Self> {
        MixtureSource::numbered_from(manifests, weights, config, 0)
    }

    /// A source over the one dataset that the run numbers `index` (its samples carry that
    /// index): one dataset's stream of a steered mixture.
    pub fn of_dataset(index: u32, manifest: &DatasetManifest, config: SourceOptions) -> Result<Self> {
        MixtureSource::numbered_from(std::slice::from_ref(manifest), &[1.0], config, index)
    }

    fn numbered_from(
        manifests: &[DatasetManifest],
        weights: &[f64],
        config: SourceOptions,
        first: u32,
    ) -> Result<Self> {
        if manifests.is_empty() {
            return Err(Error::Config("a mixture needs at least one dataset".into()));
        }
        if manifests.len() != weights.len() {
            return Err(Error::Config(format!("{} datasets but {} weights", manifests.len(), weights.len())));
        }
        if config.chunk_size == 0 {
            return Err(Error::Config("chunk_size must be at least 1".into()));
        }
        if config.chunk_tokens == Some(0) {
            return Err(Error::Config("chunk_tokens must be at least 1".into()));
        }
        if config.passes == 0 && config.exhaustion != Exhaustion::Repeat {
            return Err(Error::Config("passes must be at least 1".into()));
        }
        for (m, &w) in manifests.iter().zip(weights) {
            if !w.is_finite() || w < 0.0 {
                return Err(Error::Config(format!("dataset {}: weight {w} is not a non-negative number", m.name)));
            }
            if w > 0.0 && m.rows() == 0 {
                return Err(Error::Config(format!("dataset {} has weight {w} but no rows", m.name)));
            }
        }
        let sum: f64 = weights.iter().sum();
        if sum <= 0.0 {
            return Err(Error::Config("every weight is 0".into()));
        }
        let m: Vec<u64> = weights
            .iter()
            .map(|&w| if w > 0.0 { ((w / sum * WEIGHT_SCALE).round() as u64).max(1) } else { 0 })
            .collect();
        let orders: Vec<DatasetOrder> = manifests
            .iter()
            .enumerate()
            .map(|(d, man)| DatasetOrder::new(first + d as u32, man, config.order, config.seed))
            .collect();
        let budgets: Vec<Option<u64>> = orders
            .iter()
            .map(|o| match config.exhaustion {
                Exhaustion::Repeat => None,
                _ => Some(o.rows() * config.passes),
            })
            .collect();
        let (phases, total) = plan_phases(&m, &budgets, config.exhaustion);
        Ok(MixtureSource {
            config,
            names: manifests.iter().map(|m| m.name.clone()).collect(),
            weights: weights.to_vec(),
            m,
            orders,
            phases,
            total,
            // Until estimates are given, a row costs its dataset's mean bytes per row.
            row_tokens: manifests.iter().map(|m| (m.bytes() / m.rows().max(1)).max(1)).collect(),
            tail: None,
            first,
        })
    }

    /// Shares out the end of a finite stream for `lanes` lanes so that every lane ends with
    /// the same tokens (see [`Balance::RowSizes`] and [`Balance::RowTokens`]).
    /// `row_tokens[d][r]` is the tokens (counted or estimated) of row r of dataset d, rows in
    /// stored order (shard by shard). Does nothing for an endless stream or under
    /// `Balance::Estimates`. Costs a walk over the whole stream. The source then serves only
    /// `lanes` lanes (another count is an error).
    pub fn balance_by_rows(self, row_tokens: &[Vec<u32>], lanes: u32) -> Result<Self> {
        self.balance_against(row_tokens, lanes, &[]).map(|(s, _)| s)
    }

    /// [`MixtureSource::balance_by_rows`] for lanes that already hold `offset[l]` tokens from
    /// elsewhere (the other datasets of a steered mixture): the lanes' totals with it even out.
    /// Also returns each lane's tokens of this stream (empty when nothing was planned).
    pub(crate) fn balance_against(
        mut self,
        row_tokens: &[Vec<u32>],
        lanes: u32,
        offset: &[u64],
    ) -> Result<(Self, Vec<u64>)> {
        let (Some(total), Some(chunks)) = (self.total, self.chunks()) else {
            return Ok((self, Vec::new()));
        };
        if self.config.balance == Balance::Estimates {
            return Ok((self, Vec::new()));
        }
        if lanes == 0 {
            return Err(Error::Config("a run needs at least one lane".into()));
        }
        if row_tokens.len() != self.names.len() {
            return Err(Error::Config(format!("{} datasets but row sizes of {}", self.names.len(), row_tokens.len())));
        }
        for ((name, order), sizes) in self.names.iter().zip(&self.orders).zip(row_tokens) {
            if sizes.len() as u64 != order.rows() {
                return Err(Error::Config(format!(
                    "dataset {name}: {} rows but {} row sizes",
                    order.rows(),
                    sizes.len()
                )));
            }
        }
        let cost = |samples: &[zephon_operator::SampleId]| -> Vec<u64> {
            samples
                .iter()
                .map(|s| {
                    let d = (s.dataset - self.first) as usize;
                    u64::from(row_tokens[d][self.orders[d].stored_row(s) as usize])
                })
                .collect()
        };
        let chunk_tokens: Vec<u64> =
            (0..chunks).map(|g| self.global_chunk(g).map_or(0, |c| cost(&c.samples).iter().sum())).collect();
        let plan = balance::plan(
            lanes,
            &chunk_tokens,
            |lane, n| self.deal(Lane(lane), lanes, n),
            |g| {
                let samples = self.chunk_of(g, self.chunk_start(g).min(total), total).samples;
                let tokens = cost(&samples);
                (samples, tokens)
            },
            offset,
        );
        let totals = plan.totals.clone();
        self.tail = Some(plan);
        Ok((self, totals))
    }

    /// Sets the estimated tokens per row of each dataset that `chunk_tokens` counts (rounded,
    /// at least 1). Without it, a row counts its dataset's mean bytes per row.
    pub fn with_row_tokens(mut self, tokens_per_row: &[f64]) -> Result<Self> {
        if tokens_per_row.len() != self.names.len() {
            return Err(Error::Config(format!(
                "{} datasets but {} token estimates",
                self.names.len(),
                tokens_per_row.len()
            )));
        }
        for (name, &t) in self.names.iter().zip(tokens_per_row) {
            if !(t.is_finite() && t >= 0.0) {
                return Err(Error::Config(format!("dataset {name}: {t} tokens per row is not a non-negative number")));
            }
        }
        self.row_tokens = tokens_per_row.iter().map(|&t| (t.round() as u64).max(1)).collect();
        Ok(self)
    }

    /// Estimated tokens of the first `p` positions.
    fn tokens_before(&self, p: u64) -> u128 {
        self.draws_before(p).iter().zip(&self.row_tokens).map(|(&n, &t)| u128::from(n) * u128::from(t)).sum()
    }

    /// The first position of chunk `g` (may be past the end of a finite stream).
    fn chunk_start(&self, g: u64) -> u64 {
        let Some(t) = self.config.chunk_tokens else {
            return g.saturating_mul(u64::from(self.config.chunk_size));
        };
        let target = u128::from(g) * u128::from(t);
        // Every position costs at least one token, so the answer is at most `target`.
        let mut hi = u64::try_from(target).unwrap_or(u64::MAX);
        if let Some(total) = self.total {
            hi = hi.min(total);
        }
        self.first_reaching(target, 0, hi)
    }

    /// The first position in `lo..=hi` whose estimated tokens before it reach `target` (`hi`
    /// if none does before it).
    fn first_reaching(&self, target: u128, mut lo: u64, mut hi: u64) -> u64 {
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.tokens_before(mid) >= target {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }

    /// The positions of lane chunk `g` (dealt as the `n`-th chunk of a lane of `lanes`) when
    /// it is in the last block of a finite stream and that block is partial: the stretch
    /// from the block's start to the end is cut into `lanes` pieces of equal estimated
    /// tokens, piece `g - block start` for this lane. Dealt whole, some lanes would draw one
    /// chunk more than others at the end of the data, and under `tail = "drop"` the run
    /// ends with the first lane. `None` for every other chunk.
    fn last_block_piece(&self, lanes: u32, n: u64, g: u64) -> Option<(u64, u64)> {
        let (total, chunks) = (self.total?, self.chunks()?);
        let lanes = u64::from(lanes);
        if chunks.checked_rem(lanes)? == 0 || n != chunks / lanes {
            return None;
        }
        let first = n.checked_mul(lanes)?;
        let start = self.chunk_start(first).min(total);
        let (before, tokens) = (self.tokens_before(start), self.tokens_before(total));
        let stretch = tokens.saturating_sub(before);
        let bound = |i: u64| match i {
            0 => start,
            i if i >= lanes => total,
            i => self.first_reaching(before + stretch * u128::from(i) / u128::from(lanes), start, total),
        };
        let i = g.checked_sub(first)?;
        Some((bound(i), bound(i + 1)))
    }

    /// Number of positions in the stream, if it ends.
    pub fn len(&self) -> Option<u64> {
        self.total
    }

    /// Whether the stream is empty.
    pub fn is_empty(&self) -> bool {
        self.total == Some(0)
    }

    /// Number of chunks, if the stream ends.
    pub fn chunks(&self) -> Option<u64> {
        let total = self.total?;
        Some(match self.config.chunk_tokens {
            None => total.div_ceil(self.config.chunk_size as u64),
            Some(_) if total == 0 => 0,
            // Chunk g exists while its start is before the end: tokens before the last
            // position reach g·T.
            Some(t) => u64::try_from(self.tokens_before(total - 1) / u128::from(t)).unwrap_or(u64::MAX) + 1,
        })
    }

    /// The global chunk `g`: its samples in stream order, or `None` past the end. With
    /// `chunk_tokens`, a chunk may be empty (a document longer than a chunk spans several).
    pub fn global_chunk(&self, g: u64) -> Option<Chunk> {
        let start = self.chunk_start(g);
        let next = self.chunk_start(g.checked_add(1)?);
        let end = match self.total {
            Some(t) if start >= t => return None,
            Some(t) => next.min(t),
            None => next,
        };
        Some(self.chunk_of(g, start, end))
    }

    /// Chunk `g` holding the samples at positions `start..end`.
    fn chunk_of(&self, g: u64, start: u64, end: u64) -> Chunk {
        let mut samples = Vec::with_capacity((end - start).min(1 << 20) as usize);
        let mut owners = Vec::new();
        let mut p = start;
        while p < end {
            let phase = &self.phases[self.phases.partition_point(|ph| ph.start <= p) - 1];
            let upto = end.min(phase.end);
            let local = phase.interleave.counts_before(p - phase.start);
            let mut counts: Vec<u64> = local.iter().zip(&phase.base).map(|(a, b)| a + b).collect();
            owners.clear();
            // The interleave advances local counts; draws are base + local.
            let mut local_counts = local;
            phase.interleave.next_owners(&mut local_counts, upto - p, &mut owners);
            for &d in &owners {
                let k = counts[d];
                counts[d] += 1;
                let rows = self.orders[d].rows();
                samples.push(self.orders[d].sample(k / rows, k % rows));
            }
            p = upto;
        }
        Chunk { index: g, samples }
    }

    /// The global chunk index of lane `lane`'s `n`-th chunk with `lanes` lanes.
    pub fn deal(&self, lane: Lane, lanes: u32, n: u64) -> u64 {
        zephon_core::deal_chunk(self.config.seed, lane, lanes, n)
    }

    /// Draws of each dataset among the first `p` positions (closed form).
    pub fn draws_before(&self, p: u64) -> Vec<u64> {
        let phase = &self.phases[self.phases.partition_point(|ph| ph.start <= p) - 1];
        let p = p.min(phase.end);
        phase.interleave.counts_before(p - phase.start).iter().zip(&phase.base).map(|(a, b)| a + b).collect()
    }

    /// The dataset names, in order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The weights as given.
    pub fn weights(&self) -> &[f64] {
        &self.weights
    }
}

/// Cuts the stream into phases: each ends when a dataset of it runs out of budget.
fn plan_phases(m: &[u64], budgets: &[Option<u64>], policy: Exhaustion) -> (Vec<Phase>, Option<u64>) {
    let mut phases = Vec::new();
    let mut active = m.to_vec();
    let mut base = vec![0u64; m.len()];
    let mut start = 0u64;
    loop {
        if active.iter().all(|&w| w == 0) {
            return (phases, Some(start));
        }
        let il = Interleave::new(active.clone());
        // Where each active dataset with a budget spends its last draw.
        let end = il.active().filter_map(|d| budgets[d].map(|b| start + il.end_of_tick(d, b - base[d] - 1))).min();
        let Some(end) = end else {
            phases.push(Phase { start, end: u64::MAX, base, interleave: il });
            return (phases, None);
        };
        let local = il.counts_before(end - start);
        let next_base: Vec<u64> = base.iter().zip(&local).map(|(b, l)| b + l).collect();
        phases.push(Phase { start, end, base, interleave: il });
        if policy == Exhaustion::Stop {
            return (phases, Some(end));
        }
        for d in 0..m.len() {
            if budgets[d].is_some_and(|b| next_base[d] >= b) {
                active[d] = 0;
            }
        }
        base = next_base;
        start = end;
    }
}

impl WorkSource for MixtureSource {
    fn chunk(&self, lane: Lane, lanes: u32, n: u64) -> zephon_core::Result<Option<Chunk>> {
        if let Some(plan) = &self.tail {
            if plan.lanes != lanes {
                return Err(zephon_core::Error::Source {
                    lane,
                    message: format!("the stream's end was shared out for {} lanes, not {lanes}", plan.lanes),
                });
            }
            let first = plan.block * u64::from(lanes);
            return Ok(match n.cmp(&plan.block) {
                std::cmp::Ordering::Less => self.global_chunk(self.deal(lane, lanes, n)),
                std::cmp::Ordering::Equal => Some(Chunk {
                    index: first + u64::from(lane.0),
                    samples: plan.pieces.get(lane.0 as usize).cloned().unwrap_or_default(),
                }),
                std::cmp::Ordering::Greater => None,
            });
        }
        let g = self.deal(lane, lanes, n);
        Ok(match self.last_block_piece(lanes, n, g) {
            Some((start, end)) => Some(self.chunk_of(g, start, end)),
            None => self.global_chunk(g),
        })
    }

    fn fingerprint(&self) -> Settings {
        let datasets: Vec<SettingsValue> =
            self.names.iter().zip(&self.m).map(|(n, m)| SettingsValue::List(vec![n.into(), (*m).into()])).collect();
        // An endless stream has no end to share: its fingerprint does not name a balance.
        let mut config = self.config;
        if self.total.is_none() {
            config.balance = Balance::Estimates;
        }
        let mut s = Settings::new("mixture", 1).set("datasets", datasets).set("config", config.settings());
        // Both cut the chunks: the estimates by tokens, and the even last block of a finite
        // stream by estimated tokens (bytes per row unless estimates were given).
        if self.config.chunk_tokens.is_some() || self.total.is_some() {
            s = s.set("row_tokens", self.row_tokens.clone());
        }
        match (&self.tail, self.total) {
            (Some(plan), _) => s.set("tail", plan.digest()),
            (None, Some(_)) => s.set("last_block", "even"),
            (None, None) => s,
        }
    }

    fn describe(&self) -> String {
        let sum: u64 = self.m.iter().sum();
        let parts: Vec<String> = self
            .names
            .iter()
            .zip(&self.m)
            .map(|(n, &m)| format!("{n} {:.1}%", 100.0 * m as f64 / sum as f64))
            .collect();
        let chunks = match self.config.chunk_tokens {
            Some(t) => format!("~{t} tokens (rows count {:?} tokens)", self.row_tokens),
            None => format!("{} samples", self.config.chunk_size),
        };
        let tail = match (&self.tail, self.chunks()) {
            (Some(p), Some(chunks)) => format!(
                "; from chunk {} of {chunks} the end is shared out by {}, lanes end with {}–{} tokens",
                p.block * u64::from(p.lanes),
                if self.config.balance == Balance::RowTokens {
                    "each row's tokens"
                } else {
                    "each row's estimated tokens"
                },
                p.spread.0,
                p.spread.1
            ),
            (None, Some(_)) => "; the last partial block cut evenly by estimated tokens".to_string(),
            _ => String::new(),
        };
        format!(
            "mixture of {} ({:?}, {} pass(es), chunks of {chunks}, {:?}{tail})",
            parts.join(", "),
            self.config.exhaustion,
            self.config.passes,
            self.config.order
        )
    }
}

impl std::fmt::Debug for MixtureSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MixtureSource")
            .field("datasets", &self.names)
            .field("weights", &self.weights)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
