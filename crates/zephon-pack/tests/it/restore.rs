//! The checkpoint contract: export → import into a fresh accumulator continues exactly, and
//! `rebuild` reproduces every emitted row from its lineage alone.

use proptest::prelude::*;
use zephon_core::*;
use zephon_operator::*;
use zephon_pack::*;

use crate::common::*;

/// Exports `acc`, checks the state holds no payload, and imports it into a fresh accumulator
/// the way the engine does (each saved lineage rebuilt exactly).
fn checkpoint(pack: &Pack, acc: &dyn Accumulator, store: &mut Store) -> Result<Box<dyn Accumulator>, TestCaseError> {
    let c = pack.config();
    let state = acc.export();
    let (bins, held) = match c.algorithm {
        Algorithm::Wrap => (1, c.seq_len),
        Algorithm::FirstFit { bins } | Algorithm::BestFit { bins } => (bins, bins * c.seq_len),
    };
    // A tag, the rows emitted while warming up, a piece count per open row.
    prop_assert!(state.values.len() <= 2 + bins, "values {:?}", state.values);
    let mut tokens = 0;
    for l in &state.buffered {
        let f = l.as_single();
        prop_assert!(f.is_some_and(|f| !f.is_empty()), "held pieces are non-empty single fragments: {}", l);
        tokens += f.map_or(0, |f| f.len() as usize);
    }
    prop_assert!(tokens < held.max(1), "{} tokens held", tokens);
    let records = state.buffered.iter().map(|l| store.exact(l)).collect::<Result<Vec<_>, _>>().unwrap();
    let mut fresh = accumulator(pack);
    fresh.import(state.clone(), records).unwrap();
    prop_assert_eq!(fresh.export(), state, "an imported state exports the same");
    Ok(fresh)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    #[test]
    fn restores_continue_exactly_and_rows_rebuild_from_lineage(
        (c, docs, cuts) in configs()
            .prop_flat_map(|c| { let t = c.seq_len; (Just(c), inputs(t)) })
            .prop_flat_map(|(c, docs)| {
                let n = docs.len();
                (Just(c), Just(docs), prop::collection::vec(0..=n, 0..5))
            })
    ) {
        let pack = Pack::new(c).unwrap();
        let want = pack_all(&pack, &docs);
        let mut store = Store(docs.clone());
        let mut acc = accumulator(&pack);
        let mut rows = Vec::new();
        for i in 0..=docs.len() {
            for _ in cuts.iter().filter(|&&k| k == i) {
                acc = checkpoint(&pack, acc.as_ref(), &mut store)?;
            }
            match docs.get(i) {
                Some(d) => acc.push(d.clone(), &mut rows).unwrap(),
                None => acc.finish(&mut rows).unwrap(),
            }
        }
        prop_assert_eq!(&rows, &want);
        let other = accumulator(&pack);
        for row in &want {
            prop_assert_eq!(&acc.rebuild(row.lineage(), &mut store).unwrap(), row);
            prop_assert_eq!(&other.rebuild(row.lineage(), &mut store).unwrap(), row);
        }
    }
}

