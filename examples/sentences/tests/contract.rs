//! The operator proven twice: against the contract alone, and through the engine.

use std::sync::Arc;

use zephon_sentences::Sentences;

fn docs() -> Vec<String> {
    (0..500).map(|i| format!("Doc {i} opens. It has {} words. It ends here. ", i % 7 + 1)).collect()
}

#[test]
fn keeps_the_operator_contract() {
    use zephon_operator::testing::{CheckOptions, check_operator, text_samples};
    let options = CheckOptions { lanes: 4, seed: 42, cuts: 0 };
    let report = check_operator(|| Sentences { min_bytes: 120 }, text_samples("text", docs()), options).unwrap();
    assert_eq!(report.samples, 500);
    assert_eq!(report.outputs, 1500, "three sentences a document: {report:?}");
    assert!(report.emitted > 100 && report.restores > 1000, "{report:?}");
}

#[test]
fn a_document_without_text_is_a_reported_bad_record() {
    use zephon_operator::testing::{CheckOptions, check_operator};
    let bad = vec![zephon_operator::Record::from_sample(zephon_operator::SampleId::new(0, 0, 0))];
    let e = check_operator(|| Sentences { min_bytes: 10 }, bad, CheckOptions::default()).unwrap_err();
    assert!(e.to_string().contains("no text"), "{e}");
}

#[test]
fn keeps_every_global_step_through_the_engine() {
    use zephon_core::testing::{CheckOptions, check_in_engine};
    use zephon_core::{Datasets, MemoryDataset};
    let datasets = Datasets::new(vec![Arc::new(MemoryDataset::from_texts("docs", "text", vec![docs()]))]);
    let options = CheckOptions { lanes: 8, rows_per_lane: 2, steps: 6, chunk_size: 8, epochs: 1, seed: 42 };
    let report = check_in_engine(|| Sentences { min_bytes: 120 }, datasets, options).unwrap();
    assert!(report.configurations.len() >= 8, "{:?}", report.configurations);
}
