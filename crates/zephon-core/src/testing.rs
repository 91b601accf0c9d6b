//! Proving an operator through the engine: [`check_in_engine`] runs it at several world sizes
//! and thread counts, across a checkpoint restored at another world size, and with a second
//! accumulator after it (so that its `rebuild` runs), and compares every global step with a
//! single-process run. The contract check that needs no engine, for operator crates, is
//! `zephon_operator::testing::check_operator`.
//!
//! The rank runner it is built on, [`Ranks`], is public: every rank of a world size in this
//! process, their local steps combined into global steps, for any test that compares world
//! sizes, resumes or microbatch sizes (the facade's `Loader` drives it as an `Engine` does).
//!
//! ```
//! use std::sync::Arc;
//! use zephon_core::testing::{CheckOptions, check_in_engine};
//! use zephon_core::*;
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
//! let texts: Vec<String> = (0..40).map(|i| format!("document {i}")).collect();
//! let data = Datasets::new(vec![Arc::new(MemoryDataset::from_texts("d", "text", vec![texts]))]);
//! let report = check_in_engine(|| Upper, data, CheckOptions::default())?;
//! assert!(report.steps > 0);
//! # Ok::<(), zephon_core::testing::Violation>(())
//! ```

mod ranks;

use std::path::Path;
use std::sync::Arc;

pub use ranks::{Rank, Ranks, RanksError, fingerprint, fingerprint_through_microbatches};
pub use zephon_operator::testing::Violation;

use crate::engine::{BadRecords, ExecOptions, RunSpec, Tail};
use crate::error::OpError;
use crate::plan::Operators;
use crate::source::{Datasets, SequentialSource};
use zephon_operator::{
    Accumulator, AccumulatorState, Digest, LaneContext, Lineage, Operator, OperatorKind, Record, RngKey, Settings,
};

/// How hard [`check_in_engine`] looks.
#[derive(Copy, Clone, Debug)]
pub struct CheckOptions {
    /// Lanes (the world sizes tried are its divisors up to 8).
    pub lanes: u32,
    /// Rows each lane gives a step.
    pub rows_per_lane: u32,
    /// Steps compared.
    pub steps: u64,
    /// Samples per chunk of the work source.
    pub chunk_size: u64,
    /// Passes over the data (the source repeats it this many times).
    pub epochs: u64,
    /// The run's seed.
    pub seed: u64,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions { lanes: 4, rows_per_lane: 2, steps: 8, chunk_size: 3, epochs: 1000, seed: 7 }
    }
}

/// What [`check_in_engine`] compared.
#[derive(Clone, Debug)]
pub struct CheckReport {
    /// Steps compared in every configuration.
    pub steps: u64,
    /// Configurations that equalled the single-process run, described.
    pub configurations: Vec<String>,
}

/// Runs the operator `make()` builds over `datasets` and checks that every global step is the
/// same at world sizes 1, 2, 4, 8 (those dividing the lanes), with 1 and 2 threads, after a
/// checkpoint taken at world size 2 and restored at world size 1 and at the largest one, and
/// all of that again with a pass-through accumulator after the operator (which makes a restore
/// call its `Accumulator::rebuild` for records it emitted). Returns what it compared, or the
/// first difference or error.
pub fn check_in_engine<O: Operator>(
    make: impl Fn() -> O,
    datasets: Datasets,
    options: CheckOptions,
) -> Result<CheckReport, Violation> {
    check(make, datasets, options).map_err(Violation)
}

