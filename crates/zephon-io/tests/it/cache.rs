//! The shard version is a full content hash, paid once per file version; the caches it keys
//! follow it; failed writes and dead writers leave nothing behind.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use zephon_core::*;
use zephon_io::{DatasetOptions, open};
use zephon_operator::*;
use zephon_testkit::{operators, opts};

use crate::data::corpus_dir;

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir).map(|d| d.map(|e| e.unwrap().path()).collect()).unwrap_or_default();
    v.sort();
    v
}

fn temporaries(cache: &Path) -> Vec<PathBuf> {
    ["content", "jsonl", "jsonl-index"]
        .iter()
        .flat_map(|d| files_in(&cache.join(d)))
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().contains(".tmp.")))
        .collect()
}

fn spec_for(ds: Arc<dyn Dataset>) -> RunSpec {
    let datasets = Datasets::new(vec![ds]);
    let source = SequentialSource::new(&datasets.manifests(), 4, 1, 1);
    RunSpec {
        operators: operators(16, 0),
        source: Arc::new(source),
        datasets,
        seed: 1,
        bad_records: BadRecords::Fail,
        tail: Tail::Partial,
        token_estimates: Vec::new(),
    }
}

/// The position of the first ASCII letter at or after `at`.
fn letter_after(bytes: &[u8], at: usize) -> usize {
    (at..bytes.len()).find(|&i| bytes[i].is_ascii_alphabetic()).unwrap()
}

/// An edit of one byte, a quarter into a 1.8 MB shard (where a hash of sampled windows would
/// not look), with the size and the mtime restored: the version changes, the index is rebuilt,
/// the new text is read, and a checkpoint of the old data refuses to restore.
#[test]
fn a_same_size_edit_with_the_mtime_restored_changes_the_version() {
    let tmp = tempfile::tempdir().unwrap();
    let shard = tmp.path().join("part.jsonl");
    fs::copy(corpus_dir("a-exact", "jsonl").join("part-00000.jsonl"), &shard).unwrap();
    let cache = tmp.path().join("cache");
    let options = DatasetOptions { cache_dir: Some(cache.clone()), ..DatasetOptions::default() };
    let first = open("a", &shard, &options).unwrap();
    let version = first.manifest().shards[0].version.clone();

    let ckpt = tmp.path().join("ckpt");
    let t = Topology::builder().lanes(2).rows_per_step(2).build().unwrap();
    let mut e = Engine::start(spec_for(first.clone()), t.clone(), opts(1, 3, 1)).unwrap();
    e.next_step().unwrap();
    e.checkpoint(&ckpt).unwrap();
    drop(e);

    let mut bytes = fs::read(&shard).unwrap();
    assert!(bytes.len() > 1 << 20);
    let at = letter_after(&bytes, bytes.len() / 4);
    bytes[at] ^= 0x20; // swap the letter's case: same size, still valid JSON
    let mtime = fs::metadata(&shard).unwrap().modified().unwrap();
    let f = fs::OpenOptions::new().write(true).open(&shard).unwrap();
    f.write_all_at(&bytes, 0).unwrap();
    f.set_modified(mtime).unwrap();
    drop(f);
    assert_eq!(fs::metadata(&shard).unwrap().modified().unwrap(), mtime);
    assert_eq!(fs::metadata(&shard).unwrap().len() as usize, bytes.len());

    let changed = open("a", &shard, &options).unwrap();
    assert_ne!(changed.manifest().shards[0].version, version);
    assert!(version.starts_with("sha256:") && version.len() == 7 + 64, "{version}");
    assert_eq!(changed.manifest().rows(), first.manifest().rows());
    assert_eq!(files_in(&cache.join("jsonl-index")).len(), 2, "an index for each version");
    drop(first);
    let row = bytes[..at].iter().filter(|&&b| b == b'\n').count() as u64;
    let ds = Datasets::new(vec![changed.clone()]);
    let original = open("o", &corpus_dir("a-exact", "jsonl").join("part-00000.jsonl"), &options).unwrap();
    let old = Datasets::new(vec![original]).read(&[SampleId::new(0, 0, row)]).remove(0).unwrap();
    let new = ds.read(&[SampleId::new(0, 0, row)]).remove(0).unwrap();
    assert_ne!(old.str("text"), new.str("text"), "row {row} reads the edited text");

    let err = Engine::restore(spec_for(changed), t, opts(1, 3, 1), &ckpt).err().unwrap().to_string();
    assert!(err.contains("dataset a changed: shard 0 was part.jsonl"), "{err}");
}

/// Reopening an unchanged shard uses the cached hash and index: no cache file is rewritten
/// (a rewrite is a rename, so it would change the entry's inode).
#[test]
fn an_unchanged_shard_is_not_hashed_again() {
    let tmp = tempfile::tempdir().unwrap();
    let shard = tmp.path().join("part.jsonl");
    fs::copy(corpus_dir("a-exact", "jsonl").join("part-00001.jsonl"), &shard).unwrap();
    // A file changed in the last instant is hashed again (its ctime could repeat); let it settle.
    std::thread::sleep(Duration::from_millis(250));
    let cache = tmp.path().join("cache");
    let options = DatasetOptions { cache_dir: Some(cache.clone()), ..DatasetOptions::default() };
    let first = open("a", &shard, &options).unwrap();
    let entries = |dir: &str| -> Vec<(PathBuf, u64, SystemTime)> {
        files_in(&cache.join(dir))
            .into_iter()
            .map(|p| {
                let m = fs::metadata(&p).unwrap();
                (p, m.ino(), m.modified().unwrap())
            })
            .collect()
    };
    let (content, index) = (entries("content"), entries("jsonl-index"));
    assert_eq!((content.len(), index.len()), (1, 1));
    let entry = fs::read_to_string(&content[0].0).unwrap();
    assert!(entry.ends_with(&format!("{}\n", first.manifest().shards[0].version)), "{entry}");
    for _ in 0..2 {
        let again = open("a", &shard, &options).unwrap();
        assert_eq!(again.manifest(), first.manifest());
        assert_eq!(entries("content"), content, "the cached hash was used");
        assert_eq!(entries("jsonl-index"), index, "the cached index was used");
    }
}

