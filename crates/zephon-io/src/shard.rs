//! What identifies a shard's content, the on-disk cache that makes knowing it cheap, and the
//! cache's housekeeping (atomic writes, stale temporaries).
//!
//! A shard's version is the SHA-256 of all its bytes. Anything less (sizes, sampled windows,
//! modification times) lets an edit through: a checkpoint would then restore on changed data
//! and a JSONL offset index would be reused on the wrong file. Hashing a whole dataset is paid
//! once per file version: the hash is cached under the file's path and its `stat` identity
//! (device, inode, size, mtime and ctime in nanoseconds). ctime is in the key because no user
//! tool can set it: an edit that restores the mtime still changes the ctime.

use std::fs;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};
use zephon_core::ShardManifest;

const CONTENT_MAGIC: &str = "ZEPHON-CONTENT-HASH v1";

/// How recent a change must be for a file to count as still changing. File systems stamp
/// ctime from a clock that lags the real one by up to a tick (1–10 ms), so a second edit right
/// after hashing can carry the same ctime as the version that was hashed; such a file's hash
/// is not cached (git calls this "racily clean"). Generous, because it costs nothing on data
/// that sits still.
const RACY_WINDOW: Duration = Duration::from_millis(100);

const CHUNK: usize = 1 << 20;

/// A file version as the file system identifies it. When all of it is unchanged, so is the
/// content (short of a clock set back or a raw disk write).
#[derive(Clone, Debug)]
pub(crate) struct Stat {
    dev: u64,
    ino: u64,
    pub(crate) size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    /// The wall clock just before the file was stat'ed (not part of the identity).
    observed_ns: i128,
}

impl Stat {
    /// The identity of the file `file`.
    pub(crate) fn of(file: &fs::File) -> io::Result<Stat> {
        let observed_ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i128);
        let meta = file.metadata()?;
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Ok(Stat {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.len(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
            observed_ns,
        })
    }

    pub(crate) fn same_version(&self, other: &Stat) -> bool {
        self.line() == other.line()
    }

    /// Whether a change after this stat could carry the same ctime (see [`RACY_WINDOW`]).
    fn racy(&self) -> bool {
        self.ctime_ns >= self.observed_ns - RACY_WINDOW.as_nanos() as i128
    }

    fn line(&self) -> String {
        format!("dev {} ino {} size {} mtime {} ctime {}", self.dev, self.ino, self.size, self.mtime_ns, self.ctime_ns)
    }
}

/// Opens a shard for reading, refusing what is not a regular file: opening a FIFO blocks until
/// someone writes to it, so a FIFO named `x.jsonl` would hang the run instead of failing it.
pub(crate) fn open_regular(path: &Path) -> io::Result<(fs::File, Stat)> {
    let meta = fs::metadata(path)?;
    if !meta.is_file() {
        let what = if meta.is_dir() { "a directory" } else { "not a regular file (a FIFO, socket or device?)" };
        return Err(io::Error::new(io::ErrorKind::InvalidInput, what));
    }
    let file = fs::File::open(path)?;
    // The name may have been swapped between the check and the open: check what was opened.
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
    }
    let stat = Stat::of(&file)?;
    Ok((file, stat))
}

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

/// The content hash of `file` (opened from `path`, with `stat`): from the cache under `cache`
/// when this exact file version was hashed before, else by reading it once, handing each piece
/// to `also` too (so a caller can index while the file is hashed).
pub(crate) fn content_hash(
    file: &fs::File,
    path: &Path,
    stat: &Stat,
    cache: &Path,
    also: &mut dyn FnMut(&[u8]),
) -> io::Result<Hashed> {
    let entry = content_entry_path(cache, path, stat);
    let header = content_header(path, stat);
    if let Some(hash) = load_content_entry(&entry, &header) {
        return Ok(Hashed { hash, read_through: false, bytes_read: 0 });
    }
    let mut reader = HashingReader::new(file);
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
    // Cached only when the file did not change while it was read and is not racily recent.
    let unchanged = Stat::of(file).is_ok_and(|after| after.same_version(stat));
    if unchanged && at == stat.size && !stat.racy() {
        // A cache that cannot be written (read-only disk) only costs a rehash next time.
        let _ = write_atomic(&entry, |f| io::Write::write_all(f, format!("{header}{hash}\n").as_bytes()));
    }
    Ok(Hashed { hash, read_through: true, bytes_read: at })
}

