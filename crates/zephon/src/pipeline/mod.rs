//! The builder DSL: a mixture, then operators, then `build` at a topology.

use std::path::Path;
use std::sync::Arc;

use zephon_core::{
    BadRecords, Datasets, Engine, ExecOptions, Operators, RunSpec, SplitCheckpoint, Tail, Topology, WorkSource,
    checkpoint,
};
use zephon_mix::{
    Balance, EnsureMixture, EstimateOptions, Exhaustion, MixtureSource, Shuffle, SteeredSource, TokenEstimate,
};
use zephon_operator::Operator;
use zephon_pack::Pack;

use crate::assembled::Assembled;
use crate::error::{Error, Result};
use crate::loader::Loader;
use crate::mixture::{Amount, Mixture};

mod measure;

/// A pipeline under construction: what to train on (a [`Mixture`]) and how stored samples
/// become rows (operators, in order). `build` opens the data and starts the engine for one
/// rank; `restore` continues from a checkpoint at any world size.
///
/// ```no_run
/// use zephon::*;
/// let tokenizer = Tokenizer::from_file("tokenizer.json".as_ref())?;
/// let mixture = Mixture::new()
///     .dataset(Dataset::new("a", "corpora/a/jsonl").share(0.5))
///     .dataset(Dataset::new("b", "corpora/b/jsonl").share(0.5));
/// let mut loader = Pipeline::new(mixture)
///     .tokenize(Tokenize::new(tokenizer).eos("<|endoftext|>")?.long_documents(LongDocuments::Split { max_tokens: 2048 })?)
///     .ensure_mixture(EnsureMixture::slack_tokens(4096))
///     .pack(Pack::new(PackOptions::new(Algorithm::BestFit { bins: 64 }, 2048))?)
///     .shuffle(Shuffle::buffer(64)?)
///     .seed(1234)
///     .build(Topology::builder().lanes(8).rows_per_step(16).from_env()?)?;
/// // The mixture repeats: training decides when to stop (finite data ends with `None`).
/// for _ in 0..1000 {
///     let Some(step) = loader.next_step()? else { break };
///     let batch = step.to_batch()?; // input_ids, labels, positions, segment_ids, cu_seqlens, ...
/// #   let _ = batch;
/// }
/// # Ok::<(), zephon::Error>(())
/// ```
#[derive(Clone)]
pub struct Pipeline {
    mixture: Mixture,
    stages: Vec<Arc<dyn Operator>>,
    /// The tokenize step, also kept as itself: token estimates measure with its tokenizer.
    #[cfg(feature = "text")]
    tokenize: Option<Box<zephon_text::Tokenize>>,
    seed: u64,
    bad_records: BadRecords,
    tail: Tail,
    exec: ExecOptions,
}

impl Pipeline {
    /// A pipeline over `mixture` with no operators yet.
    pub fn new(mixture: Mixture) -> Self {
        Pipeline {
            mixture,
            stages: Vec::new(),
            #[cfg(feature = "text")]
            tokenize: None,
            seed: 0,
            bad_records: BadRecords::Fail,
            tail: Tail::Drop,
            exec: ExecOptions::default(),
        }
    }

    /// Tokenizes the text field (the parallel, stateless part where the CPU goes).
    #[cfg(feature = "text")]
    #[must_use]
    pub fn tokenize(mut self, tokenize: zephon_text::Tokenize) -> Self {
        self.stages.push(Arc::new(tokenize.clone()));
        self.tokenize = Some(Box::new(tokenize));
        self
    }

    /// Decodes, resizes and normalises the images records carry (the parallel part, before
    /// `tokenize`, which places each image's placeholder tokens).
    #[cfg(feature = "vision")]
    #[must_use]
    pub fn images(mut self, images: zephon_vision::Images) -> Self {
        self.stages.push(Arc::new(images));
        self
    }

    /// Keeps the token shares of the packer's rows on target: a per-lane scheduler that
    /// orders documents and pieces of documents (see [`EnsureMixture`]), measured on what the
    /// packer emitted (it takes the datasets' shares and the packer's standing stock and
    /// truncation when the pipeline is assembled). It holds what runs ahead and drops nothing
    /// unless given a cap ([`EnsureMixture::hold`]): each lane's closed loop supplies what it
    /// needs. Needs token shares on the datasets.
    ///
    /// `.ensure_mixture(EnsureMixture::slack_tokens(4096))`
    #[must_use]
    pub fn ensure_mixture(mut self, ensure: EnsureMixture) -> Self {
        self.stages.push(Arc::new(ensure));
        self
    }

