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
//!
//! The parts: `data.rs` (the zephon and naive feeds), `model.rs` (the model and its
//! data-parallel training step), `output.rs` (CSV and plot); this file runs the four schedules
//! and compares them.

mod data;
mod model;
mod output;

use std::error::Error;
use std::path::PathBuf;
use std::time::Instant;

use candle_core::Device;
use zephon_candle::{EngineSource, Sink};
use zephon_core::Topology;
use zephon_text::Tokenizer;

use data::{Feed, Setup, exec};
use model::{Model, Params, Point};
use output::{plot, tempfile_dir, write_csv};

type Res<T> = Result<T, Box<dyn Error>>;

/// Tokens per row (and the model's context).
const SEQ: usize = 128;
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
            #[allow(unsafe_code)]
            unsafe {
                std::env::set_var(var, args.threads.to_string())
            };
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
