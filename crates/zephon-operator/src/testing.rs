//! Proving an operator keeps the contract, in one call and without the engine:
//! [`check_operator`].
//!
//! The engine makes every global step the same at any world size and after any restore on two
//! conditions only, both the operator's to keep: its stateless part is a pure function of one
//! record with true lineage, and its accumulator's output depends only on its lane's order and
//! survives export, a fresh accumulator, rebuilt records and import. `check_operator` tests
//! exactly those, on the records you give it:
//!
//! - **Pure stateless part**: every record is applied twice, the second time on another thread
//!   in reverse order; the outputs must be equal (the row encoding and the lineage).
//! - **True lineage**: every output of one sample names only that sample, and pieces of a split
//!   have disjoint spans in order; [`Operator::apply_prefix`] returns what `apply` returns up to
//!   every piece's end.
//! - **Restorable accumulator**: each lane's stream is cut at every position (or at
//!   `CheckOptions::cuts` evenly spaced ones); at the cut the state is exported, a fresh
//!   accumulator imports it with the held records rebuilt from their lineage alone, and the rest
//!   of the stream must give what an uninterrupted lane gives. The same is repeated with a
//!   pass-through accumulator after the operator that holds three of its outputs, so that its
//!   [`Accumulator::rebuild`] must remake records it emitted.
//!
//! The engine's own end-to-end check (several world sizes and thread counts through real
//! checkpoints) is `zephon_core::testing::check_in_engine`.
//!
//! ```
//! use zephon_operator::testing::{CheckOptions, check_operator, text_samples};
//! use zephon_operator::*;
//!
//! struct Upper;
//! impl Operator for Upper {
//!     fn name(&self) -> &str { "upper" }
//!     fn fingerprint(&self) -> Settings { Settings::new("upper", 1) }
//!     fn apply(&self, mut r: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
//!         let t = r.str("text").ok_or_else(|| OpError::Data("no text".into()))?.to_uppercase();
//!         r.set(&"text".into(), Value::text(t));
//!         out.push(r);
//!         Ok(())
//!     }
//! }
//! let texts = (0..40).map(|i| format!("document {i}"));
//! let report = check_operator(|| Upper, text_samples("text", texts), CheckOptions::default())?;
//! assert_eq!(report.outputs, 40);
//! # Ok::<(), zephon_operator::testing::Violation>(())
//! ```

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::encoding::encode_record;
use crate::error::OpError;
use crate::id::{Lane, SampleId};
use crate::lineage::{Extent, Lineage};
use crate::operator::{Accumulator, AccumulatorState, LaneContext, Operator, RebuildInput};
use crate::record::{Record, Value};
use crate::rng::RngKey;

/// How [`check_operator`] deals and cuts.
#[derive(Copy, Clone, Debug)]
pub struct CheckOptions {
    /// Lanes the samples are dealt to, round robin (each lane gets its own accumulator).
    pub lanes: u32,
    /// The run's seed, given to accumulators in their [`LaneContext`].
    pub seed: u64,
    /// Restore points tried per lane, evenly spaced; `0` tries every position.
    pub cuts: usize,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions { lanes: 3, seed: 7, cuts: 0 }
    }
}

/// What [`check_operator`] compared.
#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    /// Samples applied (each twice).
    pub samples: usize,
    /// Records the stateless part produced.
    pub outputs: usize,
    /// Records the accumulator emitted over all lanes (0 for a map).
    pub emitted: usize,
    /// Restores compared (with and without the holding accumulator after it).
    pub restores: usize,
}

/// Samples as a reader gives them: sample `i` of dataset 0, shard 0, with `field` set to
/// the `i`-th text.
pub fn text_samples(field: &str, texts: impl IntoIterator<Item = impl Into<String>>) -> Vec<Record> {
    let field = field.into();
    texts
        .into_iter()
        .enumerate()
        .map(|(i, t)| Record::from_sample(SampleId::new(0, 0, i as u64)).with(&field, Value::text(t.into())))
        .collect()
}

/// The first place where an operator breaks the operator contract, described: which sample,
/// lane or restore point, and what differed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Violation(pub String);

/// Checks that the operator `make()` builds keeps the operator contract on `samples` (records
/// as a reader gives them, one per sample id). Returns what it compared, or the first
/// violation.
pub fn check_operator<O: Operator>(
    make: impl Fn() -> O,
    samples: Vec<Record>,
    options: CheckOptions,
) -> Result<CheckReport, Violation> {
    check(make, samples, options).map_err(Violation)
}

