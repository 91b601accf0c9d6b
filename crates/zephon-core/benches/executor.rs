//! Executor overhead: records/s through the engine with an identity operator, against a plain
//! single-threaded loop doing the same reads, row assembly and digests; and the cost of many
//! lanes (L = 256) against one (L = 1) at the same rows per step.
//!
//! Run: `cargo bench -p zephon-core --bench executor`

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use zephon_core::*;
use zephon_operator::*;

/// The allocator the `zephon` binary uses: with the system allocator, the consumer freeing rows
/// that workers allocated contends on glibc's arena lock and the bench measures that lock.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const RECORDS: u64 = 65_536;
const ROWS_PER_STEP: u32 = 256;

struct Identity;
impl Operator for Identity {
    fn name(&self) -> &str {
        "identity"
    }
    fn fingerprint(&self) -> zephon_operator::Settings {
        zephon_operator::Settings::new("test", 1).set("text", String::new())
    }
}

fn datasets() -> Datasets {
    let rows: Vec<String> = (0..RECORDS).map(|i| format!("record {i}")).collect();
    let shards = rows.chunks(8192).map(|c| c.to_vec()).collect();
    Datasets::new(vec![Arc::new(MemoryDataset::from_texts("bench", "text", shards))])
}

fn spec(datasets: &Datasets) -> RunSpec {
    RunSpec {
        operators: Operators::new().then(Identity),
        source: Arc::new(SequentialSource::new(&datasets.manifests(), 64, 1, 1)),
        datasets: datasets.clone(),
        seed: 1,
        bad_records: BadRecords::Fail,
        tail: Tail::Drop,
        token_estimates: Vec::new(),
    }
}

/// The same work without the engine: read in units, apply the operator, cut rows into steps,
/// digest each step. One thread, no ordering machinery.
fn plain_loop(datasets: &Datasets) -> u64 {
    let source = SequentialSource::new(&datasets.manifests(), 64, 1, 1);
    let op = Identity;
    let mut rows = Vec::with_capacity(ROWS_PER_STEP as usize);
    let mut out = Vec::new();
    let mut steps = 0;
    let mut n = 0;
    while let Ok(Some(chunk)) = source.chunk(Lane(0), 1, n) {
        for unit in chunk.samples.chunks(16) {
            for rec in datasets.read(unit) {
                let Ok(rec) = rec else { continue };
                let _ = op.apply(rec, &mut out);
                for r in out.drain(..) {
                    rows.push(r);
                    if rows.len() == ROWS_PER_STEP as usize {
                        black_box(lane_digest(&rows));
                        rows.clear();
                        steps += 1;
                    }
                }
            }
        }
        n += 1;
    }
    steps
}

fn engine_run(datasets: &Datasets, lanes: u32, threads: usize) -> u64 {
    let opts =
        ExecOptions { threads, prefetch_steps: 2, unit_samples: 16, snapshot_every: 1, ..ExecOptions::default() };
    let mut e = Engine::start(
        spec(datasets),
        Topology::builder().lanes(lanes).rows_per_step(ROWS_PER_STEP).build().unwrap(),
        opts,
    )
    .unwrap();
    let mut steps = 0;
    while let Some(s) = e.next_step().unwrap() {
        black_box(s.local_fingerprint());
        steps += 1;
    }
    steps
}

fn bench(c: &mut Criterion) {
    let data = datasets();
    let mut g = c.benchmark_group("executor");
    g.throughput(Throughput::Elements(RECORDS));
    g.sample_size(10);
    g.bench_function("plain_loop", |b| b.iter(|| plain_loop(&data)));
    for lanes in [1u32, 256] {
        for threads in [1usize, 2] {
            g.bench_function(format!("engine_L{lanes}_threads{threads}"), |b| {
                b.iter(|| engine_run(&data, lanes, threads))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
