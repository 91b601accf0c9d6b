//! Steered mixtures through the engine: the closed loop on each lane's delivered tokens is as
//! elastic and resumable as any pipeline (every global step the same at every world size,
//! thread count and resume chain), holds the shares, and delivers finite data exactly once.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use zephon_core::ShareSchedule;
use zephon_core::testing::{Ranks, fingerprint};
use zephon_core::*;
use zephon_mix::{EnsureMixture, Exhaustion, SourceOptions, SteeredSource};
use zephon_operator::*;
use zephon_testkit::{ByteTokenize, ShuffleBuffer, WrapPack, opts};

/// Three datasets of very different document lengths (in byte tokens): one to four words,
/// ten to forty, and a hundred to four hundred.
fn datasets() -> Datasets {
    const WORDS: [&str; 6] = ["lane", "step", "seed", "rank", "pack", "row"];
    let dataset = |name: &str, docs: u64, words: (u64, u64)| {
        let key = RngKey::new(17, name);
        let texts: Vec<String> = (0..docs)
            .map(|d| {
                let n = words.0 + key.with(d).below_at(0, words.1 - words.0 + 1);
                (0..n).map(|w| WORDS[key.with(d).below_at(w + 1, 6) as usize]).collect::<Vec<_>>().join(" ")
            })
            .collect();
        let shards = texts.chunks(docs.div_ceil(2) as usize).map(|c| c.to_vec()).collect();
        Arc::new(MemoryDataset::from_texts(name, "text", shards)) as Arc<dyn Dataset>
    };
    Datasets::new(vec![dataset("short", 400, (1, 4)), dataset("mid", 120, (10, 40)), dataset("long", 40, (100, 400))])
}

/// Byte tokens per row of each dataset, roughly (5 bytes a word, and the EOS).
const PER_ROW: [f64; 3] = [13.5, 126.0, 1251.0];

fn run_spec(shares: &[f64], exhaustion: Exhaustion, chunk_tokens: u64, ensure: bool, tail: Tail) -> RunSpec {
    let datasets = datasets();
    let config = SourceOptions { seed: 3, exhaustion, chunk_tokens: Some(chunk_tokens), ..SourceOptions::default() };
    let source = SteeredSource::new(&datasets.manifests(), shares, config, &PER_ROW, None).expect("valid mixture");
    let mut ops = Operators::new().then(ByteTokenize);
    if ensure {
        ops = ops.then(EnsureMixture::new(shares, 64).expect("valid shares"));
    }
    let operators = ops.then(WrapPack { len: 32 }).then(ShuffleBuffer { size: 3 });
    RunSpec {
        operators,
        source: Arc::new(source),
        datasets,
        seed: 9,
        bad_records: BadRecords::Fail,
        tail,
        token_estimates: Vec::new(),
    }
}

/// Steps `0..steps` at world size `w` (every rank in this process), fresh or restored from a
/// split checkpoint; returns the global fingerprints and every rank's split after the last.
fn run(
    spec: &RunSpec,
    lanes: u32,
    w: u32,
    threads: usize,
    steps: u64,
    from: Option<&SplitCheckpoint>,
) -> (Vec<Digest>, SplitCheckpoint) {
    let mut ranks = Ranks::engines_with(lanes, 2 * lanes, w, |t| match from {
        Some(s) => {
            let owned: Vec<Lane> = t.owned_lanes().collect();
            let mine = SplitCheckpoint {
                run: s.run.clone(),
                lanes: s.lanes.iter().filter(|p| owned.contains(&p.lane)).cloned().collect(),
            };
            Engine::restore_split(spec.clone(), t, opts(threads, 3, 2), &mine, &|l| l.to_string())
        }
        None => Engine::start(spec.clone(), t, opts(threads, 3, 2)),
    })
    .unwrap();
    let fps = ranks.steps_exactly(steps, fingerprint).unwrap();
    let splits: Vec<SplitCheckpoint> = ranks.iter().map(|e| e.checkpoint_split().unwrap()).collect();
    let split =
        SplitCheckpoint { run: splits[0].run.clone(), lanes: splits.iter().flat_map(|s| s.lanes.clone()).collect() };
    (fps, split)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Random targets, lane counts, world sizes, thread counts and resume points: every global
    /// step equals the uninterrupted run at W = 1, through two resumes at other world sizes.
    #[test]
    fn a_steered_run_is_the_same_at_every_world_size_and_across_resumes(
        shares in prop::collection::vec(0.05f64..1.0, 3),
        lanes in prop::sample::select(vec![1u32, 2, 4, 8]),
        w in prop::sample::select(vec![1u32, 2, 4, 8]),
        w2 in prop::sample::select(vec![1u32, 2, 4, 8]),
        threads in 1usize..3,
        k1 in 0u64..6,
        k2 in 0u64..6,
        ensure in any::<bool>(),
    ) {
        let (w, w2) = (w.min(lanes), w2.min(lanes));
        let spec = run_spec(&shares, Exhaustion::Repeat, 96, ensure, Tail::Drop);
        let total = k1 + k2 + 3;
        let (reference, _) = run(&spec, lanes, 1, 2, total, None);
        let (mut got, first) = run(&spec, lanes, w, threads, k1, None);
        let (more, second) = run(&spec, lanes, w2, threads, k2, Some(&first));
        got.extend(more);
        let (rest, _) = run(&spec, lanes, w, 3 - threads, total - k1 - k2, Some(&second));
        got.extend(rest);
        prop_assert_eq!(got, reference);
    }
}

