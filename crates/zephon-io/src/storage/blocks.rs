//! The node-shared block cache of remote objects: a folder of fixed-size blocks, each fetched
//! once for every process of the node.
//!
//! - A block is a file named by the object's version (URL, ETag, size) and its index, written
//!   atomically (a hidden temporary, then a rename) with a trailer: its length and SHA-256. A
//!   block whose trailer does not match is not trusted (a writer killed mid-way leaves only a
//!   hidden temporary, and a damaged block is fetched again).
//! - One fetch per block for all processes: a process takes an exclusive lock on the block's
//!   lock file (`flock`), looks again, and fetches only if the block is still missing. The
//!   kernel releases the lock of a process that dies, so a killed holder never leaves a lock
//!   stuck.
//! - A size cap: past it, blocks of this cache's own naming are removed (nothing else in the
//!   folder ever is): by default the block whose next read by this process's lanes is furthest
//!   ahead, as the schedule said ([`BlockCache::plan`]), after those it will not read again;
//!   or the least recently used (a block read is touched).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use crate::Eviction;
use crate::shard::write_atomic;
use zephon_core::PlannedRead;

/// What every block file ends with, after its bytes: length (8 bytes LE), SHA-256 (32), magic.
const MAGIC: &[u8; 8] = b"ZPHBLK01";
const TRAILER: u64 = 8 + 32 + 8;

/// The prefix of every file this cache writes: eviction touches nothing else.
const PREFIX: &str = "blk-";

/// Counters of one cache (or one store's use of it), for reports.
#[derive(Debug, Default)]
pub struct BlockStats {
    /// Blocks found in the cache (this process or another fetched them).
    pub hits: AtomicU64,
    /// Blocks fetched from the store.
    pub misses: AtomicU64,
    /// Bytes fetched from the store.
    pub bytes_fetched: AtomicU64,
    /// Requests made to the store (fetches, listings, metadata).
    pub requests: AtomicU64,
    /// Of the blocks fetched, those fetched ahead of their read by prefetch.
    pub prefetched: AtomicU64,
}

/// One block: of the object version `key`, its `index`-th, holding `len` bytes.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Block<'a> {
    pub(crate) key: &'a str,
    pub(crate) index: u64,
    pub(crate) len: u64,
}

/// A folder of blocks shared by the processes of a node.
#[derive(Debug)]
pub(crate) struct BlockCache {
    dir: PathBuf,
    cap: u64,
    /// Bytes this process believes the folder holds; a scan sets it when it passes the cap.
    used: AtomicU64,
    /// Blocks this process has checked against their trailer (read by positioned reads after).
    checked: Mutex<HashSet<PathBuf>>,
    eviction: Eviction,
    /// When this process's lanes read each block next, as the schedule said.
    plan: Mutex<NextUses>,
}

/// The reads the schedule planned: by block, the streams (lanes) and chunks that read it; by
/// stream, where it is (its newest plan), which says when each of its reads comes and which
/// are past.
#[derive(Debug, Default)]
struct NextUses {
    lanes: HashMap<u64, PlannedRead>,
    uses: HashMap<PathBuf, Vec<(u64, u64)>>,
}

impl NextUses {
    /// When the block at `path` is read next, in thousandths of a step; `None` when no lane
    /// of this process plans to.
    fn next(&self, path: &Path) -> Option<u64> {
        let uses = self.uses.get(path)?;
        uses.iter().filter_map(|&(lane, chunk)| self.lanes.get(&lane)?.when(chunk)).min()
    }

    /// Forgets the reads that are past: those of chunks before the one their lane reads now.
    fn forget_past(&mut self) {
        let lanes = &self.lanes;
        self.uses.retain(|_, uses| {
            uses.retain(|(lane, chunk)| lanes.get(lane).is_some_and(|at| *chunk >= at.chunk_now));
            !uses.is_empty()
        });
    }
}

impl BlockCache {
    /// The cache in `dir`, holding at most `cap` bytes of blocks, evicting by `eviction`.
    pub(crate) fn new(dir: PathBuf, cap: u64, eviction: Eviction) -> io::Result<BlockCache> {
        fs::create_dir_all(&dir).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
        crate::shard::remove_stale_temporaries(std::slice::from_ref(&dir));
        let cache = BlockCache {
            dir,
            cap,
            used: AtomicU64::new(0),
            checked: Mutex::new(HashSet::new()),
            eviction,
            plan: Mutex::new(NextUses::default()),
        };
        cache.used.store(cache.scan().iter().map(|(_, n, _)| n).sum(), Ordering::Relaxed);
        Ok(cache)
    }

