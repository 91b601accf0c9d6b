//! JSONL shards: random access by row through a byte-offset index, built once per file
//! version and cached on disk.
//!
//! Rows are read with positioned reads (`pread`), not a memory map: a shard truncated under
//! a running job gives an error naming it, never a bus error.

use std::fs;
use std::io::{BufReader, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use sha2::{Digest, Sha256};
use zephon_core::{Dataset, DatasetManifest, Field, OpError, Record, SampleId, Value};

use crate::fields::Fields;
use crate::shard::{content_key, default_cache_dir, write_atomic};

const INDEX_MAGIC: &str = "ZEPHON-JSONL-INDEX v1";

/// How a JSONL shard is compressed, by file name.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    pub(crate) fn of(path: &Path) -> Option<Compression> {
        let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
        if name.ends_with(".jsonl") || name.ends_with(".ndjson") {
            Some(Compression::None)
        } else if name.ends_with(".jsonl.gz") || name.ends_with(".ndjson.gz") {
            Some(Compression::Gzip)
        } else if name.ends_with(".jsonl.zst") || name.ends_with(".ndjson.zst") {
            Some(Compression::Zstd)
        } else {
            None
        }
    }
}

struct Shard {
    /// The shard as given (possibly compressed): for messages.
    source: PathBuf,
    /// What is read: the shard itself, or its decompressed copy in the cache.
    file: fs::File,
    /// Byte offset where each row starts; a row ends where the next starts (or at `end`).
    starts: Vec<u64>,
    end: u64,
}

/// A dataset of JSONL shards.
pub struct JsonlDataset {
    manifest: DatasetManifest,
    shards: Vec<Shard>,
    fields: Fields,
    handles: Vec<Field>,
}

impl JsonlDataset {
    /// Opens `paths` as the dataset's shards, in order, building or loading each one's index.
    pub fn open(
        name: &str,
        paths: &[PathBuf],
        fields: Fields,
        cache_dir: Option<&Path>,
    ) -> Result<Self, (PathBuf, String)> {
        let cache = cache_dir.map(Path::to_path_buf).unwrap_or_else(default_cache_dir);
        let mut shards = Vec::with_capacity(paths.len());
        let mut manifest = DatasetManifest { name: name.to_string(), shards: Vec::new() };
        for path in paths {
            let fail = |m: String| (path.clone(), m);
            let compression = Compression::of(path).ok_or_else(|| fail("not a .jsonl file".into()))?;
            let key = content_key(path).map_err(|e| fail(e.to_string()))?;
            let readable = match compression {
                Compression::None => path.clone(),
                c => decompressed(path, &key, c, &cache).map_err(|e| fail(format!("cannot decompress: {e}")))?,
            };
            let (starts, end) =
                load_or_build_index(&readable, &key, &cache).map_err(|e| fail(format!("cannot index: {e}")))?;
            let file = fs::File::open(&readable).map_err(|e| fail(e.to_string()))?;
            let mut entry = crate::shard::manifest_entry(path, starts.len() as u64).map_err(|e| fail(e.to_string()))?;
            entry.version = key;
            manifest.shards.push(entry);
            shards.push(Shard { source: path.clone(), file, starts, end });
        }
        let handles = fields.handles();
        Ok(JsonlDataset { manifest, shards, fields, handles })
    }

    fn read_row(&self, id: SampleId, buf: &mut Vec<u8>) -> Result<Record, OpError> {
        let shard =
            self.shards.get(id.shard as usize).ok_or_else(|| OpError::Fatal(format!("no shard {}", id.shard)))?;
        let i = id.row as usize;
        let start = *shard.starts.get(i).ok_or_else(|| {
            OpError::Fatal(format!("{}: no row {} (the shard has {})", shard.source.display(), i, shard.starts.len()))
        })?;
        let end = shard.starts.get(i + 1).copied().unwrap_or(shard.end);
        let len = (end - start) as usize;
        self.fields.check_size(len)?;
        buf.resize(len, 0);
        shard.file.read_exact_at(buf, start).map_err(|e| {
            OpError::Fatal(format!(
                "{}: cannot read bytes {start}..{end} ({e}); did the file change since it was opened?",
                shard.source.display()
            ))
        })?;
        let values = parse_row(buf, &self.handles)
            .map_err(|e| OpError::Data(format!("{}: invalid JSON: {e}", shard.source.display())))?;
        let mut record = Record::from_sample(id);
        for (name, value) in self.handles.iter().zip(values) {
            if let Some(v) = value {
                record.set(name, v);
            }
        }
        self.fields.check(&record)?;
        Ok(record)
    }
}

impl Dataset for JsonlDataset {
    fn manifest(&self) -> &DatasetManifest {
        &self.manifest
    }

    fn read(&self, samples: &[SampleId], out: &mut Vec<Result<Record, OpError>>) {
        let mut buf = Vec::new();
        for &id in samples {
            out.push(self.read_row(id, &mut buf));
        }
    }
}

/// Parses one JSON object, keeping only the named fields (others are skipped unparsed).
fn parse_row(bytes: &[u8], names: &[Field]) -> Result<Vec<Option<Value>>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let values = PickFields { names }.deserialize(&mut de)?;
    de.end()?;
    Ok(values)
}

struct PickFields<'a> {
    names: &'a [Field],
}

impl<'de> DeserializeSeed<'de> for PickFields<'_> {
    type Value = Vec<Option<Value>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for PickFields<'_> {
    type Value = Vec<Option<Value>>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = vec![None; self.names.len()];
        while let Some(slot) = map.next_key_seed(KeyIndex { names: self.names })? {
            match slot {
                Some(i) => out[i] = json_value(map.next_value::<serde_json::Value>()?),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(out)
    }
}

