//! Records with shaped arrays and attachments (images anchored on the token axis) through
//! split → pack → shuffle: the invariants hold for them too.
//!
//! - the same global steps at random lane counts, rows per lane, world sizes, thread counts,
//!   unit sizes and microbatch sizes, and across a checkpoint restored at another world size;
//! - every image delivered exactly once per epoch, never cut, with its placeholder tokens;
//! - a change of an array's shape alone changes the fingerprints.

use std::collections::BTreeMap;

use proptest::prelude::*;
use zephon_core::testing::{Ranks, fingerprint_through_microbatches};
use zephon_core::*;
use zephon_operator::*;
use zephon_pack::*;
use zephon_testkit::{
    IMAGE, ImageTokenize, ShuffleBuffer, Split, image_corpus, images_of, opts, run_ranks, span_len, spec,
};

const DOCS: usize = 150;

fn operators(alg: Algorithm, seq_len: usize, shuffle: usize, transpose: bool) -> Operators {
    operators_ending(alg, seq_len, shuffle, transpose, EndOfData::KeepPieces)
}

fn operators_ending(alg: Algorithm, seq_len: usize, shuffle: usize, transpose: bool, end: EndOfData) -> Operators {
    let config = PackOptions { max_segments: 6.min(seq_len), end_of_data: end, ..PackOptions::new(alg, seq_len) };
    let ops = Operators::new()
        .then(ImageTokenize { transpose })
        .then(Split { max: seq_len })
        .then(Pack::new(config).unwrap());
    if shuffle > 0 { ops.then(ShuffleBuffer { size: shuffle }) } else { ops }
}

fn algorithm(i: usize) -> Algorithm {
    [Algorithm::Wrap, Algorithm::FirstFit { bins: 3 }, Algorithm::BestFit { bins: 4 }][i]
}

/// Per step, per lane: the digest of the lane's rows taken back out of microbatches of `m`.
fn through_microbatches(spec: &RunSpec, lanes: u32, rows: u32, w: u32, m: usize, steps: u64) -> Vec<Digest> {
    let mut ranks = Ranks::engines(spec, lanes, rows, w, opts(2, 2, 2), None).unwrap();
    ranks.steps_exactly(steps, |parts| fingerprint_through_microbatches(parts, m).unwrap()).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn steps_with_images_are_the_same_at_any_topology_and_across_restores(
        lanes_log in 0u32..3,
        r in 1u32..3,
        w_log in 0u32..3,
        threads in 1usize..3,
        unit in 1usize..5,
        alg in 0usize..3,
        seq_len in 12usize..40,
        shuffle in 0usize..4,
        resume_at in 1u64..4,
        w2_log in 0u32..3,
    ) {
        let lanes = 1 << lanes_log;
        let (w, w2) = (1 << w_log.min(lanes_log), 1 << w2_log.min(lanes_log));
        let rows = lanes * r;
        let steps = 6;
        let s = spec(image_corpus(DOCS, 12, 7), operators(algorithm(alg), seq_len, shuffle, false), 3, 1000, Tail::Drop);
        let reference = run_ranks(&s, lanes, rows, 1, opts(1, 3, 1), steps, None, None);
        prop_assert_eq!(reference.len() as u64, steps);
        let got = run_ranks(&s, lanes, rows, w, opts(threads, unit, 2), steps, None, None);
        prop_assert_eq!(&got, &reference, "W={}", w);
        let m = (rows / w) as usize;
        let mb = if m.is_multiple_of(2) { m / 2 } else { m };
        prop_assert_eq!(&through_microbatches(&s, lanes, rows, w, mb, steps), &reference, "microbatch {}", mb);
        let tmp = tempfile::tempdir().unwrap();
        let mut resumed = run_ranks(&s, lanes, rows, w, opts(threads, unit, 2), resume_at, None, Some(tmp.path()));
        resumed.extend(run_ranks(&s, lanes, rows, w2, opts(2, 2, 1), steps - resume_at, Some(tmp.path()), None));
        prop_assert_eq!(&resumed, &reference, "W={} -> W={} at {}", w, w2, resume_at);
    }
}

