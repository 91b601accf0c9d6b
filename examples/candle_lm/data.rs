//! The data side: the zephon pipeline (tokenize, wrap-pack) behind one prefetcher per rank, and
//! the naive baseline that shards a shuffled dataset by rank and packs each rank's stream.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;

use candle_core::Device;
use zephon_candle::{EngineSource, PrefetchOptions, Prefetcher, Sink, Tensors};
use zephon_core::{
    BadRecords, Batch, Dataset, Datasets, ExecOptions, Operators, Place, RunSpec, Tail, Topology, step_fingerprint,
};
use zephon_operator::{
    Accumulator, Digest, Fragment, Lane, LaneContext, Lineage, Operator, Permutation, Record, RngKey, SampleId, Span,
    Value,
};
use zephon_pack::{Algorithm, Pack, PackOptions};
use zephon_text::{LongDocuments, Tokenize, Tokenizer};

use crate::{LANES, Res, SEED, SEQ};

/// What every feed of a run is built from: the run's spec, and the parts the naive loader
/// reuses (dataset, tokenizer, packer).
#[derive(Clone)]
pub(crate) struct Setup {
    pub(crate) spec: RunSpec,
    dataset: Arc<dyn Dataset>,
    tokenizer: Tokenizer,
    eos: u32,
    pack: Pack,
    pub(crate) rows: u32,
    pub(crate) device: Device,
}

impl Setup {
    pub(crate) fn new(corpus: &Path, tokenizer: Tokenizer, rows: u32, device: Device) -> Res<Setup> {
        let dataset = zephon_io::open("a", corpus, &zephon_io::DatasetOptions::default())?;
        let datasets = Datasets::new(vec![dataset.clone()]);
        let config = zephon_mix::SourceOptions { seed: SEED, chunk_size: 16, ..Default::default() };
        let source = zephon_mix::MixtureSource::new(&datasets.manifests(), &[1.0], config)?;
        let eos = tokenizer.token_id("<|endoftext|>")?;
        let tokenize = Tokenize::new(tokenizer.clone())
            .eos("<|endoftext|>")?
            .long_documents(LongDocuments::Split { max_tokens: 4 * SEQ })?;
        // Wrap packing: concatenate and cut, the cheapest layout; documents keep their own
        // positions and segment ids, so attention never crosses a document boundary.
        let pack = Pack::new(PackOptions { pad_id: eos, ..PackOptions::new(Algorithm::Wrap, SEQ) })?;
        let spec = RunSpec {
            operators: Operators::new().then(tokenize).then(pack.clone()),
            source: Arc::new(source),
            datasets,
            seed: SEED,
            bad_records: BadRecords::Fail,
            tail: Tail::Drop,
            token_estimates: Vec::new(),
        };
        Ok(Setup { spec, dataset, tokenizer, eos, pack, rows, device })
    }
}

/// How every zephon feed executes: one worker thread, two steps prefetched, a snapshot after
/// every step (the checkpoint is taken at an arbitrary one).
pub(crate) fn exec() -> ExecOptions {
    ExecOptions { threads: 1, prefetch_steps: 2, unit_samples: 16, snapshot_every: 1, ..ExecOptions::default() }
}

/// Where a run's steps come from: one zephon prefetcher per rank, or naive rank streams.
pub(crate) enum Feed {
    Zephon(Vec<Prefetcher>),
    Naive(Vec<NaiveRank>),
}

impl Feed {
    /// `w` rank loaders, started fresh or restored from the checkpoint in `resume`.
    pub(crate) fn zephon(setup: &Setup, w: u32, resume: Option<&Path>) -> Res<Feed> {
        let mut ranks = Vec::new();
        for r in 0..w {
            let t = Topology::builder()
                .lanes(LANES)
                .rows_per_step(setup.rows)
                .place(Place { rank: r, world_size: w })
                .build()?;
            let source = match resume {
                Some(dir) => EngineSource::restore(setup.spec.clone(), t, exec(), dir)?,
                None => EngineSource::start(setup.spec.clone(), t, exec())?,
            };
            let sink = Sink::new(setup.device.clone());
            ranks.push(Prefetcher::start(source, sink, PrefetchOptions { depth: 2, microbatch: None })?);
        }
        Ok(Feed::Zephon(ranks))
    }

