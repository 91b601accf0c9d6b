//! Why elastic determinism matters, on a real loss curve: a tiny causal LM (GPT-2 tokenizer, the
//! 4095 most common GPT-2 ids as tokens and one shared token for the rest, d=64, 2 layers,
//! 4 heads, rows of 128 packed tokens with a block-diagonal causal mask from `segment_ids`)
//! trained on real text four times:
//!
//! 1. zephon at W=1;
//! 2. zephon at W=4 — four rank loaders in this process, each with its own prefetcher, their
//!    gradients summed (simulated data parallelism) — checkpointed at step N/2 while steps are
//!    prefetched, and resumed from that checkpoint at W=2;
//! 3. and 4. the same two schedules with a naive loader that shards a shuffled dataset by rank
//!    (DistributedSampler-style: rank r of W takes documents r, r+W, ... and packs its own
//!    stream) and resumes by skipping the rows the new rank would have consumed.
//!
//! Runs 1 and 2 see the same bytes at every step (their step fingerprints are compared), so
//! their losses agree up to float summation order; runs 3 and 4 see different data and their
//! curves drift apart. The losses are printed side by side and plotted to
//! `docs/loss_curves.png` (and `docs/loss_curves.csv`). Model and optimizer state stay in
//! memory across the resume: what is under test is the data.
//!
//! `cargo run --release -p zephon-candle --example candle_lm -- [--steps N] [--rows G]
//! [--compare M] [--out PNG] [--device cpu|cuda] [--threads N]` (needs `bash scripts/fetch-testdata.sh`;
//! `--device cuda` needs `--features cuda`, see `scripts/cuda-tests.sh`). `--compare M` also
//! times M steps at W=1 with and without the prefetcher.

use std::collections::VecDeque;
use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use candle_core::backprop::GradStore;
use candle_core::{D, DType, Device, Tensor, Var};
use candle_nn::optim::{AdamW, Optimizer, ParamsAdamW};
use plotters::prelude::*;
use zephon_candle::{EngineSource, PrefetchOptions, Prefetcher, Sink, Tensors};
use zephon_core::{
    Accumulator, BadRecords, Batch, Dataset, Datasets, Digest, ExecOptions, Fragment, Lane, LaneContext, Lineage,
    Operator, Operators, Permutation, Place, Record, RngKey, RunSpec, SampleId, Span, Tail, Topology, Value,
    step_fingerprint,
};
use zephon_pack::{Algorithm, Pack, PackOptions};
use zephon_text::{LongDocuments, Tokenize, Tokenizer};

type Res<T> = Result<T, Box<dyn Error>>;

const SEQ: usize = 128;
const DIM: usize = 64;
const HEADS: usize = 4;
const LAYERS: usize = 2;
/// The model's vocabulary: GPT-2 ids below `CLASSES - 1` are their own token, rarer ones share
/// the last, in the input and in the targets. GPT-2 numbers tokens in BPE merge order, roughly
/// frequency order, so common tokens keep their identity. The full 50257-token vocabulary
/// (embeddings, softmax, AdamW over 3.2M embedding weights) would make a CPU step about 6x
/// as slow.
const CLASSES: usize = 4096;
const LANES: u32 = 8;
const SEED: u64 = 1234;

struct Args {
    steps: usize,
    rows: u32,
    compare: usize,
    out: PathBuf,
    device: Device,
    threads: usize,
}

