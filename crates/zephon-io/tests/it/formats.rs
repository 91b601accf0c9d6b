//! JSONL and Parquet hold the same rows; indexes are cached and invalidated; compressed
//! JSONL reads like plain; format detection.

use std::fs;
use std::io::Write;

use zephon_core::{Dataset, Datasets};
use zephon_io::{DatasetOptions, Error, Format, open, open_shards};
use zephon_operator::Value;

use crate::data::*;

#[test]
fn jsonl_and_parquet_hold_the_same_rows_in_the_same_order() {
    let counts = counts();
    for corpus in ["a-exact", "b-exact"] {
        let j = open_corpus(corpus, "jsonl");
        let p = open_corpus(corpus, "parquet");
        let rows = counts["corpora"][corpus]["rows"].as_u64().unwrap();
        assert_eq!(j.manifest().rows(), rows);
        assert_eq!(p.manifest().rows(), rows);
        let ds = Datasets::new(vec![j, p]);
        let (ja, pa) = (all_ids(&ds, 0), all_ids(&ds, 1));
        for (jb, pb) in ja.chunks(997).zip(pa.chunks(997)) {
            for (x, y) in ds.read(jb).into_iter().zip(ds.read(pb)) {
                let (x, y) = (x.unwrap(), y.unwrap());
                assert_eq!(x.get("text"), y.get("text"));
                assert_eq!(x.get("id"), y.get("id"));
                assert_eq!(x.get("source"), y.get("source"));
            }
        }
    }
}

#[test]
fn random_order_reads_equal_sequential_reads() {
    for format in ["jsonl", "parquet"] {
        let ds = Datasets::new(vec![open_corpus("b", format)]);
        let ids = all_ids(&ds, 0);
        let seq: Vec<_> = ds.read(&ids).into_iter().map(|r| r.unwrap()).collect();
        // A fixed scramble that jumps between shards and row groups.
        let perm = zephon_operator::Permutation::new(ids.len() as u64, zephon_operator::RngKey::new(3, "scramble"));
        for i in (0..ids.len() as u64).step_by(7) {
            let j = perm.apply(i) as usize;
            let got = ds.read(&ids[j..j + 1]).remove(0).unwrap();
            assert_eq!(got, seq[j], "{format} row {j}");
        }
    }
}

