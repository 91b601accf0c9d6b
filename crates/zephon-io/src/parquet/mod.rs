//! Parquet shards (HF-style or any): rows addressed one by one, fetched a row group at a time.
//!
//! A random row costs a page decode whatever the reader does (about 2 ms with the 1 MB pages
//! most writers produce), so this reader decodes the requested columns of a whole row group
//! once and keeps recently used row groups in a bounded cache. Work sources that keep a chunk
//! within few row groups (block shuffles) then read at row-group speed.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use arrow_array::RecordBatch;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::reader::{ChunkReader, Length};
use zephon_core::{Dataset, DatasetManifest, PlannedRead, ShardManifest};
use zephon_operator::{Field, OpError, Record, SampleId};

use crate::fields::Fields;
use crate::images::ImageHandles;
use crate::layout::ShardRef;
use crate::parquet_images;
use crate::shard::{
    CONTENT_DIR, content_hash, default_cache_dir, manifest_entry, map_parallel, remove_stale_temporaries,
};
use crate::storage::{Object, ObjectReader, Upcoming};
use crate::{DatasetOptions, Error};

mod cells;

use cells::{approx_size, check_json_type, check_text_type, check_type, json_at, value_at};

/// Decoded row groups kept per dataset, by bytes.
const DEFAULT_CACHE_BYTES: usize = 256 << 20;

/// Rows per decoded batch; a row group may decode into several.
const MAX_BATCH_ROWS: usize = 1 << 16;

/// Runs parquet crate code on file contents. It asserts on some malformed input (real shards
/// with flipped bytes reach such asserts); a panic becomes an error naming the file instead of
/// taking the run down.
fn guarded<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        Err(format!("the Parquet reader failed on this file ({what})"))
    })
}

/// A shard object read with positioned reads. `ChunkReader for File` seeks a duplicated
/// descriptor, and duplicates share one file offset, so two threads decoding row groups of one
/// shard would read each other's bytes. Positioned reads have no offset to share.
#[derive(Clone)]
struct PreadFile {
    object: Arc<dyn Object>,
}

/// A reader from a position of the object, owning its handle (the parquet crate keeps it).
struct PreadReader {
    object: Arc<dyn Object>,
    pos: u64,
}

impl std::io::Read for PreadReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut at = ObjectReader::new(self.object.as_ref(), self.pos);
        let n = std::io::Read::read(&mut at, buf)?;
        self.pos = at.pos;
        Ok(n)
    }
}

impl Length for PreadFile {
    fn len(&self) -> u64 {
        self.object.size()
    }
}

impl ChunkReader for PreadFile {
    type T = std::io::BufReader<PreadReader>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(std::io::BufReader::new(PreadReader { object: self.object.clone(), pos: start }))
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<bytes::Bytes> {
        let mut buf = vec![0u8; length];
        self.object.read_exact_at(&mut buf, start)?;
        Ok(buf.into())
    }
}

struct Shard {
    /// Where it is, for messages.
    path: String,
    file: PreadFile,
    meta: ArrowReaderMetadata,
    mask: ProjectionMask,
    /// First row of each row group, plus the total at the end.
    rg_starts: Vec<u64>,
}

impl Shard {
    /// Passes what the schedule says of row groups `groups` on to the file, as the column
    /// chunks read of each, in order.
    fn upcoming(&self, groups: &[usize], upcoming: Upcoming) {
        if !upcoming.wanted_by(self.file.object.as_ref()) {
            return;
        }
        let meta = self.meta.metadata();
        let spans = groups.iter().filter_map(|&rg| meta.row_groups().get(rg)).flat_map(|g| {
            g.columns().iter().enumerate().filter(|(leaf, _)| self.mask.leaf_included(*leaf)).filter_map(|(_, c)| {
                let start = u64::try_from(c.dictionary_page_offset().unwrap_or_else(|| c.data_page_offset())).ok()?;
                Some((start, start.checked_add(u64::try_from(c.compressed_size()).ok()?)?))
            })
        });
        upcoming.tell(self.file.object.as_ref(), spans);
    }
}

/// A dataset of Parquet shards.
pub struct ParquetDataset {
    manifest: DatasetManifest,
    shards: Vec<Shard>,
    fields: Fields,
    handles: Vec<Field>,
    /// The images column, when images are read.
    images: Option<(String, ImageHandles)>,
    cache: Mutex<RowGroupCache>,
    /// Row groups decoded so far (each decode of one, cache misses included).
    decodes: AtomicU64,
}

type Decoded = Arc<Vec<RecordBatch>>;

