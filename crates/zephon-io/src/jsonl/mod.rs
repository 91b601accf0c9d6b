//! JSONL shards: random access by row through a byte-offset index, built once per file
//! version and cached on disk.
//!
//! Rows are read with positioned reads (`pread`), not a memory map: a shard truncated under
//! a running job gives an error naming it, never a bus error. Small shards of short rows
//! (within [`DatasetOptions::jsonl_held_bytes`]) are read whole on first use instead, because
//! for a document of a line the system call costs as much as parsing and tokenizing it.
//!
//! Images (LLaVA / OBELICS style) are paths in a field, relative to the shard's folder; each
//! file is read whole when its row is read, on the engine's worker thread.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use zephon_core::{Dataset, DatasetManifest, PlannedRead, ShardManifest};
use zephon_operator::{Field, OpError, Record, SampleId};

use crate::fields::Fields;
use crate::images::{self, Image, ImageHandles, ReadError};
use crate::layout::ShardRef;
use crate::shard::{CONTENT_DIR, content_hash, hash_hex, manifest_entry, open_shards};
use crate::storage::{LocalObject, Object, Upcoming};
use crate::{DatasetOptions, Result};

mod index;
mod row;

pub(crate) use index::Compression;
use index::{Indexer, decompress, index_file, load_index, save_index};

pub(crate) use row::{ImagePaths, parse_row};

/// Default of [`DatasetOptions::jsonl_held_bytes`].
const DEFAULT_HELD_BYTES: u64 = 64 << 20;

/// Bytes all datasets open with the default budget hold together, so that a mixture of many
/// small datasets does not hold 64 MiB for each.
const DEFAULT_HELD_TOTAL: u64 = 256 << 20;

/// Bytes reserved now under [`DEFAULT_HELD_TOTAL`].
static DEFAULT_HELD: AtomicU64 = AtomicU64::new(0);

/// Takes up to `want` bytes of the process's default budget; how many it got.
fn reserve_default(want: u64) -> u64 {
    let before = DEFAULT_HELD
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
            Some(used + want.min(DEFAULT_HELD_TOTAL.saturating_sub(used)))
        })
        .unwrap_or(DEFAULT_HELD_TOTAL);
    want.min(DEFAULT_HELD_TOTAL.saturating_sub(before))
}

/// Shards whose rows average more than this are read row by row whatever the budget: a
/// system call per row matters next to parsing and tokenizing short rows only (for a
/// one-line document it is half the cost; for a page of text, under 1 %).
const HELD_MEAN_ROW_BYTES: u64 = 1024;

/// Marks the shards of short rows held while they fit in `budget` (in order); the bytes they
/// take.
fn hold_within(shards: &mut [Shard], budget: u64) -> u64 {
    let mut used = 0;
    for shard in shards {
        if shard.end > HELD_MEAN_ROW_BYTES * shard.starts.len() as u64 {
            continue;
        }
        if used + shard.end > budget {
            break;
        }
        used += shard.end;
        shard.held = Some(OnceLock::new());
    }
    used
}

/// The cache folders JSONL datasets write to (under the cache directory).
const CACHE_DIRS: [&str; 3] = [CONTENT_DIR, "jsonl", "jsonl-index"];

struct Shard {
    /// The shard as given (possibly compressed): for messages, and for image paths relative
    /// to its folder.
    source: ShardRef,
    /// What is read: the shard itself (the very object that was hashed), or its decompressed
    /// copy in the cache.
    file: Arc<dyn Object>,
    /// Byte offset where each row starts; a row ends where the next starts (or at `end`).
    starts: Vec<u64>,
    end: u64,
    /// For a held shard: its bytes, read whole on first use (or why they could not be).
    held: Option<OnceLock<std::result::Result<Box<[u8]>, String>>>,
}

impl Shard {
    /// Where row `i` starts and ends (it ends where the next starts, the last at `end`).
    fn row_span(&self, i: usize) -> Option<(u64, u64)> {
        let start = *self.starts.get(i)?;
        Some((start, self.starts.get(i + 1).copied().unwrap_or(self.end)))
    }