    /// The most bytes it holds.
    pub(crate) fn cap(&self) -> u64 {
        self.cap
    }

    /// The folder.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// How many bytes of reads ahead the schedule should announce ([`BlockCache::plan`]):
    /// twice the cache under eviction by next use (what is read again within that span is
    /// what a full cache can keep), none under LRU.
    pub(crate) fn plans_ahead(&self) -> u64 {
        match self.eviction {
            Eviction::NextUse => self.cap.saturating_mul(2),
            Eviction::Lru => 0,
        }
    }

    /// The schedule's word: blocks `blocks` of the object version `key` are read as `read`
    /// says.
    pub(crate) fn plan(&self, key: &str, blocks: std::ops::RangeInclusive<u64>, read: &PlannedRead) {
        if self.eviction != Eviction::NextUse {
            return;
        }
        let mut plan = self.plan.lock().unwrap_or_else(PoisonError::into_inner);
        let lane = plan.lanes.entry(read.stream).or_insert(*read);
        if (read.chunk_now, read.step_milli) >= (lane.chunk_now, lane.step_milli) {
            *lane = *read;
        }
        for index in blocks {
            let uses = plan.uses.entry(self.path_of(key, index)).or_default();
            if !uses.contains(&(read.stream, read.chunk)) {
                uses.push((read.stream, read.chunk));
            }
        }
    }

    fn path_of(&self, key: &str, index: u64) -> PathBuf {
        let digest = hex::encode(&Sha256::digest(key.as_bytes())[..16]);
        self.dir.join(format!("{PREFIX}{digest}-{index}"))
    }

    /// Reads `buf.len()` bytes at `offset` of `block`, fetching it with `fetch` when no process
    /// of the node has.
    pub(crate) fn read(
        &self,
        block: Block<'_>,
        offset: u64,
        buf: &mut [u8],
        stats: &BlockStats,
        fetch: impl Fn() -> io::Result<Vec<u8>>,
    ) -> io::Result<()> {
        let path = self.path_of(block.key, block.index);
        let mut tries = 0;
        loop {
            match self.ensure_bytes(block, stats, &fetch)? {
                // Fetched now: read from memory, since another thread may evict the file before
                // this one opens it (a block just read is the first an eviction takes).
                Some(bytes) => {
                    let start = usize::try_from(offset).unwrap_or(usize::MAX);
                    let piece =
                        start.checked_add(buf.len()).and_then(|end| bytes.get(start..end)).ok_or_else(|| {
                            io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                format!("bytes {offset}..+{} are past the block's {}", buf.len(), bytes.len()),
                            )
                        })?;
                    buf.copy_from_slice(piece);
                    return Ok(());
                }
                None => {
                    stats.hits.fetch_add(1, Ordering::Relaxed);
                }
            }
            match fs::File::open(&path) {
                Ok(file) => {
                    file.read_exact_at(buf, offset)?;
                    // Touched on use, so that eviction takes the least recently used.
                    let _ = file.set_modified(SystemTime::now());
                    return Ok(());
                }
                // Evicted (by another thread or process) between its check and this open:
                // fetched again.
                Err(e) if e.kind() == io::ErrorKind::NotFound && tries < 3 => {
                    tries += 1;
                    self.lock_checked().remove(&path);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Whether this process already checked `block` whole (no I/O): a prefetch of it is not
    /// needed.
    pub(crate) fn known(&self, block: Block<'_>) -> bool {
        self.lock_checked().contains(&self.path_of(block.key, block.index))
    }

    /// Makes sure `block` is in the cache, fetching it with `fetch` when no process of the
    /// node has; whether this call fetched it.
    pub(crate) fn ensure(
        &self,
        block: Block<'_>,
        stats: &BlockStats,
        fetch: impl FnOnce() -> io::Result<Vec<u8>>,
    ) -> io::Result<bool> {
        self.ensure_bytes(block, stats, fetch).map(|fetched| fetched.is_some())
    }

    /// As [`BlockCache::ensure`], with the block's bytes when this call fetched them.
    fn ensure_bytes(
        &self,
        block: Block<'_>,
        stats: &BlockStats,
        fetch: impl FnOnce() -> io::Result<Vec<u8>>,
    ) -> io::Result<Option<Vec<u8>>> {
        let Block { key, index, len } = block;
        let path = self.path_of(key, index);
        if self.usable(&path, len) {
            return Ok(None);
        }
        let lock_path = path.with_extension("lock");
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", lock_path.display())))?;
        lock.lock()?;
        // Another process (or a prefetch) may have fetched it while this one waited.
        if self.usable(&path, len) {
            return Ok(None);
        }
        stats.misses.fetch_add(1, Ordering::Relaxed);
        let bytes = fetch()?;
        if bytes.len() as u64 != len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("block {index} came back with {} bytes instead of {len}", bytes.len()),
            ));
        }
        stats.bytes_fetched.fetch_add(len, Ordering::Relaxed);
        self.write_block(&path, &bytes)?;
        self.lock_checked().insert(path.clone());
        if self.used.fetch_add(len + TRAILER, Ordering::Relaxed) + len + TRAILER > self.cap {
            self.evict(&path, self.cap);
        }
        drop(lock);
        Ok(Some(bytes))
    }