struct RowGroupCache {
    budget: usize,
    used: usize,
    map: HashMap<(u32, usize), (Decoded, usize)>,
    order: VecDeque<(u32, usize)>,
    /// Row groups one thread is decoding now; the others that need one wait for it.
    decoding: HashMap<(u32, usize), Arc<Decoding>>,
}

/// A row group being decoded: its result once there.
#[derive(Default)]
struct Decoding {
    result: Mutex<Option<Result<Decoded, String>>>,
    done: Condvar,
}

impl Decoding {
    fn wait(&self) -> Result<Decoded, String> {
        let mut result = self.result.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(r) = &*result {
                return r.clone();
            }
            result = self.done.wait(result).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn finish(&self, result: Result<Decoded, String>) {
        *self.result.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
        self.done.notify_all();
    }
}

impl RowGroupCache {
    fn get(&mut self, key: (u32, usize)) -> Option<Decoded> {
        let hit = self.map.get(&key).map(|(d, _)| d.clone())?;
        if let Some(i) = self.order.iter().position(|k| *k == key) {
            self.order.remove(i);
        }
        self.order.push_back(key);
        Some(hit)
    }

    fn put(&mut self, key: (u32, usize), value: Decoded) {
        let size: usize = value.iter().map(|b| b.get_array_memory_size()).sum();
        if self.map.insert(key, (value, size)).is_none() {
            self.order.push_back(key);
            self.used += size;
        }
        while self.used > self.budget && self.order.len() > 1 {
            if let Some(old) = self.order.pop_front()
                && let Some((_, s)) = self.map.remove(&old)
            {
                self.used -= s;
            }
        }
    }
}

impl ParquetDataset {
    /// Opens `shards` as the dataset's shards, checking that every requested column exists
    /// and has a type zephon reads (the text field: a string type; the images column: see
    /// [`Fields::images`]). Each shard is hashed once per object version (cached under
    /// `options.cache_dir`); several shards open at a time.
    pub fn open(name: &str, shards: &[ShardRef], options: &DatasetOptions) -> crate::Result<Self> {
        options.fields.check(name)?;
        let cache = options.cache_dir.clone().unwrap_or_else(default_cache_dir);
        remove_stale_temporaries(&[cache.join(CONTENT_DIR)]);
        let fields = &options.fields;
        let opened = map_parallel(shards.len(), |i| open_shard(name, &shards[i], fields, &cache))?;
        let (shards, entries): (Vec<Shard>, Vec<ShardManifest>) = opened.into_iter().unzip();
        Ok(ParquetDataset {
            manifest: DatasetManifest { name: name.to_string(), shards: entries },
            shards,
            fields: fields.clone(),
            handles: fields.handles(),
            images: fields.images.clone().map(|c| (c, ImageHandles::new())),
            cache: Mutex::new(RowGroupCache {
                budget: options.parquet_cache_bytes.unwrap_or(DEFAULT_CACHE_BYTES),
                used: 0,
                map: HashMap::new(),
                order: VecDeque::new(),
                decoding: HashMap::new(),
            }),
            decodes: AtomicU64::new(0),
        })
    }

    /// How many times a row group was decoded so far. Each is decoded once while it stays in
    /// the cache (`parquet_cache_bytes`), however many threads need it at once; a count far
    /// above the row groups read means the cache is too small for the read order.
    pub fn row_group_decodes(&self) -> u64 {
        self.decodes.load(Ordering::Relaxed)
    }

    /// The requested columns of row group `rg` of shard `s`, decoded (from the cache if there).
    /// Threads that need a row group another one is decoding wait for its result rather than
    /// decode it too: at the start of a run every lane wants the same few row groups, and each
    /// duplicate decode costs the whole group's time and memory again.
    fn row_group(&self, s: u32, rg: usize) -> Result<Decoded, OpError> {
        let key = (s, rg);
        let shard = &self.shards[s as usize];
        let fail = |e: String| OpError::Fatal(format!("{}: row group {rg}: {e}", shard.path));
        let decoding = {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(hit) = cache.get(key) {
                return Ok(hit);
            }
            if let Some(other) = cache.decoding.get(&key).cloned() {
                drop(cache);
                return other.wait().map_err(fail);
            }
            let mine = Arc::new(Decoding::default());
            cache.decoding.insert(key, mine.clone());
            mine
        };
        let result = self.decode(shard, rg).map(Arc::new);
        {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            cache.decoding.remove(&key);
            if let Ok(decoded) = &result {
                cache.put(key, decoded.clone());
            }
        }
        decoding.finish(result.clone());
        result.map_err(fail)
    }

