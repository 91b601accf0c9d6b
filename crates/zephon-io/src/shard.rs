//! What identifies a shard's content, the on-disk cache that makes knowing it cheap, and the
//! cache's housekeeping (atomic writes, stale temporaries).
//!
//! A shard's version is the SHA-256 of all its bytes. Anything less (sizes, sampled windows,
//! modification times) lets an edit through: a checkpoint would then restore on changed data
//! and a JSONL offset index would be reused on the wrong file. Hashing a whole dataset is paid
//! once per object version: the hash is cached under the object's version identity
//! ([`Object::version`]: for a local file its path and `stat` identity, device, inode, size,
//! mtime and ctime in nanoseconds; ctime because no user tool can set it, so an edit that
//! restores the mtime still changes the ctime).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use sha2::{Digest, Sha256};
use zephon_core::ShardManifest;

use crate::layout::ShardRef;
use crate::storage::Object;

const CHUNK: usize = 1 << 20;

/// A shard's content hash and how it was obtained.
pub(crate) struct Hashed {
    /// `sha256:<hex>` of every byte of the file.
    pub(crate) hash: String,
    /// Whether the file was read to compute it (so `also` saw every byte), rather than found
    /// in the cache.
    pub(crate) read_through: bool,
    /// Bytes read when `read_through`.
    pub(crate) bytes_read: u64,
}

/// The content hash of `object`: from the cache under `cache` when this exact version was
/// hashed before, else by reading it once, handing each piece to `also` too (so a caller can
/// index while the object is hashed).
pub(crate) fn content_hash(object: &dyn Object, cache: &Path, also: &mut dyn FnMut(&[u8])) -> io::Result<Hashed> {
    if let Some(version) = object.content_version() {
        return Ok(Hashed { hash: version.to_string(), read_through: false, bytes_read: 0 });
    }
    let header = object.version();
    let entry = content_entry_path(cache, header);
    if let Some(hash) = load_content_entry(&entry, header) {
        return Ok(Hashed { hash, read_through: false, bytes_read: 0 });
    }
    let mut reader = HashingReader::new(object);
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match io::Read::read(&mut reader, &mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        also(&buf[..n]);
    }
    let (hash, at) = reader.finish()?;
    #[cfg(test)]
    HASHES_COMPUTED.with(|c| c.set(c.get() + 1));
    // Cached only when the object did not change while it was read and is not racily recent.
    if object.unchanged().unwrap_or(false) && at == object.size() && object.settled() {
        // A cache that cannot be written (read-only disk) only costs a rehash next time.
        let _ = write_atomic(&entry, |f| io::Write::write_all(f, format!("{header}{hash}\n").as_bytes()));
    }
    Ok(Hashed { hash, read_through: true, bytes_read: at })
}

/// Reads an object from its start (with positioned reads) through SHA-256, so that whatever
/// consumes the bytes (a decompressor) also proves which content it consumed.
pub(crate) struct HashingReader<'a> {
    object: &'a dyn Object,
    h: Sha256,
    pos: u64,
}

impl<'a> HashingReader<'a> {
    pub(crate) fn new(object: &'a dyn Object) -> Self {
        HashingReader { object, h: Sha256::new(), pos: 0 }
    }

