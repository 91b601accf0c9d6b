//! A third-party operator written against `zephon-core` alone: "sentences" cuts each
//! document into sentences (stateless part) and an accumulator joins sentences into rows of
//! at least `min_bytes` bytes (ordered, per lane). Then the same run at W = 1 and W = 4, and a
//! resume at another world size, give the same steps.
//!
//! Run: `cargo run -p zephon-core --example custom_operator`

use std::sync::Arc;
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

fn main() -> Result<()> {
    let docs: Vec<String> =
        (0..500).map(|i| format!("Doc {i} opens. It has {} words. It ends here. ", i % 7 + 1)).collect();
    let datasets = Datasets::new(vec![Arc::new(MemoryDataset::from_texts("docs", "text", vec![docs]))]);
    let spec = RunSpec {
        operators: Operators::new().then(Sentences { min_bytes: 120 }),
        source: Arc::new(SequentialSource::new(&datasets.manifests(), 8, 1, 42)),
        datasets,
        seed: 42,
        bad_records: BadRecords::Fail,
        tail: Tail::Drop,
        metadata: Default::default(),
    };
    let opts = ExecOptions { threads: 2, ..ExecOptions::default() };
    let global =
        |w: u32, steps: u64, resume: Option<&std::path::Path>, save: Option<&std::path::Path>| -> Result<Vec<Digest>> {
            let mut ranks = (0..w)
                .map(|r| {
                    let t = Topology::new(8, 16, w, r)?;
                    match resume {
                        Some(d) => Engine::restore(spec.clone(), t, opts, d),
                        None => Engine::start(spec.clone(), t, opts),
                    }
                })
                .collect::<Result<Vec<_>>>()?;
            let mut fps = Vec::new();
            for _ in 0..steps {
                let mut lane_digests = Vec::new();
                for e in &mut ranks {
                    let step = e.next_step()?.ok_or_else(|| Error::Config("data ran out".into()))?;
                    lane_digests.extend(step.lane_digests().map(|(_, d)| d));
                }
                fps.push(step_fingerprint(&lane_digests));
            }
            if let Some(dir) = save {
                for e in &ranks {
                    e.checkpoint(dir)?;
                }
            }
            Ok(fps)
        };
    let one = global(1, 6, None, None)?;
    let four = global(4, 6, None, None)?;
    let dir = std::env::temp_dir().join(format!("zephon-example-{}", std::process::id()));
    let mut resumed = global(2, 3, None, Some(&dir))?;
    resumed.extend(global(8, 3, Some(&dir), None)?);
    let _ = std::fs::remove_dir_all(&dir);
    for (s, fp) in one.iter().enumerate() {
        println!("step {s}: {fp}  W=4 {}  W=2→8 resume {}", same(fp, &four[s]), same(fp, &resumed[s]));
    }
    assert!(one == four && one == resumed, "fingerprints differ");
    println!("all steps identical at W = 1, 4 and after a resume from W = 2 to W = 8");
    Ok(())
}

fn same(a: &Digest, b: &Digest) -> &'static str {
    if a == b { "same" } else { "DIFFERENT" }
}