    /// Decodes the requested columns of row group `rg` of `shard`.
    fn decode(&self, shard: &Shard, rg: usize) -> Result<Vec<RecordBatch>, String> {
        self.decodes.fetch_add(1, Ordering::Relaxed);
        // The decoder reads column chunk after column chunk: from an object store, their
        // blocks are asked for together.
        shard.upcoming(&[rg], Upcoming::Soon);
        let rows = (shard.rg_starts[rg + 1] - shard.rg_starts[rg]) as usize;
        guarded(|| {
            let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(shard.file.clone(), shard.meta.clone())
                .with_projection(shard.mask.clone())
                .with_row_groups(vec![rg])
                // Bounded: the row count comes from the file, and a batch is allocated up front.
                .with_batch_size(rows.clamp(1, MAX_BATCH_ROWS))
                .build()
                .map_err(|e| e.to_string())?;
            reader.collect::<Result<Vec<RecordBatch>, _>>().map_err(|e| e.to_string())
        })
    }

    fn read_row(&self, id: SampleId) -> Result<Record, OpError> {
        let shard =
            self.shards.get(id.shard as usize).ok_or_else(|| OpError::Fatal(format!("no shard {}", id.shard)))?;
        let total = shard.rg_starts.last().copied().unwrap_or(0);
        if id.row >= total {
            return Err(OpError::Fatal(format!("{}: no row {} (the shard has {total})", shard.path, id.row)));
        }
        let rg = shard.rg_starts.partition_point(|&s| s <= id.row) - 1;
        let batches = self.row_group(id.shard, rg)?;
        let mut local = (id.row - shard.rg_starts[rg]) as usize;
        let batch = batches
            .iter()
            .find(|b| {
                let hit = local < b.num_rows();
                if !hit {
                    local -= b.num_rows();
                }
                hit
            })
            .ok_or_else(|| OpError::Fatal(format!("{}: row group {rg} decoded short", shard.path)))?;
        let mut cells = Vec::with_capacity(self.handles.len());
        let json_from = self.fields.json_from();
        for (k, name) in self.handles.iter().enumerate() {
            // Every requested column was checked to exist at open and is in the projection.
            let col = batch.column_by_name(name.as_str()).ok_or_else(|| {
                OpError::Fatal(format!("{}: column {:?} missing from the decoded row group", shard.path, name))
            })?;
            cells.push(if k >= json_from { json_at(col.as_ref(), local) } else { value_at(col.as_ref(), local) });
        }
        let found = match &self.images {
            Some((column, _)) => {
                let col = batch.column_by_name(column).ok_or_else(|| {
                    OpError::Fatal(format!("{}: column {column:?} missing from the decoded row group", shard.path))
                })?;
                parquet_images::images_at(col.as_ref(), local, column)?
            }
            None => Vec::new(),
        };
        self.fields.check_size(
            cells.iter().map(approx_size).sum::<usize>() + found.iter().map(|i| i.bytes.len()).sum::<usize>(),
        )?;
        let mut record = Record::from_sample(id);
        for (i, (name, cell)) in self.handles.iter().zip(cells).enumerate() {
            self.fields.put(&mut record, i, name, cell)?;
        }
        if let Some((_, handles)) = &self.images {
            handles.attach(&mut record, found)?;
        }
        Ok(record)
    }
}

/// Opens one shard: checks its schema against `fields` and hashes it.
fn open_shard(name: &str, shard: &ShardRef, fields: &Fields, cache: &Path) -> crate::Result<(Shard, ShardManifest)> {
    let location = shard.location();
    let path = PathBuf::from(&location);
    let path = path.as_path();
    let fail = |message: String| Error::Open { dataset: name.to_string(), path: path.to_path_buf(), message };
    let object = shard.open().map_err(|e| fail(e.to_string()))?;
    let hashed = content_hash(object.as_ref(), cache, &mut |_| {}).map_err(|e| fail(format!("cannot read: {e}")))?;
    let size = object.size();
    let file = PreadFile { object: object.clone() };
    let meta = guarded(|| ArrowReaderMetadata::load(&file, ArrowReaderOptions::new()).map_err(|e| e.to_string()))
        .map_err(|e| fail(format!("not a readable Parquet file (truncated or corrupt?): {e}")))?;
    let rg_starts = check_layout(meta.metadata(), size)
        .map_err(|e| fail(format!("not a readable Parquet file (corrupt metadata): {e}")))?;
    let schema = meta.schema().clone();
    let mut roots = Vec::new();
    let images = fields.images.as_deref().map(|c| (usize::MAX, c));
    for (k, wanted) in fields.names().enumerate().chain(images) {
        let Ok(i) = schema.index_of(wanted) else {
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            return Err(Error::MissingColumn {
                dataset: name.to_string(),
                path: path.to_path_buf(),
                column: wanted.to_string(),
                available: names.join(", "),
            });
        };
        let is_text = k == 0 && fields.text.is_some();
        let t = schema.field(i).data_type();
        let expected = if k == usize::MAX {
            parquet_images::check_type(t)
        } else if k >= fields.json_from() {
            check_json_type(t)
        } else if is_text {
            check_text_type(t)
        } else {
            check_type(t)
        };
        if let Err(expected) = expected {
            return Err(Error::ColumnType {
                dataset: name.to_string(),
                path: path.to_path_buf(),
                column: wanted.to_string(),
                found: t.to_string(),
                expected,
            });
        }
        roots.push(i);
    }
    let descr = meta.parquet_schema();
    let mask = match fields.images.as_deref() {
        None => ProjectionMask::roots(descr, roots),
        Some(_) => {
            // The images column is the last root found; of it only the children images need.
            let image_root = roots.pop().unwrap_or_default();
            let mut leaves: Vec<usize> =
                (0..descr.num_columns()).filter(|&l| roots.contains(&descr.get_column_root_idx(l))).collect();
            leaves.extend(parquet_images::leaves(descr, image_root));
            ProjectionMask::leaves(descr, leaves)
        }
    };
    let entry = manifest_entry(shard, object.as_ref(), rg_starts.last().copied().unwrap_or(0), hashed.hash);
    Ok((Shard { path: location.clone(), file, meta, mask, rg_starts }, entry))
}

/// The first row of each row group plus the total, after checking that the footer describes
/// a possible file: the parquet crate asserts (panics) on negative offsets and sizes, and a
/// row count that overflows would wrap.
fn check_layout(meta: &ParquetMetaData, file_len: u64) -> Result<Vec<u64>, String> {
    let mut starts = vec![0u64];
    for (g, rg) in meta.row_groups().iter().enumerate() {
        let rows = u64::try_from(rg.num_rows()).map_err(|_| format!("row group {g} has {} rows", rg.num_rows()))?;
        let last = starts.last().copied().unwrap_or(0);
        starts.push(last.checked_add(rows).ok_or_else(|| format!("row group {g}: the row count overflows"))?);
        for c in rg.columns() {
            let start = c.dictionary_page_offset().unwrap_or_else(|| c.data_page_offset());
            let len = c.compressed_size();
            let inside = u64::try_from(start)
                .ok()
                .zip(u64::try_from(len).ok())
                .and_then(|(s, l)| s.checked_add(l))
                .is_some_and(|end| end <= file_len);
            if !inside {
                return Err(format!(
                    "row group {g}, column {}: bytes {start}..+{len} are not inside the file ({file_len} bytes)",
                    c.column_path()
                ));
            }
        }
    }
    Ok(starts)
}

impl Dataset for ParquetDataset {
    fn manifest(&self) -> &DatasetManifest {
        &self.manifest
    }