    /// `w` naive ranks, each skipping what it would have consumed in `skip_steps` steps.
    pub(crate) fn naive(setup: &Setup, w: u32, skip_steps: usize) -> Res<Feed> {
        let mut ranks = Vec::new();
        for r in 0..w {
            let mut rank = NaiveRank::new(setup, w, r)?;
            // The usual resume: skip the rows this rank would have consumed at its new world
            // size (which are not the rows the old ranks consumed).
            rank.rows(skip_steps * (setup.rows / w) as usize)?;
            ranks.push(rank);
        }
        Ok(Feed::Naive(ranks))
    }

    /// Each rank's tensors for the next step, and the global fingerprint where known.
    pub(crate) fn next(&mut self) -> Res<(Vec<Tensors>, Option<Digest>)> {
        match self {
            Feed::Zephon(ranks) => {
                let (mut out, mut digests) = (Vec::new(), Vec::new());
                for p in ranks.iter_mut() {
                    let step = p.next_step()?.ok_or("the data ended")?;
                    digests.extend(step.lane_digests().iter().map(|(_, d)| *d));
                    out.extend(step.into_microbatches());
                }
                Ok((out, Some(step_fingerprint(&digests))))
            }
            Feed::Naive(ranks) => {
                let mut out = Vec::new();
                for r in ranks.iter_mut() {
                    let rows = r.rows(r.per_step)?;
                    out.push(r.sink.convert(Batch::from_rows(&rows)?)?);
                }
                Ok((out, None))
            }
        }
    }

    /// Every rank's checkpoint into `dir` (the naive loader has none).
    pub(crate) fn checkpoint(&self, dir: &Path) -> Res<()> {
        if let Feed::Zephon(ranks) = self {
            for p in ranks {
                p.checkpoint(dir)?;
            }
        }
        Ok(())
    }
}

/// One rank of the naive loader: documents `r, r+W, ...` of one seeded shuffle of the
/// dataset, tokenized and wrap-packed by this rank alone.
pub(crate) struct NaiveRank {
    dataset: Arc<dyn Dataset>,
    tokenizer: Tokenizer,
    eos: u32,
    docs: Vec<SampleId>,
    at: usize,
    per_step: usize,
    sink: Sink,
    pack: Box<dyn Accumulator>,
    ready: VecDeque<Record>,
}

impl NaiveRank {
    fn new(setup: &Setup, w: u32, r: u32) -> Res<NaiveRank> {
        let manifest = setup.dataset.manifest();
        let all: Vec<SampleId> = manifest
            .shards
            .iter()
            .enumerate()
            .flat_map(|(s, sh)| (0..sh.rows).map(move |row| SampleId::new(0, s as u32, row)))
            .collect();
        let perm = Permutation::new(all.len() as u64, RngKey::new(SEED, "naive-sampler"));
        let docs = (r as u64..all.len() as u64).step_by(w as usize).map(|i| all[perm.apply(i) as usize]).collect();
        let pack = setup.pack.accumulator(LaneContext { lane: Lane(r), seed: SEED }).ok_or("pack accumulates")?;
        Ok(NaiveRank {
            dataset: setup.dataset.clone(),
            tokenizer: setup.tokenizer.clone(),
            eos: setup.eos,
            docs,
            at: 0,
            per_step: (setup.rows / w) as usize,
            sink: Sink::new(setup.device.clone()),
            pack,
            ready: VecDeque::new(),
        })
    }

    fn rows(&mut self, n: usize) -> Res<Vec<Record>> {
        while self.ready.len() < n {
            let ids: Vec<SampleId> = (0..16).map(|k| self.docs[(self.at + k) % self.docs.len()]).collect();
            self.at += ids.len();
            let mut read = Vec::new();
            self.dataset.read(&ids, &mut read);
            for (id, rec) in ids.into_iter().zip(read) {
                let rec = rec?;
                let text = rec.str("text").ok_or("a document without text")?;
                let mut tokens = self.tokenizer.encode(text)?;
                tokens.push(self.eos);
                let doc = Record::new(Lineage::single(Fragment::span(id, Span::prefix(tokens.len() as u32))))
                    .with(&"tokens".into(), Value::seq(tokens));
                let mut out = Vec::new();
                self.pack.push(doc, &mut out)?;
                self.ready.extend(out);
            }
        }
        Ok(self.ready.drain(..n).collect())
    }
}