    /// Packs documents into rows.
    #[must_use]
    pub fn pack(mut self, pack: Pack) -> Self {
        self.stages.push(Arc::new(pack));
        self
    }

    /// Shuffles records (usually rows) through a buffer per lane:
    /// `.shuffle(Shuffle::buffer(64)?)`, or `Shuffle::buffer(64)?.warm_up()` to emit from the
    /// start while the buffer fills.
    #[must_use]
    pub fn shuffle(mut self, shuffle: Shuffle) -> Self {
        self.stages.push(Arc::new(shuffle));
        self
    }

    /// Appends any operator (third-party operators implement `zephon_operator::Operator`). It
    /// is assembled with the others ([`Operator::assemble`]): what it needs of the pipeline it
    /// states itself.
    #[must_use]
    pub fn then(mut self, op: impl Operator) -> Self {
        self.stages.push(Arc::new(op));
        self
    }

    /// The run's seed (shuffles, the chunk deal, accumulators).
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// What to do with malformed records.
    #[must_use]
    pub fn bad_records(mut self, policy: BadRecords) -> Self {
        self.bad_records = policy;
        self
    }

    /// What to do when finite data ends mid-step.
    #[must_use]
    pub fn tail(mut self, tail: Tail) -> Self {
        self.tail = tail;
        self
    }

    /// Execution settings (threads, prefetch, unit size, snapshot interval): they never change
    /// the data.
    #[must_use]
    pub fn exec(mut self, exec: ExecOptions) -> Self {
        self.exec = exec;
        self
    }

    /// Worker threads.
    #[must_use]
    pub fn threads(mut self, threads: usize) -> Self {
        self.exec.threads = threads;
        self
    }

    /// Opens the data and starts this rank's part of the run from the beginning.
    pub fn build(self, topology: Topology) -> Result<Loader> {
        let assembled = self.assemble(None, topology.lanes())?;
        let engine = Engine::start(assembled.spec.clone(), topology, self.exec)?;
        Ok(Loader::new(engine, assembled, self.exec))
    }

    /// Continues the run from the checkpoint in `dir` at `topology` (any world size dividing
    /// the lanes). Token estimates come from the checkpoint, never measured again.
    pub fn restore(self, topology: Topology, dir: &Path) -> Result<Loader> {
        let metadata = checkpoint::metadata(dir)?;
        let assembled = self.assemble(Some(&metadata), topology.lanes())?;
        let engine = Engine::restore(assembled.spec.clone(), topology, self.exec, dir)?;
        Ok(Loader::new(engine, assembled, self.exec))
    }

    /// Continues the run from a split checkpoint (the run part and this rank's lane parts, as a
    /// trainer's distributed checkpoint hands them back) at `topology`, any world size dividing
    /// the lanes. `key` names a lane's part in errors as the caller stores it.
    pub fn restore_split(
        self,
        topology: Topology,
        split: &SplitCheckpoint,
        key: &dyn Fn(zephon_operator::Lane) -> String,
    ) -> Result<Loader> {
        let metadata = SplitCheckpoint::summary(&split.run)?.metadata;
        let assembled = self.assemble(Some(&metadata), topology.lanes())?;
        let engine = Engine::restore_split(assembled.spec.clone(), topology, self.exec, split, key)?;
        Ok(Loader::new(engine, assembled, self.exec))
    }

    /// The split checkpoint of this rank's lanes before the first step, without starting the
    /// run (it opens the data and plans the mixture, as `build` does): the template a trainer's
    /// checkpoint store loads into.
    pub fn initial_split(&self, topology: &Topology) -> Result<SplitCheckpoint> {
        let assembled = self.assemble(None, topology.lanes())?;
        Ok(Engine::initial_split(&assembled.spec, topology, &self.exec)?)
    }

