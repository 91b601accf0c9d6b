//! A third-party operator, written against `zephon-operator` alone: [`Sentences`] cuts each
//! document into sentences (its stateless part) and an accumulator joins sentences into rows
//! of at least `min_bytes` bytes (ordered, per lane).
//!
//! [`SentencesSection`] makes it a spec table, `[sentences]` with `min_bytes`: a `zephon`
//! command built with it (`examples/sentences-cli`, three lines) runs specs that use it.
//!
//! `tests/contract.rs` proves it with `zephon_operator::testing::check_operator` (the
//! contract, no engine) and, through the engine, with `zephon_core::testing::check_in_engine`
//! (every global step the same at every world size, thread count and resume). Run
//! `cargo test -p zephon-sentences`.

#![deny(missing_docs)]

use std::sync::Arc;

use zephon_operator::*;

/// Sentences of the `text` field joined into `row` records of at least `min_bytes` bytes.
#[derive(Debug, Clone)]
pub struct Sentences {
    /// Bytes a row reaches before it is emitted.
    pub min_bytes: usize,
}

impl Operator for Sentences {
    fn name(&self) -> &str {
        "sentences"
    }
    fn fingerprint(&self) -> Settings {
        Settings::new("sentences", 1).set("min_bytes", self.min_bytes)
    }
    fn kind(&self) -> OperatorKind {
        OperatorKind::MapThenAccumulate
    }

    /// Stateless: one record per sentence, each identified by its byte range in the document.
    fn apply(&self, r: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        let text = r.str("text").ok_or_else(|| OpError::Data("no text".into()))?;
        let sample = r.lineage().first_sample().ok_or_else(|| OpError::Fatal("no lineage".into()))?;
        let mut start = 0;
        for (i, _) in text.match_indices(". ").chain([(text.len(), "")]) {
            let end = (i + 2).min(text.len());
            if end > start {
                // Byte offsets of one document fit in u32: readers refuse larger rows.
                let piece = Fragment::range(sample, start as u32, end as u32)
                    .ok_or_else(|| OpError::Fatal(format!("sentence {start}..{end} is reversed")))?;
                out.push(Record::new(Lineage::single(piece)).with(&"text".into(), Value::text(&text[start..end])));
            }
            start = end;
        }
        Ok(())
    }

    fn accumulator(&self, _: LaneContext) -> Option<Box<dyn Accumulator>> {
        Some(Box::new(JoinRows { min_bytes: self.min_bytes, held: Vec::new() }))
    }
}

/// Joins sentences until a row has `min_bytes`. Its state is the lineage of held sentences.
struct JoinRows {
    min_bytes: usize,
    held: Vec<Record>,
}

fn join(parts: &[Record]) -> Record {
    let lineage = Lineage::from_fragments(parts.iter().flat_map(|p| p.lineage().fragments().to_vec()).collect());
    let text: String = parts.iter().filter_map(|p| p.str("text")).collect();
    Record::new(lineage).with(&"row".into(), Value::text(text))
}

impl Accumulator for JoinRows {
    fn push(&mut self, r: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        self.held.push(r);
        if self.held.iter().filter_map(|p| p.str("text")).map(str::len).sum::<usize>() >= self.min_bytes {
            out.push(join(&std::mem::take(&mut self.held)));
        }
        Ok(())
    }
    fn export(&self) -> AccumulatorState {
        AccumulatorState { values: vec![], buffered: self.held.iter().map(|r| r.lineage().clone()).collect() }
    }
    fn import(&mut self, _: AccumulatorState, held: Vec<Record>) -> Result<(), OpError> {
        self.held = held;
        Ok(())
    }
    fn rebuild(&self, lineage: &Lineage, input: &mut dyn RebuildInput) -> Result<Record, OpError> {
        let parts =
            lineage.fragments().iter().map(|f| input.exact(&Lineage::single(*f))).collect::<Result<Vec<_>, _>>()?;
        Ok(join(&parts))
    }
}

/// The `[sentences]` table of a spec: `min_bytes` (at least 1), nothing else.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SentencesTable {
    min_bytes: usize,
}

/// `[sentences]` in a spec: [`Sentences`] on the records as read (before any tokenization).
#[derive(Debug, Clone, Copy, Default)]
pub struct SentencesSection;

impl Section for SentencesSection {
    fn name(&self) -> &str {
        "sentences"
    }

    fn stage(&self) -> Stage {
        Stage::Records
    }

    fn build(&self, table: &SectionTable, _: &SectionContext) -> Result<Arc<dyn Operator>, String> {
        let t: SentencesTable = table.parse()?;
        if t.min_bytes == 0 {
            return Err("min_bytes must be at least 1".into());
        }
        Ok(Arc::new(Sentences { min_bytes: t.min_bytes }))
    }
}
