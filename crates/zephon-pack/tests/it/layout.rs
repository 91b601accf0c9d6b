//! Row layout and placement: the properties every row has, and the algorithms' exact choices.

use proptest::prelude::*;
use zephon_operator::*;
use zephon_pack::*;

use crate::common::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Every row has the contract's shape and internally consistent metadata; every kept
    /// input token is in exactly one row; rows respect `max_segments`.
    #[test]
    fn rows_are_consistent_and_cover_the_input_once((c, docs) in configs().prop_flat_map(|c| {
        let t = c.seq_len;
        (Just(c), inputs(t))
    })) {
        let pack = Pack::new(c.clone()).unwrap();
        let rows = pack_all(&pack, &docs);
        for row in &rows {
            check_row(&c, row)?;
        }
        prop_assert_eq!(coverage(&rows), expected_coverage(&c, &docs));
        prop_assert_eq!(&pack_all(&pack, &docs), &rows, "packing is a function of the input");

        if c.algorithm == Algorithm::Wrap {
            // Concatenate-and-chunk keeps the input order, and only the last row, or a row
            // that reached max_segments, is short.
            let order: Vec<(u64, u32)> = rows
                .iter()
                .flat_map(|r| r.lineage().fragments().iter().flat_map(|f| (f.start()..f.end()).map(|p| (f.sample.row, p))))
                .collect();
            let want: Vec<(u64, u32)> = docs
                .iter()
                .flat_map(|d| {
                    let f = *d.lineage().as_single().unwrap();
                    let keep = if c.longer_than_row == LongerThanRow::Truncate { f.len().min(c.seq_len as u32) } else { f.len() };
                    (f.start()..f.start() + keep).map(move |p| (f.sample.row, p))
                })
                .collect();
            prop_assert_eq!(order, want);
            for row in rows.iter().rev().skip(1) {
                let full = int(row, NUM_TOKENS) as usize == c.seq_len;
                prop_assert!(full || row.lineage().fragments().len() == c.max_segments);
            }
        } else {
            // No piece is longer than T, and a T-token piece is a row of its own.
            for row in &rows {
                for f in row.lineage().fragments() {
                    prop_assert!(f.len() as usize <= c.seq_len);
                }
            }
            if c.end_of_data == EndOfData::FillRows {
                // What the input's end flushes is laid out as wrap lays it: the same rows as
                // wrap makes from the open rows' pieces, so every row of it but the last is
                // full or at max_segments.
                let mut acc = accumulator(&pack);
                let mut before = Vec::new();
                for d in &docs {
                    acc.push(d.clone(), &mut before).unwrap();
                }
                let held: Vec<Record> = acc
                    .export()
                    .buffered
                    .iter()
                    .map(|l| Store(docs.clone()).exact(l).unwrap())
                    .collect();
                let mut end = Vec::new();
                acc.finish(&mut end).unwrap();
                prop_assert_eq!(&rows[..before.len()], &before[..]);
                let wrap = Pack::new(PackOptions { algorithm: Algorithm::Wrap, longer_than_row: LongerThanRow::Split, ..c.clone() }).unwrap();
                prop_assert_eq!(&end, &pack_all(&wrap, &held), "the end is wrap over the held pieces");
                for row in end.iter().rev().skip(1) {
                    let full = int(row, NUM_TOKENS) as usize == c.seq_len;
                    prop_assert!(full || row.lineage().fragments().len() == c.max_segments);
                }
            }
        }
    }
}

fn config(algorithm: Algorithm, t: usize, s: usize) -> PackOptions {
    PackOptions { max_segments: s, ..PackOptions::new(algorithm, t) }
}

/// The (sample row, length) of each segment of each row.
fn shape(rows: &[Record]) -> Vec<Vec<(u64, u32)>> {
    rows.iter().map(|r| r.lineage().fragments().iter().map(|f| (f.sample.row, f.len())).collect()).collect()
}

fn run(c: PackOptions, lens: &[u32]) -> Vec<Vec<(u64, u32)>> {
    let docs: Vec<Record> = lens.iter().enumerate().map(|(i, &n)| piece(i as u64, 0, n)).collect();
    shape(&pack_all(&Pack::new(c).unwrap(), &docs))
}

#[test]
fn wrap_cuts_every_t_tokens_and_ends_rows_at_max_segments() {
    assert_eq!(
        run(config(Algorithm::Wrap, 4, 4), &[3, 6, 1]),
        vec![vec![(0, 3), (1, 1)], vec![(1, 4)], vec![(1, 1), (2, 1)]]
    );
    // Two segments a row: the second document ends the row early.
    assert_eq!(run(config(Algorithm::Wrap, 4, 2), &[1, 1, 1]), vec![vec![(0, 1), (1, 1)], vec![(2, 1)]]);
    // One segment a row: one document per row, split.
    assert_eq!(run(config(Algorithm::Wrap, 4, 1), &[5, 2]), vec![vec![(0, 4)], vec![(0, 1)], vec![(1, 2)]]);
    let truncate = PackOptions { longer_than_row: LongerThanRow::Truncate, ..config(Algorithm::Wrap, 4, 4) };
    assert_eq!(run(truncate, &[9, 2]), vec![vec![(0, 4)], vec![(1, 2)]]);
}

