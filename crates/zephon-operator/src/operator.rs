//! The operator contract: a stateless part that runs anywhere, and an optional per-lane
//! accumulator that runs in order. The whole contract is written on [`Operator`].

use serde::{Deserialize, Serialize};

use crate::assembly::{Assembly, Offer};
use crate::error::OpError;
use crate::id::Lane;
use crate::lineage::Lineage;
use crate::record::Record;
use crate::settings::Settings;

/// What an operator does: a stateless transformation, an accumulator, or both in that order.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum OperatorKind {
    /// Only the stateless part ([`Operator::apply`]).
    Map,
    /// Only an accumulator (`apply` is not called).
    Accumulate,
    /// `apply`, then the accumulator on its outputs.
    MapThenAccumulate,
}

impl OperatorKind {
    /// Whether `apply` runs.
    pub fn maps(self) -> bool {
        matches!(self, OperatorKind::Map | OperatorKind::MapThenAccumulate)
    }

    /// Whether there is an accumulator.
    pub fn accumulates(self) -> bool {
        matches!(self, OperatorKind::Accumulate | OperatorKind::MapThenAccumulate)
    }

    /// The kind's fixed name in plans and fingerprints: `map`, `accumulate` or
    /// `map+accumulate`.
    pub fn as_str(self) -> &'static str {
        match self {
            OperatorKind::Map => "map",
            OperatorKind::Accumulate => "accumulate",
            OperatorKind::MapThenAccumulate => "map+accumulate",
        }
    }
}

/// Where an accumulator lives: its lane and the run's seed (for an [`crate::RngKey`]).
///
/// Deliberately no world size or rank: an accumulator that could see them could make the data
/// depend on them.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LaneContext {
    /// The lane.
    pub lane: Lane,
    /// The run's seed.
    pub seed: u64,
}

/// One step of a pipeline: a stateless part, an optional per-lane accumulator, or both.
///
/// A third-party operator implements this trait (and [`Accumulator`] if it keeps state)
/// against `zephon-operator` alone; the crate `examples/sentences` is a complete one. This is the
/// whole contract between an operator and the engine.
///
/// # Where each part runs
/// - [`Operator::apply`] (the stateless part) may run on any thread, in any order, any number
///   of times: restore runs it again on buffered samples. It must be a pure function of its
///   input record: no clocks, no global counters, no randomness except from
///   [`crate::RngKey`] keyed by what the record itself carries (its sample id).
/// - An [`Accumulator`] belongs to one lane. It sees that lane's records in stream order, one
///   call at a time, and its output must depend only on that order, never on timing, thread or
///   world size (it is not told the world size: [`LaneContext`] has the lane and seed only).
/// - Stateless operators placed **after** an accumulator run on the lane, in order, on the
///   thread that drains it (their input already depends on history); only those before the
///   first accumulator run in parallel. Put heavy stateless work (decoding, tokenizing) first.
///
/// # Lineage
/// Every record carries a [`Lineage`]: the pieces of stored samples it was made of. The engine
/// checkpoints lineage, never payloads, so an operator must keep it true:
/// - A map that keeps the record's meaning keeps its lineage unchanged.
/// - A map that gives a sample a sequence axis (a tokenizer) sets the lineage to
///   `Fragment::span(sample, 0..n)` for `n` positions, replacing the whole-sample fragment.
/// - A split produces pieces with **disjoint** spans of the same sample, in order, each sliced
///   with [`Record::slice`] (which also keeps exactly the attachments anchored in the piece and
///   refuses to cut an atomic one). A piece's lineage then identifies it on restore.
/// - An accumulator that combines records gives the result the concatenation of their
///   fragments (packing) and must override [`Accumulator::rebuild`] to remake it from that
///   lineage alone; one that passes records through unchanged (a shuffle) keeps theirs.
///
/// # Errors
/// Return [`OpError::Data`] when **this record** is bad (malformed, empty, too long): the run's
/// bad-record policy stops the run with dataset, shard and row, or skips and counts it. Return
/// [`OpError::Fatal`] when anything else is wrong (a broken invariant, a state that cannot be
/// restored, a bug): it always stops the run. Never panic on data; a panic is caught and
/// reported as a failed run.
///
/// # When the engine calls what
/// - [`Operator::accumulator`] once per owned lane at start, and again before
///   [`Accumulator::import`] on restore. [`Operator::kind`] must agree with it: the engine
///   refuses to start when an operator declares a kind without an accumulator or returns an
///   accumulator its kind does not declare.
/// - [`Accumulator::finish`] only when the lane's input ends (finite data); what it emits
///   reaches the consumer only under the engine's partial-tail policy if it does not fill a step.
/// - [`Accumulator::rebuild`] only on restore, and only when a later accumulator holds records
///   this one emitted.
/// - [`Accumulator::next_stage_out`] only for an accumulator that asks for it
///   ([`Accumulator::watches_next_stage`]), with every record the next accumulator stage of
///   its lane emits: the one path by which an accumulator learns what happened after it.
pub trait Operator: Send + Sync + 'static {
    /// A short name for plans and errors (`tokenize`, `pack`).
    fn name(&self) -> &str;

    /// Every setting that changes the output, typed ([`Settings`] has a canonical encoding that
    /// does not depend on the compiler). Part of the checkpoint fingerprint: a checkpoint only
    /// restores into a pipeline with the same settings.
    fn fingerprint(&self) -> Settings;

    /// Which parts the operator has.
    fn kind(&self) -> OperatorKind {
        OperatorKind::Map
    }

    /// The stateless part: turns one record into zero or more records appended to `out`.
    /// Must be a pure function of `record`. When it splits a record, the pieces must have
    /// disjoint lineage ranges.
    fn apply(&self, record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        out.push(record);
        Ok(())
    }

    /// The stateless part for a restore that needs only the outputs within positions
    /// `0..until` of the sample's sequence axis. It may stop early, but every output it
    /// returns must equal the corresponding output of [`Operator::apply`], and it must return
    /// every output whose range ends at or before `until`. The default runs `apply`.
    ///
    /// Restore uses it so that rebuilding a buffered piece of a long document costs about the
    /// piece's position in the document, not the whole document.
    fn apply_prefix(&self, record: Record, until: u32, out: &mut Vec<Record>) -> Result<(), OpError> {
        let _ = until;
        self.apply(record, out)
    }

    /// A fresh accumulator for one lane. Called once per owned lane when the engine starts
    /// (and again on restore before `import`). Must return `Some` when [`Operator::kind`]
    /// says the operator accumulates.
    fn accumulator(&self, lane: LaneContext) -> Option<Box<dyn Accumulator>> {
        let _ = lane;
        None
    }

    /// One line for `explain`: what the operator does and what it buffers. The default is the
    /// text form of [`Operator::fingerprint`].
    fn describe(&self) -> String {
        self.fingerprint().to_text()
    }

    /// What this operator tells the other operators of its pipeline (a vocabulary size, the
    /// positions it holds, the attachments it decodes). The default offers nothing.
    fn offer(&self) -> Offer {
        Offer::none()
    }

    /// Adapts the operator to its pipeline, once, before the run starts: given the datasets
    /// and what the other operators offer ([`Assembly`]), returns the operator to run in its
    /// place (`None`: this one as it is), or an error naming what is missing or contradictory
    /// (reported as a pipeline error before anything runs). The default keeps the operator.
    fn assemble(&self, assembly: &Assembly<'_>) -> Result<Option<std::sync::Arc<dyn Operator>>, OpError> {
        let _ = assembly;
        Ok(None)
    }

    /// What one lane's exported accumulator state says for the run's report, as named counts
    /// ([`Tally`]) over `datasets` datasets; the default says nothing. A report reads an
    /// operator's state only through this, never by the operator's name or the place of its
    /// state.
    fn report(&self, state: &AccumulatorState, datasets: usize) -> Vec<Tally> {
        let _ = (state, datasets);
        Vec::new()
    }
}

