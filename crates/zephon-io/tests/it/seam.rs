//! Every reader reads through the storage seam: the same datasets served from memory
//! (`MemoryStore`, where a reader that opened a file by itself would find nothing) read
//! exactly as from disk, for every format, compressed JSON Lines, image paths and tar members
//! included, and every object of the store is read from.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use zephon_core::Dataset;
use zephon_io::storage::{MemoryStore, Store};
use zephon_io::{DatasetOptions, Fields, Layout, Location, open_layout};
use zephon_operator::{SampleId, encode_record};

/// Copies every file under `dir` into a memory store, by relative path.
fn into_memory(dir: &Path) -> Arc<MemoryStore> {
    let store = MemoryStore::new("mem://data");
    let local = zephon_io::storage::LocalStore::new(dir);
    for relative in local.list().unwrap() {
        store.put(&relative, fs::read(dir.join(&relative)).unwrap());
    }
    store
}

/// Every row of `ds`, each as its canonical encoding (fields, attachments, lineage).
fn rows(ds: &Arc<dyn Dataset>) -> Vec<Vec<u8>> {
    let m = ds.manifest();
    let mut out = Vec::new();
    for (s, shard) in m.shards.iter().enumerate() {
        let ids: Vec<SampleId> = (0..shard.rows).map(|r| SampleId::new(0, s as u32, r)).collect();
        let mut got = Vec::new();
        ds.read(&ids, &mut got);
        for r in got {
            let mut bytes = Vec::new();
            encode_record(&r.unwrap(), &mut |b| bytes.extend_from_slice(b));
            out.push(bytes);
        }
    }
    out
}

fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// A WebDataset tar of `photos` (key, jpg bytes, caption).
pub fn tar_of(photos: &[(String, Vec<u8>, String)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (key, jpg, caption) in photos {
        for (ext, data) in [("jpg", jpg.as_slice()), ("txt", caption.as_bytes())] {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, format!("{key}.{ext}"), data).unwrap();
        }
    }
    b.into_inner().unwrap()
}

#[test]
fn every_reader_reads_through_the_store() {
    let data = zephon_testkit::testdata();
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let photos: Vec<(String, Vec<u8>, String)> = fs::read_to_string(data.join("images/captioned/captions.jsonl"))
        .unwrap()
        .lines()
        .take(6)
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let s = |k: &str| v[k].as_str().unwrap().to_string();
            (s("id"), fs::read(data.join("images/captioned").join(s("file"))).unwrap(), s("caption"))
        })
        .collect();
    // Four datasets, each in its own folder, nested as downloads are.
    let cases: Vec<(&str, Fields)> = vec![
        ("jsonl", Fields { text: Some("text".into()), ..Fields::default() }),
        ("parquet", Fields { text: Some("text".into()), ..Fields::default() }),
        ("tar", Fields { text: Some("txt".into()), images: Some("jpg".into()), ..Fields::default() }),
        ("captions", Fields { text: Some("caption".into()), images: Some("images".into()), ..Fields::default() }),
    ];
    let root = tmp.path().join("data");
    let text = fs::read_to_string(data.join("corpora/a/jsonl/part-00000.jsonl")).unwrap();
    let head: String = text.lines().take(200).map(|l| format!("{l}\n")).collect();
    let put = |rel: &str, bytes: &[u8]| {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, bytes).unwrap();
    };
    put("jsonl/en/c4-train.00000-of-00002.json.gz", &gz(head.as_bytes()));
    put(
        "jsonl/en/c4-train.00001-of-00002.jsonl",
        text.lines().skip(200).take(100).map(|l| format!("{l}\n")).collect::<String>().as_bytes(),
    );
    put(
        "parquet/data/train-00000-of-00001.parquet",
        &fs::read(data.join("corpora/b/parquet/part-00000.parquet")).unwrap(),
    );
    put("tar/shards/train-0000.tar", &tar_of(&photos[..3]));
    put("tar/shards/train-0001.tar", &tar_of(&photos[3..]));
    let mut captions = String::new();
    for (id, jpg, caption) in &photos {
        put(&format!("captions/images/{id}.jpg"), jpg);
        captions.push_str(
            &serde_json::json!({ "caption": caption, "images": [format!("../images/{id}.jpg")] }).to_string(),
        );
        captions.push('\n');
    }
    put("captions/rows/part-0.jsonl", captions.as_bytes());

    for (name, fields) in cases {
        let options = DatasetOptions { fields, cache_dir: Some(cache.clone()), ..DatasetOptions::default() };
        let on_disk = Location::local(name, &root.join(name).to_string_lossy()).unwrap();
        let layout = Layout::resolve(name, &[on_disk], None).unwrap();
        let disk = open_layout(name, &layout, &options).unwrap();

        let store = into_memory(&root.join(name));
        let in_memory = Location::in_store(store.clone(), "**/*.*").unwrap();
        let layout = Layout::resolve(name, &[in_memory], None).unwrap();
        let memory = open_layout(name, &layout, &options).unwrap();
        let (a, b) = (rows(&disk), rows(&memory));
        assert!(!a.is_empty(), "{name}");
        assert_eq!(a, b, "{name}: the same rows from memory as from disk");
        assert_eq!(
            disk.manifest().shards.iter().map(|s| (&s.name, s.rows, &s.version)).collect::<Vec<_>>(),
            memory.manifest().shards.iter().map(|s| (&s.name, s.rows, &s.version)).collect::<Vec<_>>(),
            "{name}"
        );
        // Every object was read from the store, images included (shards are read whole to be
        // hashed; image files when their rows are).
        for relative in store.list().unwrap() {
            assert!(store.bytes_read(&relative) > 0, "{name}: {relative} was never read from the store");
        }
    }
}
