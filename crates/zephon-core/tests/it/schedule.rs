//! A batch-size schedule G(step) keeps the invariants: every global step is the same bytes at
//! every world size, and a chain of resumes at other world sizes, at a boundary of the
//! schedule, one step either side of it or anywhere else, continues the uninterrupted run.

use proptest::prelude::*;
use zephon_core::*;
use zephon_operator::*;

use crate::common::*;

fn divisors(n: u32) -> Vec<u32> {
    (1..=n).filter(|d| n.is_multiple_of(*d)).collect()
}

/// A schedule of G over `lanes` lanes from `(steps, rows per lane)` segments: consecutive
/// segments of equal G merge (a schedule writes each change once).
fn schedule(lanes: u32, segments: &[(u64, u32)]) -> RowsPerStep {
    let mut out: Vec<(u64, u32)> = Vec::new();
    let mut at = 0;
    for &(steps, per_lane) in segments {
        let g = per_lane * lanes;
        if out.last().is_none_or(|&(_, last)| last != g) {
            out.push((at, g));
        }
        at += steps;
    }
    RowsPerStep::new(out).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20, ..ProptestConfig::default() })]

    #[test]
    fn a_batch_size_schedule_gives_the_same_steps_at_every_world_size_and_across_resumes(
        lanes in prop::sample::select(vec![1u32, 2, 4, 8]),
        segments in prop::collection::vec((1u64..5, 1u32..5), 1..4),
        shuffle in prop::sample::select(vec![0usize, 5]),
        w_picks in prop::collection::vec(0usize..8, 8),
        extra_cuts in prop::collection::vec(1u64..16, 0..2),
        shift in prop::sample::select(vec![-1i64, 0, 1]),
    ) {
        let g = schedule(lanes, &segments);
        let total = segments.iter().map(|s| s.0).sum::<u64>() + 3;
        let spec = spec(corpus(400, 40, 4), operators(64, shuffle), 5, 1000, Tail::Drop);
        let reference = run_ranks(&spec, lanes, g.clone(), 1, opts(1, 4, 1), total, None, None);
        prop_assert_eq!(reference.len() as u64, total);
        let ws = divisors(lanes);

        // Every world size gives the same steps.
        let w = ws[w_picks[0] % ws.len()];
        prop_assert_eq!(&run_ranks(&spec, lanes, g.clone(), w, opts(2, 3, 2), total, None, None), &reference);

        // Resumes at each boundary of the schedule (shifted by a step either way), and at a
        // random step or two, each at another world size.
        let mut cuts: Vec<u64> = g.segments()[1..].iter().map(|(s, _)| s.saturating_add_signed(shift)).collect();
        cuts.extend(extra_cuts.iter().map(|c| c % total));
        cuts.retain(|&c| 0 < c && c < total);
        cuts.sort_unstable();
        cuts.dedup();
        let tmp = tempfile::tempdir().unwrap();
        let mut got = Vec::new();
        let mut resume: Option<std::path::PathBuf> = None;
        let mut at = 0;
        for (i, &cut) in cuts.iter().chain([total].iter()).enumerate() {
            let w = ws[w_picks[(i + 1) % w_picks.len()] % ws.len()];
            let save = tmp.path().join(format!("ckpt-{i}"));
            got.extend(run_ranks(&spec, lanes, g.clone(), w, opts(2, 3, 2), cut - at, resume.as_deref(), Some(&save)));
            resume = Some(save);
            at = cut;
        }
        prop_assert_eq!(got, reference);
    }
}

/// Each step holds exactly G(step) rows, split evenly over the lanes, and a lane's rows are one
/// stream: the steps of a schedule are the same rows cut at other places.
#[test]
fn a_lanes_rows_are_one_stream_cut_where_the_schedule_says() {
    let lanes = 2;
    let g = RowsPerStep::new(vec![(0, 2), (3, 6), (5, 4)]).unwrap();
    let spec = spec(corpus(300, 30, 6), operators(48, 0), 3, 1000, Tail::Drop);
    let lane_rows = |rows: RowsPerStep, steps: u64| {
        let t = Topology::builder().lanes(lanes).rows_per_step(rows).build().unwrap();
        let mut e = Engine::start(spec.clone(), t.clone(), opts(2, 3, 2)).unwrap();
        let mut by_lane: Vec<Vec<Lineage>> = vec![Vec::new(); lanes as usize];
        for s in 0..steps {
            let step = e.next_step().unwrap().unwrap();
            assert_eq!(step.len() as u32, t.rows_at(s), "step {s}");
            for l in step.lanes() {
                assert_eq!(l.rows().len() as u32, t.rows_per_lane_at(s));
                by_lane[l.lane().0 as usize].extend(l.rows().iter().map(|r| r.lineage().clone()));
            }
        }
        by_lane
    };
    let scheduled = lane_rows(g.clone(), 8);
    // 1 + 1 + 1 + 3 + 3 + 2 + 2 + 2 = 15 rows a lane: the same as 15 steps of one row a lane.
    let flat = lane_rows(RowsPerStep::constant(lanes), g.rows_before(8) / u64::from(lanes));
    assert_eq!(scheduled, flat);
}

/// A checkpoint under one schedule resumes under another that differs only after its step
/// (reported), and is refused by one that differs before it, naming the step.
#[test]
fn a_schedule_may_change_after_the_checkpoints_step_but_not_before() {
    let lanes = 2;
    let spec = spec(corpus(300, 30, 7), operators(48, 3), 3, 1000, Tail::Drop);
    let g = RowsPerStep::new(vec![(0, 2), (4, 4)]).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    run_ranks(&spec, lanes, g.clone(), 2, opts(2, 3, 2), 3, None, Some(tmp.path()));
    let restore = |rows: RowsPerStep| {
        let t = Topology::builder().lanes(lanes).rows_per_step(rows).build().unwrap();
        Engine::restore(spec.clone(), t, opts(1, 3, 1), tmp.path())
    };
    let later = restore(RowsPerStep::new(vec![(0, 2), (6, 8)]).unwrap()).unwrap();
    let notice = later.notices().join("\n");
    assert!(notice.contains("step 4") && notice.contains("after the checkpoint's step 3"), "{notice}");
    assert!(restore(g).unwrap().notices().is_empty());
    let e = restore(RowsPerStep::new(vec![(0, 2), (2, 4)]).unwrap()).err().unwrap().to_string();
    assert!(e.contains("gives 2 at step 2, this run's 4") && e.contains("delivered steps up to 2"), "{e}");
}