/// A count an operator reports from one lane's accumulator state ([`Operator::report`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tally {
    /// A count per dataset (by the run's dataset index), added up over lanes.
    PerDataset {
        /// Its name in reports (`conversations_split`, `dropped_tokens`...).
        name: &'static str,
        /// Its value for each dataset.
        values: Vec<u64>,
    },
    /// A count for the lane as a whole, the largest over lanes (a high-water mark).
    Peak {
        /// Its name in reports.
        name: &'static str,
        /// Its value on this lane.
        value: u64,
    },
}

/// A shared operator is the operator: `Arc<O>` and `Arc<dyn Operator>` go wherever an operator
/// does.
impl<O: Operator + ?Sized> Operator for std::sync::Arc<O> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn fingerprint(&self) -> Settings {
        (**self).fingerprint()
    }
    fn kind(&self) -> OperatorKind {
        (**self).kind()
    }
    fn apply(&self, record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        (**self).apply(record, out)
    }
    fn apply_prefix(&self, record: Record, until: u32, out: &mut Vec<Record>) -> Result<(), OpError> {
        (**self).apply_prefix(record, until, out)
    }
    fn accumulator(&self, lane: LaneContext) -> Option<Box<dyn Accumulator>> {
        (**self).accumulator(lane)
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
    fn offer(&self) -> Offer {
        (**self).offer()
    }
    fn assemble(&self, assembly: &Assembly<'_>) -> Result<Option<std::sync::Arc<dyn Operator>>, OpError> {
        (**self).assemble(assembly)
    }
    fn report(&self, state: &AccumulatorState, datasets: usize) -> Vec<Tally> {
        (**self).report(state, datasets)
    }
}

