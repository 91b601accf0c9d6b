//! Shard readers for zephon: datasets as shards of rows, read by [`SampleId`].
//!
//! The one design decision: **address by row, fetch in bulk.** A work source names samples
//! one by one (dataset, shard, row), in whatever order its shuffles chose; readers make that
//! cheap. JSONL shards get a byte-offset index, built in one pass per file version and cached
//! on disk, so any row is one positioned read. Parquet shards are decoded a row group at a
//! time (only the requested columns) and kept in a bounded cache, because a random Parquet row
//! costs a page decode anyway. WebDataset tar shards get a member index (a scan of their
//! headers, cached like the JSONL index), so a sample is a few positioned reads.
//!
//! **Images** (vision-language data) come from an HF image column, from paths in a JSONL
//! field, or from tar members, as [`Fields::images`] says. Each becomes an unplaced
//! attachment of kind [`IMAGE`] carrying the encoded file ([`IMAGE_BYTES`]) and where it
//! came from ([`IMAGE_SOURCE`]); a tokenizer places it, a vision operator decodes it. A row
//! re-read from its id yields the same images, so pixels never need to enter a checkpoint.
//!
//! Every shard has a manifest entry (rows, bytes, and as version the SHA-256 of the whole
//! file, `sha256:<hex>`), so a checkpoint taken on one version of the data refuses to restore
//! on another, however small the edit. The hash is computed once per file version (path,
//! size, mtime, ctime, inode) and cached, like the JSONL indexes it keys.
//!
//! **One storage seam.** No reader opens a file by itself: shards and image files are
//! [`storage::Object`]s found in a [`storage::Store`] (the local disk, memory, and object
//! stores the same way), and caches are keyed by an object's version identity, never by a
//! local path. A dataset is a [`Layout`]: files, folders (recursive), globs or a list of them,
//! in the order of their paths relative to their roots, of one [`Split`] when asked.
//!
//! What this crate is not: it decides no order (that is `zephon-mix`), tokenizes nothing, and
//! never panics on a malformed row. A bad row is an [`OpError::Data`] naming the file, the
//! field, the image path or the tar member as the user wrote it; the engine adds dataset,
//! shard and row. A Parquet shard whose columns cannot serve the requested fields, and a tar
//! shard that is truncated or damaged, are refused when opened, with the offset at fault.
//!
//! ```no_run
//! use zephon_io::{open, DatasetOptions};
//! let ds = open("corpus-a", "data/a/".as_ref(), &DatasetOptions::default())?;
//! println!("{} rows in {} shards", ds.manifest().rows(), ds.manifest().shards.len());
//! # Ok::<(), zephon_io::Error>(())
//! ```

#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

mod error;
mod fields;
mod images;
mod jsonl;
mod layout;
#[cfg(feature = "parquet")]
mod parquet;
#[cfg(feature = "parquet")]
mod parquet_images;
mod shard;
pub mod storage;
mod webdataset;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use error::{Error, Result};
pub use fields::Fields;
pub use jsonl::JsonlDataset;
pub use layout::{Found, Glob, Layout, Location, ShardRef, Split};
#[cfg(feature = "parquet")]
pub use parquet::ParquetDataset;
pub use webdataset::{KEY_FIELD, TarDataset};
pub use zephon_core::{Dataset, DatasetManifest, MemoryDataset, PlannedRead};
/// The names of image attachments and their values, as the vision operator reads them (one
/// list for every crate: [`zephon_operator::columns`]).
pub use zephon_operator::columns::{IMAGE, IMAGE_BYTES, IMAGE_SOURCE};
pub use zephon_operator::{OpError, SampleId};

/// How to open a dataset.
#[derive(Clone, Debug, Default)]
pub struct DatasetOptions {
    /// Which fields to read and how to check them.
    pub fields: Fields,
    /// Where content hashes, JSONL indexes and decompressed copies are cached (default:
    /// `ZEPHON_CACHE`, else `~/.cache/zephon`). Temporaries left there by dead writers are
    /// removed when a dataset is opened.
    pub cache_dir: Option<PathBuf>,
    /// Bytes of decoded Parquet row groups kept per dataset (default 256 MiB).
    pub parquet_cache_bytes: Option<usize>,
    /// Bytes of JSONL shards read whole into memory on first use, per dataset: rows of a
    /// held shard cost no system call each, which is most of reading a short document.
    /// Shards whose rows average at most 1 KiB are held in order while their total fits;
    /// the rest are read row by row.
    /// `Some(0)` holds none. The default is 64 MiB per dataset and 256 MiB for all the
    /// process's datasets opened with the default together.
    pub jsonl_held_bytes: Option<usize>,
    /// How object stores are reached and cached (URLs need the `remote` feature).
    pub storage: StorageOptions,
}

