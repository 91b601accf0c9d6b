//! Bad input, each case a test: an error naming dataset, shard and row (or the file), or a
//! counted skip under the skip policy. Never a panic.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use zephon_core::*;
use zephon_io::{DatasetOptions, Fields, Format, open, open_shards};
use zephon_operator::*;
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

pub fn spec_for(ds: Arc<dyn Dataset>, bad_records: BadRecords) -> RunSpec {
    let datasets = Datasets::new(vec![ds]);
    let source = SequentialSource::new(&datasets.manifests(), 4, 1, 1);
    RunSpec {
        operators: operators(16, 0),
        source: Arc::new(source),
        datasets,
        seed: 1,
        bad_records,
        tail: Tail::Partial,
        token_estimates: Vec::new(),
    }
}

/// Runs to the end; returns the error text, or the skipped count when the run completes.
pub fn run(spec: RunSpec) -> Result<u64, String> {
    let mut e = Engine::start(spec, Topology::builder().lanes(2).rows_per_step(2).build().unwrap(), opts(2, 3, 2))
        .map_err(|e| e.to_string())?;
    loop {
        match e.next_step() {
            Ok(Some(_)) => {}
            Ok(None) => return Ok(e.skipped()),
            Err(err) => return Err(err.to_string()),
        }
    }
}

fn check_case(bad: &[u8], expect: &str) {
    check_case_with(Fields::default(), bad, expect);
}