/// Reads a file from its start (with positioned reads, leaving the descriptor's offset alone)
/// through SHA-256, so that whatever consumes the bytes (a decompressor) also proves which
/// content it consumed.
pub(crate) struct HashingReader<'a> {
    file: &'a fs::File,
    h: Sha256,
    pos: u64,
}

impl<'a> HashingReader<'a> {
    pub(crate) fn new(file: &'a fs::File) -> Self {
        HashingReader { file, h: Sha256::new(), pos: 0 }
    }

    /// `sha256:<hex>` of the whole file (the part not read yet is read now), and its length.
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
        let n = self.file.read_at(buf, self.pos)?;
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

fn content_header(path: &Path, stat: &Stat) -> String {
    format!("{CONTENT_MAGIC}\n{}\n{}\n", absolute(path).display(), stat.line())
}

fn content_entry_path(cache: &Path, path: &Path, stat: &Stat) -> PathBuf {
    let mut h = Sha256::new();
    h.update(content_header(path, stat).as_bytes());
    cache.join("content").join(hex::encode(&h.finalize()[..16]))
}

fn load_content_entry(entry: &Path, header: &str) -> Option<String> {
    let text = fs::read_to_string(entry).ok()?;
    let hash = text.strip_prefix(header)?.strip_suffix('\n')?;
    let hex = hash.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| hash.to_string())
}

fn absolute(path: &Path) -> PathBuf {
    fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The hex digits of a `sha256:<hex>` content hash, for cache file names.
pub(crate) fn hash_hex(hash: &str) -> &str {
    hash.strip_prefix("sha256:").unwrap_or(hash)
}

/// A manifest entry for a shard file.
pub(crate) fn manifest_entry(path: &Path, rows: u64, stat: &Stat, hash: String) -> ShardManifest {
    ShardManifest { path: path.display().to_string(), rows, bytes: stat.size, version: hash }
}

pub(crate) use zephon_core::disk::{cache_dir as default_cache_dir, remove_stale_temporaries, write_atomic};

/// The cache folders each kind of dataset writes to.
pub(crate) const CONTENT_DIR: &str = "content";

/// Opens a dataset's shards, several at a time, in order: removes stale temporaries from the
/// format's `cache_dirs` under the cache folder, then runs `open(path, cache)` on every shard.
/// The first shard that fails (in order, whatever the timing) is the error, naming the dataset
/// and the file.
pub(crate) fn open_shards<S: Send>(
    name: &str,
    paths: &[PathBuf],
    options: &crate::DatasetOptions,
    cache_dirs: &[&str],
    open: impl Fn(&Path, &Path) -> Result<(S, ShardManifest), String> + Sync,
) -> crate::Result<(Vec<S>, Vec<ShardManifest>)> {
    let cache = options.cache_dir.clone().unwrap_or_else(default_cache_dir);
    remove_stale_temporaries(&cache_dirs.iter().map(|d| cache.join(d)).collect::<Vec<_>>());
    let opened = map_parallel(paths.len(), |i| {
        open(&paths[i], &cache).map_err(|message| crate::Error::Open {
            dataset: name.to_string(),
            path: paths[i].clone(),
            message,
        })
    })?;
    Ok(opened.into_iter().unzip())
}

/// `f(0..n)` on up to 8 threads, results in order. On errors, the one of the lowest index is
/// returned (and higher indexes are not started), so the message does not depend on timing.
pub(crate) fn map_parallel<T: Send, E: Send>(n: usize, f: impl Fn(usize) -> Result<T, E> + Sync) -> Result<Vec<T>, E> {
    let threads = std::thread::available_parallelism().map_or(1, |p| p.get()).min(8).min(n);
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
        let hash = |also: &mut dyn FnMut(&[u8])| {
            let (f, stat) = open_regular(&p).unwrap();
            content_hash(&f, &p, &stat, &cache, also).unwrap()
        };
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
            let (f, stat) = open_regular(&p).unwrap();
            assert!(content_hash(&f, &p, &stat, &cache, &mut |_| {}).unwrap().read_through);
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
        let err = open_regular(&p).err().unwrap().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        let err = open_regular(tmp.path()).err().unwrap().to_string();
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
