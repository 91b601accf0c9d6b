//! Mixture shares hold within 1 % over any window of 10 chunks; quotas are closed-form.

use proptest::prelude::*;
use zephon_core::{DatasetManifest, ShardManifest};
use zephon_mix::*;

fn synthetic(rows: &[u64]) -> Vec<DatasetManifest> {
    rows.iter()
        .enumerate()
        .map(|(i, &r)| DatasetManifest {
            name: format!("d{i}"),
            shards: vec![ShardManifest {
                path: format!("d{i}"),
                name: String::new(),
                rows: r,
                bytes: r,
                version: "1".into(),
            }],
        })
        .collect()
}

fn window_shares_hold(source: &MixtureSource, weights: &[f64], chunks: u64, chunk_size: u64) {
    let sum: f64 = weights.iter().sum();
    let per_chunk: Vec<Vec<u64>> = (0..chunks)
        .map(|g| {
            let mut c = vec![0u64; weights.len()];
            for s in source.global_chunk(g).unwrap().samples {
                c[s.dataset as usize] += 1;
            }
            c
        })
        .collect();
    for start in 0..chunks - 10 {
        let mut c = vec![0u64; weights.len()];
        for chunk in &per_chunk[start as usize..start as usize + 10] {
            for (a, b) in c.iter_mut().zip(chunk) {
                *a += b;
            }
        }
        for (d, &w) in weights.iter().enumerate() {
            let share = c[d] as f64 / (10 * chunk_size) as f64;
            assert!(
                (share - w / sum).abs() <= 0.01,
                "window at chunk {start}: dataset {d} share {share}, weight {}",
                w / sum
            );
        }
    }
}

