//! The one storage seam: every reader reads through an [`Object`], found in a [`Store`].
//!
//! An object is what a reader needs of a shard or an image file: its size, positioned reads,
//! and what identifies its version without reading it (caches of content hashes and indexes
//! are keyed by that, never by a local path). A store lists the objects under its root
//! (recursively, sorted by relative path) and opens them. [`LocalStore`] is the local disk;
//! [`MemoryStore`] holds objects in memory (tests use it to prove no reader opens a file by
//! itself); object stores plug in the same way.
//!
//! What it is not: no reader logic and no caching policy live here, only bytes and identity.

use std::fmt;
use std::io;
use std::sync::Arc;
use zephon_core::PlannedRead;

#[cfg(feature = "remote")]
mod blocks;
pub(crate) mod local;
mod memory;
#[cfg(feature = "remote")]
mod remote;

pub use local::{LocalObject, LocalStore};
pub use memory::MemoryStore;
#[cfg(feature = "remote")]
pub use remote::RemoteStore;

/// Whether `text` is the URL of an object store (`s3://`, `gs://`, `az://`, `abfs://`,
/// `http://`, `https://`), which needs the `remote` feature.
pub fn is_url(text: &str) -> bool {
    ["s3://", "gs://", "az://", "abfs://", "abfss://", "azure://", "http://", "https://"]
        .iter()
        .any(|s| text.starts_with(s))
}

/// What a remote store did, for reports: bytes and requests, block cache hits and misses,
/// retries.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Bytes fetched from the store.
    pub bytes_fetched: u64,
    /// Requests made (reads, listings, metadata).
    pub requests: u64,
    /// Blocks found in the node's block cache.
    pub cache_hits: u64,
    /// Blocks fetched into it.
    pub cache_misses: u64,
    /// Of those, blocks fetched ahead of their read by prefetch.
    pub prefetched: u64,
    /// Requests tried again after a fault (a 5xx or 429 answer, a reset, a body cut short, a
    /// stall).
    pub retries: u64,
    /// Requests cut by the stall timeout.
    pub stalls: u64,
}

impl std::ops::AddAssign for StoreStats {
    fn add_assign(&mut self, o: StoreStats) {
        self.bytes_fetched += o.bytes_fetched;
        self.requests += o.requests;
        self.cache_hits += o.cache_hits;
        self.cache_misses += o.cache_misses;
        self.prefetched += o.prefetched;
        self.retries += o.retries;
        self.stalls += o.stalls;
    }
}

/// `spans` (byte ranges in reading order) merged where they touch or lie within `gap` bytes of
/// each other: the ranges a reader hints at ([`Object::prefetch`]).
pub fn coalesce(spans: impl IntoIterator<Item = (u64, u64)>, gap: u64) -> Vec<std::ops::Range<u64>> {
    let mut out: Vec<std::ops::Range<u64>> = Vec::new();
    for (start, end) in spans {
        match out.last_mut() {
            Some(last) if start >= last.start && start <= last.end.saturating_add(gap) => last.end = last.end.max(end),
            _ => out.push(start..end),
        }
    }
    out
}

/// What the schedule says of reads to come, as readers pass it on to their objects.
#[derive(Copy, Clone, Debug)]
pub(crate) enum Upcoming<'a> {
    /// Read soon: fetch now ([`Object::prefetch`]).
    Soon,
    /// Read as planned ([`Object::plan`]).
    Planned(&'a PlannedRead),
}

impl Upcoming<'_> {
    /// Whether `object` does anything with it: readers turn samples into byte ranges only then.
    pub(crate) fn wanted_by(self, object: &dyn Object) -> bool {
        match self {
            Upcoming::Soon => object.fetches_ahead(),
            Upcoming::Planned(_) => object.plans_ahead() > 0,
        }
    }

    /// Tells `object` of the byte spans `spans` (start, end), those closer than 64 KiB as one.
    pub(crate) fn tell(self, object: &dyn Object, spans: impl IntoIterator<Item = (u64, u64)>) {
        for range in coalesce(spans, 64 << 10) {
            match self {
                Upcoming::Soon => object.prefetch(range),
                Upcoming::Planned(read) => object.plan(range, read),
            }
        }
    }
}