/// A boxed operator is the operator.
impl<O: Operator + ?Sized> Operator for Box<O> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn fingerprint(&self) -> Settings {
        (**self).fingerprint()
    }
    fn kind(&self) -> OperatorKind {
        (**self).kind()
    }
    fn apply(&self, record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        (**self).apply(record, out)
    }
    fn apply_prefix(&self, record: Record, until: u32, out: &mut Vec<Record>) -> Result<(), OpError> {
        (**self).apply_prefix(record, until, out)
    }
    fn accumulator(&self, lane: LaneContext) -> Option<Box<dyn Accumulator>> {
        (**self).accumulator(lane)
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
    fn offer(&self) -> Offer {
        (**self).offer()
    }
    fn assemble(&self, assembly: &Assembly<'_>) -> Result<Option<std::sync::Arc<dyn Operator>>, OpError> {
        (**self).assemble(assembly)
    }
    fn report(&self, state: &AccumulatorState, datasets: usize) -> Vec<Tally> {
        (**self).report(state, datasets)
    }
}

/// The state of an accumulator in a checkpoint: small numbers plus the lineage of the records
/// it holds, in the accumulator's own order. Never payloads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccumulatorState {
    /// Counters and offsets; their meaning is the accumulator's.
    pub values: Vec<u64>,
    /// The records held, by lineage. Restore rebuilds them and passes them to `import` in
    /// this order.
    pub buffered: Vec<Lineage>,
}

/// The ordered per-lane part of an operator (packing, shuffle buffers, mixture correction).
pub trait Accumulator: Send {
    /// Takes the lane's next record; appends any records now ready to `out`.
    fn push(&mut self, record: Record, out: &mut Vec<Record>) -> Result<(), OpError>;

    /// The lane's input has ended: appends whatever should still come out.
    fn finish(&mut self, out: &mut Vec<Record>) -> Result<(), OpError> {
        let _ = out;
        Ok(())
    }

    /// The state, as numbers plus lineage of held records.
    fn export(&self) -> AccumulatorState;

    /// Restores a state that [`Accumulator::export`] produced, given the held records rebuilt
    /// in the order of `state.buffered`. Called on a fresh accumulator.
    fn import(&mut self, state: AccumulatorState, buffered: Vec<Record>) -> Result<(), OpError>;

    /// Rebuilds a record this accumulator emitted, from its lineage alone, asking `input` for
    /// the records it was made of. The default suits accumulators that emit their inputs
    /// unchanged (shuffles, reorderings): it returns the input record with that lineage.
    /// Accumulators that combine or cut records (packing) override it and must produce
    /// exactly what `push` produced.
    fn rebuild(&self, lineage: &Lineage, input: &mut dyn RebuildInput) -> Result<Record, OpError> {
        input.covering(lineage)
    }

    /// Whether this accumulator wants to see what the next accumulator stage of its lane
    /// emits ([`Accumulator::next_stage_out`]). Asked once, when the lane starts.
    fn watches_next_stage(&self) -> bool {
        false
    }

    /// The next accumulator stage of this lane emitted `record`. Called only when
    /// [`Accumulator::watches_next_stage`] says so, between this accumulator's own calls, in
    /// the order the records come out; never when this is the lane's last accumulator.
    ///
    /// This is how an accumulator learns what the stage after it holds (it emitted something
    /// that has not come out yet): `ensure_mixture` measures token shares past the packer's
    /// bins. What comes out is a pure function of the lane's stream, so reacting to it keeps
    /// the accumulator one too. What it learns is state: [`Accumulator::export`] must include
    /// it. Records a restore rebuilds are not shown again: they were seen before the
    /// checkpoint.
    fn next_stage_out(&mut self, record: &Record) {
        let _ = record;
    }

    /// The lane will read no more of dataset `dataset`: a steered lane (the engine's steering)
    /// ran out of it and reads the others (an accumulator holding a dataset's share, such as
    /// `ensure_mixture`, then shares the targets among those left). Called between pushes, at
    /// a point of the lane's stream that is the same on every topology; what it changes is
    /// state ([`Accumulator::export`] must include it).
    fn dataset_ended(&mut self, dataset: u32) {
        let _ = dataset;
    }

    /// The lane's target token shares (one a dataset, summing to 1) changed: a steered lane's
    /// rows reached a step where the mixture's share schedule starts a new segment. An
    /// accumulator holding shares (`ensure_mixture`) measures afresh from here. Called between
    /// pushes, at a point of the lane's stream that is the same on every topology; what it
    /// changes is state ([`Accumulator::export`] must include it).
    fn targets_changed(&mut self, shares: &[f64]) {
        let _ = shares;
    }
}

/// Access, during restore, to the records that reached an accumulator.
pub trait RebuildInput {
    /// The whole record, as it reached the accumulator, whose lineage covers `lineage`
    /// (equal lineage, or a single fragment containing it).
    fn covering(&mut self, lineage: &Lineage) -> Result<Record, OpError>;

    /// Exactly the record with `lineage`: the covering record, sliced to a single fragment's
    /// range when it is larger.
    fn exact(&mut self, lineage: &Lineage) -> Result<Record, OpError> {
        self.covering(lineage)?.narrow_to(lineage).map_err(OpError::fatal)
    }
}
