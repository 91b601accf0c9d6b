//! Bad records: a clear error naming dataset, shard and row, or a counted deterministic skip.

use std::sync::Arc;

use zephon_core::*;
use zephon_operator::*;

use crate::common::*;

/// A corpus where some documents are empty (which the test tokenizer rejects as bad data).
fn corpus_with_holes() -> Datasets {
    let shards = vec![
        (0..50).map(|i| if i % 17 == 5 { String::new() } else { format!("doc {i} text") }).collect(),
        (0..50).map(|i| if i == 33 { String::new() } else { format!("second {i}") }).collect(),
    ];
    Datasets::new(vec![Arc::new(MemoryDataset::from_texts("holes", "text", shards))])
}

#[test]
fn a_bad_record_stops_the_run_naming_dataset_shard_and_row() {
    let spec = spec(corpus_with_holes(), operators(16, 0), 5, 1, Tail::Drop);
    let mut e =
        Engine::start(spec, Topology::builder().lanes(2).rows_per_step(2).build().unwrap(), opts(2, 3, 2)).unwrap();
    let err = loop {
        match e.next_step() {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the run should fail"),
            Err(err) => break err.to_string(),
        }
    };
    assert!(err.contains("holes shard") && err.contains("row") && err.contains("empty document"), "{err}");
    assert!(err.contains("byte-tokenize"), "{err}");
}

#[test]
fn the_failing_step_does_not_depend_on_threads() {
    let spec = spec(corpus_with_holes(), operators(16, 0), 5, 1, Tail::Drop);
    let fail_step = |threads| {
        let mut e = Engine::start(
            spec.clone(),
            Topology::builder().lanes(2).rows_per_step(2).build().unwrap(),
            opts(threads, 1, 3),
        )
        .unwrap();
        let mut n = 0;
        loop {
            match e.next_step() {
                Ok(Some(_)) => n += 1,
                Ok(None) => panic!("the run should fail"),
                Err(err) => return (n, err.to_string()),
            }
        }
    };
    assert_eq!(fail_step(1), fail_step(3));
}

/// A lane stops at its first error, also once that error is in the consumer's queue: no later
/// input runs and no later bad record replaces it, so which row is reported never depends on
/// timing.
#[test]
fn the_first_bad_record_is_the_one_reported_however_workers_race() {
    // One lane; every document from row 3 on is bad.
    let shards = vec![(0..200).map(|i| if i < 3 { format!("doc {i}") } else { String::new() }).collect()];
    let datasets = Datasets::new(vec![Arc::new(MemoryDataset::from_texts("tail", "text", shards))]);
    let spec = spec(datasets, operators(16, 0), 1, 1, Tail::Drop);
    let first_error = |threads| {
        let mut e = Engine::start(
            spec.clone(),
            Topology::builder().lanes(1).rows_per_step(1).build().unwrap(),
            opts(threads, 1, 8),
        )
        .unwrap();
        loop {
            match e.next_step() {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("the run should fail"),
                Err(err) => return err.to_string(),
            }
        }
    };
    let expected = first_error(1);
    assert!(expected.contains("row 3"), "{expected}");
    for _ in 0..40 {
        assert_eq!(first_error(4), expected);
    }
}