/// One readable object: a local file, an object in memory or in a bucket.
pub trait Object: Send + Sync + fmt::Debug {
    /// Where it is, as a user names it (a path or a URL): what messages say.
    fn location(&self) -> &str;

    /// Its size in bytes, as opened.
    fn size(&self) -> u64;

    /// What identifies this version of it without reading it: caches of what was computed from
    /// its bytes are keyed by this (a local file: its absolute path, device, inode, size,
    /// modification and change times).
    fn version(&self) -> &str;

    /// Whether [`Object::version`] may key a cache: false for a local file changed so recently
    /// that a further change could carry the same times.
    fn settled(&self) -> bool {
        true
    }

    /// What identifies its content without reading it, when the store says (a remote
    /// object's ETag and size); `None`: the content is hashed (SHA-256 of every byte).
    fn content_version(&self) -> Option<&str> {
        None
    }

    /// Reads up to `buf.len()` bytes at `offset` into `buf`; how many (0 at the end).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;

    /// Whether it is still the version it was opened as.
    fn unchanged(&self) -> io::Result<bool>;

    /// A hint that bytes `range` will be read soon: a remote object starts fetching the blocks
    /// they lie in, in the background and bounded; a local one does nothing. Returns at once
    /// and never changes what a read returns.
    fn prefetch(&self, range: std::ops::Range<u64>) {
        let _ = range;
    }

    /// Whether [`Object::prefetch`] does anything: readers skip turning samples into byte
    /// ranges for an object that does not fetch ahead (a local file).
    fn fetches_ahead(&self) -> bool {
        false
    }

    /// The schedule's word that bytes `range` are read as `read` says: a cache that evicts by
    /// next use keeps what is read soonest. Returns at once; never changes what a read returns.
    fn plan(&self, range: std::ops::Range<u64>, read: &PlannedRead) {
        let _ = (range, read);
    }

    /// How many bytes of reads ahead it wants announced by [`Object::plan`]; 0 (the default):
    /// none.
    fn plans_ahead(&self) -> u64 {
        0
    }

    /// Reads exactly `buf.len()` bytes at `offset`; an error naming the range if it ends
    /// before.
    fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        let (start, want) = (offset, buf.len());
        while !buf.is_empty() {
            match self.read_at(buf, offset) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("bytes {start}..{} are past its end ({} bytes)", start + want as u64, self.size()),
                    ));
                }
                Ok(n) => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Where objects are found: a root that lists and opens them by path relative to it.
pub trait Store: Send + Sync + fmt::Debug {
    /// The root, as a user names it.
    fn root(&self) -> &str;

    /// Every object under the root, recursively, by path relative to it (`/`-separated), in
    /// byte order of those paths. Folders and files whose name starts with `.` or `_`
    /// (`.git`, `_SUCCESS`, `_temporary`) are left out; what cannot be listed (a broken link,
    /// a folder without permission) is an error naming it.
    fn list(&self) -> io::Result<Vec<String>>;

    /// The object at `relative` (a path relative to the root, `/`-separated).
    fn open(&self, relative: &str) -> io::Result<Arc<dyn Object>>;

    /// What it did so far, if it counts (a remote store).
    fn stats(&self) -> Option<StoreStats> {
        None
    }

    /// The location of `relative` as a user names it (the root joined with it).
    fn location_of(&self, relative: &str) -> String {
        let root = self.root().trim_end_matches('/');
        if root.is_empty() { relative.to_string() } else { format!("{root}/{relative}") }
    }
}

/// Whether a path component is left out of listings: hidden (`.git`, `.gitattributes`) or
/// marked as metadata by a leading underscore (`_SUCCESS`, `_temporary`, `_delta_log`).
pub(crate) fn hidden(component: &str) -> bool {
    component.starts_with('.') || component.starts_with('_')
}

/// A reader over an object from `start`, with positioned reads (no shared offset).
#[cfg(feature = "parquet")]
pub(crate) struct ObjectReader<'a> {
    object: &'a dyn Object,
    pub(crate) pos: u64,
}

#[cfg(feature = "parquet")]
impl<'a> ObjectReader<'a> {
    pub(crate) fn new(object: &'a dyn Object, start: u64) -> Self {
        ObjectReader { object, pos: start }
    }
}

#[cfg(feature = "parquet")]
impl io::Read for ObjectReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.object.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}
