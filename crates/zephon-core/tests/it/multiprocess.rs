//! Ranks as separate OS processes: each reads its rank and world size from the environment
//! (as under torchrun), logs its lanes' digests per step, and checkpoints its own lanes.
//! Combined, the logs equal the one-process run; restarts at other world sizes continue it.

use std::fs;

use zephon_core::*;

use crate::common::*;

const LANES: u32 = 8;
const ROWS: u32 = 16;
const STEPS: u64 = 9;
const ENTRY: &str = "multiprocess::rank_process_entry";

fn the_spec() -> RunSpec {
    spec(corpus(400, 40, 21), operators(40, 6), 6, 1000, Tail::Drop)
}

/// The body of a rank process, started by `spawn_ranks` (which runs ignored tests by name);
/// not a test of its own.
#[test]
#[ignore = "the body of a rank process: the multi-process tests start it"]
fn rank_process_entry() {
    assert!(rank_process(the_spec, LANES, ROWS, opts(2, 3, 2)), "started without spawn_ranks's environment");
}

#[test]
fn rank_processes_combine_to_the_single_process_run_and_resume_elsewhere() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let reference = run_ranks(&the_spec(), LANES, ROWS, 1, opts(1, 4, 1), STEPS, None, None);

    for ws in [2, 4, 8] {
        assert_eq!(spawn_ranks(ENTRY, LANES, ws, 0, STEPS, None, None, w), reference, "W = {ws}");
    }

    // Stop all ranks after step 3 at W = 2, restart at W = 4, stop again after step 6,
    // restart at W = 1 and at W = 8.
    let ck1 = w.join("ckpt-3");
    let ck2 = w.join("ckpt-6");
    let mut got = spawn_ranks(ENTRY, LANES, 2, 0, 3, None, Some(&ck1), w);
    got.extend(spawn_ranks(ENTRY, LANES, 4, 3, 6, Some(&ck1), Some(&ck2), w));
    let tail1 = spawn_ranks(ENTRY, LANES, 1, 6, STEPS, Some(&ck2), None, w);
    let tail8 = spawn_ranks(ENTRY, LANES, 8, 6, STEPS, Some(&ck2), None, w);
    assert_eq!(tail1, tail8);
    got.extend(tail1);
    assert_eq!(got, reference);
    // The checkpoint directories hold one file per rank.
    assert_eq!(fs::read_dir(&ck1).unwrap().count(), 2);
    assert_eq!(fs::read_dir(&ck2).unwrap().count(), 4);
}