fn args() -> Res<Args> {
    let mut a =
        Args { steps: 200, rows: 8, compare: 30, out: "docs/loss_curves.png".into(), device: Device::Cpu, threads: 1 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--steps" => a.steps = value.parse()?,
            "--rows" => a.rows = value.parse()?,
            "--compare" => a.compare = value.parse()?,
            "--out" => a.out = value.into(),
            "--device" => a.device = device(&value)?,
            "--threads" => a.threads = value.parse()?,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if !a.rows.is_multiple_of(LANES) || a.steps < 2 {
        return Err(format!("--rows must be a multiple of {LANES} and --steps at least 2").into());
    }
    Ok(a)
}

/// `cpu`, or `cuda` / `cuda:N` in a build with the `cuda` feature.
fn device(name: &str) -> Res<Device> {
    match name {
        "cpu" => Ok(Device::Cpu),
        #[cfg(feature = "cuda")]
        cuda if cuda.starts_with("cuda") => {
            let ordinal = cuda.strip_prefix("cuda:").map_or(Ok(0), str::parse)?;
            Ok(Device::new_cuda(ordinal)?)
        }
        other => Err(format!("unknown device {other} (cuda needs the `cuda` feature)").into()),
    }
}

fn main() -> Res<()> {
    let args = args()?;
    // candle's CPU kernels run on a pool whose threads spin at barriers: on a small machine
    // one compute thread beats one per core, because the loaders' threads need the other
    // cores. `--threads N` changes it; set before any thread starts.
    for var in ["CANDLE_NUM_THREADS", "RAYON_NUM_THREADS"] {
        if std::env::var_os(var).is_none() {
            // SAFETY: no other thread exists yet, so nothing reads the environment concurrently.
            unsafe { std::env::set_var(var, args.threads.to_string()) };
        }
    }
    let data = std::env::var_os("ZEPHON_TESTDATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/zephon-testdata"));
    let corpus = data.join("corpora/a/jsonl");
    let tokenizer = Tokenizer::from_file(&data.join("tokenizers/gpt2/tokenizer.json"))?;
    let setup = Setup::new(&corpus, tokenizer, args.rows, args.device.clone())?;
    let init = Params::init(SEED);
    let (n, half) = (args.steps, args.steps / 2);

    let t = Instant::now();
    let z1 = train(&setup, &init, &mut Feed::zephon(&setup, 1, None)?, 0, n)?;
    let z1_secs = t.elapsed().as_secs_f64();
    println!("zephon W=1: {n} steps in {z1_secs:.1} s ({:.2} steps/s, prefetch depth 2)", n as f64 / z1_secs);

    let ckpt = tempfile_dir("zephon-candle-lm")?;
    let mut model = Model::new(&init, &setup.device)?;
    let mut feed = Feed::zephon(&setup, 4, None)?;
    let mut z42 = model.run(&mut feed, 0, half)?;
    // Steps past N/2 are already prefetched; the checkpoint is still the trainer's position.
    feed.checkpoint(&ckpt)?;
    drop(feed);
    let mut feed = Feed::zephon(&setup, 2, Some(&ckpt))?;
    z42.extend(model.run(&mut feed, half, n)?);
    println!("zephon W=4 -> checkpoint at step {half} -> W=2: done");

    let n1 = train(&setup, &init, &mut Feed::naive(&setup, 1, 0)?, 0, n)?;
    let mut model = Model::new(&init, &setup.device)?;
    let mut n42 = model.run(&mut Feed::naive(&setup, 4, 0)?, 0, half)?;
    n42.extend(model.run(&mut Feed::naive(&setup, 2, half)?, half, n)?);
    println!("naive W=1 and W=4 -> W=2: done");

    report(&z1, &z42, &n1, &n42, half);
    let csv = args.out.with_extension("csv");
    write_csv(&csv, &z1, &z42, &n1, &n42)?;
    plot(&args.out, &[&z1, &z42, &n1, &n42], half)?;
    println!("plot: {} (legend in crates/zephon-candle/README.md), values: {}", args.out.display(), csv.display());

    if args.compare > 0 {
        compare_prefetch(&setup, &init, args.compare)?;
    }
    Ok(())
}

/// One step's loss and, for zephon feeds, the global step fingerprint.
#[derive(Clone, Copy)]
struct Point {
    loss: f64,
    fingerprint: Option<Digest>,
}

fn train(setup: &Setup, init: &Params, feed: &mut Feed, from: usize, to: usize) -> Res<Vec<Point>> {
    Model::new(init, &setup.device)?.run(feed, from, to)
}

