//! Object stores (`s3://`, `gs://`, `az://` and `abfs://`, `https://`) as stores of the seam,
//! through `object_store`.
//!
//! - An object's version is its URL, ETag and size, and its content version (what manifests
//!   and checkpoints hold) its ETag and size: nothing is read to know it. Every ranged read is
//!   conditional on the ETag it was opened with, so an object replaced during a run is an
//!   error naming it, never a mix of two versions.
//! - Reads go through the node-shared block cache ([`super::blocks`]): an object is fetched in
//!   blocks of `block_bytes`, once for every process of the node.
//! - One small tokio runtime per process runs the requests; callers block on it from the
//!   engine's worker threads, which hold no lane lock while they read.
//! - Reads the schedule hints at are fetched ahead by [`prefetch`], in the order hinted.
//! - Faults are met by [`patience`]: retries with backoff and jitter, a stall timeout that
//!   resets on progress, errors that name the object and the range.
//! - Credentials and endpoints are found as each cloud's SDK finds them (environment, AWS
//!   profiles with `credential_process`, instance and web-identity roles where `object_store`
//!   has them). They are never written anywhere: not in locations, messages or manifests.

use std::fmt;
use std::io;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, Weak};

use futures::TryStreamExt;
use object_store::path::Path as StorePath;
use object_store::{ClientOptions, GetOptions, GetRange, ObjectStore, ObjectStoreExt};

use super::blocks::{Block, BlockCache, BlockStats};
use super::{Object, Store, StoreStats, hidden};
use crate::StorageOptions;
use zephon_core::PlannedRead;

mod credentials;
mod patience;
mod prefetch;

use patience::{Failure, Patience, RetryStats, patiently};

/// The process's runtime for object-store requests.
fn runtime() -> io::Result<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("zephon-remote")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| io::Error::other(format!("cannot start the object-store runtime: {e}")))
}

/// Runs `f` on the runtime and waits for it.
fn block_on<T>(f: impl std::future::Future<Output = T>) -> io::Result<T> {
    Ok(runtime()?.block_on(f))
}

/// An `object_store` error as an `io::Error` that names the object (and never a credential).
pub(crate) fn store_error(url: &str, e: object_store::Error) -> io::Error {
    let kind = match &e {
        object_store::Error::NotFound { .. } => io::ErrorKind::NotFound,
        object_store::Error::Precondition { .. } => io::ErrorKind::InvalidData,
        _ => io::ErrorKind::Other,
    };
    let message = match e {
        object_store::Error::Precondition { .. } => {
            format!("{url} changed since it was opened (its ETag no longer matches): open the dataset again")
        }
        object_store::Error::NotFound { .. } => format!("{url} does not exist"),
        other => format!("{url}: {other}"),
    };
    io::Error::new(kind, message)
}

/// A prefix of an object store (`s3://bucket/prefix`) as a store of the seam.
pub struct RemoteStore {
    /// The root as the user wrote it, without a trailing `/`.
    root: String,
    store: Arc<dyn ObjectStore>,
    prefix: StorePath,
    blocks: Arc<BlockCache>,
    block_bytes: u64,
    stats: Arc<BlockStats>,
    patience: Patience,
    retries: Arc<RetryStats>,
    prefetcher: Option<&'static prefetch::Prefetcher>,
}

impl fmt::Debug for RemoteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RemoteStore({})", self.root)
    }
}

impl RemoteStore {
    /// The store at `url` (a bucket, or a prefix in one) with `options`.
    pub fn open(url: &str, options: &StorageOptions) -> io::Result<RemoteStore> {
        let root = url.trim_end_matches('/').to_string();
        let parsed =
            url::Url::parse(&root).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{root}: {e}")))?;
        let (store, prefix) = build(&parsed, options)?;
        let dir = options.cache_dir.clone().unwrap_or_else(|| crate::shard::default_cache_dir().join("blocks"));
        Ok(RemoteStore {
            root,
            store,
            prefix,
            blocks: shared_cache(dir, options.cache_bytes(), options.eviction())?,
            block_bytes: options.block_bytes(),
            stats: Arc::new(BlockStats::default()),
            patience: Patience::of(options),
            retries: Arc::new(RetryStats::default()),
            // The process's prefetch threads start with the first store that asks for them.
            prefetcher: (options.prefetch_requests() > 0)
                .then(|| prefetch::Prefetcher::get(options.prefetch_requests()))
                .flatten(),
        })
    }

    fn key_of(&self, relative: &str) -> StorePath {
        let rel = relative.trim_start_matches('/');
        if self.prefix.as_ref().is_empty() {
            StorePath::from(rel)
        } else {
            StorePath::from(format!("{}/{rel}", self.prefix.as_ref()))
        }
    }
}