    /// Writes a block with its trailer. A full disk evicts half of what the cache holds and
    /// tries once more, then is an error that says so.
    fn write_block(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.with_room(path, || {
            write_atomic(path, |f| {
                use io::Write;
                f.write_all(bytes)?;
                f.write_all(&(bytes.len() as u64).to_le_bytes())?;
                f.write_all(&Sha256::digest(bytes))?;
                f.write_all(MAGIC)
            })
        })
    }

    /// Runs `write` (of the block at `path`); on a full disk, evicts half of what the cache
    /// holds and runs it once more.
    fn with_room(&self, path: &Path, write: impl Fn() -> io::Result<()>) -> io::Result<()> {
        match write() {
            Err(e) if disk_full(&e) => {
                let held = self.scan().iter().map(|(_, n, _)| n).sum::<u64>();
                self.evict(path, held / 2);
                write().map_err(|e| {
                    if disk_full(&e) {
                        io::Error::new(
                            e.kind(),
                            format!(
                                "the block cache {} is on a full disk, and still was after evicting blocks down to \
                                 {} bytes: free space there, or give [storage] cache_dir on another disk or a \
                                 smaller cache_bytes",
                                self.dir.display(),
                                held / 2
                            ),
                        )
                    } else {
                        e
                    }
                })
            }
            other => other,
        }
    }

    fn lock_checked(&self) -> std::sync::MutexGuard<'_, HashSet<PathBuf>> {
        self.checked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the block file exists whole: its trailer checked once per process.
    fn usable(&self, path: &Path, len: u64) -> bool {
        if self.lock_checked().contains(path) {
            return path.exists();
        }
        let Ok(bytes) = fs::read(path) else { return false };
        let good = bytes.len() as u64 == len + TRAILER && {
            let (data, trailer) = bytes.split_at(len as usize);
            trailer[..8] == len.to_le_bytes() && trailer[8..40] == Sha256::digest(data)[..] && &trailer[40..] == MAGIC
        };
        if good {
            self.lock_checked().insert(path.to_path_buf());
        }
        good
    }

    /// This cache's blocks: path, bytes, last use.
    fn scan(&self) -> Vec<(PathBuf, u64, SystemTime)> {
        let Ok(entries) = fs::read_dir(&self.dir) else { return Vec::new() };
        entries
            .flatten()
            .filter(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.starts_with(PREFIX) && !name.ends_with(".lock")
            })
            .filter_map(|e| {
                let meta = e.metadata().ok()?;
                Some((e.path(), meta.len(), meta.modified().unwrap_or(SystemTime::UNIX_EPOCH)))
            })
            .collect()
    }

    /// Removes blocks, in the order of [`BlockCache::eviction`], until the cache holds at most
    /// `target` bytes (never `keep`, the block just written).
    fn evict(&self, keep: &Path, target: u64) {
        let counted = self.used.load(Ordering::Relaxed);
        let mut blocks = self.scan();
        let mut used: u64 = blocks.iter().map(|(_, n, _)| n).sum();
        match self.eviction {
            Eviction::Lru => blocks.sort_by_key(|(_, _, t)| *t),
            Eviction::NextUse => self.order_by_next_use(&mut blocks),
        }
        for (path, n, _) in blocks {
            if used <= target {
                break;
            }
            if path == keep {
                continue;
            }
            if fs::remove_file(&path).is_ok() {
                used -= n;
                self.lock_checked().remove(&path);
            }
        }
        // What is left, plus what other threads wrote since the scan (they counted it, and may
        // have seen the cap not yet passed).
        let _ = self.used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
            Some(used.saturating_add(now.saturating_sub(counted)))
        });
    }
}