/// Tokens per dataset of every row a run at one lane delivers, step by step, and each row's
/// lineage.
fn delivered(spec: &RunSpec, steps: u64) -> (Vec<[u64; 3]>, Vec<Lineage>) {
    let mut e =
        Engine::start(spec.clone(), Topology::builder().lanes(1).rows_per_step(2).build().unwrap(), opts(2, 3, 2))
            .unwrap();
    let (mut tokens, mut by_step, mut lineage) = ([0u64; 3], Vec::new(), Vec::new());
    for _ in 0..steps {
        let Some(step) = e.next_step().unwrap() else { break };
        for row in step.rows() {
            for f in row.lineage().fragments() {
                tokens[f.sample.dataset as usize] += u64::from(f.len());
            }
            lineage.push(row.lineage().clone());
        }
        by_step.push(tokens);
    }
    (by_step, lineage)
}

/// The loop holds each dataset's share of a lane's tokens within about a chunk plus a
/// document, at every step, though the documents' lengths differ a hundredfold.
#[test]
fn the_closed_loop_holds_the_shares_at_every_step() {
    let shares = [0.2, 0.3, 0.5];
    let spec = run_spec(&shares, Exhaustion::Repeat, 96, false, Tail::Drop);
    let (by_step, _) = delivered(&spec, 800);
    let mut worst = 0.0f64;
    for t in &by_step {
        let total: u64 = t.iter().sum();
        for d in 0..3 {
            worst = worst.max((t[d] as f64 - shares[d] * total as f64).abs());
        }
    }
    // A chunk is ~96 tokens; the longest document ~2,000, delivered whole before the loop can
    // answer; the packer and the shuffle hold a few rows of 32.
    assert!(worst < 2500.0, "a dataset ran {worst:.0} tokens off its share");
    let last = by_step.last().unwrap();
    let total: u64 = last.iter().sum();
    for d in 0..3 {
        let share = last[d] as f64 / total as f64;
        assert!((share - shares[d]).abs() < 0.02, "dataset {d}: {share:.3} of {total} tokens");
    }
}

/// Finite data under `redistribute`: every token of every document is delivered exactly once,
/// and a lane that runs out of a dataset goes on with the others.
#[test]
fn finite_steered_data_is_delivered_exactly_once() {
    let spec = run_spec(&[0.2, 0.3, 0.5], Exhaustion::Redistribute, 96, true, Tail::Partial);
    let (_, rows) = delivered(&spec, u64::MAX);
    let mut seen: BTreeMap<SampleId, Vec<(u32, u32)>> = BTreeMap::new();
    for l in &rows {
        for f in l.fragments() {
            let span = f.positions().expect("tokens");
            seen.entry(f.sample).or_default().push((span.start(), span.end()));
        }
    }
    let manifests = datasets().manifests();
    let docs: u64 = manifests.iter().map(|m| m.rows()).sum();
    assert_eq!(seen.len() as u64, docs, "every document arrives");
    for (doc, mut spans) in seen {
        spans.sort();
        let mut at = 0;
        for (a, b) in spans {
            assert_eq!(a, at, "{doc}: a hole or an overlap at {a}");
            at = b;
        }
    }
}

