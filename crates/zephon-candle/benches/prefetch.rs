//! What the prefetcher costs per step, relative to the data it moves, and what it saves when
//! the trainer is busy.
//!
//! `cargo bench -p zephon-candle --bench prefetch`
//!
//! A pipeline with history (byte tokens, wrap packing to 2048, a shuffle buffer) at W=1, 64
//! rows of 2048 u32 tokens per step (512 KiB of tensors), L = 8 and L = 64 lanes:
//! - `inline`: `next_step` + `Sink::step` on the trainer's thread, per step;
//! - `prefetched`: `Prefetcher::next_step` with no training work (the pipeline's pace);
//! - `resume point`: the per-step bookkeeping that keeps checkpoints at the trainer's step
//!   (the lanes' states, cloned once per step by the worker);
//! - a trainer that computes for a fixed time per step, with and without the prefetcher.

use std::hint::black_box;
use std::time::{Duration, Instant};

use zephon_candle::{EngineSource, PrefetchOptions, Prefetcher, Sink, StepSource};
use zephon_core::{Engine, ExecOptions, RunSpec, Tail, Topology};
use zephon_testkit as kit;

const ROWS: u32 = 64;
const STEPS: usize = 150;

fn spec() -> RunSpec {
    kit::spec(kit::corpus(40_000, 400, 3), kit::operators(2048, 8), 16, 1_000, Tail::Drop)
}

fn opts() -> ExecOptions {
    kit::opts(2, 16, 4)
}

fn busy(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

fn per_step(lanes: u32, work: Duration) -> (f64, f64) {
    let topology = Topology::builder().lanes(lanes).rows_per_step(ROWS).build().unwrap();
    let sink = Sink::cpu();
    let mut engine = Engine::start(spec(), topology.clone(), opts()).unwrap();
    for _ in 0..5 {
        engine.next_step().unwrap();
    }
    let t = Instant::now();
    for _ in 0..STEPS {
        let step = engine.next_step().unwrap().unwrap();
        black_box(sink.step(step, None).unwrap());
        busy(work);
    }
    let inline = t.elapsed().as_secs_f64() / STEPS as f64;
    drop(engine);

    let source = EngineSource::start(spec(), topology, opts()).unwrap();
    let mut pre = Prefetcher::start(source, sink, PrefetchOptions { depth: 2, microbatch: None }).unwrap();
    for _ in 0..5 {
        pre.next_step().unwrap();
    }
    let t = Instant::now();
    for _ in 0..STEPS {
        black_box(pre.next_step().unwrap().unwrap());
        busy(work);
    }
    (inline, t.elapsed().as_secs_f64() / STEPS as f64)
}

fn resume_point_cost(lanes: u32) -> (f64, usize) {
    let mut source =
        EngineSource::start(spec(), Topology::builder().lanes(lanes).rows_per_step(ROWS).build().unwrap(), opts())
            .unwrap();
    for _ in 0..20 {
        source.next_step().unwrap();
    }
    let n = 2000;
    let t = Instant::now();
    for _ in 0..n {
        black_box(source.resume_point());
    }
    let per = t.elapsed().as_secs_f64() / n as f64;
    let rp = source.resume_point();
    let lineages: usize = rp.lanes().map_or(0, |l| {
        l.iter().map(|s| s.pending.len() + s.accumulators.iter().map(|a| a.buffered.len()).sum::<usize>()).sum()
    });
    (per, lineages)
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    let step_bytes = (ROWS as usize * 2048 * 4) as f64;
    println!("step: {ROWS} rows x 2048 u32 = {:.0} KiB of tensors", step_bytes / 1024.0);
    for lanes in [8u32, 64] {
        let (inline, pre) = per_step(lanes, Duration::ZERO);
        let (rp, lineages) = resume_point_cost(lanes);
        println!(
            "L={lanes:3}: inline {:7.1} us/step ({:6.2} GB/s), prefetched {:7.1} us/step; resume point {:6.1} us/step \
             ({} lineages held, {:.2} us per KiB of step data)",
            inline * 1e6,
            step_bytes / inline / 1e9,
            pre * 1e6,
            rp * 1e6,
            lineages,
            rp * 1e6 / (step_bytes / 1024.0)
        );
    }
    for work_ms in [1u64, 4] {
        let work = Duration::from_millis(work_ms);
        let (inline, pre) = per_step(8, work);
        println!(
            "trainer busy {work_ms} ms/step, L=8: {:6.1} steps/s inline, {:6.1} steps/s prefetched ({:+.1} %)",
            1.0 / inline,
            1.0 / pre,
            100.0 * (inline / pre - 1.0)
        );
    }
}