fn report(z1: &[Point], z42: &[Point], n1: &[Point], n42: &[Point], half: usize) {
    let same = z1.iter().zip(z42).all(|(a, b)| a.fingerprint.is_some() && a.fingerprint == b.fingerprint);
    println!("\nstep | zephon W=1 | zephon W=4->2 |   |diff|   | naive W=1 | naive W=4->2 |  |diff|");
    let every = (z1.len() / 20).max(1);
    for s in (0..z1.len()).filter(|s| s % every == 0 || *s == half || s + 1 == z1.len()) {
        println!(
            "{s:4} | {:10.6} | {:13.6} | {:9.2e} | {:9.4} | {:12.4} | {:7.4}{}",
            z1[s].loss,
            z42[s].loss,
            (z1[s].loss - z42[s].loss).abs(),
            n1[s].loss,
            n42[s].loss,
            (n1[s].loss - n42[s].loss).abs(),
            if s == half { "  <- resumed at W=2 from the checkpoint" } else { "" }
        );
    }
    let max_rel = |a: &[Point], b: &[Point]| {
        a.iter().zip(b).map(|(x, y)| (x.loss - y.loss).abs() / x.loss.abs().max(1e-12)).fold(0.0f64, f64::max)
    };
    let mean_abs =
        |a: &[Point], b: &[Point]| a.iter().zip(b).map(|(x, y)| (x.loss - y.loss).abs()).sum::<f64>() / a.len() as f64;
    println!(
        "\nzephon: every global step fingerprint identical at W=1 and W=4->2: {same}; \
         loss difference max {:.2e} relative, mean {:.2e} absolute (f32 summation order)",
        max_rel(z1, z42),
        mean_abs(z1, z42)
    );
    println!(
        "naive:  loss difference max {:.2e} relative, mean {:.2e} absolute (different data at every step)",
        max_rel(n1, n42),
        mean_abs(n1, n42)
    );
}