    /// This pipeline as a validation pass (see [`crate::Validation`]): every record of its
    /// datasets once, in order, each one row of `pack`'s shape (one record a row, truncated to
    /// it), the last steps padded so that every rank ends after the same step. The pipeline must
    /// hold no packer, shuffle or `ensure_mixture` of its own (they would move or merge records;
    /// `shuffle`, when given, goes after the packer), and its records must each make one piece
    /// (tokenize and chat truncate, not split).
    pub fn validation(mut self, pack: &Pack, shuffle: Option<Shuffle>) -> Result<crate::Validation> {
        // An accumulator that passes every record on as it comes (one that only counts) keeps
        // one record a row; any other may hold, reorder or merge records.
        if let Some(op) = self
            .stages
            .iter()
            .find(|op| op.kind().accumulates() && op.offer().holds != Some(zephon_operator::Holding::Nothing))
        {
            return Err(Error::Build(format!(
                "a validation pass reads each record into one row: it adds its own one-per-row packer, and {} would \
                 reorder or merge records",
                op.name()
            )));
        }
        let mut config = pack.config().clone();
        config.algorithm = zephon_pack::Algorithm::FirstFit { bins: 1 };
        config.max_segments = 1;
        config.longer_than_row = zephon_pack::LongerThanRow::Truncate;
        let one_per_row = Pack::new(config)?;
        let pad = one_per_row.padding_row();
        self.mixture.once_in_order = true;
        self.tail = Tail::Partial;
        let pipeline = self.pack(one_per_row);
        let pipeline = match shuffle {
            Some(s) => pipeline.shuffle(s),
            None => pipeline,
        };
        Ok(crate::Validation::new(pipeline, pad))
    }

    /// w(step) as a schedule, when the mixture is by token shares: the datasets' shares from
    /// step 0 and the segments of [`Mixture::shares_from`]. Checks the mixture; opens nothing.
    pub fn share_schedule(&self) -> Result<Option<zephon_core::ShareSchedule>> {
        self.mixture.check().map_err(Error::Build)?;
        self.mixture.share_schedule().map_err(Error::Build)
    }

    /// The plan, without starting anything: datasets, work source, operators (parallel part
    /// and per-lane stages), buffers.
    pub fn explain(&self, topology: &Topology) -> Result<String> {
        Ok(self.assemble(None, topology.lanes())?.plan(topology, &self.exec).indent())
    }

    /// Opens datasets, plans weights (estimating tokens unless `saved` holds estimates) and
    /// builds the core run spec for `lanes` lanes.
    fn assemble(&self, saved: Option<&zephon_core::RunMetadata>, lanes: u32) -> Result<Assembled> {
        let m = &self.mixture;
        m.check().map_err(Error::Build)?;
        let schedule = m.share_schedule().map_err(Error::Build)?;
        let shares = schedule.as_ref().map(|w| w.at(0).to_vec());
        // Assembled first: a pipeline in the wrong order is refused before data is opened or
        // measured.
        let operators = self.operators(shares.as_deref())?;
        m.storage.check().map_err(Error::Build)?;
        let (opened, layouts): (Vec<_>, Vec<_>) = m
            .datasets
            .iter()
            .map(|d| d.open(&m.storage))
            .collect::<std::result::Result<Vec<_>, _>>()?
            .into_iter()
            .unzip();
        let datasets = Datasets::new(opened);
        if layouts.iter().any(|l| l.stats().is_some()) {
            let need = m.storage.cache_needed(lanes as usize, self.exec.threads);
            if m.storage.cache_bytes() < need {
                return Err(Error::Build(format!(
                    "[storage] cache_bytes = {} is smaller than what the readers of one step hold at once: one block \
                     of {} bytes per lane, two per worker thread and one per prefetch request, {need} bytes; give at least \
                     that",
                    m.storage.cache_bytes(),
                    m.storage.block_bytes()
                )));
            }
        }
        let mut config = m.config;
        config.seed = m.seed.unwrap_or(self.seed);
        config.balance = self.balance(&datasets)?;
        let planned = shares.is_some() || m.config.chunk_tokens.is_some();
        let estimates = if m.once_in_order {
            None
        } else if planned || config.balance != Balance::Estimates {
            let estimates = match saved.filter(|s| !s.token_estimates.is_empty()) {
                Some(s) => s.token_estimates.clone(),
                None => match self.estimate(&datasets, &operators) {
                    Ok(e) => e,
                    // Only the balance needed them: data with no measurable rows (all bad,
                    // say) ends unbalanced, as the plan says, and its rows are reported
                    // as the run meets them.
                    Err(_) if !planned && m.balance.is_none() => {
                        config.balance = Balance::Estimates;
                        Vec::new()
                    }
                    Err(e) => return Err(e),
                },
            };
            if estimates.is_empty() { None } else { Some(estimates) }
        } else {
            None
        };
        let by_rows = config.balance != Balance::Estimates;
        // Token shares are held by each lane's closed loop on what it delivered; sample
        // weights by the open-loop interleave.
        let once = m.once_in_order.then(|| zephon_mix::OnceInOrder::new(&datasets.manifests(), config.chunk_size));
        let records = once.as_ref().map(zephon_mix::OnceInOrder::rows);
        let (source, weights): (Arc<dyn WorkSource>, Vec<f64>) = match (&shares, &estimates) {
            _ if once.is_some() => (Arc::new(once.clone().expect("checked above")), vec![1.0; datasets.len()]),
            (Some(shares), Some(e)) => {
                let per_row: Vec<f64> = e.iter().map(TokenEstimate::tokens_per_row).collect();
                let max_samples = m.chunks_by_samples.then_some(config.chunk_size);
                let mut source = SteeredSource::new(&datasets.manifests(), shares, config, &per_row, max_samples)?;
                if let Some(w) = schedule.clone().filter(|w| !w.is_constant()) {
                    source = source.with_schedule(w)?;
                }
                if by_rows && source.is_finite() {
                    source = source.balance_by_rows(&self.row_tokens(&datasets, e, config.balance)?, lanes)?;
                }
                (Arc::new(source), shares.clone())
            }
            _ => {
                let weights: Vec<f64> = m
                    .datasets
                    .iter()
                    .map(|d| match d.amount {
                        Amount::Weight(w) => w,
                        Amount::Share(s) => s,
                    })
                    .collect();
                let mut source = MixtureSource::new(&datasets.manifests(), &weights, config)?;
                if let Some(e) = &estimates {
                    source =
                        source.with_row_tokens(&e.iter().map(TokenEstimate::tokens_per_row).collect::<Vec<_>>())?;
                    if by_rows && source.len().is_some() {
                        source = source.balance_by_rows(&self.row_tokens(&datasets, e, config.balance)?, lanes)?;
                    }
                }
                (Arc::new(source), weights)
            }
        };
        let spec = RunSpec {
            operators,
            source,
            datasets,
            seed: self.seed,
            bad_records: self.bad_records,
            tail: self.tail,
            token_estimates: estimates.clone().unwrap_or_default(),
        };
        let notices = m.notices();
        let storage = layouts.iter().any(|l| l.stats().is_some()).then(|| m.storage.describe());
        Ok(Assembled { spec, estimates, weights, shares: schedule, records, notices, layouts, storage })
    }