    /// The bytes of a held shard (read now if this is the first use), or `None` when the
    /// shard is read row by row.
    fn held_bytes(&self) -> Option<std::result::Result<&[u8], OpError>> {
        let cell = self.held.as_ref()?;
        let bytes = cell.get_or_init(|| {
            let mut all = vec![0u8; self.end as usize];
            self.file.read_exact_at(&mut all, 0).map(|()| all.into_boxed_slice()).map_err(|e| {
                format!(
                    "{}: cannot read its {} bytes ({e}); did the file change since it was opened?",
                    self.source.location(),
                    self.end
                )
            })
        });
        Some(bytes.as_deref().map_err(|e| OpError::Fatal(e.clone())))
    }
}

/// A dataset of JSONL shards.
pub struct JsonlDataset {
    manifest: DatasetManifest,
    shards: Vec<Shard>,
    fields: Fields,
    handles: Vec<Field>,
    /// The field holding image paths, when images are read.
    images: Option<(Field, ImageHandles)>,
    /// Bytes of the process's default held budget this dataset reserved (given back on drop).
    default_held: u64,
}

impl Drop for JsonlDataset {
    fn drop(&mut self) {
        DEFAULT_HELD.fetch_sub(self.default_held, Ordering::Relaxed);
    }
}

impl JsonlDataset {
    /// Opens `shards` as the dataset's shards, in order, hashing each one (once per object
    /// version, cached) and building or loading its index, several shards at a time.
    pub fn open(name: &str, shards: &[ShardRef], options: &DatasetOptions) -> Result<Self> {
        options.fields.check(name)?;
        let (mut shards, entries) = open_shards(name, shards, options, &CACHE_DIRS, open_shard)?;
        let default_held = match options.jsonl_held_bytes {
            Some(budget) => {
                hold_within(&mut shards, budget as u64);
                0
            }
            None => {
                // What fits in this dataset's budget, then as much of it as the process's
                // total allows; the part not used is given back at once.
                let want = hold_within(&mut shards, DEFAULT_HELD_BYTES);
                shards.iter_mut().for_each(|s| s.held = None);
                let granted = reserve_default(want);
                let used = hold_within(&mut shards, granted);
                DEFAULT_HELD.fetch_sub(granted - used, Ordering::Relaxed);
                used
            }
        };
        let fields = options.fields.clone();
        let handles = fields.handles();
        let images = fields.images.as_deref().map(|f| (Field::new(f), ImageHandles::new()));
        Ok(JsonlDataset {
            manifest: DatasetManifest { name: name.to_string(), shards: entries },
            shards,
            fields,
            handles,
            images,
            default_held,
        })
    }

    fn read_row(&self, id: SampleId, buf: &mut Vec<u8>) -> std::result::Result<Record, OpError> {
        let shard =
            self.shards.get(id.shard as usize).ok_or_else(|| OpError::Fatal(format!("no shard {}", id.shard)))?;
        let i = id.row as usize;
        let (start, end) = shard.row_span(i).ok_or_else(|| {
            OpError::Fatal(format!("{}: no row {} (the shard has {})", shard.source.location(), i, shard.starts.len()))
        })?;
        // Indexes are checked when loaded, so this only guards against a bug.
        let len = end.checked_sub(start).ok_or_else(|| {
            OpError::Fatal(format!("{}: the index of this shard is corrupt (row {i})", shard.source.location()))
        })? as usize;
        self.fields.check_size(len)?;
        let bytes: &[u8] = match shard.held_bytes() {
            Some(all) => all?.get(start as usize..end as usize).ok_or_else(|| {
                OpError::Fatal(format!("{}: the index of this shard is corrupt (row {i})", shard.source.location()))
            })?,
            None => {
                buf.resize(len, 0);
                shard.file.read_exact_at(buf, start).map_err(|e| {
                    OpError::Fatal(format!(
                        "{}: cannot read bytes {start}..{end} ({e}); did the file change since it was opened?",
                        shard.source.location()
                    ))
                })?;
                buf
            }
        };
        let images_field = self.images.as_ref().map(|(f, _)| f);
        let row = parse_row(bytes, &self.handles, self.fields.json_from(), images_field)
            .map_err(|e| OpError::Data(format!("{}: invalid JSON: {e}", shard.source.location())))?;
        if let Some(d) = row.duplicate {
            let name = self.handles.get(d).or(images_field).map_or("", Field::as_str);
            return Err(OpError::Data(format!(
                "field {name:?} appears twice in the row; which one is meant is ambiguous"
            )));
        }
        let mut record = Record::from_sample(id);
        for (i, (name, cell)) in self.handles.iter().zip(row.cells).enumerate() {
            self.fields.put(&mut record, i, name, cell)?;
        }
        if let Some((field, handles)) = &self.images {
            let found = self.read_images(shard, field, row.images, len)?;
            handles.attach(&mut record, found)?;
        }
        Ok(record)
    }