/// Maps a key to the index of the wanted field it names, without allocating.
struct KeyIndex<'a> {
    names: &'a [Field],
}

impl<'de> DeserializeSeed<'de> for KeyIndex<'_> {
    type Value = Option<usize>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIndex<'_> {
    type Value = Option<usize>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a field name")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(self.names.iter().position(|n| n.as_str() == v))
    }
}

fn json_value(v: serde_json::Value) -> Option<Value> {
    use serde_json::Value as J;
    Some(match v {
        J::Null => return None,
        J::Bool(b) => Value::Int(b as i64),
        J::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::text(s),
        other => Value::text(other.to_string()),
    })
}

/// The decompressed copy of `path` in the cache, made once per content version.
fn decompressed(path: &Path, key: &str, c: Compression, cache: &Path) -> std::io::Result<PathBuf> {
    let target = cache.join("jsonl").join(format!("{}.jsonl", cache_name(path, key)));
    if target.is_file() {
        return Ok(target);
    }
    let input = BufReader::with_capacity(1 << 20, fs::File::open(path)?);
    write_atomic(&target, |out| {
        let mut out = std::io::BufWriter::with_capacity(1 << 20, out);
        match c {
            Compression::Gzip => std::io::copy(&mut flate2::read::MultiGzDecoder::new(input), &mut out)?,
            Compression::Zstd => std::io::copy(&mut zstd::stream::read::Decoder::with_buffer(input)?, &mut out)?,
            Compression::None => 0,
        };
        out.flush()
    })?;
    Ok(target)
}

fn cache_name(path: &Path, key: &str) -> String {
    let abs = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut h = Sha256::new();
    h.update(abs.to_string_lossy().as_bytes());
    h.update(key.as_bytes());
    hex::encode(&h.finalize()[..12])
}

/// Loads the cached index of `path` when it was built for this content version, else builds
/// it with one sequential pass and caches it.
fn load_or_build_index(path: &Path, key: &str, cache: &Path) -> std::io::Result<(Vec<u64>, u64)> {
    let size = fs::metadata(path)?.len();
    let index_path = cache.join("jsonl-index").join(format!("{}.idx", cache_name(path, key)));
    if let Some(starts) = load_index(&index_path, key, size) {
        return Ok((starts, size));
    }
    let starts = build_index(path)?;
    let mut bytes = format!("{INDEX_MAGIC}\nkey {key} {size}\nrows {}\n", starts.len()).into_bytes();
    for s in &starts {
        bytes.extend_from_slice(&s.to_le_bytes());
    }
    // A cache that cannot be written (read-only disk) only costs a rebuild next time.
    let _ = write_atomic(&index_path, |f| f.write_all(&bytes));
    Ok((starts, size))
}

fn load_index(path: &Path, key: &str, size: u64) -> Option<Vec<u64>> {
    let bytes = fs::read(path).ok()?;
    let header = format!("{INDEX_MAGIC}\nkey {key} {size}\nrows ");
    let rest = bytes.strip_prefix(header.as_bytes())?;
    let nl = rest.iter().position(|&b| b == b'\n')?;
    let rows: usize = std::str::from_utf8(&rest[..nl]).ok()?.parse().ok()?;
    let body = &rest[nl + 1..];
    if body.len() != rows * 8 {
        return None;
    }
    Some(body.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())).collect())
}

/// Offsets of the lines that hold something other than whitespace.
fn build_index(path: &Path) -> std::io::Result<Vec<u64>> {
    let mut f = BufReader::with_capacity(1 << 20, fs::File::open(path)?);
    let mut starts = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut offset = 0u64;
    let mut line_start = 0u64;
    let mut has_content = false;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        let mut pos = 0;
        while pos < n {
            let nl = memchr::memchr(b'\n', &buf[pos..n]);
            let seg_end = nl.map_or(n, |k| pos + k);
            if !has_content && buf[pos..seg_end].iter().any(|b| !b.is_ascii_whitespace()) {
                has_content = true;
                starts.push(line_start);
            }
            match nl {
                Some(_) => {
                    pos = seg_end + 1;
                    line_start = offset + pos as u64;
                    has_content = false;
                }
                None => pos = n,
            }
        }
        offset += n as u64;
    }
    Ok(starts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_fields_and_skips_others() {
        let names = [Field::new("text"), Field::new("id")];
        let v = parse_row(br#"{"id": 7, "skip": {"deep": [1,2]}, "text": "a\"b"}"#, &names).unwrap();
        assert_eq!(v, vec![Some(Value::text("a\"b")), Some(Value::Int(7))]);
        assert!(parse_row(b"[1,2]", &names).is_err());
        assert!(parse_row(br#"{"text": "x"} trailing"#, &names).is_err());
        assert!(parse_row(b"{\"text\": \"\xff\"}", &names).is_err(), "invalid UTF-8");
    }

    #[test]
    fn index_skips_blank_lines_and_handles_a_missing_final_newline() {
        let dir = std::env::temp_dir().join(format!("zephon-idx-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join("x.jsonl");
        fs::write(&p, b"{\"a\":1}\n\n  \n{\"a\":2}\r\n{\"a\":3}").unwrap();
        assert_eq!(build_index(&p).unwrap(), vec![0, 12, 21]);
        fs::remove_dir_all(&dir).unwrap();
    }
}