#[test]
fn real_corpora_shares_hold_in_every_window_of_10_chunks() {
    let m = crate::manifests("parquet");
    for weights in [[0.5, 0.5], [0.9, 0.1], [0.23, 0.77]] {
        let config = SourceOptions { seed: 2, chunk_size: 256, exhaustion: Exhaustion::Repeat, ..Default::default() };
        let source = MixtureSource::new(&m, &weights, config).unwrap();
        window_shares_hold(&source, &weights, 200, 256);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn shares_hold_for_random_weights_and_chunk_sizes(
        weights in prop::collection::vec(0.01f64..10.0, 1..6),
        chunk_size in 100u64..600,
        seed in any::<u64>(),
    ) {
        let m = synthetic(&vec![10_000; weights.len()]);
        let config = SourceOptions { seed, chunk_size: chunk_size as u32, exhaustion: Exhaustion::Repeat, ..Default::default() };
        let source = MixtureSource::new(&m, &weights, config).unwrap();
        window_shares_hold(&source, &weights, 40, chunk_size);
        // Closed-form counts agree with the chunks.
        let mut walked = vec![0u64; weights.len()];
        for g in 0..15 {
            prop_assert_eq!(source.draws_before(g * chunk_size), walked.clone());
            for s in source.global_chunk(g).unwrap().samples {
                walked[s.dataset as usize] += 1;
            }
        }
    }

    #[test]
    fn redistribute_uses_every_row_passes_times(
        rows in prop::collection::vec(1u64..400, 1..5),
        weights_seed in any::<u64>(),
        passes in 1u64..3,
        chunk_size in 1u32..70,
    ) {
        let weights: Vec<f64> = (0..rows.len()).map(|i| 1.0 + ((weights_seed >> (i * 8)) & 0xff) as f64).collect();
        let m = synthetic(&rows);
        let config = SourceOptions { seed: weights_seed, chunk_size, exhaustion: Exhaustion::Redistribute, passes, ..Default::default() };
        let source = MixtureSource::new(&m, &weights, config).unwrap();
        let total: u64 = rows.iter().sum::<u64>() * passes;
        prop_assert_eq!(source.len(), Some(total));
        let mut counts = std::collections::HashMap::new();
        let mut g = 0;
        while let Some(c) = source.global_chunk(g) {
            for s in c.samples {
                *counts.entry(s).or_insert(0u64) += 1;
            }
            g += 1;
        }
        prop_assert_eq!(counts.len() as u64, rows.iter().sum::<u64>());
        prop_assert!(counts.values().all(|&c| c == passes));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Chunks by estimated tokens cover the same stream as chunks by samples, in order, each
    /// position once; every chunk holds at most `chunk_tokens` plus one row of tokens, and
    /// `chunks()` says where they end.
    #[test]
    fn chunks_by_tokens_cut_the_same_stream_into_token_sized_pieces(
        rows in prop::collection::vec(1u64..300, 1..4),
        row_tokens in prop::collection::vec(1.0f64..5000.0, 3),
        seed in any::<u64>(),
        chunk_tokens in 1u64..20_000,
        redistribute in any::<bool>(),
    ) {
        let m = synthetic(&rows);
        let weights: Vec<f64> = (0..rows.len()).map(|i| 1.0 + ((seed >> (i * 8)) & 0xff) as f64).collect();
        let exhaustion = if redistribute { Exhaustion::Redistribute } else { Exhaustion::Stop };
        let by_samples = SourceOptions { seed, chunk_size: 1, exhaustion, ..Default::default() };
        let reference = MixtureSource::new(&m, &weights, by_samples).unwrap();
        let by_tokens = SourceOptions { chunk_tokens: Some(chunk_tokens), ..by_samples };
        let cost = &row_tokens[..rows.len()];
        let source = MixtureSource::new(&m, &weights, by_tokens).unwrap().with_row_tokens(cost).unwrap();
        let mut stream = Vec::new();
        let mut g = 0;
        while let Some(c) = source.global_chunk(g) {
            let tokens: u64 = c.samples.iter().map(|s| cost[s.dataset as usize].round() as u64).sum();
            let biggest = cost.iter().map(|c| c.round() as u64).max().unwrap_or(0);
            prop_assert!(tokens <= chunk_tokens + biggest, "chunk {} holds {} tokens", g, tokens);
            stream.extend(c.samples);
            g += 1;
        }
        prop_assert_eq!(source.chunks(), Some(g));
        let expected: Vec<_> = (0..reference.len().unwrap()).flat_map(|p| reference.global_chunk(p).unwrap().samples).collect();
        prop_assert_eq!(stream, expected);
    }
}

#[test]
fn bad_settings_are_errors() {
    let m = synthetic(&[10, 10]);
    let c = SourceOptions::default();
    assert!(MixtureSource::new(&m, &[1.0], c).is_err());
    assert!(MixtureSource::new(&m, &[0.0, 0.0], c).is_err());
    assert!(MixtureSource::new(&m, &[-1.0, 1.0], c).is_err());
    assert!(MixtureSource::new(&m, &[f64::NAN, 1.0], c).is_err());
    assert!(MixtureSource::new(&synthetic(&[0, 10]), &[1.0, 1.0], c).is_err());
    assert!(MixtureSource::new(&m, &[1.0, 1.0], SourceOptions { chunk_size: 0, ..c }).is_err());
    assert!(MixtureSource::new(&m, &[1.0, 1.0], SourceOptions { chunk_tokens: Some(0), ..c }).is_err());
    let two = MixtureSource::new(&m, &[1.0, 1.0], c).unwrap();
    assert!(two.with_row_tokens(&[1.0]).is_err());
    let two = MixtureSource::new(&m, &[1.0, 1.0], c).unwrap();
    assert!(two.with_row_tokens(&[f64::NAN, 1.0]).is_err());
    let e = MixtureSource::new(&m, &[1.0], c).err().unwrap().to_string();
    assert!(e.contains("2 datasets but 1 weights"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// With finite data, every lane draws the same number of chunks: a partial last block is
    /// cut into one piece per lane, of equal estimated tokens within two rows. The lanes still
    /// cover the stream, each position once.
    #[test]
    fn a_partial_last_block_is_cut_into_one_even_piece_per_lane(
        rows in prop::collection::vec(1u64..400, 1..4),
        row_tokens in prop::collection::vec(1.0f64..3000.0, 3),
        seed in any::<u64>(),
        lanes in 1u32..20,
        by_tokens in any::<bool>(),
        chunk in 1u64..5000,
        redistribute in any::<bool>(),
    ) {
        use zephon_core::{WorkSource};
        use zephon_operator::{Lane};
        let m = synthetic(&rows);
        let weights: Vec<f64> = (0..rows.len()).map(|i| 1.0 + ((seed >> (i * 8)) & 0xff) as f64).collect();
        let exhaustion = if redistribute { Exhaustion::Redistribute } else { Exhaustion::Stop };
        let config = if by_tokens {
            SourceOptions { seed, chunk_tokens: Some(chunk), exhaustion, ..Default::default() }
        } else {
            SourceOptions { seed, chunk_size: (chunk % 300 + 1) as u32, exhaustion, ..Default::default() }
        };
        let cost = &row_tokens[..rows.len()];
        let source = MixtureSource::new(&m, &weights, config).unwrap().with_row_tokens(cost).unwrap();
        let tokens = |c: &zephon_core::Chunk| -> u64 { c.samples.iter().map(|s| cost[s.dataset as usize].round().max(1.0) as u64).sum() };
        let mut per_lane = Vec::new();
        let mut stream = Vec::new();
        for l in 0..lanes {
            let mut n = 0;
            let mut last = None;
            while let Some(c) = source.chunk(Lane(l), lanes, n).unwrap() {
                last = Some(tokens(&c));
                stream.extend(c.samples);
                n += 1;
            }
            per_lane.push((n, last));
        }
        let chunks = source.chunks().unwrap();
        let blocks = chunks.div_ceil(u64::from(lanes));
        prop_assert!(per_lane.iter().all(|&(n, _)| n == blocks), "{:?} for {} chunks", per_lane, chunks);
        if !chunks.is_multiple_of(u64::from(lanes)) {
            let last: Vec<u64> = per_lane.iter().filter_map(|&(_, t)| t).collect();
            let biggest = cost.iter().map(|c| c.round().max(1.0) as u64).max().unwrap_or(1);
            let (lo, hi) = (*last.iter().min().unwrap(), *last.iter().max().unwrap());
            // Each cut lands within one row after the even split point.
            prop_assert!(hi - lo <= 2 * biggest, "last pieces {:?}", last);
        }
        let mut expected: Vec<_> = (0..chunks).flat_map(|g| source.global_chunk(g).unwrap().samples).collect();
        expected.sort();
        stream.sort();
        prop_assert_eq!(stream, expected);
    }
}
