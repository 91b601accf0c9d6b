//! Over a pass, every row is handed out exactly once across all lanes, whatever L; with
//! `repeat`, each pass again exactly once, in another order.

use std::collections::HashMap;

use zephon_core::WorkSource;
use zephon_mix::*;
use zephon_operator::{Lane, SampleId};

use crate::manifests;

fn all_rows(m: &[zephon_core::DatasetManifest]) -> Vec<SampleId> {
    m.iter()
        .enumerate()
        .flat_map(|(d, man)| {
            man.shards
                .iter()
                .enumerate()
                .flat_map(move |(s, sh)| (0..sh.rows).map(move |r| SampleId::new(d as u32, s as u32, r)))
        })
        .collect()
}

#[test]
fn one_pass_hands_out_every_row_exactly_once_for_any_lane_count() {
    for format in ["jsonl", "parquet"] {
        let m = manifests(format);
        let want = all_rows(&m);
        for order in [
            Order { shuffle_shards: true, rows: RowOrder::Shuffled },
            Order { shuffle_shards: true, rows: RowOrder::Blocks { size: 1000 } },
            Order { shuffle_shards: false, rows: RowOrder::Global },
        ] {
            let config = SourceOptions {
                seed: 9,
                chunk_size: 100,
                order,
                exhaustion: Exhaustion::Redistribute,
                ..Default::default()
            };
            let source = MixtureSource::new(&m, &[0.5, 0.5], config).unwrap();
            assert_eq!(source.len(), Some(want.len() as u64));
            for lanes in [1u32, 3, 8, 64, 1024] {
                let mut seen: HashMap<SampleId, u32> = HashMap::with_capacity(want.len());
                for l in 0..lanes {
                    let mut n = 0;
                    while let Some(chunk) = source.chunk(Lane(l), lanes, n).unwrap() {
                        for s in chunk.samples {
                            *seen.entry(s).or_default() += 1;
                        }
                        n += 1;
                    }
                    // No chunk after the lane's first `None`.
                    assert!(source.chunk(Lane(l), lanes, n + 1).unwrap().is_none());
                }
                assert_eq!(seen.len(), want.len(), "{format} {order:?} L={lanes}");
                assert!(seen.values().all(|&c| c == 1), "{format} {order:?} L={lanes}: a row twice");
                assert!(want.iter().all(|id| seen.contains_key(id)));
            }
        }
    }
}

#[test]
fn repeat_hands_out_each_pass_exactly_once_in_a_new_order() {
    let m = manifests("parquet");
    let config = SourceOptions { seed: 4, chunk_size: 128, exhaustion: Exhaustion::Repeat, ..Default::default() };
    let source = MixtureSource::new(&m, &[0.5, 0.5], config).unwrap();
    assert_eq!(source.len(), None);
    // Dataset b (index 1) is the smaller: walk until three passes of it are out.
    let rows_b = m[1].rows() as usize;
    let mut draws: Vec<SampleId> = Vec::new();
    let mut g = 0;
    while draws.len() < 3 * rows_b {
        draws.extend(source.global_chunk(g).unwrap().samples.into_iter().filter(|s| s.dataset == 1));
        g += 1;
    }
    let passes: Vec<Vec<SampleId>> = draws[..3 * rows_b].chunks(rows_b).map(|c| c.to_vec()).collect();
    for p in &passes {
        let mut sorted = p.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), rows_b, "a pass holds every row once");
    }
    assert_ne!(passes[0], passes[1]);
    assert_ne!(passes[1], passes[2]);
}

#[test]
fn stop_ends_when_the_first_dataset_runs_out() {
    let m = manifests("jsonl");
    let config =
        SourceOptions { seed: 1, chunk_size: 50, exhaustion: Exhaustion::Stop, passes: 2, ..Default::default() };
    let source = MixtureSource::new(&m, &[0.5, 0.5], config).unwrap();
    let end = source.len().unwrap();
    let draws = source.draws_before(end);
    // b has fewer rows: it is exhausted (two passes) exactly at the end, a is not.
    assert_eq!(draws[1], 2 * m[1].rows());
    assert!(draws[0] < 2 * m[0].rows());
    assert!(draws[0].abs_diff(draws[1]) <= 1, "50/50 by samples: {draws:?}");
}

/// Balanced by row sizes, the end of a pass is shared out by document, not by chunk: still
/// every row once, for any L, and the lanes' tokens (a quarter of the text bytes here) end
/// within 64 of each other, where the deal alone leaves them 350 k apart.
#[test]
fn the_end_shared_out_by_row_sizes_still_hands_out_every_row_once() {
    for format in ["jsonl", "parquet"] {
        let datasets = crate::corpora(format);
        let m = datasets.manifests();
        let want = all_rows(&m);
        let bytes = row_sizes(&datasets, &["text", "text"], &|t: &str| Ok(t.len() as u32), 2).unwrap();
        let tokens: Vec<Vec<u32>> = bytes.iter().map(|rows| rows.iter().map(|&b| b / 4 + 1).collect()).collect();
        let size = |s: &SampleId| {
            let d = s.dataset as usize;
            let before: u64 = m[d].shards[..s.shard as usize].iter().map(|sh| sh.rows).sum();
            u64::from(tokens[d][(before + s.row) as usize])
        };
        let largest = tokens.iter().flatten().copied().max().unwrap_or(0) as u64;
        for exhaustion in [Exhaustion::Redistribute, Exhaustion::Stop] {
            let config =
                SourceOptions { seed: 3, chunk_size: 64, exhaustion, balance: Balance::RowSizes, ..Default::default() };
            for lanes in [1u32, 3, 8, 64] {
                let source =
                    MixtureSource::new(&m, &[0.3, 0.7], config).unwrap().balance_by_rows(&tokens, lanes).unwrap();
                let unbalanced = MixtureSource::new(&m, &[0.3, 0.7], config).unwrap();
                let mut seen: HashMap<SampleId, u32> = HashMap::new();
                let (mut totals, mut dealt) = (Vec::new(), Vec::new());
                for l in 0..lanes {
                    let lane_tokens = |s: &MixtureSource, seen: &mut Option<&mut HashMap<SampleId, u32>>| {
                        let (mut n, mut t) = (0, 0u64);
                        while let Some(chunk) = s.chunk(Lane(l), lanes, n).unwrap() {
                            for id in chunk.samples {
                                t += size(&id);
                                if let Some(seen) = seen.as_deref_mut() {
                                    *seen.entry(id).or_default() += 1;
                                }
                            }
                            n += 1;
                        }
                        t
                    };
                    totals.push(lane_tokens(&source, &mut Some(&mut seen)));
                    dealt.push(lane_tokens(&unbalanced, &mut None));
                }
                let spread = |t: &[u64]| t.iter().max().unwrap() - t.iter().min().unwrap();
                if exhaustion == Exhaustion::Redistribute {
                    assert_eq!(seen.len(), want.len(), "{format} L={lanes}");
                }
                assert!(seen.values().all(|&c| c == 1), "{format} {exhaustion:?} L={lanes}: a row twice");
                assert!(
                    spread(&totals) <= 64,
                    "{format} {exhaustion:?} L={lanes}: lanes end {} apart (largest row {largest}), dealt alone {}",
                    spread(&totals),
                    spread(&dealt)
                );
                if lanes == 8 {
                    println!(
                        "{format} {exhaustion:?} L=8: lanes end {} apart balanced, {} dealt alone",
                        spread(&totals),
                        spread(&dealt)
                    );
                }
            }
        }
    }
}
