//! Operators in order, and the plan that splits them into the parallel part and
//! the per-lane stages.

use std::sync::Arc;

use crate::error::{Error, OpError, Result};
use crate::plan_node::PlanNode;
use zephon_operator::{Accumulator, Digest, LaneContext, Lineage, Operator, OperatorKind, Record};

/// Operators in order. Records flow through each operator's stateless part, then its
/// accumulator, then on to the next operator.
#[derive(Clone, Default)]
pub struct Operators {
    ops: Vec<Arc<dyn Operator>>,
}

impl Operators {
    /// An empty pipeline: rows are the records as read.
    pub fn new() -> Self {
        Operators::default()
    }

    /// Appends an operator (a shared one too: `Arc<dyn Operator>` is an operator).
    #[must_use]
    pub fn then(mut self, op: impl Operator) -> Self {
        self.ops.push(Arc::new(op));
        self
    }

    /// The operators in order.
    pub fn operators(&self) -> &[Arc<dyn Operator>] {
        &self.ops
    }

    /// A digest of every operator's name, kind and settings, in order (canonically encoded).
    pub fn fingerprint(&self) -> Digest {
        let ops: Vec<zephon_operator::SettingsValue> = self
            .ops
            .iter()
            .map(|op| {
                zephon_operator::Settings::new("operator", 1)
                    .set("name", op.name())
                    .set("kind", op.kind().as_str())
                    .set("settings", op.fingerprint())
                    .into()
            })
            .collect();
        zephon_operator::Settings::new("operators", 1).set("operators", ops).digest()
    }

    /// The plan as a tree: which operators run in parallel, which per lane, what each does
    /// and buffers (each operator's [`Operator::describe`]).
    pub fn plan(&self) -> PlanNode {
        let plan = Plan::new(self.clone());
        let node = |op: &Arc<dyn Operator>, part: &str| PlanNode::new(op.name(), format!("{part}, {}", op.describe()));
        let mut root = PlanNode::new("operators", "");
        if !plan.parallel.is_empty() {
            root = root.with(
                PlanNode::new("parallel (any thread)", "")
                    .with_all(plan.parallel.iter().map(|op| node(op, "stateless"))),
            );
        }
        for (k, stage) in plan.stages.iter().enumerate() {
            let ops = stage.pre.iter().map(|op| node(op, "stateless")).chain([node(&stage.op, "accumulator")]);
            root = root.with(PlanNode::new(format!("lane, stage {k}"), "").with_all(ops));
        }
        if !plan.tail.is_empty() {
            root = root.with(
                PlanNode::new("lane, after stages", "").with_all(plan.tail.iter().map(|op| node(op, "stateless"))),
            );
        }
        root
    }

    /// [`Operators::plan`] as text.
    pub fn explain(&self) -> String {
        self.plan().indent()
    }
}

/// One accumulator and the stateless parts that run inline before it.
#[derive(Clone)]
pub(crate) struct Stage {
    /// Stateless parts between the previous accumulator and this one (run on the lane).
    pub pre: Vec<Arc<dyn Operator>>,
    /// The operator whose accumulator this is.
    pub op: Arc<dyn Operator>,
}

/// The executable form of a pipeline.
///
/// Stateless parts before the first accumulator run in parallel on any thread (that is where
/// the heavy work — reading, tokenizing, decoding — belongs). After the first accumulator,
/// everything runs on the lane, in order: records there already depend on history.
#[derive(Clone)]
pub(crate) struct Plan {
    pub operators: Operators,
    pub parallel: Vec<Arc<dyn Operator>>,
    pub stages: Vec<Stage>,
    pub tail: Vec<Arc<dyn Operator>>,
}

impl Plan {
    pub fn new(operators: Operators) -> Self {
        let mut parallel = None;
        let mut stages = Vec::new();
        let mut maps: Vec<Arc<dyn Operator>> = Vec::new();
        for op in &operators.ops {
            let kind = op.kind();
            if kind.maps() {
                maps.push(op.clone());
            }
            if kind.accumulates() {
                let pre = std::mem::take(&mut maps);
                if parallel.is_none() {
                    parallel = Some(pre);
                    stages.push(Stage { pre: Vec::new(), op: op.clone() });
                } else {
                    stages.push(Stage { pre, op: op.clone() });
                }
            }
        }
        match parallel {
            Some(parallel) => Plan { operators, parallel, stages, tail: maps },
            None => Plan { operators, parallel: maps, stages, tail: Vec::new() },
        }
    }