#[test]
fn skipped_records_are_counted_and_the_same_on_every_topology() {
    let mut spec = spec(corpus_with_holes(), operators(16, 0), 5, 1, Tail::Partial);
    spec.bad_records = BadRecords::Skip;
    let total_skipped = |w: u32| {
        let mut engines: Vec<Engine> = (0..w)
            .map(|r| {
                Engine::start(
                    spec.clone(),
                    Topology::builder()
                        .lanes(4)
                        .rows_per_step(8)
                        .place(Place { rank: r, world_size: w })
                        .build()
                        .unwrap(),
                    opts(2, 2, 2),
                )
                .unwrap()
            })
            .collect();
        // In a partial tail, ranks end when all their lanes have; compare non-empty lane rows.
        let mut fps = std::collections::BTreeMap::new();
        loop {
            let steps: Vec<_> = engines.iter_mut().map(|e| e.next_step().unwrap()).collect();
            if steps.iter().all(|s| s.is_none()) {
                break;
            }
            for s in steps.iter().flatten() {
                for l in s.lanes().iter().filter(|l| !l.rows().is_empty()) {
                    fps.insert((s.step(), l.lane()), l.digest());
                }
            }
        }
        (engines.iter().map(|e| e.skipped()).sum::<u64>(), fps)
    };
    let (skipped, fps) = total_skipped(1);
    assert_eq!(skipped, 4, "3 empty docs in shard 0, 1 in shard 1");
    assert_eq!(total_skipped(2), (skipped, fps.clone()));
    assert_eq!(total_skipped(4), (skipped, fps));
}

/// An operator that panics on one record: the engine reports it instead of hanging.
struct Explode;
impl Operator for Explode {
    fn name(&self) -> &str {
        "explode"
    }
    fn fingerprint(&self) -> zephon_operator::Settings {
        zephon_operator::Settings::new("test", 1)
    }
    fn apply(&self, record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        if record.lineage().first_sample().is_some_and(|s| s.row == 7) {
            panic!("boom on row 7");
        }
        out.push(record);
        Ok(())
    }
}

#[test]
fn a_panicking_operator_is_reported_not_hung() {
    let datasets = corpus(40, 5, 1);
    let mut s = spec(datasets, Operators::new().then(Explode), 4, 1, Tail::Drop);
    s.tail = Tail::Drop;
    let mut e =
        Engine::start(s, Topology::builder().lanes(1).rows_per_step(1).build().unwrap(), opts(2, 2, 1)).unwrap();
    let err = loop {
        match e.next_step() {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("should fail"),
            Err(err) => break err.to_string(),
        }
    };
    assert!(err.contains("boom on row 7"), "{err}");
}

#[test]
fn batches_stack_equal_rows_and_keep_unequal_ones_ragged() {
    let spec = spec(corpus(100, 20, 4), operators(24, 0), 4, 10, Tail::Drop);
    let mut e =
        Engine::start(spec, Topology::builder().lanes(2).rows_per_step(6).build().unwrap(), opts(1, 4, 1)).unwrap();
    let step = e.next_step().unwrap().unwrap();
    let batch = step.to_batch().unwrap();
    assert_eq!(batch.rows(), 6);
    assert_eq!(batch.column("input_ids").unwrap().dense().unwrap().shape().dims(), &[6, 24]);
    assert_eq!(batch.lineages(), step.rows().map(|r| r.lineage().clone()).collect::<Vec<_>>());
    let a = Record::from_sample(SampleId::new(0, 0, 0)).with(&"x".into(), Value::array(vec![1u32, 2]));
    let b = Record::from_sample(SampleId::new(0, 0, 1)).with(&"x".into(), Value::array(vec![1u32]));
    let batch = Batch::from_rows([&a, &b]).unwrap();
    let x = batch.column("x").unwrap().ragged().unwrap();
    assert_eq!(x.row_offsets(), &[0, 1, 2]);
    assert_eq!(x.values().as_u32(), Some(&[1, 2, 1][..]));
    let c = Record::from_sample(SampleId::new(0, 0, 2)).with(&"x".into(), Value::array(vec![1i32]));
    let err = Batch::from_rows([&a, &c]).unwrap_err().to_string();
    assert!(err.contains("row 1 is i32, row 0 is u32"), "{err}");
}

/// An operator whose accumulator forgets to declare itself, and one whose `rebuild` is wrong.
mod contract {
    use super::*;

    pub struct Undeclared;
    impl Operator for Undeclared {
        fn name(&self) -> &str {
            "undeclared"
        }
        fn fingerprint(&self) -> zephon_operator::Settings {
            zephon_operator::Settings::new("test", 1)
        }
        fn accumulator(&self, _: LaneContext) -> Option<Box<dyn Accumulator>> {
            Some(Box::new(Pass))
        }
    }