    /// Reads the first and last byte of each sample's row in a held shard before any is
    /// parsed. Rows drawn at random sit far apart in memory, so each row's first read misses
    /// the CPU caches; read together, the misses overlap instead of one parse waiting after
    /// another (a short row's parse is mostly that wait). Rows it cannot find are left to
    /// `read_row` to report.
    fn touch_held_rows(&self, samples: &[SampleId]) {
        for id in samples {
            let Some(shard) = self.shards.get(id.shard as usize) else { continue };
            let Some(Ok(bytes)) = shard.held_bytes() else { continue };
            let Some((start, end)) = shard.row_span(id.row as usize) else { continue };
            if let (Some(first), Some(last)) = (bytes.get(start as usize), bytes.get((end as usize).wrapping_sub(1))) {
                std::hint::black_box((*first, *last));
            }
        }
    }

    /// Reads the files a row's images field names, in its order, counting their bytes toward
    /// the row size limit on top of the row's own `row_bytes`.
    fn read_images(
        &self,
        shard: &Shard,
        field: &Field,
        paths: ImagePaths,
        row_bytes: usize,
    ) -> std::result::Result<Vec<Image>, OpError> {
        let name = field.as_str();
        let paths = match paths {
            ImagePaths::Paths(p) => p,
            ImagePaths::Bad(what) => {
                return Err(OpError::Data(format!(
                    "field {name:?} {what}; image paths are a string or an array of strings"
                )));
            }
        };
        let mut total = row_bytes as u64;
        let mut found = Vec::with_capacity(paths.len());
        for (k, written) in paths.into_iter().enumerate() {
            let (resolved, object) = shard.source.open_beside(&written);
            let limit = self.fields.max_row_bytes.map(|max| max.saturating_sub(total));
            let bytes = images::read_object(object, limit).map_err(|e| match e {
                ReadError::TooBig(size) => OpError::Data(format!(
                    "row of at least {} bytes with its images (image {k} {written:?} has {size}) is over the \
                     limit of {} bytes (max_row_bytes)",
                    total.saturating_add(size),
                    self.fields.max_row_bytes.unwrap_or(0)
                )),
                ReadError::Io(e) => {
                    OpError::Data(format!("field {name:?}: image {k} {written:?} (resolved to {resolved}): {e}"))
                }
            })?;
            total += bytes.len() as u64;
            found.push(Image { bytes: bytes.into(), source: written.into() });
        }
        Ok(found)
    }
}

impl JsonlDataset {
    /// Passes what the schedule says of `samples` (all of one shard) on to its file, as the
    /// byte spans of their rows.
    fn upcoming(&self, samples: &[SampleId], upcoming: Upcoming) {
        let Some(shard) = samples.first().and_then(|s| self.shards.get(s.shard as usize)) else { return };
        if upcoming.wanted_by(shard.file.as_ref()) {
            upcoming.tell(shard.file.as_ref(), samples.iter().filter_map(|s| shard.row_span(s.row as usize)));
        }
    }
}