    /// One fresh accumulator per stage for `lane`. Refuses an operator whose
    /// [`Operator::kind`] and [`Operator::accumulator`] disagree, in either direction.
    pub fn accumulators(&self, ctx: LaneContext) -> Result<Vec<Box<dyn Accumulator>>> {
        if let Some(op) = self.operators.ops.iter().find(|op| !op.kind().accumulates() && op.accumulator(ctx).is_some())
        {
            return Err(Error::Operator {
                operator: op.name().to_string(),
                lane: ctx.lane,
                message: format!(
                    "returns an accumulator but its kind() is {}, so the accumulator would never run: \
                     override kind() to return Accumulate or MapThenAccumulate",
                    op.kind().as_str()
                ),
            });
        }
        self.stages
            .iter()
            .map(|st| {
                st.op.accumulator(ctx).ok_or_else(|| Error::Operator {
                    operator: st.op.name().to_string(),
                    lane: ctx.lane,
                    message: format!("declares kind {} but returned no accumulator", OperatorKind::Accumulate.as_str()),
                })
            })
            .collect()
    }
}

/// Runs `ops`' stateless parts in order on `record` (each 1:N), appending the final outputs to
/// `out`. On error returns the failing operator's name.
pub(crate) fn apply_chain<'a>(
    ops: &'a [Arc<dyn Operator>],
    record: Record,
    out: &mut Vec<Record>,
) -> Result<(), (&'a str, OpError)> {
    apply_chain_prefix(ops, record, None, out)
}

/// [`apply_chain`], or with `until`, the restore's version that needs only positions
/// `0..until` of the record (see `Operator::apply_prefix`).
pub(crate) fn apply_chain_prefix<'a>(
    ops: &'a [Arc<dyn Operator>],
    record: Record,
    until: Option<u32>,
    out: &mut Vec<Record>,
) -> Result<(), (&'a str, OpError)> {
    chain(ops, record, until, out, None)
}

/// [`apply_chain`], adding each operator's thread time (nanoseconds) to `nanos[i]`.
pub(crate) fn apply_chain_timed<'a>(
    ops: &'a [Arc<dyn Operator>],
    record: Record,
    out: &mut Vec<Record>,
    nanos: &mut [u64],
) -> Result<(), (&'a str, OpError)> {
    chain(ops, record, None, out, Some(nanos))
}

fn chain<'a>(
    ops: &'a [Arc<dyn Operator>],
    record: Record,
    until: Option<u32>,
    out: &mut Vec<Record>,
    mut nanos: Option<&mut [u64]>,
) -> Result<(), (&'a str, OpError)> {
    let apply = |op: &'a Arc<dyn Operator>, r: Record, out: &mut Vec<Record>, nanos: Option<&mut u64>| {
        let t = nanos.as_ref().map(|_| std::time::Instant::now());
        let res = match until {
            Some(until) => op.apply_prefix(r, until, out),
            None => op.apply(r, out),
        }
        .map_err(|e| (op.name(), e));
        if let (Some(n), Some(t)) = (nanos, t) {
            *n += u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
        }
        res
    };
    match ops {
        [] => {
            out.push(record);
            Ok(())
        }
        [only] => apply(only, record, out, nanos.and_then(|n| n.first_mut())),
        [first, rest @ ..] => {
            let mut mid = Vec::new();
            apply(first, record, &mut mid, nanos.as_deref_mut().and_then(|n| n.first_mut()))?;
            for r in mid {
                chain(rest, r, until, out, nanos.as_deref_mut().map(|n| &mut n[1..]))?;
            }
            Ok(())
        }
    }
}

/// Picks the record among `candidates` whose lineage covers `wanted`.
pub(crate) fn take_covering(candidates: Vec<Record>, wanted: &Lineage) -> Result<Record, OpError> {
    let n = candidates.len();
    candidates.into_iter().find(|r| r.lineage().covers(wanted)).ok_or_else(|| {
        OpError::Fatal(format!(
            "none of the {n} records the operators produce covers it (did an operator's output change since the checkpoint?)"
        ))
    })
}

impl std::fmt::Debug for Operators {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.ops.iter().map(|op| op.fingerprint().to_text())).finish()
    }
}
