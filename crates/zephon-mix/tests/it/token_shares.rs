//! TokenEstimation with the real GPT-2 tokenizer: corpus A (short documents) against corpus B
//! (long documents) at 50/50 *tokens*. Sample quotas planned from the estimates deliver
//! realized token shares within 2 % over the first 50 M tokens.

use std::collections::HashMap;
use std::sync::Arc;

use zephon_core::*;
use zephon_mix::*;
use zephon_operator::*;
use zephon_testkit::{operators, opts, run_ranks};

use crate::corpora;

fn gpt2() -> tokenizers::Tokenizer {
    let path = zephon_testkit::testdata().join("tokenizers/gpt2/tokenizer.json");
    tokenizers::Tokenizer::from_file(path).unwrap()
}

/// Exact GPT-2 token counts of every row of every dataset, tokenized on 2 threads.
fn exact_counts(datasets: &Datasets, tok: &tokenizers::Tokenizer) -> HashMap<SampleId, u64> {
    let ids: Vec<SampleId> = datasets
        .manifests()
        .iter()
        .enumerate()
        .flat_map(|(d, m)| {
            m.shards
                .iter()
                .enumerate()
                .flat_map(move |(s, sh)| (0..sh.rows).map(move |r| SampleId::new(d as u32, s as u32, r)))
        })
        .collect();
    let half = ids.len() / 2;
    std::thread::scope(|s| {
        let parts: Vec<_> = [&ids[..half], &ids[half..]]
            .into_iter()
            .map(|part| {
                s.spawn(move || {
                    let mut out = Vec::with_capacity(part.len());
                    for batch in part.chunks(256) {
                        for (id, r) in batch.iter().zip(datasets.read(batch)) {
                            let text = r.unwrap().str("text").unwrap().to_string();
                            out.push((*id, tok.encode(text, false).unwrap().len() as u64));
                        }
                    }
                    out
                })
            })
            .collect();
        parts.into_iter().flat_map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn token_estimates_plan_50_50_token_shares_within_2_percent_over_50m_tokens() {
    let tok = gpt2();
    assert_eq!(
        tok.encode("Hello world, this is a test.", false).unwrap().get_ids(),
        &[15496, 995, 11, 428, 318, 257, 1332, 13],
        "the real GPT-2 tokenizer"
    );
    let datasets = corpora("jsonl");
    let count = |t: &str| tok.encode(t, false).map(|e| e.len()).map_err(|e| e.to_string());
    let est = estimate(&datasets, &["text"; 2], &count, EstimateOptions { threads: 2, ..EstimateOptions::default() })
        .unwrap();
    let weights = weights_for_token_shares(&est, &[0.5, 0.5]).unwrap();
    let config =
        SourceOptions { seed: 11, chunk_size: 512, exhaustion: Exhaustion::Repeat, ..SourceOptions::default() };
    let source = MixtureSource::new(&datasets.manifests(), &weights, config).unwrap();

    let counts = exact_counts(&datasets, &tok);
    let true_per_row: Vec<f64> = (0..2)
        .map(|d| {
            let (n, t) =
                counts.iter().filter(|(id, _)| id.dataset == d).fold((0u64, 0u64), |(n, t), (_, c)| (n + 1, t + c));
            t as f64 / n as f64
        })
        .collect();
    let mut tokens = [0u64; 2];
    let mut g = 0;
    while tokens.iter().sum::<u64>() < 50_000_000 {
        for s in source.global_chunk(g).unwrap().samples {
            tokens[s.dataset as usize] += counts[&s];
        }
        g += 1;
    }
    let total = (tokens[0] + tokens[1]) as f64;
    let share_a = tokens[0] as f64 / total;
    println!(
        "estimated tokens/row: a {:.1} (true {:.1}), b {:.1} (true {:.1}); realized over {:.1} M tokens: a {:.2} %, b {:.2} %",
        est[0].tokens_per_row(),
        true_per_row[0],
        est[1].tokens_per_row(),
        true_per_row[1],
        total / 1e6,
        100.0 * share_a,
        100.0 * (1.0 - share_a)
    );
    // Within 2 % of the target share (0.5 ± 0.01).
    assert!((share_a - 0.5).abs() <= 0.01, "realized share of a: {share_a}");
}

/// The estimates travel in the checkpoint: a restore rebuilds the same source from them
/// without measuring anything, and continues the run exactly.
#[test]
fn token_estimates_are_restored_from_the_checkpoint_not_remeasured() {
    let datasets = corpora("parquet");
    let manifests = datasets.manifests();
    let est = vec![declared(&manifests[0], 0.31), declared(&manifests[1], 0.27)];
    let spec_from = |est: &[TokenEstimate]| {
        let weights = weights_for_token_shares(est, &[0.5, 0.5]).unwrap();
        let config =
            SourceOptions { seed: 3, chunk_size: 16, exhaustion: Exhaustion::Repeat, ..SourceOptions::default() };
        RunSpec {
            operators: operators(128, 4),
            source: Arc::new(MixtureSource::new(&manifests, &weights, config).unwrap()),
            datasets: datasets.clone(),
            seed: 1,
            bad_records: BadRecords::Fail,
            tail: Tail::Drop,
            token_estimates: est.to_vec(),
        }
    };
    let reference = run_ranks(&spec_from(&est), 4, 8, 1, opts(2, 4, 2), 6, None, None);
    let tmp = tempfile::tempdir().unwrap();
    let mut got = run_ranks(&spec_from(&est), 4, 8, 2, opts(2, 4, 2), 3, None, Some(tmp.path()));
    let saved = checkpoint::metadata(tmp.path()).unwrap();
    let restored = saved.token_estimates;
    assert_eq!(restored, est);
    got.extend(run_ranks(&spec_from(&restored), 4, 8, 4, opts(2, 4, 2), 3, Some(tmp.path()), None));
    assert_eq!(got, reference);
    // Different estimates would change the plan: the checkpoint refuses them.
    let other = vec![declared(&manifests[0], 0.5), declared(&manifests[1], 0.27)];
    let e = Engine::restore(
        spec_from(&other),
        Topology::builder().lanes(4).rows_per_step(8).build().unwrap(),
        opts(1, 4, 1),
        tmp.path(),
    );
    assert!(e.err().unwrap().to_string().contains("work source was"));
}
