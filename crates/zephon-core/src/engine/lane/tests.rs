use std::sync::atomic::{AtomicU64, Ordering};

use super::*;
use crate::plan::Operators;
use zephon_operator::{AccumulatorState, Lineage};
use zephon_operator::{Fragment, SampleId, Span, Value};

fn lane() -> LaneRun {
    lane_snapshotting_every(1)
}

fn lane_snapshotting_every(every: u64) -> LaneRun {
    let plan = Arc::new(Plan::new(Operators::new()));
    LaneRun::new(
        LaneSetup {
            lane: Lane(0),
            plan,
            accs: Vec::new(),
            names: vec!["d".to_string()].into(),
            rows: RowsPerStep::constant(2),
            lanes: 1,
            tail: Tail::Drop,
            snapshot_every: every,
            snapshot_at: None,
            digests_by_workers: true,
            bad_limit: vec![1024].into(),
            steering: None,
            read: ReadBudget { budget: 16, unit_cap: 16 },
        },
        0,
    )
}

/// One input that makes 1,000 rows (a huge document) and a second input.
fn big_unit() -> UnitOutput {
    let sample = SampleId::new(0, 0, 0);
    let records: Vec<Record> = (0..1001u32)
        .map(|i| {
            Record::new(Lineage::single(Fragment::span(sample, Span::at(i, 1).unwrap())))
                .with(&"x".into(), Value::Int(i64::from(i)))
        })
        .collect();
    UnitOutput::Samples {
        chunk: 0,
        start: 0,
        chunk_len: 2,
        records,
        ends: vec![1000, 1001],
        inputs: vec![(0, None), (0, None)],
        failure: None,
    }
}

#[test]
fn each_snapshot_holds_as_pending_exactly_the_rows_after_its_step() {
    for every in [1, 2, 3, 7] {
        let mut run = lane_snapshotting_every(every);
        // The first input makes 1,000 rows of 2 a step: 500 steps finalized at once, all
        // snapshotted at the boundary after it. The second input's row comes later and
        // is in none of them.
        run.accumulate(big_unit(), u64::MAX);
        assert_eq!((run.steps.len(), run.current.len()), (500, 1));
        let lineages: Vec<Vec<Lineage>> =
            run.steps.iter().map(|s| s.rows.iter().map(|r| r.lineage().clone()).collect()).collect();
        for (i, step) in run.steps.iter().enumerate() {
            let wanted = (step.step.0 + 1).is_multiple_of(every);
            assert_eq!(step.state.is_some(), wanted, "step {} with snapshots every {every}", step.step.0);
            if let Some(snap) = &step.state {
                let pending = snap.state().pending;
                let after: Vec<Lineage> = lineages[i + 1..].iter().flatten().cloned().collect();
                assert!(pending == after, "step {}, snapshots every {every}: wrong pending rows", step.step.0);
            }
        }
    }
}

/// Passes records on; counts the records the next stage emitted.
struct Watcher(Arc<AtomicU64>);

impl Accumulator for Watcher {
    fn push(&mut self, record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        out.push(record);
        Ok(())
    }
    fn export(&self) -> AccumulatorState {
        AccumulatorState::default()
    }
    fn import(&mut self, _: AccumulatorState, _: Vec<Record>) -> Result<(), OpError> {
        Ok(())
    }
    fn watches_next_stage(&self) -> bool {
        true
    }
    fn next_stage_out(&mut self, _: &Record) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Holds records and lets them out three at a time.
struct Threes(Vec<Record>);

impl Accumulator for Threes {
    fn push(&mut self, record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        self.0.push(record);
        if self.0.len() == 3 {
            out.append(&mut self.0);
        }
        Ok(())
    }
    fn export(&self) -> AccumulatorState {
        AccumulatorState::default()
    }
    fn import(&mut self, _: AccumulatorState, _: Vec<Record>) -> Result<(), OpError> {
        Ok(())
    }
}

#[test]
fn a_watching_accumulator_sees_what_the_next_stage_emits_and_the_last_one_sees_nothing() {
    let (first, last) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut run = lane();
    run.accs = vec![Box::new(Watcher(first.clone())), Box::new(Threes(Vec::new())), Box::new(Watcher(last.clone()))];
    run.watches_next = run.accs.iter().map(|a| a.watches_next_stage()).collect();
    run.scratch = (0..3).map(|_| Vec::new()).collect();
    run.accumulate(big_unit(), u64::MAX);
    let seen = |c: &AtomicU64| c.load(Ordering::Relaxed);
    assert_eq!(seen(&first), 999, "1,001 records in, 333 threes out; 2 still held");
    assert_eq!(run.rows_emitted, 999);
    assert_eq!(seen(&last), 0, "the last stage has no next one");
}

#[test]
fn a_lane_pauses_inside_a_huge_input_and_continues_where_it_stopped() {
    let mut run = lane();
    run.accumulate(big_unit(), 3);
    assert!(run.is_paused());
    assert_eq!(run.progress().steps_made, 3, "stops at the step it may make, not at 500");
    assert_eq!(run.steps.len(), 3);
    run.steps.clear();
    run.continue_paused(10);
    assert_eq!(run.progress().steps_made, 10);
    run.continue_paused(u64::MAX);
    assert!(!run.is_paused());
    assert_eq!(run.progress().steps_made, 500, "1,001 rows of 2 a step");
    assert_eq!(run.cursor(), Cursor { chunk: 1, offset: 0 }, "both inputs consumed");
    // The rows are the same as without a pause.
    let mut straight = lane();
    straight.accumulate(big_unit(), u64::MAX);
    let digests = |r: &LaneRun| r.steps.iter().map(LaneStep::digest).collect::<Vec<_>>();
    assert_eq!(digests(&run), digests(&straight)[3..]);
}
