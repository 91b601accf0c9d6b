//! Split checkpoints (a run part and a part per lane, the shape a trainer's distributed
//! checkpoint stores): a restore at any world size from the lanes' parts continues the run
//! exactly, and parts that do not belong together are refused, naming the part.

use proptest::prelude::*;
use zephon_core::testing::{Ranks, fingerprint};
use zephon_core::*;
use zephon_operator::*;

use crate::common::*;

const LANES: u32 = 8;
const ROWS: u32 = 16;

fn run_spec() -> RunSpec {
    spec(corpus(300, 40, 3), operators(24, 4), 4, 100, Tail::Drop)
}

fn key(l: Lane) -> String {
    format!("lane_{:06}", l.0)
}

/// Steps `0..steps` at world size `w` (every rank in this process), then every rank's split
/// checkpoint merged as a store would: one run part (the ranks' must be equal) and every lane's
/// part.
fn run_and_split(spec: &RunSpec, w: u32, steps: u64) -> (Vec<Digest>, SplitCheckpoint) {
    let mut ranks = Ranks::engines(spec, LANES, ROWS, w, opts(2, 3, 2), None).unwrap();
    let fps = ranks.steps_exactly(steps, fingerprint).unwrap();
    let splits: Vec<SplitCheckpoint> = ranks.iter().map(|e| e.checkpoint_split().unwrap()).collect();
    for s in &splits {
        assert_eq!(s.run, splits[0].run, "every rank writes the same run part");
    }
    let lanes = splits.iter().flat_map(|s| s.lanes.clone()).collect();
    (fps, SplitCheckpoint { run: splits[0].run.clone(), lanes })
}

/// Every rank of `w` restored from the parts it owns of `all`.
fn restored(spec: &RunSpec, w: u32, all: &SplitCheckpoint) -> Ranks<Engine> {
    Ranks::start(w, |r| restore(spec, w, r, all)).unwrap()
}

/// Rank `rank` of `w` restored from the parts it owns (as a store hands it its template's keys).
fn restore(spec: &RunSpec, w: u32, rank: u32, all: &SplitCheckpoint) -> Result<Engine> {
    let t = Topology::builder().lanes(LANES).rows_per_step(ROWS).place(Place { rank, world_size: w }).build().unwrap();
    let owned: Vec<Lane> = t.owned_lanes().collect();
    let mine = SplitCheckpoint {
        run: all.run.clone(),
        lanes: all.lanes.iter().filter(|p| owned.contains(&p.lane)).cloned().collect(),
    };
    Engine::restore_split(spec.clone(), t, opts(1, 3, 1), &mine, &key)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Resume chains through split checkpoints at random world sizes and steps equal the
    /// uninterrupted run at W = 1.
    #[test]
    fn split_checkpoints_resume_exactly_at_any_world_size(
        w1 in prop::sample::select(vec![1u32, 2, 4, 8]),
        w2 in prop::sample::select(vec![1u32, 2, 4, 8]),
        w3 in prop::sample::select(vec![1u32, 2, 4, 8]),
        k1 in 0u64..5,
        k2 in 0u64..4,
    ) {
        let spec = run_spec();
        let total = k1 + k2 + 3;
        let reference = run_ranks(&spec, LANES, ROWS, 1, opts(2, 3, 2), total, None, None);
        let (mut got, first) = run_and_split(&spec, w1, k1);
        let mut ranks = restored(&spec, w2, &first);
        got.extend(ranks.steps_exactly(k2, fingerprint).unwrap());
        let splits: Vec<SplitCheckpoint> = ranks.iter().map(|e| e.checkpoint_split().unwrap()).collect();
        let second = SplitCheckpoint { run: splits[0].run.clone(), lanes: splits.iter().flat_map(|s| s.lanes.clone()).collect() };
        got.extend(restored(&spec, w3, &second).steps_exactly(total - k1 - k2, fingerprint).unwrap());
        prop_assert_eq!(got, reference);
    }
}