    pub struct Pass;
    impl Accumulator for Pass {
        fn push(&mut self, r: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
            out.push(r);
            Ok(())
        }
        fn export(&self) -> AccumulatorState {
            AccumulatorState::default()
        }
        fn import(&mut self, _: AccumulatorState, _: Vec<Record>) -> Result<(), OpError> {
            Ok(())
        }
    }

    /// Appends a counter to each record: its output depends on history, and its `rebuild`
    /// (the default: the input unchanged) cannot remake it.
    pub struct Counter;
    impl Operator for Counter {
        fn name(&self) -> &str {
            "counter"
        }
        fn fingerprint(&self) -> zephon_operator::Settings {
            zephon_operator::Settings::new("test", 1)
        }
        fn kind(&self) -> OperatorKind {
            OperatorKind::Accumulate
        }
        fn accumulator(&self, _: LaneContext) -> Option<Box<dyn Accumulator>> {
            Some(Box::new(Count(0)))
        }
    }

    pub struct Count(i64);
    impl Accumulator for Count {
        fn push(&mut self, r: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
            self.0 += 1;
            out.push(r.with(&"n".into(), Value::Int(self.0)));
            Ok(())
        }
        fn export(&self) -> AccumulatorState {
            AccumulatorState { values: vec![self.0 as u64], buffered: vec![] }
        }
        fn import(&mut self, s: AccumulatorState, _: Vec<Record>) -> Result<(), OpError> {
            self.0 = s.values.first().copied().unwrap_or(0) as i64;
            Ok(())
        }
    }
}

#[test]
fn an_accumulator_its_kind_does_not_declare_is_refused() {
    let s = spec(corpus(40, 10, 1), Operators::new().then(contract::Undeclared), 4, 10, Tail::Drop);
    let e = Engine::start(s, Topology::builder().lanes(2).rows_per_step(2).build().unwrap(), opts(1, 2, 1))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("returns an accumulator but its kind() is map"), "{e}");
}

#[test]
fn check_operator_proves_a_good_operator_and_catches_a_bad_rebuild() {
    use zephon_core::testing::{CheckOptions, check_in_engine};
    let report = check_in_engine(|| ByteTokenize, corpus(200, 20, 3), CheckOptions::default()).unwrap();
    assert!(report.configurations.len() >= 10, "{:?}", report.configurations);
    let e = check_in_engine(|| contract::Counter, corpus(200, 20, 3), CheckOptions::default()).unwrap_err();
    assert!(
        e.to_string().contains("held accumulator after it"),
        "the bad rebuild shows once something holds its output: {e}"
    );
}

#[test]
fn timings_name_every_part_of_the_pipeline_in_order() {
    let shards = vec![(0..400).map(|i| format!("document {i} ").repeat(20)).collect()];
    let datasets = Datasets::new(vec![Arc::new(MemoryDataset::from_texts("t", "text", shards))]);
    let spec = spec(datasets, operators(64, 4), 8, 1, Tail::Drop);
    let mut e =
        Engine::start(spec, Topology::builder().lanes(2).rows_per_step(2).build().unwrap(), opts(2, 4, 2)).unwrap();
    while e.next_step().unwrap().is_some() {}
    let t = e.timings();
    let parts: Vec<(&str, &str)> = t.iter().map(|s| (s.name.as_str(), s.part.as_str())).collect();
    assert_eq!(
        parts,
        [
            ("read", "parallel"),
            ("byte-tokenize", "parallel"),
            ("wrap-pack", "lane"),
            ("shuffle-buffer", "lane"),
            ("digest", "engine"),
            ("snapshot", "engine")
        ]
    );
    assert!(t.iter().all(|s| s.seconds > 0.0), "every part did work: {t:?}");
}