fn check<O: Operator>(
    make: impl Fn() -> O,
    samples: Vec<Record>,
    options: CheckOptions,
) -> Result<CheckReport, String> {
    if options.lanes == 0 {
        return Err("check_operator: lanes must be at least 1".into());
    }
    let op = make();
    let kind = op.kind();
    let mut report = CheckReport { samples: samples.len(), ..CheckReport::default() };
    let mut mapped: HashMap<SampleId, Vec<Record>> = HashMap::new();
    let mut order: Vec<Vec<SampleId>> = vec![Vec::new(); options.lanes as usize];
    let mut given = Vec::with_capacity(samples.len());
    for (i, sample) in samples.iter().enumerate() {
        let id = single_sample(sample)
            .ok_or_else(|| format!("sample #{i} has lineage {}: give whole samples", sample.lineage()))?;
        given.push((id, sample));
        if mapped.contains_key(&id) {
            return Err(format!("sample {id} is given twice"));
        }
        let outs = if kind.maps() { apply(&op, sample.clone(), id)? } else { vec![sample.clone()] };
        report.outputs += outs.len();
        mapped.insert(id, outs);
        order[i % options.lanes as usize].push(id);
    }
    if kind.maps() {
        check_pure(&op, &given, &mapped)?;
        for (id, sample) in &given {
            check_prefix(&op, sample, &mapped[id])?;
        }
    }
    for (lane, ids) in order.iter().enumerate() {
        let inputs: Vec<Record> = ids.iter().flat_map(|id| mapped[id].iter().cloned()).collect();
        let ctx = LaneContext { lane: Lane(lane as u32), seed: options.seed };
        for hold in [false, true] {
            let reference = run_lane(&make, ctx, hold, &inputs, None, &mapped)?;
            if !hold {
                report.emitted += reference.len();
            }
            for cut in cut_points(inputs.len(), options.cuts) {
                let got = run_lane(&make, ctx, hold, &inputs, Some(cut), &mapped)?;
                let after = if hold { " with a holding accumulator after it" } else { "" };
                compare(&reference, &got).map_err(|e| format!("{ctx:?}, restored after input {cut}{after}: {e}"))?;
                report.restores += 1;
            }
        }
    }
    Ok(report)
}

fn single_sample(r: &Record) -> Option<SampleId> {
    r.lineage().as_single().filter(|f| f.extent == Extent::Whole).map(|f| f.sample)
}

fn apply<O: Operator>(op: &O, record: Record, id: SampleId) -> Result<Vec<Record>, String> {
    let mut out = Vec::new();
    op.apply(record, &mut out).map_err(|e| format!("apply on sample {id}: {e}"))?;
    check_lineage(&out, id)?;
    Ok(out)
}

/// Every output names only its sample, and pieces with spans are disjoint and in order.
fn check_lineage(outs: &[Record], id: SampleId) -> Result<(), String> {
    let mut end = 0u32;
    for (i, r) in outs.iter().enumerate() {
        for f in r.lineage().fragments() {
            if f.sample != id {
                return Err(format!(
                    "output {i} of sample {id} names sample {} in its lineage {}",
                    f.sample,
                    r.lineage()
                ));
            }
        }
        if let Some(f) = r.lineage().as_single()
            && let Extent::Span(s) = f.extent
        {
            if s.start() < end {
                return Err(format!(
                    "output {i} of sample {id} ({}) overlaps or precedes the piece before it",
                    r.lineage()
                ));
            }
            end = s.end();
        }
    }
    Ok(())
}

/// The stateless part gives the same outputs on another thread, in reverse order.
fn check_pure<O: Operator>(
    op: &O,
    samples: &[(SampleId, &Record)],
    mapped: &HashMap<SampleId, Vec<Record>>,
) -> Result<(), String> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                for &(id, sample) in samples.iter().rev() {
                    let again = apply(op, sample.clone(), id)?;
                    compare(&mapped[&id], &again).map_err(|e| format!("apply is not pure on sample {id}: {e}"))?;
                }
                Ok(())
            })
            .join()
            .map_err(|_| "apply panicked on the second pass".to_string())?
    })
}