/// The split of a fresh run, taken without starting it, is the run's first state: restoring
/// from it gives the run from its first step.
#[test]
fn the_initial_split_restores_to_the_start() {
    let spec = run_spec();
    let reference = run_ranks(&spec, LANES, ROWS, 2, opts(2, 3, 2), 4, None, None);
    let parts: Vec<SplitCheckpoint> = (0..2)
        .map(|r| {
            Engine::initial_split(
                &spec,
                &Topology::builder()
                    .lanes(LANES)
                    .rows_per_step(ROWS)
                    .place(Place { rank: r, world_size: 2 })
                    .build()
                    .unwrap(),
                &opts(2, 3, 2),
            )
            .unwrap()
        })
        .collect();
    assert_eq!(parts[0].run, parts[1].run);
    let all =
        SplitCheckpoint { run: parts[0].run.clone(), lanes: parts.iter().flat_map(|s| s.lanes.clone()).collect() };
    assert_eq!(all.lanes.len(), LANES as usize);
    assert_eq!(restored(&spec, 4, &all).steps_exactly(4, fingerprint).unwrap(), reference);
}

fn err(r: Result<Engine>) -> String {
    match r {
        Ok(_) => panic!("the restore should fail"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn parts_that_do_not_belong_together_are_refused_naming_the_part() {
    let spec = run_spec();
    let (_, at3) = run_and_split(&spec, 2, 3);
    let (_, at4) = run_and_split(&spec, 2, 4);
    // A missing lane.
    let mut missing = at3.clone();
    missing.lanes.retain(|p| p.lane != Lane(5));
    assert!(err(restore(&spec, 2, 1, &missing)).contains("no lane part holds lane(s) 5"));
    assert!(restore(&spec, 2, 0, &missing).is_ok(), "rank 0 of 2 does not need lane 5");
    // A lane of another step, under the same run part.
    let mut mixed = at3.clone();
    mixed.lanes[6] = at4.lanes[6].clone();
    let e = err(restore(&spec, 1, 0, &mixed));
    assert!(e.contains("lane_000006") && e.contains("step 4") && e.contains("step 3"), "{e}");
    // A lane of another run.
    let other = spec_with_seed(&spec, spec.seed + 1);
    let (_, foreign) = run_and_split(&other, 1, 3);
    let mut alien = at3.clone();
    alien.lanes[2] = foreign.lanes[2].clone();
    let e = err(restore(&spec, 1, 0, &alien));
    assert!(e.contains("lane_000002 belongs to another run"), "{e}");
    // The whole checkpoint of another run: the changed part is named.
    let e = err(restore(&spec, 1, 0, &foreign));
    assert!(e.contains("different run") && e.contains("seed"), "{e}");
    // Damage to a lane part or to the run part.
    let mut damaged = at3.clone();
    let last = damaged.lanes[1].bytes.len() - 1;
    damaged.lanes[1].bytes[last] ^= 0x40;
    assert!(err(restore(&spec, 1, 0, &damaged)).contains("lane_000001: checksum mismatch"));
    let mut cut = at3.clone();
    cut.run.truncate(cut.run.len() / 2);
    assert!(err(restore(&spec, 1, 0, &cut)).contains("the run part"));
    // A part filed under another lane's key.
    let mut swapped = at3.clone();
    swapped.lanes[3].lane = Lane(4);
    swapped.lanes[4].lane = Lane(3);
    assert!(err(restore(&spec, 1, 0, &swapped)).contains("holds the state of"));
    // Every cut of a lane part is an error, never a panic.
    for n in 0..at3.lanes[0].bytes.len() {
        let mut short = at3.clone();
        short.lanes[0].bytes.truncate(n);
        assert!(restore(&spec, 1, 0, &short).is_err());
    }
}

fn spec_with_seed(spec: &RunSpec, seed: u64) -> RunSpec {
    let mut s = spec.clone();
    s.seed = seed;
    s
}