#[test]
fn imports_refuse_states_the_packer_cannot_be_in() {
    let docs = [piece(0, 0, 3), piece(1, 0, 2), piece(2, 0, 9)];
    let mut store = Store(docs.to_vec());
    let rebuilt = |store: &mut Store, st: &AccumulatorState| {
        st.buffered.iter().map(|l| store.exact(l)).collect::<Result<Vec<_>, _>>().unwrap()
    };
    let wrap = Pack::new(PackOptions { max_segments: 3, ..PackOptions::new(Algorithm::Wrap, 8) }).unwrap();
    let fit =
        Pack::new(PackOptions { max_segments: 3, ..PackOptions::new(Algorithm::BestFit { bins: 2 }, 8) }).unwrap();
    let warming = Pack::new(PackOptions { warm_up: true, ..fit.config().clone() }).unwrap();
    let single = |row: u64, start: u32, end: u32| Lineage::single(Fragment::range(sample(row), start, end).unwrap());
    let cases: Vec<(&Pack, AccumulatorState)> = vec![
        (&wrap, AccumulatorState { values: vec![], buffered: vec![] }),
        (&wrap, AccumulatorState { values: vec![2, 1], buffered: vec![single(0, 0, 3)] }),
        (&wrap, AccumulatorState { values: vec![1, 2], buffered: vec![single(0, 0, 3)] }),
        // A full row (8 tokens) is never held.
        (&wrap, AccumulatorState { values: vec![1, 1], buffered: vec![single(2, 0, 8)] }),
        // Nor a row at max_segments.
        (
            &wrap,
            AccumulatorState { values: vec![1, 3], buffered: vec![single(0, 0, 1), single(1, 0, 1), single(2, 0, 1)] },
        ),
        (&wrap, AccumulatorState { values: vec![1, 1], buffered: vec![single(0, 0, 0)] }),
        (
            &fit,
            AccumulatorState {
                values: vec![2, 1, 1, 1],
                buffered: vec![single(0, 0, 1), single(1, 0, 1), single(2, 0, 1)],
            },
        ),
        (&fit, AccumulatorState { values: vec![2, 0], buffered: vec![] }),
        // A warming-up state for a packer that does not warm up, and the other way round.
        (&fit, AccumulatorState { values: vec![3, 2, 1], buffered: vec![single(0, 0, 1)] }),
        (&warming, AccumulatorState { values: vec![2, 1], buffered: vec![single(0, 0, 1)] }),
        // Two open rows before any was emitted: a warming-up packer holds one.
        (&warming, AccumulatorState { values: vec![3, 0, 1, 1], buffered: vec![single(0, 0, 1), single(1, 0, 1)] }),
        // More rows emitted than a warm-up counts (it stops at `bins`).
        (&warming, AccumulatorState { values: vec![3, 3, 1], buffered: vec![single(0, 0, 1)] }),
        (&fit, AccumulatorState { values: vec![1, 1], buffered: vec![single(0, 0, 1)] }),
        (&fit, AccumulatorState { values: vec![2, u64::MAX, 2], buffered: vec![single(0, 0, 1)] }),
    ];
    for (pack, st) in cases {
        let recs = rebuilt(&mut store, &st);
        let mut acc = accumulator(pack);
        match acc.import(st.clone(), recs) {
            Err(OpError::Fatal(m)) => assert!(m.contains("pack state"), "{m}"),
            other => panic!("{st:?}: expected a fatal error, got {other:?}"),
        }
    }
    // Records that are not the saved pieces.
    let mut acc = accumulator(&fit);
    let st = AccumulatorState { values: vec![2, 1], buffered: vec![single(0, 0, 2)] };
    let wrong = store.exact(&single(0, 1, 3)).unwrap();
    assert!(acc.import(st, vec![wrong]).is_err());
    let st = AccumulatorState { values: vec![2, 1], buffered: vec![single(0, 0, 2)] };
    assert!(acc.import(st, vec![]).is_err());
}

#[test]
fn rebuild_refuses_lineages_the_packer_never_emits() {
    let mut store = Store(vec![piece(0, 0, 10), piece(1, 0, 10), piece(2, 0, 10)]);
    let pack = Pack::new(PackOptions { max_segments: 2, ..PackOptions::new(Algorithm::Wrap, 8) }).unwrap();
    let acc = accumulator(&pack);
    let f = |row: u64, start: u32, end: u32| Fragment::range(sample(row), start, end).unwrap();
    for bad in [
        Lineage::default(),
        Lineage::single(f(0, 0, 9)),
        Lineage::single(f(0, 2, 2)),
        Lineage::from_fragments(vec![f(0, 0, 1), f(1, 0, 1), f(2, 0, 1)]),
        Lineage::single(f(7, 0, 1)),
    ] {
        assert!(acc.rebuild(&bad, &mut store).is_err(), "{bad}");
    }
    let ok = acc.rebuild(&Lineage::from_fragments(vec![f(0, 3, 5), f(2, 0, 6)]), &mut store).unwrap();
    assert_eq!(int(&ok, NUM_TOKENS), 8);
}