#[test]
fn first_fit_takes_the_oldest_row_with_room() {
    // 6 opens row A (room 4); 5 does not fit it and opens B (room 5); 3 fits both: the oldest.
    let got = run(config(Algorithm::FirstFit { bins: 4 }, 10, 8), &[6, 5, 3]);
    assert_eq!(got, vec![vec![(0, 6), (2, 3)], vec![(1, 5)]]);
}

#[test]
fn best_fit_takes_the_tightest_row_ties_to_the_oldest() {
    // 5 opens A (room 5), 6 opens B (room 4); 3 fits both and goes to the tighter B (room 1
    // after). Then 4 fits only A.
    let got = run(config(Algorithm::BestFit { bins: 4 }, 10, 8), &[5, 6, 3, 4]);
    assert_eq!(got, vec![vec![(0, 5), (3, 4)], vec![(1, 6), (2, 3)]]);
    // Two rows with equal room: the oldest wins (and, full, leaves at once).
    let got = run(config(Algorithm::BestFit { bins: 4 }, 10, 8), &[6, 6, 4]);
    assert_eq!(got, vec![vec![(0, 6), (2, 4)], vec![(1, 6)]]);
}

#[test]
fn a_warming_up_fit_packer_opens_rows_one_then_two_then_four() {
    // Rows of 10, documents of 6 never share one. With 4 bins, three rows stay open until a
    // fifth document needs room; warming up, the first row is open alone and leaves when the
    // second document needs a row (0 emitted: 1 open row), the next one with 2 open, and so on.
    let lens = [6, 6, 6, 6, 6, 6, 6];
    let cold = run(config(Algorithm::BestFit { bins: 4 }, 10, 8), &lens);
    let warm = run(PackOptions { warm_up: true, ..config(Algorithm::BestFit { bins: 4 }, 10, 8) }, &lens);
    assert_eq!(cold, warm, "the same rows (each holds one document), only emitted sooner");
    let pack = |warm_up| Pack::new(PackOptions { warm_up, ..config(Algorithm::BestFit { bins: 4 }, 10, 8) }).unwrap();
    let emitted_after_each = |pack: &Pack| {
        let mut acc = accumulator(pack);
        let mut rows = Vec::new();
        lens.iter()
            .enumerate()
            .map(|(i, &n)| {
                acc.push(piece(i as u64, 0, n), &mut rows).unwrap();
                rows.len()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(emitted_after_each(&pack(false)), vec![0, 0, 0, 0, 1, 2, 3]);
    // Open rows allowed: 1 (0 emitted), 2 (1 emitted), 4 (2 or more emitted).
    assert_eq!(emitted_after_each(&pack(true)), vec![0, 1, 1, 2, 2, 2, 3]);
}

#[test]
fn full_rows_leave_at_once_and_the_fullest_makes_way() {
    let c = config(Algorithm::BestFit { bins: 2 }, 10, 3);
    // 7 and 6 open two rows; 8 fits neither and both bins are open: the fullest (7) leaves
    // and 8 opens a row. Then 3 goes to the 6 (room 4 → 1). `finish` emits in creation order.
    let docs: Vec<Record> = [7u32, 6, 8, 3].iter().enumerate().map(|(i, &n)| piece(i as u64, 0, n)).collect();
    let mut acc = accumulator(&Pack::new(c.clone()).unwrap());
    let mut out = Vec::new();
    for d in &docs[..3] {
        acc.push(d.clone(), &mut out).unwrap();
    }
    assert_eq!(shape(&out), vec![vec![(0, 7)]]);
    acc.push(docs[3].clone(), &mut out).unwrap();
    acc.finish(&mut out).unwrap();
    assert_eq!(shape(&out), vec![vec![(0, 7)], vec![(1, 6), (3, 3)], vec![(2, 8)]]);

    // A piece of exactly T is a row of its own and evicts nothing; so is every piece at S = 1.
    let got = run(config(Algorithm::FirstFit { bins: 1 }, 4, 4), &[1, 4, 2]);
    assert_eq!(got, vec![vec![(1, 4)], vec![(0, 1), (2, 2)]]);
    let got = run(config(Algorithm::FirstFit { bins: 3 }, 4, 1), &[1, 2]);
    assert_eq!(got, vec![vec![(0, 1)], vec![(1, 2)]]);
    // Reaching max_segments emits the row at once.
    let got = run(config(Algorithm::FirstFit { bins: 3 }, 10, 2), &[1, 1, 1]);
    assert_eq!(got, vec![vec![(0, 1), (1, 1)], vec![(2, 1)]]);
}

#[test]
fn long_documents_split_or_truncate_under_fit() {
    let split = config(Algorithm::BestFit { bins: 4 }, 4, 4);
    assert_eq!(run(split.clone(), &[10]), vec![vec![(0, 4)], vec![(0, 4)], vec![(0, 2)]]);
    let truncate = PackOptions { longer_than_row: LongerThanRow::Truncate, ..split };
    assert_eq!(run(truncate, &[10, 1]), vec![vec![(0, 4)], vec![(1, 1)]]);
}

#[test]
fn empty_documents_are_skipped() {
    for alg in [Algorithm::Wrap, Algorithm::FirstFit { bins: 2 }, Algorithm::BestFit { bins: 2 }] {
        assert_eq!(run(config(alg, 4, 4), &[0, 2, 0, 0, 1, 0]), vec![vec![(1, 2), (4, 1)]], "{alg}");
        assert!(run(config(alg, 4, 4), &[0, 0]).is_empty());
    }
}

#[test]
fn bad_records_are_data_errors_and_leave_the_state_alone() {
    let sample = SampleId::new(0, 0, 9);
    let frag = |start, end| Fragment::range(sample, start, end).unwrap();
    let bad = [
        Record::new(Lineage::single(frag(0, 2))).with(&"text".into(), Value::text("no tokens")),
        Record::new(Lineage::single(frag(0, 2))).with(&"tokens".into(), Value::array::<u32>(vec![1, 2])),
        Record::new(Lineage::single(frag(0, 2))).with(&"tokens".into(), Value::seq::<i64>(vec![1, 2])),
        Record::new(Lineage::single(frag(0, 3))).with(&"tokens".into(), Value::seq::<u32>(vec![1, 2])),
        Record::new(Lineage::single(Fragment::whole(sample))).with(&"tokens".into(), Value::seq::<u32>(vec![1, 2])),
        Record::new(Lineage::single(frag(0, 2))).with(&"tokens".into(), Value::seq::<u32>(vec![1, u32::MAX])),
        Record::new(Lineage::from_fragments(vec![frag(0, 1), frag(5, 6)]))
            .with(&"tokens".into(), Value::seq::<u32>(vec![1, 2])),
        Record::new(Lineage::default()).with(&"tokens".into(), Value::seq::<u32>(vec![1, 2])),
    ];
    for alg in [Algorithm::Wrap, Algorithm::FirstFit { bins: 2 }, Algorithm::BestFit { bins: 2 }] {
        let pack = Pack::new(config(alg, 4, 4)).unwrap();
        let good = [piece(0, 0, 3), piece(1, 0, 3)];
        let want = pack_all(&pack, &good);
        let mut acc = accumulator(&pack);
        let mut out = Vec::new();
        acc.push(good[0].clone(), &mut out).unwrap();
        for b in &bad {
            match acc.push(b.clone(), &mut out) {
                Err(OpError::Data(m)) => assert!(m.contains("record"), "{m}"),
                other => panic!("{alg}: expected a data error for {b:?}, got {other:?}"),
            }
        }
        acc.push(good[1].clone(), &mut out).unwrap();
        acc.finish(&mut out).unwrap();
        assert_eq!(out, want, "{alg}");
    }
}

#[test]
fn other_input_fields_and_custom_names() {
    let c = PackOptions { input_field: "ids".into(), pad_id: 7, ignore_index: -1, ..config(Algorithm::Wrap, 4, 2) };
    let rec = Record::new(Lineage::single(Fragment::range(sample(0), 0, 2).unwrap()))
        .with(&"ids".into(), Value::seq::<u32>(vec![5, 6]))
        .with(&"tokens".into(), Value::Str("ignored".into()));
    let rows = pack_all(&Pack::new(c).unwrap(), &[rec]);
    assert_eq!(u32s(&rows[0], INPUT_IDS), &[5, 6, 7, 7]);
    assert_eq!(i32s(&rows[0], LABELS), &[6, -1, -1, -1]);
    assert!(rows[0].get("tokens").is_none());
}

#[test]
fn operator_surface() {
    for (bad, want) in [
        (PackOptions::new(Algorithm::Wrap, 0), PackError::ZeroSeqLen),
        (PackOptions::new(Algorithm::BestFit { bins: 0 }, 8), PackError::ZeroBins),
        (config(Algorithm::Wrap, 8, 0), PackError::ZeroMaxSegments),
    ] {
        assert_eq!(Pack::new(bad).unwrap_err(), want);
    }
    assert!(Pack::best_fit(8, 0).is_err() && Pack::first_fit(0, 2).is_err() && Pack::wrap(0).is_err());
    let pack = Pack::best_fit(2048, 64).unwrap();
    assert_eq!(pack.kind(), OperatorKind::Accumulate);
    assert_eq!(pack.name(), "pack");
    assert_eq!(
        pack.fingerprint().to_text(),
        "pack/v1 algorithm=\"best-fit\" bins=64 seq_len=2048 max_segments=512 long=\"split\" pad_id=0 \
         ignore_index=-100 input_field=\"tokens\""
    );
    assert!(pack.describe().contains("best-fit over 64 open rows"), "{}", pack.describe());
    assert_ne!(Pack::first_fit(2048, 64).unwrap().fingerprint(), pack.fingerprint());
}