    /// The operators, each assembled into the pipeline ([`Operator::assemble`]) with what the
    /// mixture and the other operators offer.
    fn operators(&self, shares: Option<&[f64]>) -> Result<Operators> {
        let ops = &self.stages;
        let neighbours: Vec<zephon_operator::Neighbour> = ops
            .iter()
            .map(|op| zephon_operator::Neighbour { name: op.name().to_string(), offer: op.offer() })
            .collect();
        let names: Vec<String> = self.mixture.datasets.iter().map(|d| d.name.clone()).collect();
        let text_fields = self.text_fields();
        let loss_weights = self
            .mixture
            .datasets
            .iter()
            .map(|d| d.loss())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(Error::Build)?;
        // Only a packer writes loss weights (it refuses them when it does not write the column);
        // without one they would change nothing.
        if let Some(d) = loss_weights.iter().position(|w| *w != zephon_operator::DatasetLossWeight::default())
            && !neighbours.iter().any(|n| n.offer.row_length.is_some())
        {
            return Err(Error::Build(format!(
                "dataset {}: a loss weight is carried by a packer's loss_weights column, and the pipeline has no packer",
                names[d]
            )));
        }
        let mut operators = Operators::new();
        for (i, op) in ops.iter().enumerate() {
            let before: Vec<zephon_operator::Neighbour> = neighbours[..i].iter().rev().cloned().collect();
            let plan = zephon_operator::Assembly {
                datasets: &names,
                text_fields: &text_fields,
                shares,
                loss_weights: &loss_weights,
                before: &before,
                after: &neighbours[i + 1..],
            };
            let assembled = op.assemble(&plan).map_err(|e| Error::Build(format!("{}: {e}", op.name())))?;
            operators = operators.then(assembled.unwrap_or_else(|| op.clone()));
        }
        Ok(operators)
    }
}

/// Stored bytes of data up to which finite runs tokenize every row at build by default (under
/// a minute on 2 cores with the GPT-2 fast path, a few with the `tokenizers` crate). Beyond, the end is shared by
/// estimates unless `balance` asks otherwise: a pass of tokenizing on every rank would cost
/// more than the tokens a balanced end saves.
pub const ROW_TOKENS_BY_DEFAULT: u64 = 1 << 30;

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let stages: Vec<String> = self.stages.iter().map(|op| op.fingerprint().to_text()).collect();
        f.debug_struct("Pipeline")
            .field("mixture", &self.mixture)
            .field("operators", &stages)
            .field("seed", &self.seed)
            .field("bad_records", &self.bad_records)
            .field("tail", &self.tail)
            .field("exec", &self.exec)
            .finish()
    }
}
