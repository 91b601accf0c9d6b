//! A mixture of the size data-mixing studies use: a hundred datasets carved from the test
//! corpora (`zephon_testkit::many_sources`: one-line documents, a 14 k-token document in every
//! tenth dataset, random shares of 0.1 % to 1.8 % written with six decimals). Each lane picks
//! the dataset of every record by its closed loop, so every dataset gets its share from the
//! first steps; what the lanes hold stays within what `explain` states, at any chunk size and
//! lane count; and the steps are the same at every world size and across a resume.

use proptest::prelude::*;
use zephon::Loader;
use zephon_testkit::{SpecText, many_sources};

use crate::*;

/// Tokens of each dataset in the rows of `steps` steps of `loader`, checking after every step
/// that no lane holds more than the memory bound states.
fn run_checked(loader: &mut Loader, steps: u64, datasets: usize, what: &str) -> Vec<u64> {
    let bound = loader.memory_bound();
    let mut tokens = vec![0u64; datasets];
    for s in 0..steps {
        let step = loader.next_step().unwrap().expect("the data repeats");
        for f in step.rows().flat_map(|r| r.lineage().fragments()) {
            tokens[f.sample.dataset as usize] += u64::from(f.len());
        }
        for (lane, buffered, ahead) in loader.held_positions() {
            assert!(
                buffered <= bound.buffered_positions() && ahead <= bound.rows_ahead,
                "{what}: after step {s} {lane} holds {buffered} positions in its accumulators and {ahead} in rows \
                 ahead; the bound is {} and {} ({bound:?})",
                bound.buffered_positions(),
                bound.rows_ahead
            );
        }
    }
    let report = loader.report();
    assert!(
        report.held_tokens_peak <= bound.buffers.iter().find(|(n, _)| n == "ensure_mixture").map_or(u64::MAX, |b| b.1),
        "{what}: ensure_mixture held {} tokens",
        report.held_tokens_peak
    );
    for d in &report.datasets {
        assert_eq!((d.dropped_documents, d.released_tokens), (0, 0), "{what}: {} dropped or released early", d.name);
    }
    tokens
}

#[test]
fn a_hundred_sources_get_their_shares_from_the_first_steps() {
    let dir = tmp();
    let many = many_sources(dir.path(), 100, 1);
    let spec = parse(&many.spec(16, 32).text());
    let mut loader = spec.pipeline().unwrap().build(spec.topology(1, 0).unwrap()).unwrap();
    // Six decimals over a hundred shares: used relative to their sum, and said so.
    let sum: f64 = many.shares().iter().sum();
    assert!((sum - 1.0).abs() > 1e-9 && (sum - 1.0).abs() < zephon::SHARE_SUM_TOLERANCE, "{sum}");
    assert!(loader.notices().iter().any(|n| n.contains("used divided by that sum")), "{:?}", loader.notices());
    let tokens = run_checked(&mut loader, 200, 100, "100 sources");
    let total: u64 = tokens.iter().sum();
    let mut worst = (0.0f64, 0usize);
    let mut relative = 0.0;
    for (d, (&t, &share)) in tokens.iter().zip(&many.shares()).enumerate() {
        let got = t as f64 / total as f64;
        let target = share / sum;
        assert!(t > 0, "dataset {d} (share {share}) delivered no token in 200 steps");
        let off = (got - target).abs() * 100.0;
        if off > worst.0 {
            worst = (off, d);
        }
        relative += (got - target).abs() / target / 100.0;
    }
    println!(
        "200 steps, {total} tokens: worst {:.3} points (dataset {}), mean relative deviation {:.1} %",
        worst.0,
        worst.1,
        100.0 * relative
    );
    assert!(worst.0 <= 0.5, "dataset {} is {:.3} points off its share", worst.1, worst.0);
}

#[test]
fn a_hundred_sources_give_the_same_steps_at_every_world_size_and_across_a_resume() {
    let dir = tmp();
    let many = many_sources(dir.path(), 100, 1);
    let spec = parse(&many.spec(16, 32).text());
    let steps = 24;
    let reference = loaders(&spec, 1, 2, None).steps_exactly(steps, zephon::testing::fingerprint).unwrap();
    for w in [2, 4, 16] {
        let got = loaders(&spec, w, 1, None).steps_exactly(steps, zephon::testing::fingerprint).unwrap();
        assert_eq!(got, reference, "W = {w}");
    }
    let ckpt = dir.path().join("ckpt");
    let mut first = loaders(&spec, 2, 1, None);
    let head = first.steps_exactly(9, zephon::testing::fingerprint).unwrap();
    first.checkpoint(&ckpt).unwrap();
    let tail = loaders(&spec, 4, 1, Some(&ckpt)).steps_exactly(steps - 9, zephon::testing::fingerprint).unwrap();
    assert_eq!([head, tail].concat(), reference, "a resume 2 → 4 after step 9");
}

