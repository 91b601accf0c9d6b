//! Rebuilding buffered records from their lineage on restore.
//!
//! A record held by accumulator `k` is rebuilt by re-reading the samples its lineage names,
//! re-running the stateless parts, and asking each earlier accumulator to rebuild what it
//! emitted (`Accumulator::rebuild`). Only buffered records are touched: restore costs what is
//! buffered, not what was processed.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::checkpoint::LaneState;
use crate::error::{Error, OpError, Result};
use crate::plan::{Plan, apply_chain, apply_chain_prefix, take_covering};
use crate::source::Datasets;
use zephon_operator::{Accumulator, Extent, Lineage, RebuildInput, Record, SampleId};

use super::lane::{LaneRun, LaneSetup};
use super::schedule::lock;
use super::settings::RunSpec;

/// Where in the pipeline a record is rebuilt.
#[derive(Copy, Clone, Debug)]
pub(crate) enum Level {
    /// Output of the parallel part (read + stateless maps).
    Source,
    /// What reached accumulator `k` (after its inline maps).
    AccIn(usize),
    /// What accumulator `k` emitted.
    AccOut(usize),
    /// A finished row (after the trailing maps).
    Row,
}

pub(crate) struct Rebuilder<'a> {
    plan: &'a Plan,
    accs: &'a [Box<dyn Accumulator>],
    datasets: &'a Datasets,
    cache: HashMap<SampleId, Vec<Record>>,
}

impl<'a> Rebuilder<'a> {
    pub fn new(plan: &'a Plan, accs: &'a [Box<dyn Accumulator>], datasets: &'a Datasets) -> Self {
        Rebuilder { plan, accs, datasets, cache: HashMap::new() }
    }

    /// Reads and processes every sample the lineages name, in one batched pass per shard, each
    /// only as far as the furthest position any lineage needs of it.
    pub fn prefetch<'l>(&mut self, lineages: impl IntoIterator<Item = &'l Lineage>) -> Result<(), (SampleId, OpError)> {
        let mut until: HashMap<SampleId, u32> = HashMap::new();
        for f in lineages.into_iter().flat_map(|l| l.fragments().iter()) {
            if self.cache.contains_key(&f.sample) {
                continue;
            }
            let end = match f.extent {
                Extent::Whole => u32::MAX,
                Extent::Span(s) => s.end(),
            };
            let e = until.entry(f.sample).or_insert(0);
            *e = (*e).max(end);
        }
        let mut ids: Vec<SampleId> = until.keys().copied().collect();
        ids.sort_unstable();
        let reads = self.datasets.read(&ids);
        for (id, read) in ids.into_iter().zip(reads) {
            let rec = read.map_err(|e| (id, e))?;
            let mut outs = Vec::new();
            apply_chain_prefix(&self.plan.parallel, rec, Some(until[&id]), &mut outs)
                .map_err(|(op, e)| (id, OpError::Fatal(format!("operator {op}: {e}"))))?;
            self.cache.insert(id, outs);
        }
        Ok(())
    }

    /// The record at `level` whose lineage covers `lineage`.
    pub fn covering(&mut self, level: Level, lineage: &Lineage) -> Result<Record, OpError> {
        match level {
            Level::Source => {
                let frag = lineage.as_single().ok_or_else(|| {
                    OpError::Fatal("a record of several samples cannot come straight from storage".into())
                })?;
                if !self.cache.contains_key(&frag.sample) {
                    self.prefetch([lineage]).map_err(|(id, e)| OpError::Fatal(format!("reading {id}: {e}")))?;
                }
                let outs = self.cache.get(&frag.sample).map(Vec::as_slice).unwrap_or_default();
                outs.iter()
                    .find(|r| r.lineage().covers(lineage))
                    .cloned()
                    .ok_or_else(|| OpError::Fatal(format!("the operators no longer produce a record covering it (they produce {} records for this sample)", outs.len())))
            }
            Level::AccIn(k) => {
                let base = if k == 0 {
                    self.covering(Level::Source, lineage)?
                } else {
                    self.covering(Level::AccOut(k - 1), lineage)?
                };
                let pre = &self.plan.stages[k].pre;
                self.through(pre, base, lineage)
            }
            Level::AccOut(k) => {
                let accs = self.accs;
                let mut input = Input { rebuilder: self, stage: k };
                accs[k].rebuild(lineage, &mut input)
            }
            Level::Row => {
                let base = match self.accs.len() {
                    0 => self.covering(Level::Source, lineage)?,
                    n => self.covering(Level::AccOut(n - 1), lineage)?,
                };
                let tail = &self.plan.tail;
                self.through(tail, base, lineage)
            }
        }
    }

    fn through(
        &self,
        ops: &[std::sync::Arc<dyn zephon_operator::Operator>],
        base: Record,
        lineage: &Lineage,
    ) -> Result<Record, OpError> {
        if ops.is_empty() {
            return Ok(base);
        }
        let mut outs = Vec::new();
        apply_chain(ops, base, &mut outs).map_err(|(op, e)| OpError::Fatal(format!("operator {op}: {e}")))?;
        take_covering(outs, lineage)
    }
}

