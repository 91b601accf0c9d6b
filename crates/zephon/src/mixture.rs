//! What to train on: datasets on disk, their weights or token shares, and the order.

use std::path::PathBuf;

use zephon_core::ShareSchedule;
use zephon_io::{DatasetOptions, Fields, Layout, Location, Split, StorageOptions};
use zephon_mix::{Balance, EstimateOptions, Exhaustion, Order, SourceOptions};

/// How far token shares may sum from 1: shares written with a few decimals (six over a hundred
/// datasets) rarely sum to exactly 1. Within it they are used relative to their sum, and the
/// run says so ([`crate::Loader::notices`]); beyond it they are refused as a mistake.
pub const SHARE_SUM_TOLERANCE: f64 = 1e-4;

/// What a run says of token shares (of the segment from `step`) that sum to `sum`: nothing
/// when it is 1 but for floating-point rounding.
pub(crate) fn share_sum_notice(step: u64, sum: f64) -> Option<String> {
    if (sum - 1.0).abs() <= 1e-9 {
        return None;
    }
    let which = if step == 0 { "the token shares".to_string() } else { format!("the token shares from step {step}") };
    Some(format!("{which} sum to {sum}: each is used divided by that sum"))
}

/// How much of the mixture a dataset is.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Amount {
    /// A share of the *tokens* (planned through token estimation with the pipeline's
    /// tokenizer, and kept on target by `ensure_mixture`).
    Share(f64),
    /// A weight on *samples*.
    Weight(f64),
}

/// One dataset of a mixture: where its shards are, with its amount and fields.
#[derive(Clone, Debug)]
pub struct Dataset {
    pub(crate) name: String,
    pub(crate) paths: Vec<PathBuf>,
    pub(crate) split: Option<Split>,
    pub(crate) amount: Amount,
    pub(crate) options: DatasetOptions,
    /// Its tokens' weight on the loss, and the field of each record's.
    pub(crate) loss_weight: f64,
    pub(crate) loss_weight_field: Option<String>,
}

impl Dataset {
    /// The dataset `name` at `path`: a shard file (`.jsonl`, `.json`, `.ndjson`, plain or
    /// `.gz` / `.zst`; `.parquet`; `.tar`), a folder of them (its subfolders too), or a glob
    /// (`data/CC-MAIN-*/*.parquet`, `**/*.jsonl.zst`); weight 1 on samples until set.
    pub fn new(name: &str, path: impl Into<PathBuf>) -> Self {
        Dataset {
            name: name.to_string(),
            paths: vec![path.into()],
            split: None,
            amount: Amount::Weight(1.0),
            options: DatasetOptions::default(),
            loss_weight: 1.0,
            loss_weight_field: None,
        }
    }

    /// Another place its shards are (a file, folder or glob), read after those before.
    #[must_use]
    pub fn also(mut self, path: impl Into<PathBuf>) -> Self {
        self.paths.push(path.into());
        self
    }

    /// Only its shards of `split` (`train`, `validation`, `test`, as Hugging Face names its
    /// files and folders). Without it, shards of several splits are refused.
    #[must_use]
    pub fn split(mut self, split: Split) -> Self {
        self.split = Some(split);
        self
    }

    /// Finds its shards (object stores reached with `storage`) and opens them; where they
    /// were found.
    pub(crate) fn open(
        &self,
        storage: &StorageOptions,
    ) -> Result<(std::sync::Arc<dyn zephon_core::Dataset>, Layout), zephon_io::Error> {
        let locations = self
            .paths
            .iter()
            .map(|p| Location::parse(&self.name, &p.to_string_lossy(), storage))
            .collect::<Result<Vec<_>, _>>()?;
        let layout = Layout::resolve(&self.name, &locations, self.split)?;
        let mut options = DatasetOptions { storage: storage.clone(), ..self.options.clone() };
        if let Some(f) = &self.loss_weight_field
            && !options.fields.extra.contains(f)
        {
            options.fields.extra.push(f.clone());
        }
        Ok((zephon_io::open_layout(&self.name, &layout, &options)?, layout))
    }

    /// Its share of the tokens.
    #[must_use]
    pub fn share(mut self, share: f64) -> Self {
        self.amount = Amount::Share(share);
        self
    }