/// How object stores are reached (beyond what each cloud's SDK finds in the environment and
/// profiles) and how their blocks are cached on the node. Never holds a secret: credentials
/// come from the environment, AWS profiles and instance roles only.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StorageOptions {
    /// The endpoint (an S3-compatible server, a local emulator).
    pub endpoint: Option<String>,
    /// The region.
    pub region: Option<String>,
    /// Allow `http://` endpoints (default: https only).
    pub allow_http: bool,
    /// S3 path-style addressing (`endpoint/bucket/key`) instead of virtual hosts.
    pub path_style: Option<bool>,
    /// Bytes of a block, the unit fetched and cached (default 8 MiB).
    pub block_bytes: Option<u64>,
    /// The node's block cache folder, shared by its processes (default `blocks/` under the
    /// cache folder).
    pub cache_dir: Option<PathBuf>,
    /// The most bytes of blocks the cache holds (default 16 GiB); past it, blocks go by
    /// `eviction`.
    pub cache_bytes: Option<u64>,
    /// Which blocks go when the cache is full (default [`Eviction::NextUse`]).
    pub eviction: Option<Eviction>,
    /// Seconds one try of a request may take in all (default: no limit; the stall timeout
    /// watches progress instead).
    pub timeout_s: Option<f64>,
    /// Seconds a request may go without a byte arriving before it is cut and tried again
    /// (default 30).
    pub stall_timeout_s: Option<f64>,
    /// Tries of a request after the first, with exponential backoff and jitter, for 5xx and
    /// 429 answers, resets, bodies cut short and stalls (default 10).
    pub retries: Option<u32>,
    /// Requests a process keeps in flight fetching the blocks the schedule will read next
    /// (default 8; 0: no prefetch). Each holds at most one block in memory.
    pub prefetch_requests: Option<usize>,
}

impl StorageOptions {
    /// Bytes of a block.
    pub fn block_bytes(&self) -> u64 {
        self.block_bytes.unwrap_or(8 << 20).max(1)
    }

    /// Refuses settings no store can work with, naming the key.
    pub fn check(&self) -> std::result::Result<(), String> {
        for (key, v) in [("stall_timeout_s", self.stall_timeout_s), ("timeout_s", self.timeout_s)] {
            if let Some(v) = v
                && !(v.is_finite() && v > 0.0)
            {
                return Err(format!("[storage] {key} = {v}: give a positive number of seconds"));
            }
        }
        if self.block_bytes == Some(0) {
            return Err("[storage] block_bytes = 0: give a positive number of bytes".into());
        }
        Ok(())
    }

    /// How long a request may go without a byte arriving.
    pub fn stall_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.stall_timeout_s.unwrap_or(30.0).max(0.001))
    }

    /// Requests kept in flight by prefetch.
    pub fn prefetch_requests(&self) -> usize {
        self.prefetch_requests.unwrap_or(8)
    }

    /// Which blocks go when the cache is full.
    pub fn eviction(&self) -> Eviction {
        self.eviction.unwrap_or_default()
    }

    /// Tries of a request after the first.
    pub fn retries(&self) -> u32 {
        self.retries.unwrap_or(10)
    }

    /// The most bytes the block cache holds.
    pub fn cache_bytes(&self) -> u64 {
        self.cache_bytes.unwrap_or(16 << 30)
    }

    /// The least the block cache must hold for `lanes` lanes read by `threads` worker threads:
    /// a block per lane and two per thread, what they read at once, and one per prefetch
    /// request. Less would have blocks evicted while a step still reads them.
    pub fn cache_needed(&self, lanes: usize, threads: usize) -> u64 {
        self.block_bytes().saturating_mul((lanes + 2 * threads + self.prefetch_requests()) as u64)
    }

    /// In words, for `explain`.
    pub fn describe(&self) -> String {
        let dir = self
            .cache_dir
            .as_ref()
            .map_or_else(|| "blocks/ under the cache folder".into(), |d| d.display().to_string());
        let endpoint = self.endpoint.as_ref().map_or(String::new(), |e| format!(", endpoint {e}"));
        format!(
            "object stores read in blocks of {} bytes, cached for the node in {dir} (at most {} bytes, evicted by {}){endpoint}; \
             {} retries, stall timeout {} s, prefetch by the schedule with {} requests in flight",
            self.block_bytes(),
            self.cache_bytes(),
            self.eviction().describe(),
            self.retries(),
            self.stall_timeout().as_secs_f64(),
            self.prefetch_requests()
        )
    }
}

