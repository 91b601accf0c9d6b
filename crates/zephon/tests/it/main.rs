//! The facade end to end: the spec, the DSL, the real corpora and the real GPT-2 tokenizer.

mod end_to_end;
mod hardening;
mod pretokenized;
mod spec;

use std::path::{Path, PathBuf};

/// A spec over the fetched corpora with the real GPT-2 tokenizer. `extra` is appended
/// verbatim (sections for pack, shuffle, ensure_mixture...).
pub fn spec_text(format: &str, lanes: u32, rows: u32, head: &str, extra: &str) -> String {
    let data = zephon_testkit::testdata();
    format!(
        r#"seed = 99
lanes = {lanes}
rows_per_step = {rows}
{head}
[[dataset]]
name = "a"
path = "{a}"
share = 0.5

[[dataset]]
name = "b"
path = "{b}"
share = 0.5

[source]
chunk_size = 16

[tokenize]
tokenizer = "{tok}"
eos = "<|endoftext|>"

[run]
threads = 2
{extra}
"#,
        a = data.join(format!("corpora/a/{format}")).display(),
        b = data.join(format!("corpora/b/{format}")).display(),
        tok = data.join("tokenizers/gpt2/tokenizer.json").display(),
    )
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