impl Dataset for JsonlDataset {
    fn manifest(&self) -> &DatasetManifest {
        &self.manifest
    }

    fn prefetch(&self, samples: &[SampleId]) {
        self.upcoming(samples, Upcoming::Soon);
    }

    fn plan(&self, samples: &[SampleId], read: &PlannedRead) {
        self.upcoming(samples, Upcoming::Planned(read));
    }

    fn plans_ahead(&self) -> u64 {
        self.shards.iter().map(|s| s.file.plans_ahead()).max().unwrap_or(0)
    }

    fn read(&self, samples: &[SampleId], out: &mut Vec<std::result::Result<Record, OpError>>) {
        self.touch_held_rows(samples);
        let mut buf = Vec::new();
        for &id in samples {
            out.push(self.read_row(id, &mut buf));
        }
    }
}

/// Opens one shard: its content hash, its readable bytes and its row index, each from the
/// cache when this object version was seen before. A plain shard that is not cached is read
/// once, hashing and indexing together. A `.json` shard that holds one JSON array is refused.
fn open_shard(
    source: &ShardRef,
    file: Arc<dyn Object>,
    cache: &Path,
) -> std::result::Result<(Shard, ShardManifest), String> {
    let name = Path::new(source.name());
    let compression = Compression::of(name).ok_or("not a .jsonl, .json or .ndjson file (plain, .gz or .zst)")?;
    // The manifest describes the shard as stored, never its decompressed copy.
    let stored = file.clone();
    let mut indexer = Indexer::default();
    let plain = compression == Compression::None;
    let hashed = content_hash(file.as_ref(), cache, &mut |b| {
        if plain {
            indexer.feed(b)
        }
    })
    .map_err(|e| format!("cannot read: {e}"))?;
    let hash = hashed.hash;
    let index_path = cache.join("jsonl-index").join(format!("{}.{}.idx", hash_hex(&hash), compression.label()));
    let (readable, starts, end): (Arc<dyn Object>, Vec<u64>, u64) = if plain {
        let (starts, end) = if hashed.read_through {
            let end = hashed.bytes_read;
            match load_index(&index_path, &hash, end) {
                Some(starts) => (starts, end),
                None => {
                    let starts = indexer.finish();
                    save_index(&index_path, &hash, end, &starts);
                    (starts, end)
                }
            }
        } else if let Some(starts) = load_index(&index_path, &hash, file.size()) {
            (starts, file.size())
        } else {
            // Indexing reads the whole object in order: a remote one is fetched ahead.
            file.prefetch(0..file.size());
            let (starts, end) = index_file(file.as_ref()).map_err(|e| format!("cannot index: {e}"))?;
            save_index(&index_path, &hash, end, &starts);
            (starts, end)
        };
        (file, starts, end)
    } else {
        let copy_path = cache.join("jsonl").join(format!("{}.{}.jsonl", hash_hex(&hash), compression.label()));
        // The copy is trusted only with an index that agrees on its size: a copy truncated
        // behind zephon's back would otherwise read as a shard with fewer rows.
        let cached = LocalObject::open(&copy_path).ok().and_then(|copy| {
            let size = copy.size();
            let starts = load_index(&index_path, &hash, size)?;
            Some((Arc::new(copy) as Arc<dyn Object>, starts, size))
        });
        match cached {
            Some(hit) => hit,
            None => {
                file.prefetch(0..file.size());
                let (starts, end) = decompress(file.as_ref(), compression, &hash, &copy_path)
                    .map_err(|e| format!("cannot decompress: {e}"))?;
                save_index(&index_path, &hash, end, &starts);
                let copy = LocalObject::open(&copy_path).map_err(|e| format!("{}: {e}", copy_path.display()))?;
                (Arc::new(copy) as Arc<dyn Object>, starts, end)
            }
        }
    };
    if Compression::says_json(name)
        && let Some(&first) = starts.first()
    {
        let mut byte = [0u8];
        readable.read_exact_at(&mut byte, first).map_err(|e| format!("cannot read: {e}"))?;
        if byte[0] == b'[' {
            return Err("holds one JSON array, not JSON Lines (one object per line): write one object a line \
                 (e.g. `jq -c '.[]' in.json > out.jsonl`)"
                .into());
        }
    }
    let entry = manifest_entry(source, stored.as_ref(), starts.len() as u64, hash);
    Ok((Shard { source: source.clone(), file: readable, starts, end, held: None }, entry))
}