    fn read(&self, samples: &[SampleId], out: &mut Vec<Result<Record, OpError>>) {
        for &id in samples {
            out.push(self.read_row(id));
        }
    }

    fn prefetch(&self, samples: &[SampleId]) {
        self.upcoming(samples, Upcoming::Soon);
    }

    fn plan(&self, samples: &[SampleId], read: &PlannedRead) {
        self.upcoming(samples, Upcoming::Planned(read));
    }

    fn plans_ahead(&self) -> u64 {
        self.shards.iter().map(|s| s.file.object.plans_ahead()).max().unwrap_or(0)
    }
}

impl ParquetDataset {
    /// Passes what the schedule says of `samples` (all of one shard) on to its file: the
    /// column chunks read of each row group they are in, in reading order.
    fn upcoming(&self, samples: &[SampleId], upcoming: Upcoming) {
        let Some(shard) = samples.first().and_then(|s| self.shards.get(s.shard as usize)) else { return };
        if !upcoming.wanted_by(shard.file.object.as_ref()) {
            return;
        }
        let mut groups: Vec<usize> = Vec::new();
        for s in samples {
            let rg = shard.rg_starts.partition_point(|&start| start <= s.row).saturating_sub(1);
            if groups.last() != Some(&rg) && !groups.contains(&rg) {
                groups.push(rg);
            }
        }
        shard.upcoming(&groups, upcoming);
    }
}

impl std::fmt::Debug for ParquetDataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParquetDataset")
            .field("name", &self.manifest.name)
            .field("shards", &self.manifest.shards.len())
            .finish_non_exhaustive()
    }
}