/// A spec whose shares follow `schedule` (3 datasets), with ensure_mixture and a shuffle that
/// keeps shares, so that every holder of targets is retargeted at each segment.
fn scheduled_spec(schedule: &ShareSchedule) -> RunSpec {
    let datasets = datasets();
    let first = schedule.at(0);
    let config = SourceOptions { seed: 3, chunk_tokens: Some(96), ..SourceOptions::default() };
    let source = SteeredSource::new(&datasets.manifests(), first, config, &PER_ROW, None)
        .and_then(|s| s.with_schedule(schedule.clone()))
        .expect("valid mixture");
    let operators = Operators::new()
        .then(ByteTokenize)
        .then(EnsureMixture::new(first, 64).expect("valid shares"))
        .then(WrapPack { len: 32 })
        .then(ShuffleBuffer { size: 3 });
    RunSpec {
        operators,
        source: Arc::new(source),
        datasets,
        seed: 9,
        bad_records: BadRecords::Fail,
        tail: Tail::Drop,
        token_estimates: Vec::new(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Random share schedules (a dataset may be off in a segment), lane counts and world
    /// sizes, resumes at a segment's first step, a step before or after it: every global step
    /// equals the uninterrupted run at W = 1.
    #[test]
    fn a_share_schedule_gives_the_same_steps_at_every_world_size_and_across_resumes(
        segments in prop::collection::vec((2u64..8, prop::collection::vec(0.0f64..1.0, 3)), 1..3),
        first in prop::collection::vec(0.05f64..1.0, 3),
        lanes in prop::sample::select(vec![1u32, 2, 4]),
        w in prop::sample::select(vec![1u32, 2, 4]),
        w2 in prop::sample::select(vec![1u32, 2, 4]),
        shift in prop::sample::select(vec![-1i64, 0, 1]),
    ) {
        let (w, w2) = (w.min(lanes), w2.min(lanes));
        let mut at = 0;
        let mut list = vec![(0, first)];
        for (len, mut w) in segments {
            at += len;
            w[at as usize % 3] += 0.2; // never all zero
            list.push((at, w));
        }
        let schedule = ShareSchedule::new(list).unwrap();
        let spec = scheduled_spec(&schedule);
        let total = at + 4;
        let (reference, _) = run(&spec, lanes, 1, 2, total, None);
        let cut = schedule.segments()[1].0.saturating_add_signed(shift).clamp(1, total - 1);
        let (mut got, first) = run(&spec, lanes, w, 2, cut, None);
        let (rest, _) = run(&spec, lanes, w2, 1, total - cut, Some(&first));
        got.extend(rest);
        prop_assert_eq!(got, reference);
    }
}

/// After a segment starts, each lane reads by its shares: a dataset off in the first segment
/// arrives only in the second, and the tokens of the second segment's steps follow its targets
/// after a transition of a few steps (what the packer and the shuffle still hold).
#[test]
fn the_closed_loop_follows_the_shares_in_force() {
    let schedule = ShareSchedule::new(vec![(0, vec![0.5, 0.5, 0.0]), (300, vec![0.2, 0.3, 0.5])]).unwrap();
    let spec = scheduled_spec(&schedule);
    let (by_step, _) = delivered(&spec, 900);
    assert_eq!(by_step[299][2], 0, "dataset 2 is off before step 300");
    // Tokens of steps 310.. (after ten steps of transition), against the second targets.
    let (from, to) = (by_step[309], by_step[by_step.len() - 1]);
    let got: Vec<u64> = (0..3).map(|d| to[d] - from[d]).collect();
    let total: u64 = got.iter().sum();
    for (d, (&n, want)) in got.iter().zip(schedule.at(300)).enumerate() {
        let share = n as f64 / total as f64;
        assert!((share - want).abs() < 0.03, "dataset {d}: {share:.3} of {total} tokens");
    }
}
