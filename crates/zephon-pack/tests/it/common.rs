//! Shared helpers: synthetic documents, a rebuild input over them, and an independent check of
//! every row invariant.

use std::collections::BTreeMap;

use proptest::prelude::*;
use zephon_core::*;
use zephon_operator::*;
use zephon_pack::*;

/// The token at `pos` of sample `row`'s document: a function of both, so a misplaced
/// fragment shows up as wrong ids.
pub fn tok(row: u64, pos: u32) -> u32 {
    ((row * 7919 + u64::from(pos) * 104_729) % 50_257) as u32
}

pub fn sample(row: u64) -> SampleId {
    SampleId::new(0, 0, row)
}

/// An input piece: positions `start..start+len` of sample `row`'s document.
pub fn piece(row: u64, start: u32, len: u32) -> Record {
    let ids = (start..start + len).map(|p| tok(row, p)).collect();
    Record::new(Lineage::single(Fragment::range(sample(row), start, start + len).unwrap()))
        .with(&Field::new("tokens"), Value::seq::<u32>(ids))
        .with(&Field::new("text"), Value::Str("dropped from rows".into()))
}

/// The inputs the packer saw, to answer rebuild requests as the engine does.
pub struct Store(pub Vec<Record>);

impl RebuildInput for Store {
    fn covering(&mut self, lineage: &Lineage) -> Result<Record, OpError> {
        self.0
            .iter()
            .find(|r| r.lineage().covers(lineage))
            .cloned()
            .ok_or_else(|| OpError::Fatal(format!("no input covers {lineage}")))
    }
}

pub fn accumulator(pack: &Pack) -> Box<dyn Accumulator> {
    pack.accumulator(LaneContext { lane: Lane(0), seed: 3 }).expect("pack accumulates")
}

/// Every row of `inputs`, push by push then finish.
pub fn pack_all(pack: &Pack, inputs: &[Record]) -> Vec<Record> {
    let mut acc = accumulator(pack);
    let mut rows = Vec::new();
    for r in inputs {
        acc.push(r.clone(), &mut rows).unwrap();
    }
    acc.finish(&mut rows).unwrap();
    rows
}

pub fn u32s<'a>(r: &'a Record, name: &str) -> &'a [u32] {
    match r.get(name) {
        Some(Value::Array(a)) if a.as_slice::<u32>().is_some() => a.as_slice::<u32>().unwrap_or_default(),
        other => panic!("{name}: expected Array U32, got {other:?}"),
    }
}

pub fn i32s<'a>(r: &'a Record, name: &str) -> &'a [i32] {
    match r.get(name) {
        Some(Value::Array(a)) if a.as_slice::<i32>().is_some() => a.as_slice::<i32>().unwrap_or_default(),
        other => panic!("{name}: expected Array I32, got {other:?}"),
    }
}

pub fn u8s<'a>(r: &'a Record, name: &str) -> &'a [u8] {
    match r.get(name) {
        Some(Value::Array(a)) if a.as_slice::<u8>().is_some() => a.as_slice::<u8>().unwrap_or_default(),
        other => panic!("{name}: expected Array U8, got {other:?}"),
    }
}

pub fn int(r: &Record, name: &str) -> i64 {
    match r.get(name) {
        Some(Value::Int(v)) => *v,
        other => panic!("{name}: expected Int, got {other:?}"),
    }
}

/// Checks one row against the layout contract, recomputing everything from `segment_ids`,
/// and its ids against the synthetic documents (`tok`).
pub fn check_row(c: &PackOptions, row: &Record) -> Result<(), TestCaseError> {
    let t = c.seq_len;
    let (ids, labels, pos, seg, mask) =
        (u32s(row, INPUT_IDS), i32s(row, LABELS), i32s(row, POSITIONS), i32s(row, SEGMENT_IDS), u8s(row, LOSS_MASK));
    let cu = i32s(row, CU_SEQLENS);
    prop_assert_eq!(row.fields().count(), 8, "rows carry exactly the packer's fields");
    for (name, n) in [("input_ids", ids.len()), ("labels", labels.len()), ("positions", pos.len())] {
        prop_assert_eq!(n, t, "{} length", name);
    }
    prop_assert_eq!(seg.len(), t);
    prop_assert_eq!(mask.len(), t);
    prop_assert_eq!(cu.len(), c.max_segments + 2);

    // Segments from segment_ids alone: 1, 2, ..., k in runs, then padding (0) to the end.
    let mut runs: Vec<(usize, usize)> = Vec::new(); // (start, len)
    let mut pad_from = t;
    for (i, &s) in seg.iter().enumerate() {
        if s == 0 {
            if pad_from == t {
                pad_from = i;
            }
            continue;
        }
        prop_assert!(pad_from == t, "segment after padding at {}", i);
        let n = runs.len();
        match runs.last_mut() {
            Some((_, len)) if s as usize == n => *len += 1,
            _ => {
                prop_assert_eq!(s as usize, runs.len() + 1, "segment ids count up by one");
                runs.push((i, 1));
            }
        }
    }
    let k = runs.len();
    let used = pad_from; // tokens in segments: padding is a suffix
    prop_assert_eq!(runs.iter().map(|r| r.1).sum::<usize>(), used);
    prop_assert!(k >= 1 && k <= c.max_segments, "k = {} segments, cap {}", k, c.max_segments);
    prop_assert_eq!(int(row, NUM_TOKENS), used as i64);

    for i in 0..t {
        let s = seg[i];
        let want_pos = if s == 0 { 0 } else { (i - runs[s as usize - 1].0) as i32 };
        prop_assert_eq!(pos[i], want_pos, "position {}", i);
        let same_next = i + 1 < t && s != 0 && seg[i + 1] == s;
        let want_label = if same_next { ids[i + 1] as i32 } else { c.ignore_index };
        prop_assert_eq!(labels[i], want_label, "label {}", i);
        prop_assert_eq!(mask[i], u8::from(labels[i] != c.ignore_index), "loss mask {}", i);
        if s == 0 {
            prop_assert_eq!(ids[i], c.pad_id, "padding id at {}", i);
        }
    }

    let mut want_cu = vec![0i32];
    let mut max_len = 0;
    for &(start, len) in &runs {
        want_cu.push((start + len) as i32);
        max_len = max_len.max(len);
    }
    if used < t {
        want_cu.push(t as i32);
        max_len = max_len.max(t - used);
    }
    want_cu.resize(c.max_segments + 2, t as i32);
    prop_assert_eq!(cu, &want_cu[..]);
    prop_assert_eq!(int(row, MAX_SEQLEN), max_len as i64);

    // Lineage: one fragment per segment, of the segment's length, holding the document's ids.
    let frags = row.lineage().fragments();
    prop_assert_eq!(frags.len(), k);
    for (f, &(start, len)) in frags.iter().zip(&runs) {
        prop_assert_eq!(f.len() as usize, len);
        for p in 0..len {
            prop_assert_eq!(ids[start + p], tok(f.sample.row, f.start() + p as u32), "id at {} from {}", start + p, f);
        }
    }
    Ok(())
}

