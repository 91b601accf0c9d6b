//! The facade end to end: the spec, the DSL, the real corpora and the real GPT-2 tokenizer.

mod assembly;
mod chat;
mod closed_loop;
mod end_to_end;
mod eviction;
mod faults;
mod finite;
mod hardening;
mod layouts;
mod many_sources;
mod per_token;
mod pretokenized;
mod remote;
mod sections;
mod shares;
mod spec;
mod spec_reference;
mod validation;

use std::path::{Path, PathBuf};

use zephon::testing::Ranks;
use zephon_testkit::SpecText;

/// A spec over the fetched corpora with the real GPT-2 tokenizer. `head` is written out right
/// after the top-level keys, `extra` at the end (sections for pack, shuffle, ensure_mixture...),
/// verbatim.
pub fn spec_text(format: &str, lanes: u32, rows: u32, head: &str, extra: &str) -> String {
    let data = zephon_testkit::testdata();
    SpecText::new(lanes, rows)
        .seed(99)
        .top_text(head)
        .dataset("a", data.join(format!("corpora/a/{format}")))
        .share(0.5)
        .dataset("b", data.join(format!("corpora/b/{format}")))
        .share(0.5)
        .chunk_size(16)
        .tokenizer(data.join("tokenizers/gpt2/tokenizer.json"), "<|endoftext|>")
        .threads(2)
        .append(extra)
        .text()
}

pub fn parse(text: &str) -> zephon::Spec {
    zephon::Spec::parse(text, "test", Path::new("/")).unwrap()
}

pub fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Very short documents: the lines of corpus A whose length in bytes is in `len`, one
/// document each (at most `most`), in a JSONL file under `dir`.
pub fn one_line_documents(dir: &Path, len: std::ops::Range<usize>, most: usize) -> PathBuf {
    let mut lines = Vec::new();
    for shard in 0..4 {
        let src = zephon_testkit::testdata().join(format!("corpora/a/jsonl/part-{shard:05}.jsonl"));
        let text = std::fs::read_to_string(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
        for l in text.lines() {
            let doc = serde_json::from_str::<serde_json::Value>(l).unwrap()["text"].as_str().unwrap().to_string();
            let picked = doc.lines().map(str::trim).filter(|s| len.contains(&s.len()));
            lines.extend(picked.map(|t| serde_json::json!({ "text": t }).to_string()));
        }
        if lines.len() >= most {
            break;
        }
    }
    lines.truncate(most);
    assert!(lines.len() > most / 2, "{} short lines", lines.len());
    write(dir, "short.jsonl", &(lines.join("\n") + "\n"))
}

/// One loader per rank of a world of `w`, fresh or resumed from `resume`.
pub fn loaders(spec: &zephon::Spec, w: u32, threads: usize, resume: Option<&Path>) -> Ranks<zephon::Loader> {
    zephon::testing::loaders(spec, w, threads, resume).unwrap()
}
