//! zephon-mix integration tests: exactly-once, mixture shares, token-share planning with the
//! real GPT-2 tokenizer, on the fetched corpora.

mod exactly_once;
mod mixture;
mod shuffle;
mod steered;
mod token_shares;

use std::sync::Arc;

use zephon_core::{Dataset, DatasetManifest, Datasets};

pub fn open_corpus(corpus: &str, format: &str) -> Arc<dyn Dataset> {
    let dir = zephon_testkit::testdata().join("corpora").join(corpus).join(format);
    zephon_io::open(corpus, &dir, &zephon_io::DatasetOptions::default()).unwrap()
}

pub fn corpora(format: &str) -> Datasets {
    Datasets::new(vec![open_corpus("a", format), open_corpus("b", format)])
}

pub fn manifests(format: &str) -> Vec<DatasetManifest> {
    corpora(format).manifests()
}