    /// Its weight on samples.
    #[must_use]
    pub fn weight(mut self, weight: f64) -> Self {
        self.amount = Amount::Weight(weight);
        self
    }

    /// The field holding the text (default `text`).
    #[must_use]
    pub fn text_field(mut self, field: &str) -> Self {
        self.options.fields.text = Some(field.to_string());
        self
    }

    /// All field settings.
    #[must_use]
    pub fn fields(mut self, fields: Fields) -> Self {
        self.options.fields = fields;
        self
    }

    /// Its tokens' weight on the loss (default 1; finite, at least 0): the packer's
    /// `loss_weights` column carries it ([`crate::PackOptions::loss_weights`]), times each
    /// record's weight when [`Dataset::loss_weight_field`] names one. A weight without that
    /// column is refused when the pipeline is built.
    #[must_use]
    pub fn loss_weight(mut self, weight: f64) -> Self {
        self.loss_weight = weight;
        self
    }

    /// The field holding each record's weight on the loss (a number, finite, at least 0; a
    /// record without it is a bad record), multiplied by the dataset's.
    #[must_use]
    pub fn loss_weight_field(mut self, field: &str) -> Self {
        self.loss_weight_field = Some(field.to_string());
        self
    }

    /// What its tokens weigh on the loss, checked.
    pub(crate) fn loss(&self) -> Result<zephon_operator::DatasetLossWeight, String> {
        let weight = zephon_operator::LossWeight::new(self.loss_weight as f32).ok_or_else(|| {
            format!("dataset {}: loss_weight {} must be a finite number, at least 0", self.name, self.loss_weight)
        })?;
        Ok(zephon_operator::DatasetLossWeight { weight, field: self.loss_weight_field.clone() })
    }

    /// Where JSONL indexes are cached.
    #[must_use]
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.options.cache_dir = Some(dir.into());
        self
    }
}

/// The work source of a pipeline: datasets, amounts and order.
#[derive(Clone, Debug, Default)]
pub struct Mixture {
    pub(crate) datasets: Vec<Dataset>,
    pub(crate) config: SourceOptions,
    pub(crate) seed: Option<u64>,
    pub(crate) estimate: EstimateOptions,
    /// The balance asked for; by default `RowTokens` where it can be measured.
    pub(crate) balance: Option<Balance>,
    /// Whether chunks were asked for by samples ([`Mixture::chunk_size`]): a mixture by token
    /// shares otherwise cuts each dataset's chunks by estimated tokens.
    pub(crate) chunks_by_samples: bool,
    /// Token shares that take effect at later steps ([`Mixture::shares_from`]).
    pub(crate) later_shares: Vec<(u64, Vec<(String, f64)>)>,
    /// Every record once, in order, instead of a mixture (a validation pass).
    pub(crate) once_in_order: bool,
    /// How object stores are reached and cached.
    pub(crate) storage: StorageOptions,
}

impl Mixture {
    /// An empty mixture: repeat forever, shuffled shards and rows, chunks of 256 samples.
    pub fn new() -> Self {
        Mixture::default()
    }

    /// Adds a dataset.
    #[must_use]
    pub fn dataset(mut self, dataset: Dataset) -> Self {
        self.datasets.push(dataset);
        self
    }

    /// Samples per chunk (the unit dealt to lanes). A mixture by token shares otherwise cuts
    /// each dataset's chunks by estimated tokens ([`zephon_mix::STEERED_CHUNK_TOKENS`]), which
    /// keeps each lane's shares within about a chunk of tokens.
    #[must_use]
    pub fn chunk_size(mut self, samples: u32) -> Self {
        self.config.chunk_size = samples;
        self.chunks_by_samples = true;
        self
    }

    /// Chunks of about `tokens` estimated tokens instead of a fixed number of samples, so
    /// that lanes carry about as many tokens each and finite data ends on every lane at about
    /// the same step (see `MixtureSource`). Tokens per row are estimated with the pipeline's
    /// tokenizer, as for token shares.
    #[must_use]
    pub fn chunk_tokens(mut self, tokens: u64) -> Self {
        self.config.chunk_tokens = Some(tokens);
        self
    }