/// One cache per folder in a process, so that every store of the process counts the same
/// bytes against the cap (the first store's cap and eviction rule hold for all of them).
fn shared_cache(dir: PathBuf, cap: u64, eviction: crate::Eviction) -> io::Result<Arc<BlockCache>> {
    static CACHES: OnceLock<std::sync::Mutex<Vec<Arc<BlockCache>>>> = OnceLock::new();
    let mut all = CACHES.get_or_init(Default::default).lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(c) = all.iter().find(|c| c.dir() == dir) {
        return Ok(c.clone());
    }
    let c = Arc::new(BlockCache::new(dir, cap, eviction)?);
    all.push(c.clone());
    Ok(c)
}

/// The `object_store` client for `url`, with the options' endpoint, region and addressing.
fn build(url: &url::Url, options: &StorageOptions) -> io::Result<(Arc<dyn ObjectStore>, StorePath)> {
    let bad = |e: object_store::Error| io::Error::new(io::ErrorKind::InvalidInput, format!("{url}: {e}"));
    let mut client = ClientOptions::new().with_allow_http(options.allow_http);
    // The stall timeout watches each try; a whole-request limit only when asked for.
    client = match options.timeout_s {
        Some(t) => client.with_timeout(std::time::Duration::from_secs_f64(t)),
        None => client.with_timeout_disabled(),
    };
    // Tries are counted and paced in one place, `patience`: the client's own are off.
    let retry = object_store::RetryConfig { max_retries: 0, ..Default::default() };
    let prefix = StorePath::from_url_path(url.path()).map_err(|e| bad(e.into()))?;
    let store: Arc<dyn ObjectStore> = match url.scheme() {
        "s3" => {
            let mut b = object_store::aws::AmazonS3Builder::from_env()
                .with_url(url.as_str())
                .with_client_options(client)
                .with_retry(retry);
            if let Some(p) = credentials::aws_profile()? {
                if std::env::var_os("AWS_REGION").is_none()
                    && std::env::var_os("AWS_DEFAULT_REGION").is_none()
                    && let Some(region) = &p.region
                {
                    b = b.with_region(region);
                }
                if let Some(endpoint) = &p.endpoint {
                    b = b.with_endpoint(endpoint);
                }
                b = b.with_credentials(p.provider);
            }
            if let Some(e) = &options.endpoint {
                b = b.with_endpoint(e);
            }
            if let Some(r) = &options.region {
                b = b.with_region(r);
            }
            if let Some(path_style) = options.path_style {
                b = b.with_virtual_hosted_style_request(!path_style);
            }
            Arc::new(b.build().map_err(bad)?)
        }
        "gs" => Arc::new(
            object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_url(url.as_str())
                .with_client_options(client)
                .with_retry(retry)
                .build()
                .map_err(bad)?,
        ),
        "az" | "abfs" | "abfss" | "azure" => {
            let mut b = object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_url(url.as_str())
                .with_client_options(client)
                .with_retry(retry);
            if let Some(e) = &options.endpoint {
                b = b.with_endpoint(e.clone());
            }
            Arc::new(b.build().map_err(bad)?)
        }
        "http" | "https" => {
            let base = format!("{}://{}", url.scheme(), url.authority());
            let store = object_store::http::HttpBuilder::new()
                .with_url(base)
                .with_client_options(client)
                .with_retry(retry)
                .build()
                .map_err(bad)?;
            Arc::new(store)
        }
        other => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{url}: no object store for `{other}://`"),
            ));
        }
    };
    Ok((store, prefix))
}

impl Store for RemoteStore {
    fn root(&self) -> &str {
        &self.root
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let prefix = (!self.prefix.as_ref().is_empty()).then_some(&self.prefix);
        let stall = self.patience.stall;
        let metas: Vec<object_store::ObjectMeta> =
            block_on(patiently(self.patience, &self.retries, &self.root, None, || {
                self.stats.requests.fetch_add(1, Ordering::Relaxed);
                async move {
                    let mut pages = self.store.list(prefix);
                    let mut all = Vec::new();
                    // Each next entry (a listing page at most) within the stall timeout.
                    while let Some(meta) = patience::within(stall, pages.try_next()).await? {
                        all.push(meta);
                    }
                    Ok::<_, Failure>(all)
                }
            }))??;
        let strip = if self.prefix.as_ref().is_empty() { 0 } else { self.prefix.as_ref().len() + 1 };
        let mut out: Vec<String> = metas
            .into_iter()
            .map(|m| m.location.as_ref().get(strip..).unwrap_or_default().to_string())
            .filter(|p| !p.is_empty() && !p.split('/').any(hidden))
            .collect();
        out.sort();
        Ok(out)
    }

    fn open(&self, relative: &str) -> io::Result<Arc<dyn Object>> {
        let key = self.key_of(relative);
        let location = self.location_of(relative);
        let meta = block_on(patiently(self.patience, &self.retries, &location, None, || {
            self.stats.requests.fetch_add(1, Ordering::Relaxed);
            patience::within(self.patience.stall, self.store.head(&key))
        }))??;
        let etag =
            meta.e_tag.clone().ok_or_else(|| io::Error::other(format!("{location}: the store gives no ETag")))?;
        Ok(Arc::new_cyclic(|me| RemoteObject {
            me: me.clone(),
            prefetcher: self.prefetcher,
            version: format!("{location}\netag {etag}\nsize {}\n", meta.size),
            content: format!("etag:{} size:{}", etag.trim_matches('"'), meta.size),
            location,
            key,
            size: meta.size,
            etag,
            store: self.store.clone(),
            blocks: self.blocks.clone(),
            block_bytes: self.block_bytes,
            stats: self.stats.clone(),
            patience: self.patience,
            retries: self.retries.clone(),
        }))
    }

