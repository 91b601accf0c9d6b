//! The shuffle buffer, filling up front or warming up: the same steps at every topology and
//! across restores (proved with `check_in_engine`), and a warming-up buffer emits from its
//! second record on.

use std::sync::Arc;

use zephon_core::testing::{CheckOptions, check_in_engine};
use zephon_core::{Datasets, MemoryDataset};
use zephon_mix::Shuffle;
use zephon_operator::{Fragment, Lane, LaneContext, Lineage, Operator, Record, SampleId};

fn data() -> Datasets {
    let shards =
        vec![(0..300).map(|i| format!("record {i}")).collect(), (0..200).map(|i| format!("other {i}")).collect()];
    Datasets::new(vec![Arc::new(MemoryDataset::from_texts("m", "text", shards))])
}

#[test]
fn both_kinds_of_buffer_are_the_same_at_every_topology_and_across_restores() {
    let options = CheckOptions { steps: 12, ..CheckOptions::default() };
    check_in_engine(|| Shuffle::buffer(16).unwrap(), data(), options).unwrap();
    let report = check_in_engine(|| Shuffle::buffer(16).unwrap().warm_up(), data(), options).unwrap();
    assert!(report.configurations.len() >= 8, "{report:?}");
}

#[test]
fn a_warming_up_buffer_emits_from_its_second_record_and_loses_none() {
    let record = |row| Record::new(Lineage::single(Fragment::whole(SampleId { dataset: 0, shard: 0, row })));
    let ctx = LaneContext { lane: Lane(0), seed: 3 };
    let mut cold = Shuffle::buffer(64).unwrap().accumulator(ctx).unwrap();
    let mut warm = Shuffle::buffer(64).unwrap().warm_up().accumulator(ctx).unwrap();
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

/// A buffer that keeps shares: a stream whose long records (dataset 0, 400 tokens) come in
/// bursts, 30 % of the tokens. The plain buffer's output runs well past the limit; the keeping
/// one stays within the limit plus one record, loses nothing, and resumes from its exported
/// state to the same output.
#[test]
fn a_buffer_that_keeps_shares_stays_within_the_limit_and_resumes_exactly() {
    let record = |row: u64| {
        let (dataset, len) = if (row / 6) % 10 < 3 && row.is_multiple_of(6) { (0, 400) } else { (1, 34) };
        Record::new(Lineage::single(Fragment::range(SampleId { dataset, shard: 0, row }, 0, len).unwrap()))
    };
    let stream: Vec<Record> = (0..3000).map(record).collect();
    let total: f64 = stream.iter().map(|r| f64::from(r.lineage().fragments()[0].len())).sum();
    let share0 =
        stream.iter().filter(|r| r.lineage().first_sample().unwrap().dataset == 0).count() as f64 * 400.0 / total;
    let shares = [share0, 1.0 - share0];
    let ctx = LaneContext { lane: Lane(0), seed: 5 };
    let limit = 600u64;
    let worst = |out: &[Record]| {
        let (mut t, mut all) = ([0f64; 2], 0f64);
        let mut worst = 0f64;
        for r in out {
            let f = r.lineage().fragments()[0];
            t[f.sample.dataset as usize] += f64::from(f.len());
            all += f64::from(f.len());
            worst = worst.max(t[0] - shares[0] * all).max(t[1] - shares[1] * all);
        }
        worst
    };
    let run = |op: &Shuffle, split: Option<usize>| {
        let mut acc = op.accumulator(ctx).unwrap();
        let mut out = Vec::new();
        for (i, r) in stream.iter().enumerate() {
            if split == Some(i) {
                let state = acc.export();
                let held: Vec<Record> = state.buffered.iter().map(|l| Record::new(l.clone())).collect();
                acc = op.accumulator(ctx).unwrap();
                acc.import(state, held).unwrap();
            }
            acc.push(r.clone(), &mut out).unwrap();
        }
        acc.finish(&mut out).unwrap();
        out
    };
    let plain = Shuffle::buffer(64).unwrap();
    let keeping = Shuffle::buffer(64).unwrap().keep_shares(&shares, limit).unwrap();
    let (a, b) = (run(&plain, None), run(&keeping, None));
    // Before the final flush, which is not steered.
    let steered = stream.len() - 64;
    println!("worst excess: plain {:.0}, keeping {:.0} (limit {limit})", worst(&a[..steered]), worst(&b[..steered]));
    assert!(worst(&a[..steered]) > 2.0 * limit as f64, "the stream is not skewed enough to test anything");
    assert!(worst(&b[..steered]) <= (limit + 400) as f64);
    let mut rows: Vec<u64> = b.iter().map(|r| r.lineage().first_sample().unwrap().row).collect();
    rows.sort_unstable();
    assert_eq!(rows, (0..3000).collect::<Vec<_>>(), "every record exactly once");
    let lineages = |v: &[Record]| v.iter().map(|r| r.lineage().clone()).collect::<Vec<_>>();
    assert_eq!(lineages(&run(&keeping, Some(1234))), lineages(&b), "restored mid-stream");
    assert_ne!(lineages(&run(&keeping.clone().warm_up(), Some(1234))), lineages(&b));
}