fn check<O: Operator>(make: impl Fn() -> O, datasets: Datasets, options: CheckOptions) -> Result<CheckReport, String> {
    let o = options;
    let make = Arc::new(move || -> Arc<dyn Operator> { Arc::new(make()) });
    let ws: Vec<u32> = [1, 2, 4, 8].into_iter().filter(|w| o.lanes.is_multiple_of(*w)).collect();
    let mut report = CheckReport { steps: o.steps, configurations: Vec::new() };
    for hold in [false, true] {
        let ops = || {
            let ops = Operators::new().then(make());
            if hold { ops.then(Hold) } else { ops }
        };
        let spec = RunSpec {
            operators: ops(),
            source: Arc::new(SequentialSource::new(&datasets.manifests(), o.chunk_size, o.epochs, o.seed)),
            datasets: datasets.clone(),
            seed: o.seed,
            bad_records: BadRecords::Fail,
            tail: Tail::Drop,
            token_estimates: Vec::new(),
        };
        let after = if hold { " + a held accumulator after it" } else { "" };
        let run = |w: u32, threads: usize, from: Option<&Path>, to: u64, save: Option<&Path>| {
            fingerprints(&spec, o.lanes, o.lanes * o.rows_per_lane, w, threads, from, to, save)
        };
        let reference = run(1, 1, None, o.steps, None)?;
        if reference.len() as u64 != o.steps {
            return Err(format!(
                "the data ends after {} of {} steps: give more data or fewer steps",
                reference.len(),
                o.steps
            ));
        }
        for &w in &ws {
            for threads in [1, 2] {
                let got = run(w, threads, None, o.steps, None)?;
                compare(&reference, &got, 0, &format!("W={w} threads={threads}{after}"))?;
                report.configurations.push(format!("W={w} threads={threads}{after}"));
            }
        }
        let tmp = std::env::temp_dir().join(format!("zephon-check-{}-{}", std::process::id(), hold));
        let _ = std::fs::remove_dir_all(&tmp);
        let half = o.steps / 2;
        let w0 = if o.lanes.is_multiple_of(2) { 2 } else { 1 };
        let head = run(w0, 2, None, half, Some(&tmp))?;
        compare(&reference, &head, 0, &format!("W={w0} to the checkpoint{after}"))?;
        for &w in [1, *ws.last().unwrap_or(&1)].iter() {
            let tail = run(w, 2, Some(&tmp), o.steps, None)?;
            compare(&reference, &tail, half, &format!("checkpoint at step {half} (W={w0}) restored at W={w}{after}"))?;
            report.configurations.push(format!("restore W={w0}→{w} at step {half}{after}"));
        }
        let _ = std::fs::remove_dir_all(&tmp);
    }
    Ok(report)
}

fn compare(reference: &[Digest], got: &[Digest], from: u64, what: &str) -> Result<(), String> {
    for (i, d) in got.iter().enumerate() {
        let s = from as usize + i;
        if reference.get(s) != Some(d) {
            return Err(format!("{what}: step {s} differs from the single-process run"));
        }
    }
    Ok(())
}

/// Global fingerprints of steps up to `to`, every rank of world size `w` in this process;
/// fewer where the data ends first.
#[allow(clippy::too_many_arguments)]
fn fingerprints(
    spec: &RunSpec,
    lanes: u32,
    rows: u32,
    w: u32,
    threads: usize,
    resume: Option<&Path>,
    to: u64,
    save: Option<&Path>,
) -> Result<Vec<Digest>, String> {
    let opts = ExecOptions { threads, prefetch_steps: 2, unit_samples: 2, snapshot_every: 1, ..ExecOptions::default() };
    let mut ranks = Ranks::engines(spec, lanes, rows, w, opts, resume).map_err(|e| e.to_string())?;
    let out = ranks.fingerprints(to.saturating_sub(ranks.position().0)).map_err(|e| e.to_string())?;
    if let Some(dir) = save {
        ranks.checkpoint(dir).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// A pass-through accumulator that holds three records and lets them go in a seeded order, so
/// that a checkpoint holds the checked operator's outputs and a restore must rebuild them.
struct Hold;

impl Operator for Hold {
    fn name(&self) -> &str {
        "hold"
    }
    fn fingerprint(&self) -> Settings {
        Settings::new("hold", 3)
    }
    fn kind(&self) -> OperatorKind {
        OperatorKind::Accumulate
    }
    fn accumulator(&self, lane: LaneContext) -> Option<Box<dyn Accumulator>> {
        Some(Box::new(HoldAcc {
            key: RngKey::new(lane.seed, "check-hold").with(u64::from(lane.lane.0)),
            n: 0,
            held: Vec::new(),
        }))
    }
}

struct HoldAcc {
    key: RngKey,
    n: u64,
    held: Vec<Record>,
}

impl Accumulator for HoldAcc {
    fn push(&mut self, record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        self.n += 1;
        self.held.push(record);
        if self.held.len() > 3 {
            let i = self.key.below_at(self.n, self.held.len() as u64) as usize;
            out.push(self.held.remove(i));
        }
        Ok(())
    }
    fn finish(&mut self, out: &mut Vec<Record>) -> Result<(), OpError> {
        out.append(&mut self.held);
        Ok(())
    }
    fn export(&self) -> AccumulatorState {
        AccumulatorState {
            values: vec![self.n],
            buffered: self.held.iter().map(|r| r.lineage().clone()).collect::<Vec<Lineage>>(),
        }
    }
    fn import(&mut self, state: AccumulatorState, buffered: Vec<Record>) -> Result<(), OpError> {
        self.n = *state.values.first().ok_or_else(|| OpError::Fatal("hold: no count".into()))?;
        self.held = buffered;
        Ok(())
    }
}
