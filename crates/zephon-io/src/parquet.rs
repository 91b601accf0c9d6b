//! Parquet shards (HF-style or any): rows addressed one by one, fetched a row group at a time.
//!
//! A random row costs a page decode whatever the reader does (about 2 ms with the 1 MB pages
//! most writers produce), so this reader decodes the requested columns of a whole row group
//! once and keeps recently used row groups in a bounded cache. Work sources that keep a chunk
//! within few row groups (block shuffles) then read at row-group speed.

use std::collections::{HashMap, VecDeque};
use std::fs;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::file::reader::{ChunkReader, Length};
use zephon_core::{Dataset, DatasetManifest, Field, OpError, Record, SampleId, Value};

use crate::fields::Fields;

/// Decoded row groups kept per dataset, by bytes.
const DEFAULT_CACHE_BYTES: usize = 256 << 20;

/// A shard file read with positioned reads. `ChunkReader for File` seeks a duplicated
/// descriptor, and duplicates share one file offset, so two threads decoding row groups of one
/// shard would read each other's bytes. Positioned reads have no offset to share.
#[derive(Clone)]
struct PreadFile {
    file: Arc<fs::File>,
    len: u64,
}

struct PreadReader {
    file: Arc<fs::File>,
    pos: u64,
}

impl std::io::Read for PreadReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Length for PreadFile {
    fn len(&self) -> u64 {
        self.len
    }
}

impl ChunkReader for PreadFile {
    type T = std::io::BufReader<PreadReader>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(std::io::BufReader::new(PreadReader { file: self.file.clone(), pos: start }))
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<bytes::Bytes> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; length];
        self.file.read_exact_at(&mut buf, start)?;
        Ok(buf.into())
    }
}

struct Shard {
    path: PathBuf,
    file: PreadFile,
    meta: ArrowReaderMetadata,
    mask: ProjectionMask,
    /// First row of each row group, plus the total at the end.
    rg_starts: Vec<u64>,
}

/// A dataset of Parquet shards.
pub struct ParquetDataset {
    manifest: DatasetManifest,
    shards: Vec<Shard>,
    fields: Fields,
    handles: Vec<Field>,
    cache: Mutex<RowGroupCache>,
}

type Decoded = Arc<Vec<RecordBatch>>;

struct RowGroupCache {
    budget: usize,
    used: usize,
    map: HashMap<(u32, usize), (Decoded, usize)>,
    order: VecDeque<(u32, usize)>,
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
    /// Opens `paths` as the dataset's shards, checking that every requested column exists and
    /// has a type zephon reads. `cache_bytes` bounds the decoded row groups kept (default
    /// 256 MiB).
    pub fn open(
        name: &str,
        paths: &[PathBuf],
        fields: Fields,
        cache_bytes: Option<usize>,
    ) -> Result<Self, (PathBuf, String)> {
        let mut shards = Vec::with_capacity(paths.len());
        let mut manifest = DatasetManifest { name: name.to_string(), shards: Vec::new() };
        for path in paths {
            let fail = |m: String| (path.clone(), m);
            let handle = fs::File::open(path).map_err(|e| fail(e.to_string()))?;
            let len = handle.metadata().map_err(|e| fail(e.to_string()))?.len();
            let file = PreadFile { file: Arc::new(handle), len };
            let meta = ArrowReaderMetadata::load(&file, ArrowReaderOptions::new())
                .map_err(|e| fail(format!("not a readable Parquet file (truncated or corrupt?): {e}")))?;
            let schema = meta.schema().clone();
            let mut roots = Vec::new();
            for wanted in fields.names() {
                match schema.index_of(wanted) {
                    Ok(i) => {
                        check_type(schema.field(i).data_type()).map_err(|m| fail(format!("column {wanted:?}: {m}")))?;
                        roots.push(i);
                    }
                    Err(_) if Some(wanted) == fields.text.as_deref() => {
                        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
                        return Err(fail(format!("no column {wanted:?} (columns: {})", names.join(", "))));
                    }
                    Err(_) => {}
                }
            }
            let mask = ProjectionMask::roots(meta.parquet_schema(), roots);
            let mut rg_starts = vec![0u64];
            for rg in meta.metadata().row_groups() {
                let last = rg_starts.last().copied().unwrap_or(0);
                rg_starts.push(last + rg.num_rows().max(0) as u64);
            }
            let rows = rg_starts.last().copied().unwrap_or(0);
            manifest.shards.push(crate::shard::manifest_entry(path, rows).map_err(|e| fail(e.to_string()))?);
            shards.push(Shard { path: path.clone(), file, meta, mask, rg_starts });
        }
        let handles = fields.handles();
        Ok(ParquetDataset {
            manifest,
            shards,
            fields,
            handles,
            cache: Mutex::new(RowGroupCache {
                budget: cache_bytes.unwrap_or(DEFAULT_CACHE_BYTES),
                used: 0,
                map: HashMap::new(),
                order: VecDeque::new(),
            }),
        })
    }