/// Byte-identical compressed shards share one decompressed copy, which is trusted only with an
/// index that agrees on its size: a copy truncated in the cache is made again, not read as a
/// shorter shard.
#[test]
fn a_truncated_decompressed_copy_is_made_again() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = corpus_dir("a-exact", "jsonl").join("part-00001.jsonl");
    let zst = tmp.path().join("part.jsonl.zst");
    fs::write(&zst, zstd::encode_all(&fs::read(&plain).unwrap()[..], 3).unwrap()).unwrap();
    let cache = tmp.path().join("cache");
    let options = DatasetOptions { cache_dir: Some(cache.clone()), ..DatasetOptions::default() };
    let rows = open("z", &zst, &options).unwrap().manifest().rows();
    let copies = files_in(&cache.join("jsonl"));
    assert_eq!(copies.len(), 1);
    let len = fs::metadata(&copies[0]).unwrap().len();
    fs::OpenOptions::new().write(true).open(&copies[0]).unwrap().set_len(len / 2).unwrap();
    let again = open("z", &zst, &options).unwrap();
    assert_eq!(again.manifest().rows(), rows);
    assert_eq!(fs::metadata(&copies[0]).unwrap().len(), len);
}

/// A corrupt `.jsonl.gz`: the open fails naming the file, and no temporary is left behind.
#[test]
fn a_failed_decompression_leaves_no_temporary() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = fs::read(corpus_dir("a-exact", "jsonl").join("part-00001.jsonl")).unwrap();
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(&plain).unwrap();
    let mut gz = enc.finish().unwrap();
    let cache = tmp.path().join("cache");
    let options = DatasetOptions { cache_dir: Some(cache.clone()), ..DatasetOptions::default() };
    for (i, damage) in ["flip", "truncate"].into_iter().enumerate() {
        let path = tmp.path().join(format!("bad-{i}.jsonl.gz"));
        if damage == "flip" {
            let mid = gz.len() / 2;
            gz[mid..mid + 64].iter_mut().for_each(|b| *b ^= 0x5A);
            fs::write(&path, &gz).unwrap();
        } else {
            fs::write(&path, &gz[..gz.len() / 3]).unwrap();
        }
        let err = open("gz", &path, &options).err().unwrap().to_string();
        assert!(err.contains("dataset gz") && err.contains(&path.display().to_string()), "{err}");
        assert!(err.contains("cannot decompress"), "{err}");
        assert_eq!(temporaries(&cache), Vec::<PathBuf>::new(), "{damage}");
    }
}

/// The tag zephon-io's temporaries carry for this process's pid space (the kernel boot and the
/// pid namespace, as `shard.rs` computes it), or `None` where it is unknown.
fn process_space() -> Option<String> {
    use sha2::Digest;
    let boot = fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let ns = fs::read_link("/proc/self/ns/pid").ok()?;
    let mut h = sha2::Sha256::new();
    h.update(boot.trim().as_bytes());
    h.update(ns.to_string_lossy().as_bytes());
    Some(hex::encode(&h.finalize()[..6]))
}

/// Temporaries of dead writers are removed when a dataset is next opened; a live writer's
/// (another host's, judged by age only) is kept.
#[test]
fn stale_temporaries_are_removed_at_the_next_open() {
    let tmp = tempfile::tempdir().unwrap();
    let shard = tmp.path().join("part.jsonl");
    fs::write(&shard, "{\"text\": \"a\"}\n").unwrap();
    let cache = tmp.path().join("cache");
    for d in ["content", "jsonl", "jsonl-index"] {
        fs::create_dir_all(cache.join(d)).unwrap();
    }
    // This host's, for a pid above the kernel's maximum (4194304), which never runs.
    let here = process_space();
    let dead = cache.join(format!("jsonl/.0a1b2c.tmp.{}.4294967295.0", here.as_deref().unwrap_or("0")));
    // Another host's, two days old.
    let old = cache.join("content/.0a1b2c.tmp.0123456789ab.17.0");
    // Another host's, fresh: maybe being written right now.
    let live = cache.join("jsonl-index/.0a1b2c.plain.idx.tmp.0123456789ab.17.1");
    // Not a temporary of ours at all.
    let other = cache.join("jsonl/notes.tmp.txt");
    for p in [&dead, &old, &live, &other] {
        fs::write(p, b"partial").unwrap();
    }
    let two_days_ago = SystemTime::now() - Duration::from_secs(48 * 3600);
    fs::OpenOptions::new().write(true).open(&old).unwrap().set_modified(two_days_ago).unwrap();
    let options = DatasetOptions { cache_dir: Some(cache.clone()), ..DatasetOptions::default() };
    open("t", &shard, &options).unwrap();
    // Liveness is judged by pid only where the process space is known.
    assert!(!dead.exists() || here.is_none(), "a dead writer's temporary");
    assert!(!old.exists(), "a day-old temporary");
    assert!(live.exists() && other.exists());
}
