//! The fetched corpora, opened as datasets.

use std::path::PathBuf;
use std::sync::Arc;

use zephon_core::{Dataset, Datasets};
use zephon_io::{DatasetOptions, Fields, open};
use zephon_operator::SampleId;

pub fn corpus_dir(corpus: &str, format: &str) -> PathBuf {
    zephon_testkit::testdata().join("corpora").join(corpus).join(format)
}

pub fn with_fields(extra: &[&str]) -> DatasetOptions {
    DatasetOptions {
        fields: Fields { extra: extra.iter().map(|s| s.to_string()).collect(), ..Fields::default() },
        ..DatasetOptions::default()
    }
}

pub fn open_corpus(corpus: &str, format: &str) -> Arc<dyn Dataset> {
    open(&format!("{corpus}-{format}"), &corpus_dir(corpus, format), &with_fields(&["id", "source"])).unwrap()
}

pub fn counts() -> serde_json::Value {
    let text = std::fs::read_to_string(zephon_testkit::testdata().join("corpora/counts.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// All sample ids of dataset `d` of `datasets`, shard by shard.
pub fn all_ids(datasets: &Datasets, d: usize) -> Vec<SampleId> {
    let m = &datasets.manifests()[d];
    m.shards
        .iter()
        .enumerate()
        .flat_map(|(s, sh)| (0..sh.rows).map(move |r| SampleId::new(d as u32, s as u32, r)))
        .collect()
}
