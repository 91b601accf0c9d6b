//! Random-access reads by SampleId: rows/s for JSONL (offset index + positioned read + JSON
//! parse of the text field) and Parquet (row-group decode with a cache), on the fetched
//! corpus A (19,464 short documents in 4 shards), in three orders:
//! - `sequential`: rows in stored order;
//! - `blocks`: blocks of 1,000 rows (one Parquet row group) in random order;
//! - `random`: a global random permutation (every read may hit a new row group).
//!
//! Run: `cargo bench -p zephon-io --bench read` (needs `scripts/fetch-testdata.sh`).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use zephon_core::Datasets;
use zephon_io::{DatasetOptions, open};
use zephon_operator::{Permutation, RngKey, SampleId};

fn ids(ds: &Datasets) -> Vec<SampleId> {
    let m = &ds.manifests()[0];
    m.shards.iter().enumerate().flat_map(|(s, sh)| (0..sh.rows).map(move |r| SampleId::new(0, s as u32, r))).collect()
}

fn bench(c: &mut Criterion) {
    let data = std::env::var_os("ZEPHON_TESTDATA").map(std::path::PathBuf::from).unwrap_or_else(|| {
        std::path::PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/zephon-testdata")
    });
    let mut g = c.benchmark_group("read");
    g.sample_size(10);
    for format in ["jsonl", "parquet"] {
        let ds =
            Datasets::new(vec![open("a", &data.join("corpora/a").join(format), &DatasetOptions::default()).unwrap()]);
        let all = ids(&ds);
        let n = all.len() as u64;
        let perm = Permutation::new(n, RngKey::new(1, "bench"));
        let random: Vec<SampleId> = (0..n).map(|i| all[perm.apply(i) as usize]).collect();
        let blocks = Permutation::new(n.div_ceil(1000), RngKey::new(2, "bench"));
        let blocked: Vec<SampleId> = (0..n.div_ceil(1000))
            .flat_map(|b| {
                let b = blocks.apply(b);
                (b * 1000..((b + 1) * 1000).min(n)).map(|i| all[i as usize]).collect::<Vec<_>>()
            })
            .collect();
        g.throughput(Throughput::Elements(n));
        let small = DatasetOptions { parquet_cache_bytes: Some(4 << 20), ..DatasetOptions::default() };
        let cold = Datasets::new(vec![open("a", &data.join("corpora/a").join(format), &small).unwrap()]);
        if format == "parquet" {
            // A cache far smaller than the data: random reads decode a row group almost every time.
            g.bench_function("parquet/random-4MiB-cache", |b| {
                b.iter(|| random.chunks(16).map(|u| cold.read(u).iter().filter(|r| r.is_ok()).count()).sum::<usize>())
            });
            g.bench_function("parquet/blocks-4MiB-cache", |b| {
                b.iter(|| blocked.chunks(16).map(|u| cold.read(u).iter().filter(|r| r.is_ok()).count()).sum::<usize>())
            });
        }
        for (label, order) in [("sequential", &all), ("blocks", &blocked), ("random", &random)] {
            // Reads in units of 16 samples, as the engine issues them.
            g.bench_function(format!("{format}/{label}"), |b| {
                b.iter(|| {
                    let mut ok = 0;
                    for unit in order.chunks(16) {
                        ok += ds.read(unit).iter().filter(|r| r.is_ok()).count();
                    }
                    ok
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