/// How many rows cover each (sample, position): every kept position exactly once.
pub fn coverage(rows: &[Record]) -> BTreeMap<(u64, u32), u32> {
    let mut seen = BTreeMap::new();
    for r in rows {
        for f in r.lineage().fragments() {
            for p in f.start()..f.end() {
                *seen.entry((f.sample.row, p)).or_insert(0) += 1;
            }
        }
    }
    seen
}

/// The positions the packer must keep from `inputs`: all of them under split, the first T of
/// each input piece under truncate.
pub fn expected_coverage(c: &PackOptions, inputs: &[Record]) -> BTreeMap<(u64, u32), u32> {
    let mut want = BTreeMap::new();
    for r in inputs {
        let f = *r.lineage().as_single().unwrap();
        let keep = match c.longer_than_row {
            LongerThanRow::Split => f.len(),
            LongerThanRow::Truncate => f.len().min(c.seq_len as u32),
        };
        for p in f.start()..f.start() + keep {
            want.insert((f.sample.row, p), 1);
        }
    }
    want
}

/// A random valid config: T up to 40, so that documents longer than T are common.
pub fn configs() -> impl Strategy<Value = PackOptions> {
    (
        1usize..40,
        prop_oneof![Just(0usize), 1usize..7],
        any::<bool>(),
        1usize..10,
        prop::sample::select(vec![LongerThanRow::Split, LongerThanRow::Truncate]),
        0u32..3,
        prop::sample::select(vec![-100i32, -1]),
        prop::sample::select(vec![EndOfData::KeepPieces, EndOfData::FillRows]),
        any::<bool>(),
    )
        .prop_map(|(t, bins, best, s, longer_than_row, pad_id, ignore_index, end_of_data, warm_up)| {
            let algorithm = match (bins, best) {
                (0, _) => Algorithm::Wrap,
                (b, false) => Algorithm::FirstFit { bins: b },
                (b, true) => Algorithm::BestFit { bins: b },
            };
            PackOptions {
                max_segments: s.min(t),
                longer_than_row,
                pad_id,
                ignore_index,
                end_of_data,
                warm_up,
                ..PackOptions::new(algorithm, t)
            }
        })
}

/// Random input for rows of `t`: documents of 0, 1, around T and many times T tokens, some
/// arriving as two pieces with disjoint ranges (a tokenizer that splits long documents).
pub fn inputs(t: usize) -> impl Strategy<Value = Vec<Record>> {
    let t = t as u32;
    let len = prop_oneof![2 => Just(0u32), 2 => Just(1u32), 6 => 0..2 * t + 2, 1 => t..12 * t + 1, 1 => Just(t)];
    prop::collection::vec((len, 0u32..4, prop::option::of(0.0f64..1.0)), 0..40).prop_map(|docs| {
        let mut out = Vec::new();
        for (row, (len, start, cut)) in docs.into_iter().enumerate() {
            let row = row as u64;
            match cut {
                Some(x) => {
                    let a = (f64::from(len) * x) as u32;
                    out.push(piece(row, start, a));
                    out.push(piece(row, start + a, len - a));
                }
                None => out.push(piece(row, start, len)),
            }
        }
        out
    })
}

/// Token positions of fragments the packer made (always ranges).
pub trait Positions {
    fn start(&self) -> u32;
    fn end(&self) -> u32;
}

impl Positions for Fragment {
    fn start(&self) -> u32 {
        self.positions().expect("packed fragments are token ranges").start()
    }
    fn end(&self) -> u32 {
        self.positions().expect("packed fragments are token ranges").end()
    }
}