/// Which blocks the block cache removes when it is full.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Eviction {
    /// The block whose next read by a lane of this process is furthest ahead in the schedule
    /// goes first; blocks no lane reads again (within the plan's horizon of twice the cache)
    /// go before any, least recently used first. A block this process has not read or planned
    /// (another process of the node's) goes before any it will read again.
    #[default]
    NextUse,
    /// The least recently used block goes first.
    Lru,
}

impl Eviction {
    /// Its name in a spec: `next_use` or `lru`.
    pub fn describe(self) -> &'static str {
        match self {
            Eviction::NextUse => "next_use",
            Eviction::Lru => "lru",
        }
    }
}

/// A shard file format.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Format {
    /// JSON Lines, plain or `.gz`/`.zst` compressed.
    Jsonl,
    /// Apache Parquet.
    Parquet,
    /// WebDataset tar shards (`.tar`, uncompressed): samples are members grouped by key.
    Tar,
}

impl Format {
    /// Its name: `jsonl`, `parquet` or `tar`.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Jsonl => "jsonl",
            Format::Parquet => "parquet",
            Format::Tar => "tar",
        }
    }

    /// The format a file name says, if any: `.parquet`, `.tar`, and JSON Lines as `.jsonl`,
    /// `.ndjson` or `.json`, each plain or `.gz` / `.zst`.
    pub fn of(path: &Path) -> Option<Format> {
        if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("parquet")) {
            Some(Format::Parquet)
        } else if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("tar")) {
            Some(Format::Tar)
        } else if jsonl::Compression::of(path).is_some() {
            Some(Format::Jsonl)
        } else {
            None
        }
    }
}

/// Opens the dataset at `path`: a shard file, a folder of shards (recursively), or a glob
/// (see [`Location::local`]), detecting the format.
pub fn open(name: &str, path: &Path, options: &DatasetOptions) -> Result<Arc<dyn Dataset>> {
    let location = Location::local(name, &path.to_string_lossy())?;
    open_layout(name, &Layout::resolve(name, &[location], None)?, options)
}

/// Opens the shards of `layout`, in its order.
pub fn open_layout(name: &str, layout: &Layout, options: &DatasetOptions) -> Result<Arc<dyn Dataset>> {
    open_refs(name, layout.format, &layout.shards, options)
}

/// Opens an explicit list of local shard files of one format, in the given order. A missing
/// file is an error naming it.
pub fn open_shards(
    name: &str,
    format: Format,
    files: &[PathBuf],
    options: &DatasetOptions,
) -> Result<Arc<dyn Dataset>> {
    let refs: Vec<ShardRef> = files.iter().map(|f| ShardRef::local(f)).collect();
    open_refs(name, format, &refs, options)
}

fn open_refs(name: &str, format: Format, shards: &[ShardRef], options: &DatasetOptions) -> Result<Arc<dyn Dataset>> {
    Ok(match format {
        Format::Jsonl => Arc::new(JsonlDataset::open(name, shards, options)?),
        Format::Tar => Arc::new(TarDataset::open(name, shards, options)?),
        #[cfg(feature = "parquet")]
        Format::Parquet => Arc::new(ParquetDataset::open(name, shards, options)?),
        #[cfg(not(feature = "parquet"))]
        Format::Parquet => {
            return Err(Error::Open {
                dataset: name.to_string(),
                path: shards.first().map(|s| PathBuf::from(s.location())).unwrap_or_default(),
                message: "this build of zephon-io has no `parquet` feature".into(),
            });
        }
    })
}