/// Row 23 is `bad`: the run stops with `expect` naming dataset, shard and row, or skips it.
fn check_case_with(fields: Fields, bad: &[u8], expect: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let path = shard_with(tmp.path(), bad);
    let opts = DatasetOptions { fields, cache_dir: Some(tmp.path().join("cache")), ..DatasetOptions::default() };
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
fn a_text_that_is_a_json_array_or_object_is_not_tokenized_as_json() {
    check_case(br#"{"id": 23, "text": ["hello", "world"]}"#, r#"field "text" is a JSON array, not text"#);
    check_case(br#"{"id": 23, "text": {"en": "hello"}}"#, r#"field "text" is a JSON object, not text"#);
}

#[test]
fn a_null_text_says_null_not_missing() {
    check_case(br#"{"id": 23, "text": null}"#, r#"field "text" is null"#);
}

#[test]
fn a_boolean_text_says_boolean() {
    check_case(br#"{"id": 23, "text": true}"#, r#"field "text" is a boolean, not text"#);
}

#[test]
fn an_array_in_an_extra_field_is_a_bad_record() {
    let fields = Fields { extra: vec!["id".into(), "tags".into()], ..Fields::default() };
    check_case_with(
        fields,
        br#"{"id": 23, "text": "fine", "tags": ["a", "b"]}"#,
        r#"field "tags" is a JSON array; zephon reads strings, numbers, booleans and arrays of integers"#,
    );
}

#[test]
fn an_integer_beyond_i64_is_refused_not_rounded() {
    // Stored as a float it would come back as 18446744073709552000.
    let fields = Fields { extra: vec!["id".into()], ..Fields::default() };
    check_case_with(
        fields,
        br#"{"id": 18446744073709551615, "text": "fine"}"#,
        r#"field "id" is 18446744073709551615"#,
    );
}

#[test]
fn a_field_given_twice_is_ambiguous() {
    check_case(br#"{"id": 23, "text": "one", "text": "two"}"#, r#"field "text" appears twice"#);
}

#[test]
fn every_message_names_the_configured_text_field() {
    let body = || Fields { text: Some("body".into()), ..Fields::default() };
    for (row, want) in [
        (&br#"{"id": 23, "body": null}"#[..], r#"field "body" is null"#),
        (br#"{"id": 23, "body": 7}"#, r#"field "body" is an integer, not text"#),
        (br#"{"id": 23, "body": false}"#, r#"field "body" is a boolean, not text"#),
        (br#"{"id": 23, "body": ["x"]}"#, r#"field "body" is a JSON array, not text"#),
        (br#"{"id": 23, "body": ""}"#, r#"field "body" is """#),
        (br#"{"id": 23, "text": "the wrong field"}"#, r#"no field "body""#),
    ] {
        // The other rows have "text", not "body": give them a body too.
        let tmp = tempfile::tempdir().unwrap();
        let mut bytes = Vec::new();
        for i in 0..40 {
            if i == 23 {
                bytes.extend_from_slice(row);
            } else {
                bytes.extend_from_slice(format!(r#"{{"id": {i}, "body": "row {i}"}}"#).as_bytes());
            }
            bytes.push(b'\n');
        }
        let path = tmp.path().join("body.jsonl");
        fs::write(&path, bytes).unwrap();
        let opts =
            DatasetOptions { fields: body(), cache_dir: Some(tmp.path().join("cache")), ..DatasetOptions::default() };
        // Read directly: the test operators tokenize a field named "text".
        let ds = Datasets::new(vec![open("bodies", &path, &opts).unwrap()]);
        let err = ds.read(&[SampleId::new(0, 0, 23)]).remove(0).unwrap_err().to_string();
        assert!(err.contains(want), "{err}");
        assert!(!err.contains(r#""text""#), "{err}");
    }
}

#[test]
fn a_leading_byte_order_mark_is_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("bom.jsonl");
    fs::write(&plain, "\u{FEFF}{\"text\": \"first\"}\r\n{\"text\": \"second\"}\r\n").unwrap();
    let gz = tmp.path().join("bom.jsonl.gz");
    let mut enc = flate2::write::GzEncoder::new(fs::File::create(&gz).unwrap(), flate2::Compression::fast());
    std::io::Write::write_all(&mut enc, &fs::read(&plain).unwrap()).unwrap();
    enc.finish().unwrap();
    let opts = DatasetOptions { cache_dir: Some(tmp.path().join("cache")), ..DatasetOptions::default() };
    for path in [plain, gz] {
        let ds = Datasets::new(vec![open("bom", &path, &opts).unwrap()]);
        let rows = ds.read(&[SampleId::new(0, 0, 0), SampleId::new(0, 0, 1)]);
        let texts: Vec<_> = rows.into_iter().map(|r| r.map(|r| r.str("text").map(String::from))).collect();
        assert_eq!(texts, vec![Ok(Some("first".into())), Ok(Some("second".into()))], "{}", path.display());
    }
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
    // Read row by row, and held in memory (read whole at its first row).
    for held in [Some(0), None] {
        let tmp = tempfile::tempdir().unwrap();
        let path = shard_with(tmp.path(), br#"{"id": 23, "text": "fine"}"#);
        let opts = DatasetOptions {
            cache_dir: Some(tmp.path().join("cache")),
            jsonl_held_bytes: held,
            ..DatasetOptions::default()
        };
        let ds = open("shrinking", &path, &opts).unwrap();
        let len = fs::metadata(&path).unwrap().len();
        fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(len / 2).unwrap();
        let err = run(spec_for(ds, BadRecords::Skip)).unwrap_err();
        assert!(err.contains("shrinking shard 0 row") && err.contains("did the file change"), "{held:?}: {err}");
        assert!(err.contains(&path.display().to_string()), "{held:?}: {err}");
    }
}

#[test]
fn a_shard_changed_under_a_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let path = shard_with(tmp.path(), br#"{"id": 23, "text": "the original row"}"#);
    let opts = DatasetOptions { cache_dir: Some(tmp.path().join("cache")), ..DatasetOptions::default() };
    let ckpt = tmp.path().join("ckpt");
    let t = Topology::builder().lanes(2).rows_per_step(2).build().unwrap();
    let mut e =
        Engine::start(spec_for(open("corpus", &path, &opts).unwrap(), BadRecords::Fail), t.clone(), opts_exec())
            .unwrap();
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

/// A FIFO named like a shard: opening it for reading would wait for a writer forever.
#[test]
fn a_fifo_named_like_a_shard_is_refused_not_waited_on() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("part-00000.jsonl");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success());
    assert!(made, "mkfifo");
    let (tx, rx) = std::sync::mpsc::channel();
    let (path, cache) = (fifo.clone(), tmp.path().join("cache"));
    std::thread::spawn(move || {
        let opts = DatasetOptions { cache_dir: Some(cache), ..DatasetOptions::default() };
        let _ = tx.send(open("fifo", &path, &opts).err().map(|e| e.to_string()));
    });
    let err = rx.recv_timeout(std::time::Duration::from_secs(20)).expect("open returned").unwrap();
    assert!(err.contains("dataset fifo") && err.contains("not a regular file"), "{err}");
}

/// A damaged cached index (offsets out of order) is rebuilt, not trusted: trusted, it would
/// make a row of negative length.
#[test]
fn a_damaged_cached_index_is_rebuilt() {
    let tmp = tempfile::tempdir().unwrap();
    let path = shard_with(tmp.path(), br#"{"id": 23, "text": "fine"}"#);
    let opts = DatasetOptions { cache_dir: Some(tmp.path().join("cache")), ..DatasetOptions::default() };
    let read_all = || {
        let ds = Datasets::new(vec![open("damaged", &path, &opts).unwrap()]);
        let ids: Vec<_> = (0..ds.manifests()[0].rows()).map(|r| SampleId::new(0, 0, r)).collect();
        ds.read(&ids).into_iter().map(|r| r.map(|r| r.str("text").map(String::from))).collect::<Vec<_>>()
    };
    let want = read_all();
    assert_eq!(want.len(), 40);
    let index = fs::read_dir(tmp.path().join("cache/jsonl-index")).unwrap().next().unwrap().unwrap().path();
    let mut bytes = fs::read(&index).unwrap();
    let body = bytes.len() - 40 * 8;
    bytes[body..]
        .chunks_exact_mut(8)
        .enumerate()
        .for_each(|(i, c)| c.copy_from_slice(&(1000 - i as u64 * 7).to_le_bytes()));
    fs::write(&index, bytes).unwrap();
    assert_eq!(read_all(), want);
}

fn opts_exec() -> ExecOptions {
    opts(1, 3, 1)
}

mod never_panics {
    use proptest::prelude::*;
    use zephon_core::Datasets;
    use zephon_io::{DatasetOptions, open};
    use zephon_operator::SampleId;

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