/// Chunks of 128 to 8,192 estimated tokens (the size that once made the lanes read one
/// dataset for ever) at 1, 16 and 256 lanes: the first steps come, and no lane holds more
/// than the bound.
#[test]
fn memory_stays_within_the_bound_at_any_chunk_size_and_lane_count() {
    let dir = tmp();
    let many = many_sources(dir.path(), 100, 1);
    for (lanes, rows) in [(1, 32), (16, 32), (256, 256)] {
        for chunk in [128u64, 512, 2048, 8192] {
            let what = format!("L = {lanes}, chunk_tokens = {chunk}");
            let spec = parse(&many.spec(lanes, rows).set("source", "chunk_tokens", chunk).text());
            let mut loader = spec.pipeline().unwrap().build(spec.topology(1, 0).unwrap()).unwrap();
            run_checked(&mut loader, 6, 100, &what);
        }
    }
}

/// A random mixture of `datasets` datasets, each of one-line documents of `short` characters
/// with a long document of `long` characters every `every` rows.
fn random_mixture(
    dir: &std::path::Path,
    datasets: usize,
    short: std::ops::Range<usize>,
    long: usize,
    every: usize,
    seed: u64,
) -> Vec<std::path::PathBuf> {
    let data = zephon_testkit::testdata();
    let b = std::fs::read_to_string(data.join("corpora/b-exact/jsonl/part-00000.jsonl")).unwrap();
    let prose: String = b
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["text"].as_str().unwrap().to_string())
        .collect::<Vec<_>>()
        .join("\n");
    let lines = one_line_documents(dir, short, 4000);
    let lines: Vec<String> = std::fs::read_to_string(lines).unwrap().lines().map(str::to_string).collect();
    (0..datasets)
        .map(|d| {
            let folder = dir.join(format!("r{d}"));
            std::fs::create_dir_all(&folder).unwrap();
            let mut out = Vec::new();
            for i in 0..60 {
                out.push(lines[(seed as usize + d * 61 + i) % lines.len()].clone());
                if (i + d) % every == 0 {
                    let start = (seed as usize * 7919 + d * 104_729 + i * 13) % (prose.len() - long - 8);
                    let start = (start..).find(|&k| prose.is_char_boundary(k)).unwrap();
                    let end = (start + long..).find(|&k| prose.is_char_boundary(k)).unwrap();
                    out.push(serde_json::json!({ "text": &prose[start..end] }).to_string());
                }
            }
            std::fs::write(folder.join("part.jsonl"), out.join("\n") + "\n").unwrap();
            folder
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    /// Random mixtures (datasets, shares, document lengths, chunk sizes, slack, row length,
    /// lanes): no lane ever holds more than the bound `explain` states, nothing is dropped or
    /// let through early.
    #[test]
    fn random_mixtures_hold_no_more_than_the_stated_bound(
        datasets in 2usize..10,
        raw in prop::collection::vec(0.02f64..1.0, 10),
        long in prop_oneof![Just(2_000usize), Just(20_000), Just(80_000)],
        every in 3usize..40,
        chunk in 64u64..8192,
        slack in 256u64..8192,
        seq_len in prop_oneof![Just(256u64), Just(512), Just(1024)],
        lanes in prop_oneof![Just(1u32), Just(2), Just(4), Just(8)],
        seed in 0u64..1000,
    ) {
        let dir = tmp();
        let paths = random_mixture(dir.path(), datasets, 20..200, long, every, seed);
        let sum: f64 = raw[..datasets].iter().sum();
        let mut text = SpecText::new(lanes, lanes * 2).seed(seed);
        for (d, p) in paths.iter().enumerate() {
            text = text.dataset(&format!("r{d}"), p).share(raw[d] / sum);
        }
        let data = zephon_testkit::testdata();
        let text = text
            .tokenizer(data.join("tokenizers/gpt2/tokenizer.json"), "<|endoftext|>")
            .set("source", "chunk_tokens", chunk)
            .set("ensure_mixture", "slack_tokens", slack)
            .pack("best_fit", seq_len)
            .set("pack", "pad_id", 50256u64)
            .shuffle(8)
            .threads(2)
            .text();
        let spec = parse(&text);
        let mut loader = spec.pipeline().unwrap().build(spec.topology(1, 0).unwrap()).unwrap();
        run_checked(&mut loader, 12, datasets, &format!("{datasets} datasets, chunk {chunk}, L = {lanes}"));
    }
}