    /// The requested columns of row group `rg` of shard `s`, decoded (from the cache if there).
    fn row_group(&self, s: u32, rg: usize) -> Result<Decoded, OpError> {
        if let Some(hit) = self.cache.lock().unwrap_or_else(|p| p.into_inner()).get((s, rg)) {
            return Ok(hit);
        }
        let shard = &self.shards[s as usize];
        let fail = |e: String| OpError::Fatal(format!("{}: row group {rg}: {e}", shard.path.display()));
        let rows = (shard.rg_starts[rg + 1] - shard.rg_starts[rg]) as usize;
        let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(shard.file.clone(), shard.meta.clone())
            .with_projection(shard.mask.clone())
            .with_row_groups(vec![rg])
            .with_batch_size(rows.max(1))
            .build()
            .map_err(|e| fail(e.to_string()))?;
        let batches: Vec<RecordBatch> = reader.collect::<Result<_, _>>().map_err(|e| fail(e.to_string()))?;
        let decoded = Arc::new(batches);
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).put((s, rg), decoded.clone());
        Ok(decoded)
    }

    fn read_row(&self, id: SampleId) -> Result<Record, OpError> {
        let shard =
            self.shards.get(id.shard as usize).ok_or_else(|| OpError::Fatal(format!("no shard {}", id.shard)))?;
        let total = shard.rg_starts.last().copied().unwrap_or(0);
        if id.row >= total {
            return Err(OpError::Fatal(format!("{}: no row {} (the shard has {total})", shard.path.display(), id.row)));
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
            .ok_or_else(|| OpError::Fatal(format!("{}: row group {rg} decoded short", shard.path.display())))?;
        let mut record = Record::from_sample(id);
        let mut size = 0;
        for name in &self.handles {
            if let Some(col) = batch.column_by_name(name.as_str())
                && let Some(v) = value_at(col.as_ref(), local)
            {
                size += approx_size(&v);
                record.set(name, v);
            }
        }
        self.fields.check_size(size)?;
        self.fields.check(&record)?;
        Ok(record)
    }
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
}

fn approx_size(v: &Value) -> usize {
    match v {
        Value::Str(s) => s.len(),
        Value::Bytes(b) => b.len(),
        _ => 8,
    }
}

fn check_type(t: &DataType) -> Result<(), String> {
    match t {
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::Boolean
        | DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64
        | DataType::Float32
        | DataType::Float64 => Ok(()),
        // HF `Image`/`Audio` features: struct<bytes: binary, path: string>; the bytes are read.
        DataType::Struct(children) if children.iter().any(|c| c.name() == "bytes") => Ok(()),
        other => {
            Err(format!("type {other} is not supported (text, binary, integer, float, boolean, or an HF image struct)"))
        }
    }
}

/// The value of row `i` of `col`, or `None` when it is null.
fn value_at(col: &dyn Array, i: usize) -> Option<Value> {
    if col.is_null(i) {
        return None;
    }
    Some(match col.data_type() {
        DataType::Utf8 => Value::text(col.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => Value::text(col.as_string::<i64>().value(i)),
        DataType::Utf8View => Value::text(col.as_string_view().value(i)),
        DataType::Binary => Value::Bytes(col.as_binary::<i32>().value(i).into()),
        DataType::LargeBinary => Value::Bytes(col.as_binary::<i64>().value(i).into()),
        DataType::BinaryView => Value::Bytes(col.as_binary_view().value(i).into()),
        DataType::Boolean => Value::Int(col.as_boolean().value(i) as i64),
        DataType::Int8 => Value::Int(col.as_primitive::<Int8Type>().value(i) as i64),
        DataType::Int16 => Value::Int(col.as_primitive::<Int16Type>().value(i) as i64),
        DataType::Int32 => Value::Int(col.as_primitive::<Int32Type>().value(i) as i64),
        DataType::Int64 => Value::Int(col.as_primitive::<Int64Type>().value(i)),
        DataType::UInt8 => Value::Int(col.as_primitive::<UInt8Type>().value(i) as i64),
        DataType::UInt16 => Value::Int(col.as_primitive::<UInt16Type>().value(i) as i64),
        DataType::UInt32 => Value::Int(col.as_primitive::<UInt32Type>().value(i) as i64),
        DataType::UInt64 => Value::Int(col.as_primitive::<UInt64Type>().value(i) as i64),
        DataType::Float32 => Value::Float(col.as_primitive::<Float32Type>().value(i) as f64),
        DataType::Float64 => Value::Float(col.as_primitive::<Float64Type>().value(i)),
        DataType::Struct(_) => {
            let bytes = col.as_struct().column_by_name("bytes")?;
            return value_at(bytes.as_ref(), i);
        }
        _ => return None,
    })
}