/// `apply_prefix(until)` gives every output ending at or before `until`, equal to `apply`'s.
fn check_prefix<O: Operator>(op: &O, sample: &Record, outs: &[Record]) -> Result<(), String> {
    for r in outs {
        let Some(Extent::Span(s)) = r.lineage().as_single().map(|f| f.extent) else { continue };
        let mut got = Vec::new();
        op.apply_prefix(sample.clone(), s.end(), &mut got).map_err(|e| format!("apply_prefix({}) : {e}", s.end()))?;
        let want: Vec<Record> = outs
            .iter()
            .filter(|o| o.lineage().as_single().is_some_and(|f| end_of(f.extent) <= s.end()))
            .cloned()
            .collect();
        if got.len() < want.len() {
            return Err(format!(
                "apply_prefix({}) of {} returned {} outputs, apply has {} ending there",
                s.end(),
                sample.lineage(),
                got.len(),
                want.len()
            ));
        }
        compare(&want, &got[..want.len()])
            .map_err(|e| format!("apply_prefix({}) of {}: {e}", s.end(), sample.lineage()))?;
    }
    Ok(())
}

fn end_of(e: Extent) -> u32 {
    match e {
        Extent::Whole => u32::MAX,
        Extent::Span(s) => s.end(),
    }
}

fn cut_points(n: usize, cuts: usize) -> Vec<usize> {
    if cuts == 0 || cuts > n { (0..=n).collect() } else { (0..cuts).map(|i| i * n / cuts).collect() }
}

/// One lane's outputs: the operator's accumulator (if any), then the holding accumulator (if
/// `hold`), over `inputs`; with `restore_at`, every accumulator is exported after that many
/// inputs and replaced by a fresh one that imports the state.
fn run_lane<O: Operator>(
    make: &impl Fn() -> O,
    ctx: LaneContext,
    hold: bool,
    inputs: &[Record],
    restore_at: Option<usize>,
    mapped: &HashMap<SampleId, Vec<Record>>,
) -> Result<Vec<Record>, String> {
    let mut stages = Stages::new(make, ctx, hold)?;
    let mut out = Vec::new();
    for (i, r) in inputs.iter().enumerate() {
        if restore_at == Some(i) {
            stages = stages.restored(make, ctx, mapped)?;
        }
        stages.push(r.clone(), &mut out)?;
    }
    if restore_at == Some(inputs.len()) {
        stages = stages.restored(make, ctx, mapped)?;
    }
    stages.finish(&mut out)?;
    Ok(out)
}

struct Stages {
    acc: Option<Box<dyn Accumulator>>,
    watches: bool,
    hold: Option<Hold>,
}

impl Stages {
    fn new<O: Operator>(make: &impl Fn() -> O, ctx: LaneContext, hold: bool) -> Result<Stages, String> {
        let op = make();
        let acc = op.accumulator(ctx);
        match (op.kind().accumulates(), acc.is_some()) {
            (true, false) => return Err(format!("kind() is {} but accumulator() returned none", op.kind().as_str())),
            (false, true) => return Err(format!("accumulator() returned one but kind() is {}", op.kind().as_str())),
            _ => {}
        }
        let watches = acc.as_ref().is_some_and(|a| a.watches_next_stage()) && hold;
        Ok(Stages { acc, watches, hold: hold.then(|| Hold::new(ctx)) })
    }

    fn push(&mut self, r: Record, out: &mut Vec<Record>) -> Result<(), String> {
        let mut mid = Vec::new();
        match &mut self.acc {
            Some(a) => a.push(r, &mut mid).map_err(|e| format!("push: {e}"))?,
            None => mid.push(r),
        }
        self.pass(mid, out, false)
    }

    fn finish(&mut self, out: &mut Vec<Record>) -> Result<(), String> {
        let mut mid = Vec::new();
        if let Some(a) = &mut self.acc {
            a.finish(&mut mid).map_err(|e| format!("finish: {e}"))?;
        }
        self.pass(mid, out, true)
    }

    fn pass(&mut self, mid: Vec<Record>, out: &mut Vec<Record>, finish: bool) -> Result<(), String> {
        let Some(h) = &mut self.hold else {
            out.extend(mid);
            return Ok(());
        };
        let start = out.len();
        for r in mid {
            h.push(r, out);
        }
        if finish {
            out.append(&mut h.held);
        }
        if self.watches
            && let Some(a) = &mut self.acc
        {
            for r in &out[start..] {
                a.next_stage_out(r);
            }
        }
        Ok(())
    }