#[test]
fn every_image_arrives_exactly_once_per_epoch_whole_and_in_place() {
    let datasets = image_corpus(DOCS, 12, 7);
    // What the corpus holds: per sample, its number of `#`.
    let mut want: BTreeMap<(SampleId, u32), ()> = BTreeMap::new();
    for (shard, m) in datasets.manifests()[0].shards.iter().enumerate() {
        let ids: Vec<SampleId> = (0..m.rows).map(|row| SampleId::new(0, shard as u32, row)).collect();
        for (id, r) in ids.iter().zip(datasets.read(&ids)) {
            let n = r.unwrap().str("text").unwrap().matches('#').count() as u32;
            want.extend((0..n).map(|k| ((*id, k), ())));
        }
    }
    assert!(want.len() > 100, "the corpus has images: {}", want.len());
    for (alg, end) in
        [(0, EndOfData::KeepPieces), (1, EndOfData::KeepPieces), (2, EndOfData::KeepPieces), (2, EndOfData::FillRows)]
    {
        for (lanes, w) in [(1, 1), (4, 2), (8, 8)] {
            let ops = operators_ending(algorithm(alg), 16, 3, false, end);
            let s = spec(datasets.clone(), ops, 3, 1, Tail::Partial);
            let mut seen: BTreeMap<(SampleId, u32), usize> = BTreeMap::new();
            let mut engines: Vec<Engine> = (0..w)
                .map(|r| {
                    Engine::start(
                        s.clone(),
                        Topology::builder()
                            .lanes(lanes)
                            .rows_per_step(lanes * 2)
                            .place(Place { rank: r, world_size: w })
                            .build()
                            .unwrap(),
                        opts(2, 2, 2),
                    )
                    .unwrap()
                })
                .collect();
            for e in &mut engines {
                while let Some(step) = e.next_step().unwrap() {
                    for row in step.rows() {
                        let ids = row.get(INPUT_IDS).and_then(Value::as_array).and_then(Array::as_u32).unwrap();
                        let labels = row.get(LABELS).and_then(Value::as_array).and_then(Array::as_i32).unwrap();
                        for (a, key) in row.attachments().iter().zip(images_of(row)) {
                            *seen.entry(key).or_default() += 1;
                            let span = a.span().unwrap();
                            let (s, e) = (span.start() as usize, span.end() as usize);
                            assert_eq!(span.len(), span_len(a.item()), "{alg} {key:?}: the whole span is in the row");
                            assert!(ids[s..e].iter().all(|&t| t == IMAGE), "{key:?} sits on its placeholders");
                            assert!(
                                labels[s.saturating_sub(1)..e - 1].iter().all(|&l| l == -100),
                                "placeholders are never targets"
                            );
                            let px = a.get("pixels").and_then(Value::as_array).unwrap();
                            assert_eq!((px.shape().ndim(), px.shape().dims()[2]), (3, 3));
                        }
                    }
                }
            }
            let twice: Vec<_> = seen.iter().filter(|(_, n)| **n != 1).collect();
            assert!(twice.is_empty(), "alg {alg} L={lanes}: delivered more than once: {twice:?}");
            let missing: Vec<_> = want.keys().filter(|k| !seen.contains_key(k)).collect();
            assert!(missing.is_empty(), "alg {alg} L={lanes} W={w}: never delivered: {missing:?}");
        }
    }
}

#[test]
fn a_shape_change_alone_changes_the_fingerprint() {
    let run = |transpose| {
        let s = spec(image_corpus(DOCS, 12, 7), operators(Algorithm::Wrap, 24, 0, transpose), 3, 1000, Tail::Drop);
        run_ranks(&s, 2, 4, 1, opts(1, 3, 1), 4, None, None)
    };
    let (a, b) = (run(false), run(true));
    // Same bytes everywhere; only the [h, w, 3] shapes of non-square images differ.
    assert!(a.iter().zip(&b).all(|(x, y)| x != y), "every step holds images whose shape changed");
}