struct Input<'r, 'a> {
    rebuilder: &'r mut Rebuilder<'a>,
    stage: usize,
}

impl RebuildInput for Input<'_, '_> {
    fn covering(&mut self, lineage: &Lineage) -> Result<Record, OpError> {
        self.rebuilder.covering(Level::AccIn(self.stage), lineage)
    }
}

/// Rebuilds every owned lane from its checkpointed state.
///
/// Lanes are independent: they are rebuilt in parallel. Their costs differ a lot (a lane
/// holding rows of long documents re-reads more), so threads take lanes from a shared counter
/// rather than fixed groups.
pub(super) fn resume_lanes(
    spec: &RunSpec,
    plan: &Plan,
    setups: Vec<LaneSetup>,
    states: Vec<LaneState>,
    next_step: u64,
    threads: usize,
) -> Result<Vec<LaneRun>> {
    let jobs: Vec<Mutex<Option<(LaneSetup, LaneState)>>> =
        setups.into_iter().zip(states).map(|j| Mutex::new(Some(j))).collect();
    let results: Vec<Mutex<Option<Result<LaneRun>>>> = jobs.iter().map(|_| Mutex::new(None)).collect();
    let counter = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads.min(jobs.len()).max(1) {
            scope.spawn(|| {
                loop {
                    let i = counter.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(i).and_then(|j| lock(j).take()) else { break };
                    let (setup, st) = job;
                    let run = catch_unwind(AssertUnwindSafe(|| resume_lane(spec, plan, setup, st, next_step)))
                        .unwrap_or_else(|_| Err(Error::WorkerPanic("a restore thread panicked".into())));
                    *lock(&results[i]) = Some(run);
                }
            });
        }
    });
    results
        .into_iter()
        .map(|r| {
            r.into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .unwrap_or_else(|| Err(Error::WorkerPanic("a lane was not restored".into())))
        })
        .collect()
}

/// Rebuilds one lane from its checkpointed state.
fn resume_lane(spec: &RunSpec, plan: &Plan, mut setup: LaneSetup, st: LaneState, next_step: u64) -> Result<LaneRun> {
    let lane = st.lane;
    let rebuild_err = |lineage: &dyn std::fmt::Display, e: OpError| Error::Rebuild {
        lane,
        lineage: lineage.to_string(),
        message: e.to_string(),
    };
    let mut accs = std::mem::take(&mut setup.accs);
    let mut rebuilt: Vec<Vec<zephon_operator::Record>> = Vec::new();
    let pending;
    {
        let mut rb = Rebuilder::new(plan, &accs, &spec.datasets);
        let all = st.accumulators.iter().flat_map(|a| a.buffered.iter()).chain(st.pending.iter());
        rb.prefetch(all).map_err(|(id, e)| Error::Rebuild {
            lane,
            lineage: id.to_string(),
            message: format!("cannot re-read: {e}"),
        })?;
        for (k, acc) in st.accumulators.iter().enumerate() {
            let recs = acc
                .buffered
                .iter()
                .map(|l| {
                    rb.covering(Level::AccIn(k), l)
                        .and_then(|r| r.narrow_to(l).map_err(OpError::fatal))
                        .map_err(|e| rebuild_err(l, e))
                })
                .collect::<Result<Vec<_>>>()?;
            rebuilt.push(recs);
        }
        pending = st
            .pending
            .iter()
            .map(|l| {
                rb.covering(Level::Row, l)
                    .and_then(|r| r.narrow_to(l).map_err(OpError::fatal))
                    .map_err(|e| rebuild_err(l, e))
            })
            .collect::<Result<Vec<_>>>()?;
    }
    for ((acc, state), recs) in accs.iter_mut().zip(st.accumulators.iter()).zip(rebuilt) {
        acc.import(state.clone(), recs).map_err(|e| Error::Rebuild {
            lane,
            lineage: "(accumulator state)".into(),
            message: e.to_string(),
        })?;
    }
    setup.accs = accs;
    LaneRun::resume(setup, &st, next_step, pending)
}