    /// Exports every stage and imports the state into fresh ones, each held record rebuilt
    /// from its lineage: the operator's from the mapped inputs, the holder's through the fresh
    /// accumulator's `rebuild`.
    fn restored<O: Operator>(
        self,
        make: &impl Fn() -> O,
        ctx: LaneContext,
        mapped: &HashMap<SampleId, Vec<Record>>,
    ) -> Result<Stages, String> {
        let mut fresh = Stages::new(make, ctx, self.hold.is_some())?;
        let mut input = Mapped(mapped);
        if let (Some(h), Some(fh)) = (&self.hold, &mut fresh.hold) {
            let state = h.export();
            let mut rebuilt = Vec::new();
            for l in &state.buffered {
                let r = match &fresh.acc {
                    Some(a) => a.rebuild(l, &mut input).map_err(|e| format!("rebuild of {l}: {e}"))?,
                    None => input.exact(l).map_err(|e| format!("{l}: {e}"))?,
                };
                if r.lineage() != l {
                    return Err(format!("rebuild of {l} returned a record with lineage {}", r.lineage()));
                }
                rebuilt.push(r);
            }
            compare(&h.held, &rebuilt).map_err(|e| format!("rebuilt records differ from those emitted: {e}"))?;
            fh.import(state, rebuilt);
        }
        if let (Some(a), Some(fa)) = (&self.acc, &mut fresh.acc) {
            let state: AccumulatorState = a.export();
            let mut rebuilt = Vec::new();
            for l in &state.buffered {
                rebuilt.push(input.covering(l).map_err(|e| format!("held record {l}: {e}"))?);
            }
            fa.import(state, rebuilt).map_err(|e| format!("import: {e}"))?;
        }
        Ok(fresh)
    }
}

/// The mapped inputs, for rebuilding: what reached the operator's accumulator.
struct Mapped<'a>(&'a HashMap<SampleId, Vec<Record>>);

impl RebuildInput for Mapped<'_> {
    fn covering(&mut self, lineage: &Lineage) -> Result<Record, OpError> {
        let sample = lineage.first_sample().ok_or_else(|| OpError::Fatal("empty lineage".into()))?;
        self.0
            .get(&sample)
            .and_then(|outs| outs.iter().find(|r| r.lineage().covers(lineage)))
            .cloned()
            .ok_or_else(|| OpError::Fatal(format!("no input record covers {lineage}")))
    }
}

/// A pass-through accumulator holding three records, letting one go in a seeded order.
struct Hold {
    key: RngKey,
    n: u64,
    held: Vec<Record>,
}

impl Hold {
    fn new(ctx: LaneContext) -> Hold {
        Hold { key: RngKey::new(ctx.seed, "check-hold").with(u64::from(ctx.lane.0)), n: 0, held: Vec::new() }
    }

    fn push(&mut self, r: Record, out: &mut Vec<Record>) {
        self.n += 1;
        self.held.push(r);
        if self.held.len() > 3 {
            let i = self.key.below_at(self.n, self.held.len() as u64) as usize;
            out.push(self.held.remove(i));
        }
    }

    fn export(&self) -> AccumulatorState {
        AccumulatorState { values: vec![self.n], buffered: self.held.iter().map(|r| r.lineage().clone()).collect() }
    }

    fn import(&mut self, state: AccumulatorState, held: Vec<Record>) {
        self.n = state.values.first().copied().unwrap_or(0);
        self.held = held;
    }
}

/// Equal record by record: the row encoding (what a model trains on) and the lineage.
fn compare(want: &[Record], got: &[Record]) -> Result<(), String> {
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        if w.lineage() != g.lineage() {
            return Err(format!("record {i} has lineage {} where {} was expected", g.lineage(), w.lineage()));
        }
        if bytes(w) != bytes(g) {
            return Err(format!("record {i} ({}) differs in its fields", w.lineage()));
        }
    }
    if want.len() != got.len() {
        let mut m = format!("{} records where {} were expected", got.len(), want.len());
        if let Some(r) = want.get(got.len()).or_else(|| got.get(want.len())) {
            let _ = write!(m, " (the first unmatched: {})", r.lineage());
        }
        return Err(m);
    }
    Ok(())
}

