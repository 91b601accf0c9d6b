//! End to end through the real engine: packing keeps elastic determinism. The same steps at
//! world sizes 1, 2 and 4, at other thread counts and unit sizes, and after checkpoints
//! restored at other world sizes.

use zephon_core::*;
use zephon_operator::*;
use zephon_pack::*;
use zephon_testkit::{ByteTokenize, ShuffleBuffer, corpus, opts, run_ranks, spec};

const LANES: u32 = 4;
const ROWS: u32 = 8;
const STEPS: u64 = 10;

fn packers() -> Vec<PackOptions> {
    // Byte tokens: documents of 1..=60 words are ~5..360 tokens, often longer than T = 96.
    vec![
        PackOptions { max_segments: 6, ..PackOptions::new(Algorithm::Wrap, 96) },
        PackOptions { max_segments: 4, ..PackOptions::new(Algorithm::FirstFit { bins: 3 }, 96) },
        PackOptions { max_segments: 8, ..PackOptions::new(Algorithm::BestFit { bins: 5 }, 96) },
        PackOptions {
            longer_than_row: LongerThanRow::Truncate,
            max_segments: 8,
            ..PackOptions::new(Algorithm::BestFit { bins: 5 }, 96)
        },
        // Warming up: 1, 2, 4, ... open rows, 64 after 6 rows a lane (about where the first
        // checkpoint below falls; restores inside the ramp: `restore.rs`).
        PackOptions { warm_up: true, max_segments: 8, ..PackOptions::new(Algorithm::BestFit { bins: 64 }, 96) },
    ]
}

fn run_spec(config: &PackOptions, shuffle: usize) -> RunSpec {
    let ops = Operators::new().then(ByteTokenize).then(Pack::new(config.clone()).unwrap());
    let ops = if shuffle > 0 { ops.then(ShuffleBuffer { size: shuffle }) } else { ops };
    spec(corpus(800, 60, 4), ops, 5, 1000, Tail::Drop)
}

#[test]
fn steps_are_identical_at_any_world_size_and_across_restores() {
    for config in packers() {
        for shuffle in [0, 6] {
            let s = run_spec(&config, shuffle);
            let reference = run_ranks(&s, LANES, ROWS, 1, opts(1, 4, 1), STEPS, None, None);
            assert_eq!(reference.len() as u64, STEPS, "{}", config.fingerprint());
            for (w, threads, unit) in [(2, 2, 3), (4, 3, 1)] {
                let got = run_ranks(&s, LANES, ROWS, w, opts(threads, unit, 2), STEPS, None, None);
                assert_eq!(got, reference, "W={w} {} shuffle={shuffle}", config.fingerprint());
            }
            // Checkpoint at W=2 after 3 steps, restore at W=4, checkpoint after 4 more, finish at W=1.
            let tmp = tempfile::tempdir().unwrap();
            let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
            let mut got = run_ranks(&s, LANES, ROWS, 2, opts(2, 3, 2), 3, None, Some(&a));
            got.extend(run_ranks(&s, LANES, ROWS, 4, opts(2, 2, 1), 4, Some(&a), Some(&b)));
            got.extend(run_ranks(&s, LANES, ROWS, 1, opts(3, 5, 3), STEPS - 7, Some(&b), None));
            assert_eq!(got, reference, "resumed {} shuffle={shuffle}", config.fingerprint());
        }
    }
}

#[test]
fn rows_from_the_engine_have_the_packed_shape() {
    let config = packers()[2].clone();
    let t = Topology::builder().lanes(LANES).rows_per_step(ROWS).build().unwrap();
    let mut e = Engine::start(run_spec(&config, 0), t, opts(2, 4, 1)).unwrap();
    let step = e.next_step().unwrap().unwrap();
    let mut tokens = 0;
    for row in step.rows() {
        for (name, want) in [(INPUT_IDS, 96), (LABELS, 96), (POSITIONS, 96), (SEGMENT_IDS, 96), (LOSS_MASK, 96)] {
            match row.get(name) {
                Some(Value::Array(a)) => assert_eq!(a.len(), want, "{name}"),
                other => panic!("{name}: {other:?}"),
            }
        }
        match row.get(CU_SEQLENS) {
            Some(Value::Array(a)) => assert_eq!(a.len(), config.max_segments + 2),
            other => panic!("{other:?}"),
        }
        if let Some(Value::Int(n)) = row.get(NUM_TOKENS) {
            tokens += n;
        }
    }
    assert!(tokens > (ROWS as i64 * 96) * 9 / 10, "best-fit rows are mostly full: {tokens} tokens");
}
