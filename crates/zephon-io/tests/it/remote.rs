//! Datasets in an S3 server (moto, on loopback) read exactly as the same files on disk, every
//! format (JSON Lines plain, `.gz` and `.zst`, Parquet, WebDataset tar with images, image
//! paths); an object replaced during a run is refused naming it; the block cache fetches each
//! block once and refetches what it cannot trust.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use zephon_core::Dataset;
use zephon_io::{DatasetOptions, Fields, Layout, Location, StorageOptions, open_layout};
use zephon_operator::{SampleId, encode_record};
use zephon_testkit::S3Server;

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

pub fn storage(server: &S3Server, cache: &Path) -> StorageOptions {
    StorageOptions {
        endpoint: Some(server.endpoint()),
        allow_http: true,
        path_style: Some(true),
        block_bytes: Some(256 << 10),
        cache_dir: Some(cache.to_path_buf()),
        ..StorageOptions::default()
    }
}

fn open(name: &str, location: &str, fields: Fields, storage: &StorageOptions, cache: &Path) -> Arc<dyn Dataset> {
    let loc = Location::parse(name, location, storage).unwrap();
    let layout = Layout::resolve(name, &[loc], None).unwrap();
    let options =
        DatasetOptions { fields, cache_dir: Some(cache.to_path_buf()), storage: storage.clone(), ..Default::default() };
    open_layout(name, &layout, &options).unwrap()
}

#[test]
fn every_format_reads_from_s3_as_from_disk() {
    let Some(server) = S3Server::start() else { return };
    server.set_env();
    let data = zephon_testkit::testdata();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("data");
    let put = |rel: &str, bytes: &[u8]| {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, bytes).unwrap();
    };
    let text = fs::read_to_string(data.join("corpora/a/jsonl/part-00000.jsonl")).unwrap();
    let head: String = text.lines().take(300).map(|l| format!("{l}\n")).collect();
    put("jsonl/en/c4-train.00000-of-00002.json.gz", &gz(head.as_bytes()));
    put(
        "jsonl/en/c4-train.00001-of-00002.jsonl",
        text.lines().skip(300).take(300).map(|l| format!("{l}\n")).collect::<String>().as_bytes(),
    );
    put(
        "parquet/data/train-00000-of-00001.parquet",
        &fs::read(data.join("corpora/b/parquet/part-00000.parquet")).unwrap(),
    );
    put("zst/part-0.jsonl.zst", &zstd::stream::encode_all(head.as_bytes(), 3).unwrap());
    let captions = fs::read_to_string(data.join("images/captioned/captions.jsonl")).unwrap();
    let mut photos = Vec::new();
    for line in captions.lines().take(4) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let file = v["file"].as_str().unwrap();
        photos.push((
            v["id"].as_str().unwrap().to_string(),
            fs::read(data.join("images/captioned").join(file)).unwrap(),
            v["caption"].as_str().unwrap().to_string(),
        ));
    }
    put("tar/train-0000.tar", &crate::seam::tar_of(&photos[..2]));
    put("tar/train-0001.tar", &crate::seam::tar_of(&photos[2..]));
    for line in captions.lines().take(4) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let file = v["file"].as_str().unwrap();
        put(&format!("captions/{file}"), &fs::read(data.join("images/captioned").join(file)).unwrap());
        let row = serde_json::json!({ "caption": v["caption"], "images": [file] }).to_string() + "\n";
        let p = root.join("captions/rows.jsonl");
        let mut f = fs::OpenOptions::new().create(true).append(true).open(p).unwrap();
        f.write_all(row.as_bytes()).unwrap();
    }
    server.create_bucket("corpus");
    server.upload(&root, "corpus", "snap");
    let cache = tmp.path().join("cache");
    let storage = storage(&server, &cache.join("blocks"));
    for (name, fields) in [
        ("jsonl", Fields { text: Some("text".into()), ..Fields::default() }),
        ("zst", Fields { text: Some("text".into()), ..Fields::default() }),
        ("tar", Fields { text: Some("txt".into()), images: Some("jpg".into()), ..Fields::default() }),
        ("parquet", Fields { text: Some("text".into()), ..Fields::default() }),
        ("captions", Fields { text: Some("caption".into()), images: Some("images".into()), ..Fields::default() }),
    ] {
        let disk = open(name, &root.join(name).to_string_lossy(), fields.clone(), &storage, &cache);
        let s3 = open(name, &format!("s3://corpus/snap/{name}"), fields.clone(), &storage, &cache);
        assert_eq!(rows(&disk), rows(&s3), "{name}: the same rows from S3 as from disk");
        for shard in &s3.manifest().shards {
            assert!(shard.version.starts_with("etag:") && shard.path.starts_with("s3://corpus/snap/"), "{shard:?}");
        }
        // Globs list the prefix the same way.
        let globbed = open(name, &format!("s3://corpus/snap/{name}/**/*.*"), fields, &storage, &cache);
        assert_eq!(globbed.manifest().rows(), s3.manifest().rows(), "{name}");
    }
}

#[test]
fn an_object_replaced_during_a_run_is_refused_naming_it() {
    let Some(server) = S3Server::start() else { return };
    server.set_env();
    let data = zephon_testkit::testdata();
    let tmp = tempfile::tempdir().unwrap();
    let text = fs::read(data.join("corpora/b/jsonl/part-00000.jsonl")).unwrap();
    server.create_bucket("bkt");
    server.put("bkt", "docs/part-0.jsonl", &text);
    let cache = tmp.path().join("cache");
    // Small blocks, so that rows far into the shard are fetched after the change.
    let storage = StorageOptions { block_bytes: Some(64 << 10), ..storage(&server, &cache.join("blocks")) };
    let fields = Fields { text: Some("text".into()), ..Fields::default() };
    let ds = open("b", "s3://bkt/docs", fields, &storage, &cache);
    let rows = ds.manifest().rows();
    server.put("bkt", "docs/part-0.jsonl", &text[..text.len() / 2]);
    // What the node cached is of the version opened; what it must fetch now is not.
    fs::remove_dir_all(cache.join("blocks")).unwrap();
    fs::create_dir_all(cache.join("blocks")).unwrap();
    let mut out = Vec::new();
    ds.read(&[SampleId::new(0, 0, rows - 1)], &mut out);
    let err = out.remove(0).expect_err("a changed object is refused").to_string();
    assert!(err.contains("s3://bkt/docs/part-0.jsonl") && err.contains("changed since it was opened"), "{err}");
}