fn bytes(r: &Record) -> Vec<u8> {
    let mut v = Vec::new();
    encode_record(r, &mut |b| v.extend_from_slice(b));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::OperatorKind;
    use crate::settings::Settings;

    /// Joins every two records of a lane; forgets its half-full pair on export.
    struct Pairs {
        forget: bool,
    }
    struct PairAcc {
        forget: bool,
        open: Option<Record>,
    }
    impl Operator for Pairs {
        fn name(&self) -> &str {
            "pairs"
        }
        fn fingerprint(&self) -> Settings {
            Settings::new("pairs", 1)
        }
        fn kind(&self) -> OperatorKind {
            OperatorKind::Accumulate
        }
        fn accumulator(&self, _: LaneContext) -> Option<Box<dyn Accumulator>> {
            Some(Box::new(PairAcc { forget: self.forget, open: None }))
        }
    }
    impl Accumulator for PairAcc {
        fn push(&mut self, r: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
            match self.open.take() {
                None => self.open = Some(r),
                Some(a) => {
                    let mut l = a.lineage().clone();
                    for f in r.lineage().fragments() {
                        l.push(*f);
                    }
                    let text = format!("{}+{}", a.str("text").unwrap_or(""), r.str("text").unwrap_or(""));
                    out.push(Record::new(l).with(&"text".into(), Value::text(text)));
                }
            }
            Ok(())
        }
        fn export(&self) -> AccumulatorState {
            let buffered =
                if self.forget { Vec::new() } else { self.open.iter().map(|r| r.lineage().clone()).collect() };
            AccumulatorState { values: Vec::new(), buffered }
        }
        fn import(&mut self, _: AccumulatorState, buffered: Vec<Record>) -> Result<(), OpError> {
            self.open = buffered.into_iter().next();
            Ok(())
        }
        fn rebuild(&self, lineage: &Lineage, input: &mut dyn RebuildInput) -> Result<Record, OpError> {
            let [a, b] = lineage.fragments() else { return Err(OpError::Fatal("not a pair".into())) };
            let a = input.covering(&Lineage::single(*a))?;
            let b = input.covering(&Lineage::single(*b))?;
            let text = format!("{}+{}", a.str("text").unwrap_or(""), b.str("text").unwrap_or(""));
            Ok(Record::new(lineage.clone()).with(&"text".into(), Value::text(text)))
        }
    }

    #[test]
    fn a_restorable_accumulator_passes_and_one_that_forgets_fails() {
        let samples = || text_samples("text", (0..23).map(|i| format!("t{i}")));
        let report = check_operator(|| Pairs { forget: false }, samples(), CheckOptions::default()).unwrap();
        assert_eq!(report.emitted, 4 + 4 + 3, "lanes of 8, 8 and 7 records; an odd one stays open");
        assert!(report.restores > 40);
        let e = check_operator(|| Pairs { forget: true }, samples(), CheckOptions::default()).unwrap_err();
        assert!(e.to_string().contains("restored after input 1"), "{e}");
    }

    /// A map that numbers its calls: impure.
    struct Counter(std::sync::atomic::AtomicU64);
    impl Operator for Counter {
        fn name(&self) -> &str {
            "counter"
        }
        fn fingerprint(&self) -> Settings {
            Settings::new("counter", 1)
        }
        fn apply(&self, mut r: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
            let n = self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            r.set(&"n".into(), Value::Int(n as i64));
            out.push(r);
            Ok(())
        }
    }

    #[test]
    fn an_impure_map_and_a_false_lineage_fail() {
        let samples = text_samples("text", ["a", "b", "c"]);
        let e = check_operator(|| Counter(0.into()), samples.clone(), CheckOptions::default()).unwrap_err();
        assert!(e.to_string().contains("not pure"), "{e}");

        struct Thief;
        impl Operator for Thief {
            fn name(&self) -> &str {
                "thief"
            }
            fn fingerprint(&self) -> Settings {
                Settings::new("thief", 1)
            }
            fn apply(&self, r: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
                out.push(
                    Record::from_sample(SampleId::new(9, 9, 9))
                        .with(&"text".into(), Value::text(r.str("text").unwrap_or(""))),
                );
                Ok(())
            }
        }
        let e = check_operator(|| Thief, samples, CheckOptions::default()).unwrap_err();
        assert!(e.to_string().contains("names sample"), "{e}");
    }
}