#[test]
fn a_parquet_row_group_that_many_threads_need_at_once_is_decoded_once() {
    // Corpus B's shards have a row group of 1,000 long documents (about 7 to 17 MB of text):
    // decoding one takes long enough for every thread to ask for it meanwhile.
    let dir = corpus_dir("b", "parquet");
    let shard = [zephon_io::ShardRef::local(&dir.join("part-00001.parquet"))];
    let options = with_fields(&["id"]);
    let ds = zephon_io::ParquetDataset::open("b", &shard, &options).unwrap();
    let threads = 8;
    let start = std::sync::Barrier::new(threads);
    let rows: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads as u64)
            .map(|t| {
                let (ds, start) = (&ds, &start);
                s.spawn(move || {
                    let mut out = Vec::new();
                    start.wait();
                    ds.read(&[zephon_operator::SampleId::new(0, 0, t * 100)], &mut out);
                    out.remove(0).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(ds.row_group_decodes(), 1, "one decode, whatever the threads");
    let alone = zephon_io::ParquetDataset::open("b", &shard, &options).unwrap();
    for (t, row) in rows.iter().enumerate() {
        let mut out = Vec::new();
        alone.read(&[zephon_operator::SampleId::new(0, 0, t as u64 * 100)], &mut out);
        assert_eq!(row, &out.remove(0).unwrap(), "thread {t}: the row it was waiting for");
    }
    assert_eq!(alone.row_group_decodes(), 1, "later reads come from the cache");
}

/// Shards held in memory read exactly as shards read row by row, whether all, some (the
/// budget runs out part way) or none are held, in any order.
#[test]
fn held_jsonl_shards_read_like_shards_read_row_by_row() {
    let dir = corpus_dir("a", "jsonl");
    let mut paths: Vec<_> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    paths.sort();
    let sizes: Vec<usize> = paths.iter().map(|p| fs::metadata(p).unwrap().len() as usize).collect();
    assert!(sizes.len() >= 2, "corpus a has several shards");
    let read_all = |held: usize| {
        let opts = DatasetOptions { jsonl_held_bytes: Some(held), ..DatasetOptions::default() };
        let ds = Datasets::new(vec![open_shards("a", Format::Jsonl, &paths, &opts).unwrap()]);
        let ids = all_ids(&ds, 0);
        let perm = zephon_operator::Permutation::new(ids.len() as u64, zephon_operator::RngKey::new(5, "held"));
        let order: Vec<_> = (0..ids.len() as u64).map(|i| ids[perm.apply(i) as usize]).collect();
        ds.read(&order).into_iter().map(|r| r.unwrap()).collect::<Vec<_>>()
    };
    let row_by_row = read_all(0);
    assert_eq!(read_all(sizes[0] + 1), row_by_row, "the first shard held");
    assert_eq!(read_all(usize::MAX), row_by_row, "every shard held");
}

#[test]
fn the_jsonl_index_is_cached_and_rebuilt_when_the_file_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let shard = tmp.path().join("part.jsonl");
    fs::copy(corpus_dir("a-exact", "jsonl").join("part-00000.jsonl"), &shard).unwrap();
    let opts = DatasetOptions { cache_dir: Some(tmp.path().join("cache")), ..DatasetOptions::default() };
    let first = open("a", &shard, &opts).unwrap();
    let index_dir = tmp.path().join("cache/jsonl-index");
    let indexes: Vec<_> = fs::read_dir(&index_dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(indexes.len(), 1, "one index written");
    let built = fs::metadata(&indexes[0]).unwrap().modified().unwrap();
    let again = open("a", &shard, &opts).unwrap();
    assert_eq!(again.manifest(), first.manifest());
    assert_eq!(fs::metadata(&indexes[0]).unwrap().modified().unwrap(), built, "the cached index was reused");
    assert_eq!(fs::read_dir(&index_dir).unwrap().count(), 1);

    // Appending a row changes the content key: a new index, one more row, a new manifest.
    let mut f = fs::OpenOptions::new().append(true).open(&shard).unwrap();
    writeln!(f, r#"{{"id": "new", "text": "an appended row"}}"#).unwrap();
    drop(f);
    let changed = open("a", &shard, &opts).unwrap();
    assert_eq!(changed.manifest().rows(), first.manifest().rows() + 1);
    assert_ne!(changed.manifest().fingerprint(), first.manifest().fingerprint());
    assert_eq!(fs::read_dir(&index_dir).unwrap().count(), 2);
    let last = zephon_operator::SampleId::new(0, 0, changed.manifest().rows() - 1);
    let ds = Datasets::new(vec![changed]);
    assert_eq!(ds.read(&[last]).remove(0).unwrap().str("text"), Some("an appended row"));
}

#[test]
fn gzip_and_zstd_shards_read_like_plain_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = corpus_dir("a-exact", "jsonl").join("part-00001.jsonl");
    let bytes = fs::read(&plain).unwrap();
    let gz = tmp.path().join("part.jsonl.gz");
    let mut enc = flate2::write::GzEncoder::new(fs::File::create(&gz).unwrap(), flate2::Compression::fast());
    enc.write_all(&bytes).unwrap();
    enc.finish().unwrap();
    let zst = tmp.path().join("part.jsonl.zst");
    fs::write(&zst, zstd::encode_all(&bytes[..], 3).unwrap()).unwrap();
    let opts = DatasetOptions { cache_dir: Some(tmp.path().join("cache")), ..DatasetOptions::default() };
    let reference = Datasets::new(vec![open("p", &plain, &opts).unwrap()]);
    let ids = all_ids(&reference, 0);
    let want: Vec<_> = reference.read(&ids).into_iter().map(|r| r.unwrap().str("text").map(String::from)).collect();
    for path in [gz, zst] {
        let ds = Datasets::new(vec![open("c", &path, &opts).unwrap()]);
        let got: Vec<_> = ds.read(&ids).into_iter().map(|r| r.unwrap().str("text").map(String::from)).collect();
        assert_eq!(got, want, "{}", path.display());
        assert_eq!(
            ds.manifests()[0].shards[0].bytes,
            fs::metadata(&path).unwrap().len(),
            "manifest counts stored bytes"
        );
    }
}

#[test]
fn formats_are_detected_and_mixtures_of_them_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    assert!(matches!(open("e", dir, &DatasetOptions::default()), Err(Error::NoShards { .. })));
    fs::write(dir.join("notes.txt"), "x").unwrap();
    assert!(matches!(open("e", &dir.join("notes.txt"), &DatasetOptions::default()), Err(Error::UnknownFormat { .. })));
    fs::copy(corpus_dir("a-exact", "jsonl").join("part-00000.jsonl"), dir.join("a.jsonl")).unwrap();
    fs::copy(corpus_dir("a-exact", "parquet").join("part-00000.parquet"), dir.join("b.parquet")).unwrap();
    let e = open("mixed", dir, &DatasetOptions::default()).err().unwrap().to_string();
    assert!(e.contains("mix formats") && e.contains("a.jsonl") && e.contains("b.parquet"), "{e}");
    assert_eq!(Format::of("x.jsonl.zst".as_ref()), Some(Format::Jsonl));
    assert_eq!(Format::of("x.PARQUET".as_ref()), Some(Format::Parquet));
}

#[test]
fn only_requested_fields_are_read() {
    for format in ["jsonl", "parquet"] {
        let plain = open("a", &corpus_dir("a-exact", format), &DatasetOptions::default()).unwrap();
        let ds = Datasets::new(vec![plain, open_corpus("a-exact", format)]);
        let r = ds.read(&[zephon_operator::SampleId::new(0, 1, 5), zephon_operator::SampleId::new(1, 1, 5)]);
        let (only_text, more) = (r[0].as_ref().unwrap(), r[1].as_ref().unwrap());
        assert!(only_text.get("id").is_none() && only_text.get("text").is_some());
        assert!(matches!(more.get("id"), Some(Value::Str(_))), "{format}");
    }
}

#[test]
fn an_hf_image_struct_column_reads_as_bytes() {
    let path = zephon_testkit::testdata().join("images/captioned/parquet/part-00000.parquet");
    let opts = DatasetOptions {
        fields: zephon_io::Fields { text: Some("caption".into()), extra: vec!["image".into()], ..Default::default() },
        ..DatasetOptions::default()
    };
    let ds = Datasets::new(vec![open_shards("images", Format::Parquet, &[path], &opts).unwrap()]);
    let r = ds.read(&[zephon_operator::SampleId::new(0, 0, 0)]).remove(0).unwrap();
    match r.get("image") {
        Some(Value::Bytes(b)) => assert_eq!(&b[..2], &[0xFF, 0xD8], "a JPEG"),
        other => panic!("image column: {other:?}"),
    }
}