    /// `sha256:<hex>` of the whole object (the part not read yet is read now), and its length.
    pub(crate) fn finish(&mut self) -> io::Result<(String, u64)> {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match io::Read::read(self, &mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok((format!("sha256:{}", hex::encode(self.h.finalize_reset())), self.pos))
    }
}

impl io::Read for HashingReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.object.read_at(buf, self.pos)?;
        self.h.update(&buf[..n]);
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
thread_local! {
    /// Hashes computed on this thread: evidence for tests that a cached hash was used.
    static HASHES_COMPUTED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn content_entry_path(cache: &Path, header: &str) -> PathBuf {
    let mut h = Sha256::new();
    h.update(header.as_bytes());
    cache.join("content").join(hex::encode(&h.finalize()[..16]))
}

fn load_content_entry(entry: &Path, header: &str) -> Option<String> {
    let text = fs::read_to_string(entry).ok()?;
    let hash = text.strip_prefix(header)?.strip_suffix('\n')?;
    let hex = hash.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| hash.to_string())
}

/// A content version as a cache file name: the hex digits of a `sha256:<hex>` hash, or the
/// SHA-256 of another version (a remote object's ETag and size).
pub(crate) fn hash_hex(hash: &str) -> String {
    match hash.strip_prefix("sha256:") {
        Some(hex) => hex.to_string(),
        None => hex::encode(Sha256::digest(hash.as_bytes())),
    }
}

/// A manifest entry for a shard.
pub(crate) fn manifest_entry(shard: &ShardRef, object: &dyn Object, rows: u64, hash: String) -> ShardManifest {
    ShardManifest {
        path: object.location().to_string(),
        name: shard.name().to_string(),
        rows,
        bytes: object.size(),
        version: hash,
    }
}

pub(crate) use zephon_core::disk::{cache_dir as default_cache_dir, remove_stale_temporaries, write_atomic};

/// The cache folders each kind of dataset writes to.
pub(crate) const CONTENT_DIR: &str = "content";

/// Opens a dataset's shards, several at a time, in order: removes stale temporaries from the
/// format's `cache_dirs` under the cache folder, then opens each shard's object and runs
/// `open(shard, object, cache)` on it. The first shard that fails (in order, whatever the
/// timing) is the error, naming the dataset and the shard.
pub(crate) fn open_shards<S: Send>(
    name: &str,
    shards: &[ShardRef],
    options: &crate::DatasetOptions,
    cache_dirs: &[&str],
    open: impl Fn(&ShardRef, std::sync::Arc<dyn Object>, &Path) -> Result<(S, ShardManifest), String> + Sync,
) -> crate::Result<(Vec<S>, Vec<ShardManifest>)> {
    let cache = options.cache_dir.clone().unwrap_or_else(default_cache_dir);
    remove_stale_temporaries(&cache_dirs.iter().map(|d| cache.join(d)).collect::<Vec<_>>());
    let opened = map_parallel(shards.len(), |i| {
        let shard = &shards[i];
        shard.open().map_err(|e| e.to_string()).and_then(|object| open(shard, object, &cache)).map_err(|message| {
            crate::Error::Open { dataset: name.to_string(), path: PathBuf::from(shard.location()), message }
        })
    })?;
    Ok(opened.into_iter().unzip())
}

/// `f(0..n)` on 8 threads (16 on more cores), results in order: opening shards waits on
/// reads more than it computes, most of all from an object store, where each open is a chain
/// of requests. On errors, the one of the lowest index is returned (and higher indexes are not
/// started), so the message does not depend on timing.
pub(crate) fn map_parallel<T: Send, E: Send>(n: usize, f: impl Fn(usize) -> Result<T, E> + Sync) -> Result<Vec<T>, E> {
    let threads = std::thread::available_parallelism().map_or(1, |p| p.get()).clamp(8, 16).min(n);
    if threads <= 1 {
        return (0..n).map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let first_error = AtomicUsize::new(usize::MAX);
    let mut slots: Vec<Option<Result<T, E>>> = (0..n).map(|_| None).collect();
    let results: Vec<Vec<(usize, Result<T, E>)>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n || i > first_error.load(Ordering::Relaxed) {
                            return done;
                        }
                        let r = f(i);
                        if r.is_err() {
                            first_error.fetch_min(i, Ordering::Relaxed);
                        }
                        done.push((i, r));
                    }
                })
            })
            .collect();
        // A worker that panicked re-raises here: `f` is ours and does not panic on data.
        workers.into_iter().map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    for (i, r) in results.into_iter().flatten() {
        slots[i] = Some(r);
    }
    let mut out = Vec::with_capacity(n);
    for slot in slots {
        match slot {
            Some(Ok(v)) => out.push(v),
            Some(Err(e)) => return Err(e),
            // Not started because an earlier index failed, which the loop has returned.
            None => break,
        }
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) fn hashes_computed() -> u64 {
    HASHES_COMPUTED.with(|c| c.get())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{LocalObject, local::RACY_WINDOW};
    use std::time::Duration;

    /// Waits out the racy window: ctime cannot be set back.
    fn settle() {
        std::thread::sleep(RACY_WINDOW + Duration::from_millis(50));
    }

    #[test]
    fn a_hash_is_computed_once_per_file_version() {
        let tmp = tempfile::tempdir().unwrap();
        let (p, cache) = (tmp.path().join("x.jsonl"), tmp.path().join("cache"));
        fs::write(&p, b"{\"text\": \"hello\"}\n").unwrap();
        settle();
        let hash = |also: &mut dyn FnMut(&[u8])| content_hash(&LocalObject::open(&p).unwrap(), &cache, also).unwrap();
        let before = hashes_computed();
        let mut seen = 0;
        let first = hash(&mut |b| seen += b.len());
        assert!(first.read_through);
        assert_eq!(seen, 18, "`also` saw every byte");
        let again = hash(&mut |_| panic!("not read again"));
        assert!(!again.read_through);
        assert_eq!(again.hash, first.hash);
        assert_eq!(hashes_computed(), before + 1);
        let want = format!("sha256:{}", hex::encode(Sha256::digest(b"{\"text\": \"hello\"}\n")));
        assert_eq!(first.hash, want);

        // The same size and mtime, another byte: the ctime gives it away.
        let mtime = fs::metadata(&p).unwrap().modified().unwrap();
        fs::write(&p, b"{\"text\": \"hellO\"}\n").unwrap();
        fs::File::options().write(true).open(&p).unwrap().set_modified(mtime).unwrap();
        let changed = hash(&mut |_| {});
        assert!(changed.read_through);
        assert_ne!(changed.hash, first.hash);
    }

    #[test]
    fn a_racily_recent_file_is_not_cached() {
        let tmp = tempfile::tempdir().unwrap();
        let (p, cache) = (tmp.path().join("x.jsonl"), tmp.path().join("cache"));
        fs::write(&p, b"{}\n").unwrap();
        for _ in 0..2 {
            assert!(content_hash(&LocalObject::open(&p).unwrap(), &cache, &mut |_| {}).unwrap().read_through);
        }
        assert!(!cache.join(CONTENT_DIR).exists() || fs::read_dir(cache.join(CONTENT_DIR)).unwrap().count() == 0);
    }

    #[test]
    fn a_fifo_is_refused_not_waited_on() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("pipe.jsonl");
        let ok = std::process::Command::new("mkfifo").arg(&p).status().map(|s| s.success()).unwrap_or(false);
        if !ok {
            return;
        }
        let err = LocalObject::open(&p).err().unwrap().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        let err = LocalObject::open(tmp.path()).err().unwrap().to_string();
        assert!(err.contains("a directory"), "{err}");
    }

    #[test]
    fn map_parallel_keeps_order_and_reports_the_first_error() {
        let ok: Result<Vec<usize>, usize> = map_parallel(100, |i| Ok(i * 2));
        assert_eq!(ok.unwrap(), (0..100).map(|i| i * 2).collect::<Vec<_>>());
        let err = map_parallel(100, |i| if i % 30 == 17 { Err(i) } else { Ok(i) });
        assert_eq!(err, Err(17));
        assert_eq!(map_parallel::<u8, u8>(0, |_| Ok(0)), Ok(vec![]));
    }
}