    /// How the end of finite data is shared among lanes. `RowTokens`: every row is tokenized
    /// once at build (cached on disk) and the end of the data is shared out so that all lanes
    /// end within a few tokens, and `Tail::Drop` loses about one step. `RowSizes` reads every
    /// row's text length instead (cheaper; lanes still end apart by how tokens per byte vary
    /// between documents); `Estimates` reads nothing. Both row measures need a tokenize step
    /// and no images (an image's tokens are not in the text). Default: `RowTokens` where it
    /// can be measured and the data is at most [`crate::ROW_TOKENS_BY_DEFAULT`] bytes, else
    /// `Estimates`.
    #[must_use]
    pub fn balance(mut self, balance: Balance) -> Self {
        self.balance = Some(balance);
        self
    }

    /// Row order within each pass.
    #[must_use]
    pub fn order(mut self, order: Order) -> Self {
        self.config.order = order;
        self
    }

    /// What happens when a dataset has been read `passes` times.
    #[must_use]
    pub fn exhaustion(mut self, exhaustion: Exhaustion, passes: u64) -> Self {
        self.config.exhaustion = exhaustion;
        self.config.passes = passes;
        self
    }

    /// The seed of shuffles and the deal (default: the pipeline's seed).
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Changes the token shares from global step `step` on (a curriculum, or annealing on some
    /// datasets at the end): `shares` names every dataset once, each share in `[0, 1]`, summing
    /// to 1. The datasets' own shares hold from step 0; each call adds a segment, in
    /// increasing steps. Every step's data stays a pure function of the step, at any world
    /// size and after any resume (see `ShareSchedule`).
    ///
    /// ```no_run
    /// use zephon::*;
    /// let mixture = Mixture::new()
    ///     .dataset(Dataset::new("web", "data/web").share(0.8))
    ///     .dataset(Dataset::new("curated", "data/curated").share(0.2))
    ///     .shares_from(90_000, &[("web", 0.4), ("curated", 0.6)]); // anneal on curated data
    /// ```
    #[must_use]
    pub fn shares_from(mut self, step: u64, shares: &[(&str, f64)]) -> Self {
        self.later_shares.push((step, shares.iter().map(|(n, s)| (n.to_string(), *s)).collect()));
        self
    }

    /// How object stores (`s3://`, `gs://`, `az://`, `https://` paths) are reached and their
    /// blocks cached on the node; credentials come from the environment and profiles only.
    #[must_use]
    pub fn storage(mut self, storage: StorageOptions) -> Self {
        self.storage = storage;
        self
    }

    /// How token estimation samples (only used with token shares).
    #[must_use]
    pub fn estimate(mut self, config: EstimateOptions) -> Self {
        self.estimate = config;
        self
    }

    /// The token shares by step, if the mixture is by tokens (after [`Mixture::check`]).
    pub(crate) fn share_schedule(&self) -> Result<Option<ShareSchedule>, String> {
        let Some(first) = self.token_shares() else { return Ok(None) };
        let mut segments = vec![(0, first)];
        for (step, named) in &self.later_shares {
            let by_index = self
                .datasets
                .iter()
                .map(|d| named.iter().find(|(n, _)| *n == d.name).map_or(0.0, |(_, s)| *s))
                .collect();
            segments.push((*step, by_index));
        }
        ShareSchedule::new(segments).map(Some).map_err(|e| e.to_string())
    }

    /// Token shares by dataset, if the mixture is by tokens.
    pub(crate) fn token_shares(&self) -> Option<Vec<f64>> {
        self.datasets
            .iter()
            .map(|d| match d.amount {
                Amount::Share(s) => Some(s),
                Amount::Weight(_) => None,
            })
            .collect()
    }

    /// Checks what no run can use: no datasets, duplicate names, amounts that are not finite
    /// and positive, token shares that do not sum to 1 within [`SHARE_SUM_TOLERANCE`] (they
    /// are never renormalised silently: [`Mixture::notices`] says so), a mix of shares and
    /// weights, empty chunks or blocks.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.datasets.is_empty() {
            return Err("the mixture has no datasets".into());
        }
        for (i, d) in self.datasets.iter().enumerate() {
            if self.datasets[..i].iter().any(|e| e.name == d.name) {
                return Err(format!("two datasets are called {:?}: names identify datasets in checkpoints", d.name));
            }
            match d.amount {
                // A share of 0 is for a dataset a later segment of the schedule reads.
                Amount::Share(s) if !(s.is_finite() && (0.0..=1.0).contains(&s)) => {
                    return Err(format!("dataset {}: share {s} must be in [0, 1]", d.name));
                }
                Amount::Share(s)
                    if s == 0.0
                        && !self.later_shares.iter().any(|(_, w)| w.iter().any(|(n, x)| *n == d.name && *x > 0.0)) =>
                {
                    return Err(format!(
                        "dataset {}: share 0 and no later share: it would never be read (remove it, or give it a share \
                         in a later segment with Mixture::shares_from / [schedule] shares)",
                        d.name
                    ));
                }
                Amount::Weight(w) if !(w.is_finite() && w > 0.0) => {
                    return Err(format!("dataset {}: weight {w} must be finite and positive", d.name));
                }
                _ => {}
            }
        }
        let shares: Vec<f64> = self
            .datasets
            .iter()
            .filter_map(|d| match d.amount {
                Amount::Share(s) => Some(s),
                Amount::Weight(_) => None,
            })
            .collect();
        if !shares.is_empty() && shares.len() != self.datasets.len() {
            return Err("give every dataset a token share, or every dataset a sample weight".into());
        }
        let sum: f64 = shares.iter().sum();
        if !shares.is_empty() && (sum - 1.0).abs() > SHARE_SUM_TOLERANCE {
            return Err(format!(
                "token shares sum to {sum}, not 1 (within {SHARE_SUM_TOLERANCE}): give shares that add up to 1 \
                 (weights, unlike shares, are relative)"
            ));
        }
        self.check_later_shares(!shares.is_empty())?;
        if self.config.chunk_size == 0 {
            return Err("chunk_size must be at least 1".into());
        }
        if self.config.chunk_tokens == Some(0) {
            return Err("chunk_tokens must be at least 1".into());
        }
        if let zephon_mix::RowOrder::Blocks { size: 0 } = self.config.order.rows {
            return Err("block_size must be at least 1".into());
        }
        Ok(())
    }

    /// What the run does with the shares as given that a user should know: shares that sum to
    /// 1 only within [`SHARE_SUM_TOLERANCE`] are used relative to their sum (a sum off by
    /// floating-point rounding alone is not worth a word).
    pub(crate) fn notices(&self) -> Vec<String> {
        let Some(first) = self.token_shares() else { return Vec::new() };
        let later = self.later_shares.iter().map(|(step, named)| (*step, named.iter().map(|(_, x)| *x).sum::<f64>()));
        std::iter::once((0, first.iter().sum::<f64>()))
            .chain(later)
            .filter_map(|(step, sum)| share_sum_notice(step, sum))
            .collect()
    }

    /// Checks the later segments of the share schedule: steps after 0 and increasing, every
    /// dataset named once, shares in `[0, 1]` summing to 1 (never renormalised silently).
    fn check_later_shares(&self, by_tokens: bool) -> Result<(), String> {
        let Some((first, _)) = self.later_shares.first() else { return Ok(()) };
        if !by_tokens {
            return Err("a share schedule changes token shares: give the datasets `share`, not `weight`".into());
        }
        let mut last = 0;
        for (i, (step, named)) in self.later_shares.iter().enumerate() {
            let at = format!("the shares from step {step}");
            if *step <= last && (i > 0 || *first == 0) {
                return Err(format!(
                    "{at}: segments start after step 0 (the datasets' shares) and at increasing steps"
                ));
            }
            last = *step;
            for (n, x) in named {
                if !self.datasets.iter().any(|d| d.name == *n) {
                    return Err(format!("{at} name {n:?}, which is not a dataset of the mixture"));
                }
                if named.iter().filter(|(m, _)| m == n).count() > 1 {
                    return Err(format!("{at} name {n:?} twice"));
                }
                if !(x.is_finite() && (0.0..=1.0).contains(x)) {
                    return Err(format!("{at}: {n} {x} must be in [0, 1]"));
                }
            }
            if let Some(d) = self.datasets.iter().find(|d| !named.iter().any(|(n, _)| *n == d.name)) {
                return Err(format!("{at} do not name dataset {}: give every dataset its share", d.name));
            }
            let sum: f64 = named.iter().map(|(_, x)| x).sum();
            if (sum - 1.0).abs() > SHARE_SUM_TOLERANCE {
                return Err(format!("{at} sum to {sum}, not 1 (within {SHARE_SUM_TOLERANCE})"));
            }
        }
        Ok(())
    }
}