/// Steps/s at W=1 with the prefetcher and with the same work done inline, in alternating
/// blocks of 10 steps so that the load of a shared machine hits both alike.
fn compare_prefetch(setup: &Setup, init: &Params, steps: usize) -> Res<()> {
    let sink = Sink::new(setup.device.clone());
    let (mut with_model, mut inline_model) = (Model::new(init, &setup.device)?, Model::new(init, &setup.device)?);
    let mut feed = Feed::zephon(setup, 1, None)?;
    let mut source = EngineSource::start(
        setup.spec.clone(),
        Topology::builder().lanes(LANES).rows_per_step(setup.rows).build()?,
        exec(),
    )?;
    // The inline path: the trainer's thread waits for the step and builds its tensors.
    let inline = |model: &mut Model, source: &mut EngineSource| -> Res<f64> {
        let t = Instant::now();
        let step = zephon_candle::StepSource::next_step(source).map_err(|e| e as Box<dyn Error>)?;
        let tensors = sink.step(step.ok_or("the data ended")?, None)?.into_microbatches().remove(0);
        let data = t.elapsed().as_secs_f64();
        model.train_step(&[tensors])?;
        Ok(data)
    };
    // Warm-up: the engines start and the first steps are built.
    with_model.run(&mut feed, 0, 2)?;
    for _ in 0..2 {
        inline(&mut inline_model, &mut source)?;
    }
    let (mut with_secs, mut inline_secs, mut data_secs) = (0.0, 0.0, 0.0);
    for block in (0..steps).step_by(10) {
        let n = 10.min(steps - block);
        let t = Instant::now();
        with_model.run(&mut feed, 0, n)?;
        with_secs += t.elapsed().as_secs_f64();
        let t = Instant::now();
        for _ in 0..n {
            data_secs += inline(&mut inline_model, &mut source)?;
        }
        inline_secs += t.elapsed().as_secs_f64();
    }
    println!(
        "W=1, {steps} steps: {:.2} steps/s with the prefetcher, {:.2} steps/s without \
         (inline, the trainer waited {:.1} ms/step for data and tensors)",
        steps as f64 / with_secs,
        steps as f64 / inline_secs,
        1000.0 * data_secs / steps as f64
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Data: the zephon pipeline, and the naive baseline.

#[derive(Clone)]
struct Setup {
    spec: RunSpec,
    dataset: Arc<dyn Dataset>,
    tokenizer: Tokenizer,
    eos: u32,
    pack: Pack,
    rows: u32,
    device: Device,
}

impl Setup {
    fn new(corpus: &Path, tokenizer: Tokenizer, rows: u32, device: Device) -> Res<Setup> {
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

fn exec() -> ExecOptions {
    ExecOptions { threads: 1, prefetch_steps: 2, unit_samples: 16, snapshot_every: 1, ..ExecOptions::default() }
}

/// Where a run's steps come from: one zephon prefetcher per rank, or naive rank streams.
enum Feed {
    Zephon(Vec<Prefetcher>),
    Naive(Vec<NaiveRank>),
}

impl Feed {
    fn zephon(setup: &Setup, w: u32, resume: Option<&Path>) -> Res<Feed> {
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

    fn naive(setup: &Setup, w: u32, skip_steps: usize) -> Res<Feed> {
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
    fn next(&mut self) -> Res<(Vec<Tensors>, Option<Digest>)> {
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

    fn checkpoint(&self, dir: &Path) -> Res<()> {
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
struct NaiveRank {
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

// ---------------------------------------------------------------------------------------------
// The model: a tiny pre-norm transformer over `CLASSES` tokens, with learned positions.

/// Initial weights on the host, drawn once so that every run starts from the same model.
struct Params(Vec<(Vec<usize>, Vec<f32>)>);

impl Params {
    fn init(seed: u64) -> Params {
        let key = RngKey::new(seed, "candle-lm-init");
        let mut k = 0u64;
        let mut normal = |shape: Vec<usize>, std: f32| {
            let n: usize = shape.iter().product();
            let v = (0..n)
                .map(|_| {
                    k += 2;
                    // Box-Muller over two counter draws.
                    let (u1, u2) = (key.unit_at(k).max(1e-12), key.unit_at(k + 1));
                    std * ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
                })
                .collect();
            (shape, v)
        };
        let proj = 0.02 / (2.0 * LAYERS as f32).sqrt();
        let mut p =
            vec![normal(vec![CLASSES, DIM], 0.02), normal(vec![SEQ, DIM], 0.01), normal(vec![DIM, CLASSES], 0.02)];
        for _ in 0..LAYERS {
            p.push((vec![DIM], vec![1.0; DIM]));
            p.push((vec![DIM], vec![0.0; DIM]));
            p.push(normal(vec![DIM, 3 * DIM], 0.02));
            p.push(normal(vec![DIM, DIM], proj));
            p.push((vec![DIM], vec![1.0; DIM]));
            p.push((vec![DIM], vec![0.0; DIM]));
            p.push(normal(vec![DIM, 4 * DIM], 0.02));
            p.push(normal(vec![4 * DIM, DIM], proj));
        }
        p.push((vec![DIM], vec![1.0; DIM]));
        p.push((vec![DIM], vec![0.0; DIM]));
        Params(p)
    }
}

struct Model {
    vars: Vec<Var>,
    opt: AdamW,
    causal: Tensor,
}

impl Model {
    fn new(init: &Params, device: &Device) -> Res<Model> {
        let vars = init
            .0
            .iter()
            .map(|(shape, v)| Var::from_tensor(&Tensor::from_vec(v.clone(), shape.as_slice(), device)?))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let opt = AdamW::new(vars.clone(), ParamsAdamW { lr: 2e-3, weight_decay: 0.0, ..Default::default() })?;
        let causal = Tensor::tril2(SEQ, DType::U8, device)?;
        Ok(Model { vars, opt, causal })
    }

    /// Trains steps `from..to` on `feed`'s steps; the loss of each, before its update.
    fn run(&mut self, feed: &mut Feed, from: usize, to: usize) -> Res<Vec<Point>> {
        let mut out = Vec::with_capacity(to - from);
        for _ in from..to {
            let (ranks, fingerprint) = feed.next()?;
            let loss = self.train_step(&ranks)?;
            out.push(Point { loss, fingerprint });
        }
        Ok(out)
    }

    /// One optimizer step on the global batch held by `ranks`: each rank's summed token loss
    /// divided by the global token count (an all-reduce of counts), gradients summed over
    /// ranks in rank order (an all-reduce of gradients). Returns the global mean loss.
    fn train_step(&mut self, ranks: &[Tensors]) -> Res<f64> {
        let counts: Vec<f64> = ranks
            .iter()
            .map(|t| Ok(t.require("loss_mask")?.to_dtype(DType::F64)?.sum_all()?.to_scalar::<f64>()?))
            .collect::<Res<_>>()?;
        let total: f64 = counts.iter().sum();
        let mut sum: Option<GradStore> = None;
        let mut loss = 0.0;
        for t in ranks {
            let l = self.loss_sum(t)?;
            loss += l.to_scalar::<f32>()? as f64;
            let grads = (l / total)?.backward()?;
            sum = Some(match sum {
                None => grads,
                Some(mut acc) => {
                    for v in &self.vars {
                        if let (Some(a), Some(g)) = (acc.get(v.as_tensor()), grads.get(v.as_tensor())) {
                            let s = (a + g)?;
                            acc.insert(v.as_tensor(), s);
                        }
                    }
                    acc
                }
            });
        }
        self.opt.step(&sum.ok_or("a step without ranks")?)?;
        Ok(loss / total)
    }

    /// Summed next-token cross-entropy over the batch's real targets.
    fn loss_sum(&self, t: &Tensors) -> Res<Tensor> {
        let ids = t.require("input_ids")?;
        let (b, n) = ids.dims2()?;
        let v = &self.vars;
        let (wte, wpe) = (v[0].as_tensor(), v[1].as_tensor());
        let pos = t.require("positions")?.flatten_all()?;
        let ids = ids.flatten_all()?.clamp(0u32, CLASSES as u32 - 1)?;
        let mut x = (wte.index_select(&ids, 0)? + wpe.index_select(&pos, 0)?)?; // [b·n, d]
        // Block-diagonal causal mask: a token sees earlier tokens of its own document only.
        let seg = t.require("segment_ids")?;
        let same = seg.unsqueeze(2)?.broadcast_as((b, n, n))?.eq(&seg.unsqueeze(1)?.broadcast_as((b, n, n))?)?;
        let allowed = same.mul(&self.causal.broadcast_as((b, n, n))?)?;
        let bias = ((allowed.to_dtype(DType::F32)? - 1.0)? * 1e9)?.unsqueeze(1)?; // [b, 1, n, n]
        let dh = DIM / HEADS;
        for l in 0..LAYERS {
            let p = &v[3 + 8 * l..11 + 8 * l];
            let h = candle_nn::ops::layer_norm_slow(&x, p[0].as_tensor(), p[1].as_tensor(), 1e-5)?;
            let qkv = h.matmul(p[2].as_tensor())?.reshape((b, n, 3, HEADS, dh))?.permute((2, 0, 3, 1, 4))?;
            let (q, k, vv) = (qkv.get(0)?.contiguous()?, qkv.get(1)?.contiguous()?, qkv.get(2)?.contiguous()?);
            let scores = (q.matmul(&k.t()?)? * (1.0 / (dh as f64).sqrt()))?.broadcast_add(&bias)?;
            let att = candle_nn::ops::softmax(&scores, D::Minus1)?;
            let y = att.matmul(&vv)?.transpose(1, 2)?.reshape((b * n, DIM))?;
            x = (x + y.matmul(p[3].as_tensor())?)?;
            let h = candle_nn::ops::layer_norm_slow(&x, p[4].as_tensor(), p[5].as_tensor(), 1e-5)?;
            x = (x + h.matmul(p[6].as_tensor())?.gelu()?.matmul(p[7].as_tensor())?)?;
        }
        let last = v.len() - 2;
        let h = candle_nn::ops::layer_norm_slow(&x, v[last].as_tensor(), v[last + 1].as_tensor(), 1e-5)?;
        let logp = candle_nn::ops::log_softmax(&h.matmul(v[2].as_tensor())?, D::Minus1)?; // [b·n, classes]
        let mask = t.require("loss_mask")?.flatten_all()?;
        let labels = t.require("labels")?.flatten_all()?;
        // Ignored positions (label -100) gather class 0 and are masked out.
        let safe =
            mask.where_cond(&labels, &labels.zeros_like()?)?.clamp(0i64, CLASSES as i64 - 1)?.to_dtype(DType::U32)?;
        let picked = logp.gather(&safe.unsqueeze(1)?, 1)?.squeeze(1)?;
        Ok((picked * mask.to_dtype(DType::F32)?)?.sum_all()?.neg()?)
    }
}

// ---------------------------------------------------------------------------------------------
// Output: CSV and a PNG plot (no text: plotters' bitmap backend would need system fonts).

fn tempfile_dir(name: &str) -> Res<PathBuf> {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn write_csv(path: &Path, z1: &[Point], z42: &[Point], n1: &[Point], n42: &[Point]) -> Res<()> {
    let mut s = String::from("step,zephon_w1,zephon_w4_w2,naive_w1,naive_w4_w2\n");
    for i in 0..z1.len() {
        s.push_str(&format!("{i},{},{},{},{}\n", z1[i].loss, z42[i].loss, n1[i].loss, n42[i].loss));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, s)?;
    Ok(())
}

/// Curves in order: zephon W=1 (blue), zephon W=4->2 (orange, thin, on top of it), naive W=1
/// (grey), naive W=4->2 (red); a dashed vertical line at the resume step; light grid lines
/// every 50 steps and every 1.0 of loss.
fn plot(path: &Path, curves: &[&[Point]], resume: usize) -> Res<()> {
    const W: u32 = 1000;
    const H: u32 = 600;
    let mut pixels = vec![255u8; (W * H * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, (W, H)).into_drawing_area();
        root.fill(&WHITE)?;
        let n = curves[0].len();
        let losses = curves.iter().flat_map(|c| c.iter().map(|p| p.loss));
        let (lo, hi) = losses.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
        let (lo, hi) = (lo.floor(), hi.ceil());
        let area = root.margin(20, 20, 20, 20);
        let mut chart = ChartBuilder::on(&area).build_cartesian_2d(0f64..(n - 1) as f64, lo..hi)?;
        let grey = RGBColor(225, 225, 225);
        for x in (0..n).step_by(50) {
            chart.draw_series(LineSeries::new([(x as f64, lo), (x as f64, hi)], grey.stroke_width(1)))?;
        }
        for y in (lo as i64)..=(hi as i64) {
            chart.draw_series(LineSeries::new([(0.0, y as f64), ((n - 1) as f64, y as f64)], grey.stroke_width(1)))?;
        }
        chart.draw_series(DashedLineSeries::new(
            [(resume as f64, lo), (resume as f64, hi)],
            6,
            4,
            BLACK.stroke_width(1),
        ))?;
        let styles = [
            RGBColor(31, 119, 180).stroke_width(5),
            RGBColor(255, 127, 14).stroke_width(2),
            RGBColor(150, 150, 150).stroke_width(2),
            RGBColor(214, 39, 40).stroke_width(2),
        ];
        for (c, style) in curves.iter().zip(styles) {
            chart.draw_series(LineSeries::new(c.iter().enumerate().map(|(i, p)| (i as f64, p.loss)), style))?;
        }
        root.present()?;
    }
    write_png(path, W, H, &pixels)
}

/// Writes RGB8 pixels as a PNG (the `png` crate, already built for the image pipeline).
fn write_png(path: &Path, w: u32, h: u32, rgb: &[u8]) -> Res<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(std::fs::File::create(path)?), w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.write_header()?.write_image_data(rgb)?;
    Ok(())
}
