//! Parquet columns are checked against the requested fields when a shard is opened, and every
//! value arrives as stored or as an error naming its field.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, BinaryArray, BooleanArray, RecordBatch, StringArray, UInt64Array};
use zephon_core::Datasets;
use zephon_io::{DatasetOptions, Error, Fields, open};
use zephon_operator::{SampleId, Value};

fn write(dir: &Path, columns: Vec<(&str, ArrayRef)>) -> PathBuf {
    let batch = RecordBatch::try_from_iter(columns).unwrap();
    let path = dir.join("part-00000.parquet");
    let mut w = parquet::arrow::ArrowWriter::try_new(fs::File::create(&path).unwrap(), batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    path
}

fn options(dir: &Path, text: &str, extra: &[&str]) -> DatasetOptions {
    DatasetOptions {
        fields: Fields {
            text: Some(text.into()),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            ..Fields::default()
        },
        cache_dir: Some(dir.join("cache")),
        ..DatasetOptions::default()
    }
}

fn text(values: &[Option<&str>]) -> ArrayRef {
    Arc::new(StringArray::from(values.to_vec()))
}

#[test]
fn a_binary_text_column_is_refused_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    let body: ArrayRef = Arc::new(BinaryArray::from(vec![&b"hello"[..], b"world"]));
    let path = write(tmp.path(), vec![("body", body)]);
    let err = open("bin", &path, &options(tmp.path(), "body", &[])).err().expect("refused at open");
    let msg = err.to_string();
    assert!(matches!(err, Error::ColumnType { .. }), "{msg}");
    assert!(msg.contains("dataset bin") && msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains(r#"column "body" is Binary"#) && msg.contains("string column"), "{msg}");
}

#[test]
fn a_requested_extra_column_missing_from_the_file_is_refused_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    let path = write(tmp.path(), vec![("text", text(&[Some("a")])), ("id", text(&[Some("x")]))]);
    let err = open("m", &path, &options(tmp.path(), "text", &["id", "source"])).err().expect("refused at open");
    let msg = err.to_string();
    assert!(matches!(err, Error::MissingColumn { .. }), "{msg}");
    assert!(msg.contains(r#"no column "source""#) && msg.contains("columns: text, id"), "{msg}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
}

#[test]
fn a_null_text_says_null_and_names_the_configured_field() {
    let tmp = tempfile::tempdir().unwrap();
    let path = write(tmp.path(), vec![("body", text(&[Some("fine"), None]))]);
    let ds = Datasets::new(vec![open("n", &path, &options(tmp.path(), "body", &[])).unwrap()]);
    let r = ds.read(&[SampleId::new(0, 0, 0), SampleId::new(0, 0, 1)]);
    assert_eq!(r[0].as_ref().unwrap().str("body"), Some("fine"));
    let err = r[1].as_ref().err().unwrap().to_string();
    assert!(err.contains(r#"field "body" is null"#), "{err}");
}

#[test]
fn a_u64_beyond_i64_is_refused_not_wrapped_and_booleans_read_as_0_or_1() {
    let tmp = tempfile::tempdir().unwrap();
    let ids: ArrayRef = Arc::new(UInt64Array::from(vec![7, u64::MAX]));
    let flags: ArrayRef = Arc::new(BooleanArray::from(vec![true, false]));
    let path = write(tmp.path(), vec![("text", text(&[Some("a"), Some("b")])), ("id", ids), ("flag", flags)]);
    let ds = Datasets::new(vec![open("u", &path, &options(tmp.path(), "text", &["id", "flag"])).unwrap()]);
    let r = ds.read(&[SampleId::new(0, 0, 0), SampleId::new(0, 0, 1)]);
    let first = r[0].as_ref().unwrap();
    assert_eq!((first.get("id"), first.get("flag")), (Some(&Value::Int(7)), Some(&Value::Int(1))));
    let err = r[1].as_ref().err().unwrap().to_string();
    assert!(err.contains(r#"field "id" is 18446744073709551615"#), "{err}");
}

#[test]
fn lists_of_integers_read_as_token_id_arrays_and_bad_ones_are_named() {
    use arrow_array::ListArray;
    use arrow_array::types::{Int32Type, UInt64Type};
    let tmp = tempfile::tempdir().unwrap();
    let ids: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
        Some(vec![Some(50256), Some(0), Some(17)]),
        Some(vec![Some(1), None]),
        None,
    ]));
    let wide: ArrayRef = Arc::new(ListArray::from_iter_primitive::<UInt64Type, _, _>(vec![
        Some(vec![Some(3)]),
        Some(vec![Some(4)]),
        Some(vec![Some(u64::MAX)]),
    ]));
    let path = write(tmp.path(), vec![("input_ids", ids), ("wide", wide)]);
    let opts = DatasetOptions {
        fields: Fields { text: None, extra: vec!["input_ids".into(), "wide".into()], ..Fields::default() },
        cache_dir: Some(tmp.path().join("cache")),
        ..DatasetOptions::default()
    };
    let ds = Datasets::new(vec![open("ids", &path, &opts).unwrap()]);
    let r = ds.read(&[SampleId::new(0, 0, 0), SampleId::new(0, 0, 1), SampleId::new(0, 0, 2)]);
    let first = r[0].as_ref().unwrap();
    assert_eq!(first.get("input_ids"), Some(&Value::array(vec![50256i64, 0, 17])));
    assert_eq!(first.get("wide"), Some(&Value::array(vec![3i64])));
    let err = r[1].as_ref().err().unwrap().to_string();
    assert!(err.contains(r#"field "input_ids" is a list of integers with a null element"#), "{err}");
    let err = r[2].as_ref().err().unwrap().to_string();
    assert!(err.contains(r#"field "wide" is a list of integers beyond the 64-bit signed integers"#), "{err}");
}

/// A footer byte changed so that a column chunk starts at a negative offset: the parquet crate
/// asserts on that when the row group is read; zephon refuses the file when it is opened.
#[test]
fn a_footer_with_an_impossible_column_offset_is_refused_at_open() {
    let src = crate::data::corpus_dir("a-exact", "parquet").join("part-00000.parquet");
    let mut bytes = fs::read(&src).unwrap();
    let at = bytes.len() - 3882;
    bytes[at] ^= 0x79;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("bad-footer.parquet");
    fs::write(&path, &bytes).unwrap();
    let err = open("footer", &path, &options(tmp.path(), "text", &[])).err().expect("refused at open").to_string();
    assert!(err.contains("dataset footer") && err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains("corrupt metadata") && err.contains("not inside the file"), "{err}");
}

mod never_panics {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        /// A real shard with bytes flipped (half of them in the footer): it opens and reads,
        /// or gives errors; never a panic.
        #[test]
        fn a_parquet_file_with_flipped_bytes_reads_or_errors(
            flips in prop::collection::vec((any::<bool>(), any::<usize>(), 1u8..=255), 1..16),
        ) {
            let src = crate::data::corpus_dir("a-exact", "parquet").join("part-00000.parquet");
            let mut bytes = fs::read(&src).unwrap();
            let len = bytes.len();
            for (footer, i, mask) in flips {
                let i = if footer { len - 1 - i % 4096 } else { i % len };
                bytes[i] ^= mask;
            }
            let tmp = tempfile::tempdir().unwrap();
            let path = tmp.path().join("flipped.parquet");
            fs::write(&path, &bytes).unwrap();
            if let Ok(ds) = open("f", &path, &options(tmp.path(), "text", &["id", "source"])) {
                let ds = Datasets::new(vec![ds]);
                let ids: Vec<_> = (0..ds.manifests()[0].rows()).step_by(97).map(|r| SampleId::new(0, 0, r)).collect();
                prop_assert_eq!(ds.read(&ids).len(), ids.len());
            }
        }
    }
}