impl std::fmt::Debug for JsonlDataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonlDataset")
            .field("name", &self.manifest.name)
            .field("shards", &self.manifest.shards.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use zephon_operator::Value;

    use super::*;
    use crate::fields::Cell;
    use index::INDEX_MAGIC;
    use std::fs;
    use std::io::Write;

    #[test]
    fn picks_fields_and_skips_others() {
        let names = [Field::new("text"), Field::new("id")];
        let v = parse_row(br#"{"id": 7, "skip": {"deep": [1,2]}, "text": "a\"b"}"#, &names, names.len(), None).unwrap();
        assert_eq!(v.cells, vec![Cell::Value(Value::text("a\"b")), Cell::Value(Value::Int(7))]);
        assert_eq!(v.duplicate, None);
        assert!(parse_row(b"[1,2]", &names, names.len(), None).is_err());
        assert!(parse_row(br#"{"text": "x"} trailing"#, &names, names.len(), None).is_err());
        assert!(parse_row(b"{\"text\": \"\xff\"}", &names, names.len(), None).is_err(), "invalid UTF-8");
    }

    #[test]
    fn json_kinds_stay_apart() {
        let names = [Field::new("a"), Field::new("b"), Field::new("c"), Field::new("d"), Field::new("e")];
        let v = parse_row(
            br#"{"a": true, "b": null, "c": [1, {"x": 2}], "d": {"k": []}, "e": 18446744073709551615}"#,
            &names,
            names.len(),
            None,
        )
        .unwrap();
        assert_eq!(
            v.cells,
            vec![
                Cell::Bool(true),
                Cell::Null,
                Cell::Unsupported("a JSON array"),
                Cell::Unsupported("a JSON object"),
                Cell::TooBig(u64::MAX)
            ]
        );
        let v = parse_row(br#"{"a": 1, "b": 2, "a": 3}"#, &names, names.len(), None).unwrap();
        assert_eq!(v.duplicate, Some(0));
        // Fields from `json_from` on keep their JSON text as written, keys in their order.
        let v = parse_row(br#"{"c": [ {"z": 1, "a": "\u00e9"} ], "d": null, "e": 3}"#, &names, 2, None).unwrap();
        assert_eq!(
            v.cells[2..],
            [Cell::Value(Value::text(r#"[ {"z": 1, "a": "\u00e9"} ]"#)), Cell::Null, Cell::Value(Value::text("3"))]
        );
        // Token ids stored with the data: arrays of integers only.
        let v = parse_row(
            br#"{"a": [50256, 0, -1], "b": [], "c": [1, 2.5], "d": [1, 18446744073709551615]}"#,
            &names,
            names.len(),
            None,
        )
        .unwrap();
        assert_eq!(
            v.cells[..4],
            [
                Cell::Value(Value::array(vec![50256i64, 0, -1])),
                Cell::Value(Value::array(Vec::<i64>::new())),
                Cell::Unsupported("a JSON array"),
                Cell::Unsupported("a JSON array"),
            ]
        );
    }

    fn index_bytes(bytes: &[u8], piece: usize) -> Vec<u64> {
        let mut ix = Indexer::default();
        for p in bytes.chunks(piece.max(1)) {
            ix.feed(p);
        }
        ix.finish()
    }

    #[test]
    fn index_skips_blank_lines_and_handles_a_missing_final_newline() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("x.jsonl");
        let bytes = b"{\"a\":1}\n\n  \n{\"a\":2}\r\n{\"a\":3}";
        fs::write(&p, bytes).unwrap();
        let (starts, end) = index_file(&LocalObject::open(&p).unwrap()).unwrap();
        assert_eq!((starts, end), (vec![0, 12, 21], bytes.len() as u64));
        for piece in 1..bytes.len() {
            assert_eq!(index_bytes(bytes, piece), vec![0, 12, 21], "pieces of {piece}");
        }
    }

    #[test]
    fn a_leading_byte_order_mark_is_not_part_of_row_0() {
        for (bytes, want) in [
            (&b"\xEF\xBB\xBF{\"a\":1}\n{\"a\":2}\n"[..], vec![3, 11]),
            (b"\xEF\xBB\xBF\n  \n{\"a\":2}", vec![7]),
            (b"\xEF\xBB\xBF", vec![]),
            (b"\xEF\xBB{\"a\":1}\n", vec![0]),
            (b"\xEF", vec![0]),
            (b"\n\xEF\xBB\xBF{}", vec![1]),
        ] {
            for piece in 1..=bytes.len().max(1) {
                assert_eq!(index_bytes(bytes, piece), want, "{bytes:?} in pieces of {piece}");
            }
        }
    }

    #[test]
    fn a_copy_is_kept_only_for_the_content_it_was_opened_as() {
        let tmp = tempfile::tempdir().unwrap();
        let gz = tmp.path().join("x.jsonl.gz");
        let mut enc = flate2::write::GzEncoder::new(fs::File::create(&gz).unwrap(), flate2::Compression::fast());
        enc.write_all(b"{\"text\": \"a\"}\n{\"text\": \"b\"}\n").unwrap();
        enc.finish().unwrap();
        let hash = format!("sha256:{}", hex::encode(<sha2::Sha256 as sha2::Digest>::digest(fs::read(&gz).unwrap())));
        let file = LocalObject::open(&gz).unwrap();
        let (copy, other) = (tmp.path().join("c/copy.jsonl"), tmp.path().join("c/other.jsonl"));
        assert_eq!(decompress(&file, Compression::Gzip, &hash, &copy).unwrap(), (vec![0, 14], 28));
        assert_eq!(fs::read(&copy).unwrap(), b"{\"text\": \"a\"}\n{\"text\": \"b\"}\n");
        // Opened as another version (the file changed after it was hashed): nothing is kept.
        let err = decompress(&file, Compression::Gzip, "sha256:00", &other).unwrap_err();
        assert!(err.to_string().contains("changed while it was read"), "{err}");
        assert_eq!(fs::read_dir(tmp.path().join("c")).unwrap().count(), 1);
    }

    #[test]
    fn a_damaged_index_is_not_trusted() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("i.idx");
        save_index(&p, "sha256:ab", 100, &[0, 10, 50]);
        assert_eq!(load_index(&p, "sha256:ab", 100), Some(vec![0, 10, 50]));
        assert_eq!(load_index(&p, "sha256:ab", 101), None, "another size");
        assert_eq!(load_index(&p, "sha256:cd", 100), None, "another file");
        save_index(&p, "sha256:ab", 100, &[0, 50, 10]);
        assert_eq!(load_index(&p, "sha256:ab", 100), None, "offsets not rising");
        save_index(&p, "sha256:ab", 40, &[0, 10, 50]);
        assert_eq!(load_index(&p, "sha256:ab", 40), None, "an offset past the end");
        let mut bytes = format!("{INDEX_MAGIC}\nkey sha256:ab 100\nrows {}\n", usize::MAX).into_bytes();
        bytes.extend_from_slice(&[0; 8]);
        fs::write(&p, bytes).unwrap();
        assert_eq!(load_index(&p, "sha256:ab", 100), None, "a row count that overflows");
    }
}
