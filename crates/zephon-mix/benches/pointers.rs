//! Pointer generation: the cost of computing a lane's n-th chunk (its sample ids) does not
//! grow with the lane count. Corpus-sized manifests (A: 19,464 rows in 4 shards, B: 4,051 in
//! 4), 50/50, chunks of 256 samples; each iteration computes one chunk for a pseudo-random
//! (lane, n).
//!
//! Run: `cargo bench -p zephon-mix --bench pointers`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use zephon_core::{DatasetManifest, ShardManifest, WorkSource};
use zephon_mix::{Exhaustion, MixtureSource, Order, RowOrder, SourceOptions};
use zephon_operator::{Lane, RngKey};

fn manifest(name: &str, shards: &[u64]) -> DatasetManifest {
    DatasetManifest {
        name: name.into(),
        shards: shards
            .iter()
            .enumerate()
            .map(|(i, &rows)| ShardManifest {
                path: format!("{name}/{i}"),
                name: String::new(),
                rows,
                bytes: rows * 500,
                version: "1".into(),
            })
            .collect(),
    }
}

fn bench(c: &mut Criterion) {
    let m = [manifest("a", &[4866; 4]), manifest("b", &[1012, 1013, 1013, 1013])];
    let mut g = c.benchmark_group("pointers");
    g.throughput(Throughput::Elements(256));
    for (label, rows) in
        [("shuffled", RowOrder::Shuffled), ("global", RowOrder::Global), ("blocks", RowOrder::Blocks { size: 1000 })]
    {
        let config = SourceOptions {
            seed: 1,
            chunk_size: 256,
            order: Order { shuffle_shards: true, rows },
            exhaustion: Exhaustion::Repeat,
            ..SourceOptions::default()
        };
        let source = MixtureSource::new(&m, &[0.5, 0.5], config).unwrap();
        for lanes in [1u32, 64, 1024] {
            let key = RngKey::new(9, "bench");
            let mut i = 0u64;
            g.bench_function(format!("{label}/L{lanes}"), |b| {
                b.iter(|| {
                    i += 1;
                    let lane = Lane(key.below_at(i, lanes as u64) as u32);
                    let n = key.with(1).below_at(i, 1_000_000 / lanes as u64);
                    black_box(source.chunk(lane, lanes, n).unwrap())
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
