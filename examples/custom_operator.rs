//! A third-party operator written against `zephon-core` alone: "sentences" cuts each
//! document into sentences (stateless part) and an accumulator joins sentences into rows of
//! at least `min_bytes` bytes (ordered, per lane). `zephon_core::testing::check_operator` then
//! proves it keeps every global step the same at every world size, thread count and resume.
//!
//! Run: `cargo run -p zephon-core --example custom_operator`

use std::sync::Arc;
use zephon_core::testing::{CheckOptions, check_operator};
use zephon_core::*;

struct Sentences {
    min_bytes: usize,
}

impl Operator for Sentences {
    fn name(&self) -> &str {
        "sentences"
    }
    fn fingerprint(&self) -> String {
        format!("min_bytes={}", self.min_bytes)
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

fn main() -> std::result::Result<(), String> {
    let docs: Vec<String> =
        (0..500).map(|i| format!("Doc {i} opens. It has {} words. It ends here. ", i % 7 + 1)).collect();
    let datasets = Datasets::new(vec![Arc::new(MemoryDataset::from_texts("docs", "text", vec![docs]))]);
    // One call proves the operator: world sizes 1, 2, 4, 8, one and two threads, a checkpoint
    // restored at other world sizes, and all of it again with an accumulator after this one
    // (so that a restore calls its `rebuild`).
    let options = CheckOptions { lanes: 8, rows_per_lane: 2, steps: 6, chunk_size: 8, epochs: 1, seed: 42 };
    let report = check_operator(|| Sentences { min_bytes: 120 }, datasets, options)?;
    for c in &report.configurations {
        println!("{c}: {} steps identical to the single-process run", report.steps);
    }
    println!("the operator keeps every global step the same at every world size, thread count and resume");
    Ok(())
}
