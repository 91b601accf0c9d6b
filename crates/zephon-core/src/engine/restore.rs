//! Rebuilding buffered records from their lineage on restore.
//!
//! A record held by accumulator `k` is rebuilt by re-reading the samples its lineage names,
//! re-running the stateless parts, and asking each earlier accumulator to rebuild what it
//! emitted (`Accumulator::rebuild`). Only buffered records are touched: restore costs what is
//! buffered, not what was processed.

use std::collections::HashMap;

use crate::error::OpError;
use crate::id::SampleId;
use crate::operator::{Accumulator, RebuildInput};
use crate::operators::{Plan, apply_chain, apply_chain_prefix, take_covering};
use crate::record::{Lineage, Record};
use crate::source::Datasets;

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
            // A fragment without a range names the whole record.
            let end = if f.end == 0 { u32::MAX } else { f.end };
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
        ops: &[std::sync::Arc<dyn crate::operator::Operator>],
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
