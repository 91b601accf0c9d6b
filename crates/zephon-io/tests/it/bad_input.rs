//! Bad input, each case a test: an error naming dataset, shard and row (or the file), or a
//! counted skip under the skip policy. Never a panic.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use zephon_core::*;
use zephon_io::{DatasetOptions, Fields, Format, open, open_shards};
use zephon_testkit::{operators, opts};

use crate::data::corpus_dir;

/// A JSONL shard of 40 good rows with `bad` written at row 23.
fn shard_with(dir: &Path, bad: &[u8]) -> std::path::PathBuf {
    let mut bytes = Vec::new();
    for i in 0..40 {
        if i == 23 {
            bytes.extend_from_slice(bad);
        } else {
            bytes.extend_from_slice(format!(r#"{{"id": {i}, "text": "row number {i} of the shard"}}"#).as_bytes());
        }
        bytes.push(b'\n');
    }
    let p = dir.join("part-00000.jsonl");
    fs::write(&p, bytes).unwrap();
    p
}

fn spec_for(ds: Arc<dyn Dataset>, bad_records: BadRecords) -> RunSpec {
    let datasets = Datasets::new(vec![ds]);
    let source = SequentialSource::new(&datasets.manifests(), 4, 1, 1);
    RunSpec {
        operators: operators(16, 0),
        source: Arc::new(source),
        datasets,
        seed: 1,
        bad_records,
        tail: Tail::Partial,
        metadata: Default::default(),
    }
}

/// Runs to the end; returns the error text, or the skipped count when the run completes.
fn run(spec: RunSpec) -> Result<u64, String> {
    let mut e = Engine::start(spec, Topology::single(2, 2).unwrap(), opts(2, 3, 2)).map_err(|e| e.to_string())?;
    loop {
        match e.next_step() {
            Ok(Some(_)) => {}
            Ok(None) => return Ok(e.skipped()),
            Err(err) => return Err(err.to_string()),
        }
    }
}

fn check_case(bad: &[u8], expect: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let path = shard_with(tmp.path(), bad);
    let opts = DatasetOptions { cache_dir: Some(tmp.path().join("cache")), ..DatasetOptions::default() };
    let err = run(spec_for(open("bad-input", &path, &opts).unwrap(), BadRecords::Fail)).unwrap_err();
    assert!(err.contains("bad-input shard 0 row 23"), "{err}");
    assert!(err.contains(expect), "{err}");
    // Under the skip policy the same row is skipped and counted, and the run completes.
    assert_eq!(run(spec_for(open("bad-input", &path, &opts).unwrap(), BadRecords::Skip)), Ok(1));
}

#[test]
fn a_malformed_json_line() {
    check_case(br#"{"id": 23, "text": "unterminated"#, "invalid JSON");
}

#[test]
fn invalid_utf8() {
    check_case(b"{\"id\": 23, \"text\": \"caf\xe9 au lait\"}", "invalid JSON");
}

#[test]
fn a_missing_text_field() {
    check_case(br#"{"id": 23, "body": "text under another name"}"#, r#"no field "text""#);
}

#[test]
fn text_that_is_not_a_string() {
    check_case(br#"{"id": 23, "text": 42}"#, "is an integer, not text");
}

#[test]
fn an_empty_document() {
    check_case(br#"{"id": 23, "text": ""}"#, "empty document");
}

#[test]
fn a_100_mb_single_document() {
    let tmp = tempfile::tempdir().unwrap();
    let big = "word ".repeat(20 * 1024 * 1024);
    let line = serde_json::to_vec(&serde_json::json!({"id": 23, "text": big})).unwrap();
    let path = shard_with(tmp.path(), &line);
    // With a row limit: a clear error naming the row.
    let limited = DatasetOptions {
        fields: Fields { max_row_bytes: Some(64 << 20), ..Fields::default() },
        cache_dir: Some(tmp.path().join("cache")),
        ..DatasetOptions::default()
    };
    let err = run(spec_for(open("big", &path, &limited).unwrap(), BadRecords::Fail)).unwrap_err();
    assert!(err.contains("big shard 0 row 23") && err.contains("over the limit"), "{err}");
    // Without one, it is read whole.
    let plain = DatasetOptions { cache_dir: Some(tmp.path().join("cache")), ..DatasetOptions::default() };
    let ds = Datasets::new(vec![open("big", &path, &plain).unwrap()]);
    let rec = ds.read(&[SampleId::new(0, 0, 23)]).remove(0).unwrap();
    assert_eq!(rec.str("text").map(str::len), Some(100 * 1024 * 1024));
}

#[test]
fn a_truncated_parquet_file() {
    let tmp = tempfile::tempdir().unwrap();
    let src = corpus_dir("a-exact", "parquet").join("part-00000.parquet");
    let bytes = fs::read(&src).unwrap();
    for keep in [bytes.len() / 2, bytes.len() - 3, 10, 0] {
        let p = tmp.path().join(format!("cut-{keep}.parquet"));
        fs::write(&p, &bytes[..keep]).unwrap();
        let err = open("cut", &p, &DatasetOptions::default()).err().unwrap().to_string();
        assert!(err.contains("dataset cut") && err.contains(&p.display().to_string()), "{err}");
        assert!(err.contains("truncated or corrupt"), "{err}");
    }
}

#[test]
fn a_missing_shard_file() {
    let real = corpus_dir("a-exact", "jsonl").join("part-00000.jsonl");
    let missing = corpus_dir("a-exact", "jsonl").join("part-99999.jsonl");
    let err = open_shards("listed", Format::Jsonl, &[real, missing.clone()], &DatasetOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("dataset listed") && err.contains(&missing.display().to_string()), "{err}");
    assert!(err.contains("No such file"), "{err}");
}

#[test]
fn a_shard_truncated_while_the_job_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let path = shard_with(tmp.path(), br#"{"id": 23, "text": "fine"}"#);
    let opts = DatasetOptions { cache_dir: Some(tmp.path().join("cache")), ..DatasetOptions::default() };
    let ds = open("shrinking", &path, &opts).unwrap();
    let len = fs::metadata(&path).unwrap().len();
    fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(len / 2).unwrap();
    let err = run(spec_for(ds, BadRecords::Skip)).unwrap_err();
    assert!(err.contains("shrinking shard 0 row") && err.contains("did the file change"), "{err}");
}

#[test]
fn a_shard_changed_under_a_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let path = shard_with(tmp.path(), br#"{"id": 23, "text": "the original row"}"#);
    let opts = DatasetOptions { cache_dir: Some(tmp.path().join("cache")), ..DatasetOptions::default() };
    let ckpt = tmp.path().join("ckpt");
    let t = Topology::single(2, 2).unwrap();
    let mut e =
        Engine::start(spec_for(open("corpus", &path, &opts).unwrap(), BadRecords::Fail), t, opts_exec()).unwrap();
    e.next_step().unwrap();
    e.checkpoint(&ckpt).unwrap();
    drop(e);
    // Same size, one row rewritten.
    let text = fs::read_to_string(&path).unwrap().replace("the original row", "the modified row");
    fs::write(&path, text).unwrap();
    let err = Engine::restore(spec_for(open("corpus", &path, &opts).unwrap(), BadRecords::Fail), t, opts_exec(), &ckpt)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("dataset corpus changed: shard 0 was"), "{err}");
}

fn opts_exec() -> ExecOptions {
    opts(1, 3, 1)
}

mod never_panics {
    use proptest::prelude::*;
    use zephon_core::{Datasets, SampleId};
    use zephon_io::{DatasetOptions, open};

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        /// Arbitrary bytes as JSONL lines: every row reads as a record or an error.
        #[test]
        fn arbitrary_lines_read_or_error(lines in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..80), 1..30)) {
            let tmp = tempfile::tempdir().unwrap();
            let path = tmp.path().join("fuzz.jsonl");
            let mut bytes = Vec::new();
            for l in &lines {
                bytes.extend(l.iter().map(|&b| if b == b'\n' { b' ' } else { b }));
                bytes.push(b'\n');
            }
            std::fs::write(&path, &bytes).unwrap();
            let opts = DatasetOptions { cache_dir: Some(tmp.path().join("cache")), ..DatasetOptions::default() };
            let ds = Datasets::new(vec![open("fuzz", &path, &opts).unwrap()]);
            let rows = ds.manifests()[0].rows();
            let ids: Vec<SampleId> = (0..rows).map(|r| SampleId::new(0, 0, r)).collect();
            prop_assert_eq!(ds.read(&ids).len() as u64, rows);
        }
    }
}