impl BlockCache {
    /// Orders `blocks` for eviction by next use: first the blocks this process read and will
    /// not read again (least recently used first), then those of other processes, whose
    /// plans it does not know (least recently used first), then the rest, the one read
    /// furthest ahead first.
    fn order_by_next_use(&self, blocks: &mut [(PathBuf, u64, SystemTime)]) {
        let mut plan = self.plan.lock().unwrap_or_else(PoisonError::into_inner);
        plan.forget_past();
        let checked = self.lock_checked();
        blocks.sort_by_cached_key(|(path, _, t)| match plan.next(path) {
            Some(next) => (2, u64::MAX - next, *t),
            None if checked.contains(path) => (0, 0, *t),
            None => (1, 0, *t),
        });
    }
}

/// Whether `e` says the disk is full (ENOSPC, or a quota: EDQUOT).
fn disk_full(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::StorageFull || e.kind() == io::ErrorKind::QuotaExceeded || e.raw_os_error() == Some(28)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_fetched_once_checked_and_evicted_by_last_use() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = BlockCache::new(tmp.path().join("blocks"), 2 * (10 + TRAILER), Eviction::Lru).unwrap();
        let stats = BlockStats::default();
        let mut buf = [0u8; 4];
        for round in 0..2 {
            cache
                .read(Block { key: "obj", index: 0, len: 10 }, 3, &mut buf, &stats, || Ok(b"0123456789".to_vec()))
                .unwrap();
            assert_eq!(&buf, b"3456", "round {round}");
        }
        assert_eq!((stats.misses.load(Ordering::Relaxed), stats.hits.load(Ordering::Relaxed)), (1, 1));
        // A damaged block is not trusted: fetched again.
        let path = cache.path_of("obj", 0);
        let mut bytes = fs::read(&path).unwrap();
        bytes[2] ^= 1;
        fs::write(&path, &bytes).unwrap();
        let fresh = BlockCache::new(tmp.path().join("blocks"), 2 * (10 + TRAILER), Eviction::Lru).unwrap();
        fresh
            .read(Block { key: "obj", index: 0, len: 10 }, 0, &mut buf, &stats, || Ok(b"0123456789".to_vec()))
            .unwrap();
        assert_eq!(&buf, b"0123");
        assert_eq!(stats.misses.load(Ordering::Relaxed), 2);
        // Two more blocks: the cap holds two, the least recently used goes.
        std::thread::sleep(std::time::Duration::from_millis(20));
        fresh
            .read(Block { key: "obj", index: 1, len: 10 }, 0, &mut buf, &stats, || Ok(b"abcdefghij".to_vec()))
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        fresh
            .read(Block { key: "obj", index: 2, len: 10 }, 0, &mut buf, &stats, || Ok(b"ABCDEFGHIJ".to_vec()))
            .unwrap();
        assert!(!fresh.path_of("obj", 0).exists() && fresh.path_of("obj", 2).exists());
        // Nothing but its own blocks is ever removed.
        fs::write(tmp.path().join("blocks/mine.txt"), b"x").unwrap();
        fresh
            .read(Block { key: "obj", index: 3, len: 10 }, 0, &mut buf, &stats, || Ok(b"klmnopqrst".to_vec()))
            .unwrap();
        assert!(tmp.path().join("blocks/mine.txt").exists());
        // A fetch that comes back short is an error, and leaves nothing behind.
        let err = fresh
            .read(Block { key: "obj", index: 9, len: 10 }, 0, &mut buf, &stats, || Ok(b"short".to_vec()))
            .unwrap_err();
        assert!(err.to_string().contains("5 bytes instead of 10"), "{err}");
        assert!(!fresh.path_of("obj", 9).exists());
    }

    #[test]
    fn a_full_disk_evicts_half_and_writes_once_more_then_says_so() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = BlockCache::new(tmp.path().join("blocks"), 1 << 20, Eviction::Lru).unwrap();
        let stats = BlockStats::default();
        let mut buf = [0u8; 1];
        for i in 0..4 {
            std::thread::sleep(std::time::Duration::from_millis(10));
            cache.read(Block { key: "obj", index: i, len: 10 }, 0, &mut buf, &stats, || Ok(vec![i as u8; 10])).unwrap();
        }
        let full = || io::Error::new(io::ErrorKind::StorageFull, "No space left on device");
        // Full once: half the blocks (the least recently used) go, and the write goes through.
        let tries = std::cell::Cell::new(0);
        let target = cache.path_of("obj", 9);
        cache
            .with_room(&target, || {
                tries.set(tries.get() + 1);
                if tries.get() == 1 { Err(full()) } else { Ok(()) }
            })
            .unwrap();
        assert_eq!(tries.get(), 2);
        let left: Vec<bool> = (0..4).map(|i| cache.path_of("obj", i).exists()).collect();
        assert_eq!(left, [false, false, true, true], "the two least recently used went");
        // Still full after that: an error that says where and what to do.
        let err = cache.with_room(&target, || Err(full())).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::StorageFull);
        assert!(err.to_string().contains("full disk") && err.to_string().contains("cache_dir"), "{err}");
        // Other errors are not retried.
        tries.set(0);
        let err = cache
            .with_room(&target, || {
                tries.set(tries.get() + 1);
                Err(io::Error::new(io::ErrorKind::PermissionDenied, "no"))
            })
            .unwrap_err();
        assert_eq!((tries.get(), err.kind()), (1, io::ErrorKind::PermissionDenied));
    }

    #[test]
    fn next_use_evicts_what_is_read_furthest_ahead_after_what_is_never_read_again() {
        let tmp = tempfile::tempdir().unwrap();
        let cap = 3 * (10 + TRAILER);
        let cache = BlockCache::new(tmp.path().join("blocks"), cap, Eviction::NextUse).unwrap();
        assert_eq!(cache.plans_ahead(), 2 * cap);
        let stats = BlockStats::default();
        let read = |i: u64| {
            let mut b = [0u8; 1];
            cache.read(Block { key: "obj", index: i, len: 10 }, 0, &mut b, &stats, || Ok(vec![i as u8; 10])).unwrap();
        };
        // Lane 0 reads a chunk a step, lane 1 a chunk every other step; both are at step 0.
        let plan = |lane: u32, chunk: u64, chunk_now: u64, blocks: std::ops::RangeInclusive<u64>| {
            let pace = if lane == 0 { 1000 } else { 2000 };
            let step_milli = chunk_now * pace;
            cache.plan(
                "obj",
                blocks,
                &PlannedRead { stream: u64::from(lane), chunk, chunk_now, step_milli, milli_per_chunk: pace },
            );
        };
        let held = |cache: &BlockCache| -> Vec<bool> { (0..5).map(|i| cache.path_of("obj", i).exists()).collect() };
        // Lane 0 reads blocks 0, 1, 2 in its chunk 0 and block 0 again in its chunk 5; lane 1
        // reads block 1 in its chunk 4.
        plan(0, 0, 0, 0..=2);
        plan(0, 5, 0, 0..=0);
        plan(1, 4, 0, 1..=1);
        (0..3).for_each(read);
        // Lane 0 moves to its chunk 1, reading block 3: block 2 goes, never read again.
        plan(0, 1, 1, 3..=3);
        read(3);
        assert_eq!(held(&cache), [true, true, false, true, false]);
        // Lane 0 moves to its chunk 2, reading block 4: its read of block 3 is past.
        plan(0, 2, 2, 4..=4);
        read(4);
        assert_eq!(held(&cache), [true, true, false, false, true]);
        // Lane 1 moves to its chunk 1, reading block 2. Blocks 0 and 1 are each three chunks
        // ahead of their lane, but lane 1 is slower: block 1 (step 8) is read after block 0
        // (step 5), and goes.
        plan(1, 1, 1, 2..=2);
        read(2);
        assert_eq!(held(&cache), [true, false, true, false, true]);
        // Under LRU, no plan is kept and none is asked for.
        let lru = BlockCache::new(tmp.path().join("lru"), cap, Eviction::Lru).unwrap();
        lru.plan("obj", 0..=9, &PlannedRead { stream: 0, chunk: 1, chunk_now: 0, step_milli: 0, milli_per_chunk: 1 });
        assert_eq!((lru.plans_ahead(), lru.plan.lock().unwrap().uses.len()), (0, 0));
    }
}