    fn stats(&self) -> Option<StoreStats> {
        let s = &self.stats;
        Some(StoreStats {
            bytes_fetched: s.bytes_fetched.load(Ordering::Relaxed),
            requests: s.requests.load(Ordering::Relaxed),
            cache_hits: s.hits.load(Ordering::Relaxed),
            cache_misses: s.misses.load(Ordering::Relaxed),
            prefetched: s.prefetched.load(Ordering::Relaxed),
            retries: self.retries.retries.load(Ordering::Relaxed),
            stalls: self.retries.stalls.load(Ordering::Relaxed),
        })
    }
}

/// One object of a remote store, read in blocks through the node's block cache.
struct RemoteObject {
    /// Itself, for the prefetch jobs it queues.
    me: Weak<RemoteObject>,
    prefetcher: Option<&'static prefetch::Prefetcher>,
    location: String,
    key: StorePath,
    size: u64,
    etag: String,
    version: String,
    content: String,
    store: Arc<dyn ObjectStore>,
    blocks: Arc<BlockCache>,
    block_bytes: u64,
    stats: Arc<BlockStats>,
    patience: Patience,
    retries: Arc<RetryStats>,
}

impl fmt::Debug for RemoteObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RemoteObject({} {})", self.location, self.etag)
    }
}

impl RemoteObject {
    /// Block `index`: its place in the cache, and the bytes of the object it holds.
    fn block(&self, index: u64) -> (Block<'_>, Range<u64>) {
        let start = index * self.block_bytes;
        let len = self.block_bytes.min(self.size.saturating_sub(start));
        (Block { key: &self.version, index, len }, start..start + len)
    }

    /// Whether block `index` is known to be in the cache (no I/O).
    fn block_known(&self, index: u64) -> bool {
        self.blocks.known(self.block(index).0)
    }

    /// Brings block `index` into the cache (a prefetch).
    fn ensure_block(&self, index: u64) -> io::Result<()> {
        let (block, range) = self.block(index);
        if self.blocks.ensure(block, &self.stats, || self.fetch(range))? {
            self.stats.prefetched.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The bytes of `range`, by requests conditional on the ETag, tried again after faults.
    fn fetch(&self, range: Range<u64>) -> io::Result<Vec<u8>> {
        let want = range.end - range.start;
        block_on(patiently(self.patience, &self.retries, &self.location, Some(&range), || {
            self.stats.requests.fetch_add(1, Ordering::Relaxed);
            let options = GetOptions {
                if_match: Some(self.etag.clone()),
                range: Some(GetRange::Bounded(range.clone())),
                ..GetOptions::default()
            };
            patience::read_all(self.patience.stall, want, self.store.get_opts(&self.key, options))
        }))?
    }
}

impl Object for RemoteObject {
    fn location(&self) -> &str {
        &self.location
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn version(&self) -> &str {
        &self.version
    }

    fn content_version(&self) -> Option<&str> {
        Some(&self.content)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if offset >= self.size || buf.is_empty() {
            return Ok(0);
        }
        let (block, range) = self.block(offset / self.block_bytes);
        let within = offset - range.start;
        let n = (buf.len() as u64).min(block.len - within) as usize;
        self.blocks.read(block, within, &mut buf[..n], &self.stats, || self.fetch(range.clone()))?;
        Ok(n)
    }

    fn fetches_ahead(&self) -> bool {
        self.prefetcher.is_some()
    }

    fn prefetch(&self, range: Range<u64>) {
        let end = range.end.min(self.size);
        if range.start >= end {
            return;
        }
        if let (Some(p), Some(me)) = (self.prefetcher, self.me.upgrade()) {
            // At most a quarter of the cache waits to be read.
            let most = (self.blocks.cap() / self.block_bytes / 4).max(1) as usize;
            p.hint(&me, range.start / self.block_bytes..=(end - 1) / self.block_bytes, most);
        }
    }

    fn plan(&self, range: Range<u64>, read: &PlannedRead) {
        let end = range.end.min(self.size);
        if range.start < end {
            self.blocks.plan(&self.version, range.start / self.block_bytes..=(end - 1) / self.block_bytes, read);
        }
    }

    fn plans_ahead(&self) -> u64 {
        self.blocks.plans_ahead()
    }

    fn unchanged(&self) -> io::Result<bool> {
        let meta = block_on(patiently(self.patience, &self.retries, &self.location, None, || {
            self.stats.requests.fetch_add(1, Ordering::Relaxed);
            patience::within(self.patience.stall, self.store.head(&self.key))
        }))??;
        Ok(meta.e_tag.as_deref() == Some(self.etag.as_str()) && meta.size == self.size)
    }
}
