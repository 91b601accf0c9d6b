//! The shuffle buffer, filling up front or warming up: the same steps at every topology and
//! across restores (proved with `check_operator`), and a warming-up buffer emits from its
//! second record on.

use std::sync::Arc;

use zephon_core::testing::{CheckOptions, check_operator};
use zephon_core::{Datasets, Fragment, Lane, LaneContext, Lineage, MemoryDataset, Operator, Record, SampleId};
use zephon_mix::Shuffle;

fn data() -> Datasets {
    let shards =
        vec![(0..300).map(|i| format!("record {i}")).collect(), (0..200).map(|i| format!("other {i}")).collect()];
    Datasets::new(vec![Arc::new(MemoryDataset::from_texts("m", "text", shards))])
}

#[test]
fn both_kinds_of_buffer_are_the_same_at_every_topology_and_across_restores() {
    let options = CheckOptions { steps: 12, ..CheckOptions::default() };
    check_operator(|| Shuffle::new(16).unwrap(), data(), options).unwrap();
    let report = check_operator(|| Shuffle::new(16).unwrap().warm_up(), data(), options).unwrap();
    assert!(report.configurations.len() >= 8, "{report:?}");
}

#[test]
fn a_warming_up_buffer_emits_from_its_second_record_and_loses_none() {
    let record = |row| Record::new(Lineage::single(Fragment::whole(SampleId { dataset: 0, shard: 0, row })));
    let ctx = LaneContext { lane: Lane(0), seed: 3 };
    let mut cold = Shuffle::new(64).unwrap().accumulator(ctx).unwrap();
    let mut warm = Shuffle::new(64).unwrap().warm_up().accumulator(ctx).unwrap();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for row in 0..100 {
        cold.push(record(row), &mut a).unwrap();
        warm.push(record(row), &mut b).unwrap();
        if row == 1 {
            assert_eq!((a.len(), b.len()), (0, 1), "the warm buffer swaps one out at the second record");
        }
    }
    // Cold: out once the 64 slots are full. Warm: half the records until it holds 64.
    assert_eq!((a.len(), b.len()), (36, 50));
    cold.finish(&mut a).unwrap();
    warm.finish(&mut b).unwrap();
    for out in [&a, &b] {
        let mut rows: Vec<u64> = out.iter().map(|r| r.lineage().first_sample().unwrap().row).collect();
        rows.sort_unstable();
        assert_eq!(rows, (0..100).collect::<Vec<_>>(), "every record exactly once");
    }
    assert_ne!(
        a.iter().map(|r| r.lineage().clone()).collect::<Vec<_>>(),
        b.iter().map(|r| r.lineage().clone()).collect::<Vec<_>>()
    );
}
