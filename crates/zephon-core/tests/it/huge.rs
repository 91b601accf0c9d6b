//! One document that makes thousands of rows: the lane pauses inside it instead of holding
//! every row, and a checkpoint taken in the middle of it restores at another world size to
//! the uninterrupted run.

use std::sync::Arc;

use zephon_core::*;
use zephon_testkit::{ByteTokenize, ShuffleBuffer, Split, WrapPack, opts, run_ranks, spec};

fn datasets() -> Datasets {
    let mut texts: Vec<String> = (0..40).map(|i| format!("a small document number {i}")).collect();
    // 30,000 bytes: 30,001 byte tokens, 1,875 rows of 16.
    texts.insert(7, "lanes and steps ".repeat(1875));
    texts.insert(30, "x".repeat(5000));
    Datasets::new(vec![Arc::new(MemoryDataset::from_texts("huge", "text", vec![texts]))])
}

fn the_spec(shuffle: usize) -> RunSpec {
    let ops = Operators::new().then(ByteTokenize).then(Split { max: 16 }).then(WrapPack { len: 16 });
    let ops = if shuffle > 0 { ops.then(ShuffleBuffer { size: shuffle }) } else { ops };
    spec(datasets(), ops, 4, 1000, Tail::Drop)
}

#[test]
fn checkpoints_inside_a_huge_document_restore_anywhere() {
    for shuffle in [0, 3] {
        let s = the_spec(shuffle);
        let steps = 700;
        let reference = run_ranks(&s, 2, 4, 1, opts(1, 2, 1), steps, None, None);
        assert_eq!(reference.len() as u64, steps);
        for (at, w, w2) in [(5u64, 2u32, 1u32), (123, 1, 2), (400, 2, 2)] {
            let tmp = tempfile::tempdir().unwrap();
            let mut got = run_ranks(&s, 2, 4, w, opts(2, 2, 1), at, None, Some(tmp.path()));
            got.extend(run_ranks(&s, 2, 4, w2, opts(2, 3, 1), steps - at, Some(tmp.path()), None));
            assert_eq!(got, reference, "shuffle {shuffle}: checkpoint at {at} (W={w}) restored at W={w2}");
        }
        // Resumes in a row, each inside the document: a restored lane's own checkpoints keep
        // its place in the input.
        let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let mut got = run_ranks(&s, 2, 4, 2, opts(2, 2, 1), 120, None, Some(dirs[0].path()));
        got.extend(run_ranks(&s, 2, 4, 1, opts(1, 2, 1), 1, Some(dirs[0].path()), Some(dirs[1].path())));
        got.extend(run_ranks(&s, 2, 4, 2, opts(2, 2, 2), 0, Some(dirs[1].path()), Some(dirs[2].path())));
        got.extend(run_ranks(&s, 2, 4, 1, opts(2, 3, 1), steps - 121, Some(dirs[2].path()), None));
        assert_eq!(got, reference, "shuffle {shuffle}: three resumes in a row inside the document");
    }
}

#[test]
fn a_lane_inside_a_huge_document_holds_few_steps() {
    let t = Topology::builder().lanes(2).rows_per_step(4).build().unwrap();
    let mut e = Engine::start(the_spec(0), t, opts(2, 2, 1)).unwrap();
    for _ in 0..50 {
        let step = e.next_step().unwrap().unwrap();
        assert_eq!(step.len(), 4);
    }
    // Rows made but not yet delivered (pending in a checkpoint): a couple of steps' worth,
    // not the 1,800 rows of the document.
    let states = e.lane_states();
    let most = states.iter().map(|s| s.pending.len()).max().unwrap();
    assert!(most <= 3 * 2, "{most} rows pending in one lane");
    assert!(states.iter().any(|s| s.input_progress > 0), "a lane is inside the document");
}
