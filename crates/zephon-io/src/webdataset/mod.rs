//! WebDataset tar shards (as webdataset and Megatron-Energon users keep them): members
//! `KEY.EXT` grouped into samples by key, one sample a row, in the order keys first appear.
//!
//! Each shard's members are indexed once per file version (a scan of its headers, cached on
//! disk under the content hash like the JSONL indexes), so a sample is read by id with
//! positioned reads of exactly its members, never a scan.
//!
//! Fields: a requested field names a member extension (`txt`: the member `KEY.txt`, read as
//! UTF-8 text); a sample without such a member has it looked up as a key of its `KEY.json`
//! member, judged like a JSONL row's field. `__key__` is the sample's key. Images come from
//! the members whose extension is listed in [`Fields::images`], in member order.
//!
//! What is refused when a shard is opened, naming the offset: a damaged header (checksum),
//! a member cut short, a missing end-of-archive marker (a tar cut at a member boundary would
//! otherwise lose samples silently), a sparse member, and two members of one name (case
//! ignored in the extension). What is skipped, as webdataset skips it: directories, links
//! and other non-regular members, names whose last part has no `.` or starts with one, and
//! `__*__` metadata. Compressed tars (`.tar.gz`) are not read: they allow no positioned reads.

mod header;
mod index;

use std::path::Path;
use std::sync::Arc;

use zephon_core::{Dataset, DatasetManifest, PlannedRead, ShardManifest};
use zephon_operator::{Buffer, Field, OpError, Record, SampleId, Value};

use crate::fields::{Cell, Fields};
use crate::images::{Image, ImageHandles};
use crate::jsonl::parse_row;
use crate::layout::ShardRef;
use crate::shard::{CONTENT_DIR, content_hash, hash_hex, manifest_entry, open_shards};
use crate::storage::{Object, Upcoming};
use crate::{DatasetOptions, Error, Result};
use index::{Entry, Sample};

/// The cache folders tar datasets write to (under the cache directory).
const CACHE_DIRS: [&str; 2] = [CONTENT_DIR, "tar-index"];

/// The field that yields a sample's key, as webdataset names it.
pub const KEY_FIELD: &str = "__key__";

struct Shard {
    /// Where it is, for messages.
    path: String,
    file: Arc<dyn Object>,
    samples: Vec<Sample>,
}

/// A dataset of WebDataset tar shards.
pub struct TarDataset {
    manifest: DatasetManifest,
    shards: Vec<Shard>,
    fields: Fields,
    handles: Vec<Field>,
    /// The image extensions (lowercase), when images are read.
    images: Option<(Vec<String>, ImageHandles)>,
}

/// Where one requested field of a sample comes from.
enum Source<'a> {
    Key,
    Member(&'a Entry),
    Json,
    Absent,
}

impl TarDataset {
    /// Opens `shards` as the dataset's shards, in order: each is hashed (once per object
    /// version, cached) and indexed (once per content, cached), several at a time. A damaged
    /// or truncated shard is refused here, with the offset of what is wrong.
    pub fn open(name: &str, shards: &[ShardRef], options: &DatasetOptions) -> Result<Self> {
        let fields = options.fields.clone();
        fields.check(name)?;
        let extensions = match fields.images.as_deref() {
            Some(list) => {
                Some(extensions(list).map_err(|message| Error::Fields { dataset: name.to_string(), message })?)
            }
            None => None,
        };
        let (shards, entries) = open_shards(name, shards, options, &CACHE_DIRS, open_shard)?;
        let handles = fields.handles();
        Ok(TarDataset {
            manifest: DatasetManifest { name: name.to_string(), shards: entries },
            shards,
            fields,
            handles,
            images: extensions.map(|e| (e, ImageHandles::new())),
        })
    }

    fn read_row(&self, id: SampleId) -> std::result::Result<Record, OpError> {
        let shard =
            self.shards.get(id.shard as usize).ok_or_else(|| OpError::Fatal(format!("no shard {}", id.shard)))?;
        let sample = shard.samples.get(id.row as usize).ok_or_else(|| {
            OpError::Fatal(format!("{}: no row {} (the shard has {})", shard.path, id.row, shard.samples.len()))
        })?;
        let json = sample.member("json");
        let sources: Vec<Source> = self
            .handles
            .iter()
            .map(|f| match f.as_str() {
                KEY_FIELD => Source::Key,
                name => match (sample.member(name), json) {
                    (Some(m), _) => Source::Member(m),
                    (None, Some(_)) => Source::Json,
                    (None, None) => Source::Absent,
                },
            })
            .collect();
        let json = json.filter(|_| sources.iter().any(|s| matches!(s, Source::Json)));
        let images: Vec<&Entry> = match &self.images {
            Some((extensions, _)) => sample.members.iter().filter(|m| is_image(&m.ext, extensions)).collect(),
            None => Vec::new(),
        };
        // The limit is checked before anything is read: it must not cost the memory it guards.
        let members = sources.iter().filter_map(|s| if let Source::Member(m) = s { Some(*m) } else { None });
        let total: u64 = members.chain(json).chain(images.iter().copied()).map(|m| m.size).sum();
        self.fields.check_size(usize::try_from(total).unwrap_or(usize::MAX))?;

        let mut json_row = match json {
            Some(entry) => {
                let name = sample.name(entry);
                let bytes = self.read_member(shard, sample, entry)?;
                let row = parse_row(&bytes, &self.handles, self.fields.json_from(), None)
                    .map_err(|e| OpError::Data(format!("member {name:?}: invalid JSON: {e}")))?;
                if let Some(d) = row.duplicate {
                    let field = self.handles.get(d).map_or("", Field::as_str);
                    return Err(OpError::Data(format!(
                        "member {name:?}: field {field:?} appears twice; which one is meant is ambiguous"
                    )));
                }
                Some(row)
            }
            None => None,
        };
        let mut record = Record::from_sample(id);
        for (i, (field, source)) in self.handles.iter().zip(&sources).enumerate() {
            let (cell, from) = match source {
                Source::Key => (Cell::Value(Value::text(sample.key.as_str())), None),
                Source::Member(m) => {
                    let bytes = self.read_member(shard, sample, m)?;
                    let name = sample.name(m);
                    let text = String::from_utf8(bytes)
                        .map_err(|e| OpError::Data(format!("member {name:?} is not UTF-8 text: {e}")))?;
                    (Cell::Value(Value::text(text)), Some(name))
                }
                Source::Json => {
                    let cell =
                        json_row.as_mut().and_then(|r| r.cells.get_mut(i)).map(|c| std::mem::replace(c, Cell::Absent));
                    (cell.unwrap_or(Cell::Absent), json.map(|j| sample.name(j)))
                }
                Source::Absent => (Cell::Absent, None),
            };
            if i == 0 && self.fields.text.is_some() && cell == Cell::Absent {
                return Err(OpError::Data(missing_text(sample, field.as_str())));
            }
            self.fields.put(&mut record, i, field, cell).map_err(|e| match (e, from) {
                (OpError::Data(m), Some(name)) => OpError::Data(format!("member {name:?}: {m}")),
                (e, _) => e,
            })?;
        }
        if let Some((_, handles)) = &self.images {
            let mut found = Vec::with_capacity(images.len());
            for m in images {
                let bytes = self.read_member(shard, sample, m)?;
                found.push(Image { bytes: Buffer::new(bytes), source: sample.name(m).into() });
            }
            handles.attach(&mut record, found)?;
        }
        Ok(record)
    }

    /// The data of member `m` of `sample`, with one positioned read.
    fn read_member(&self, shard: &Shard, sample: &Sample, m: &Entry) -> std::result::Result<Vec<u8>, OpError> {
        let fail = |e: String| {
            OpError::Fatal(format!(
                "{}: cannot read member {:?} (bytes {}..+{}): {e}; did the file change since it was opened?",
                shard.path,
                sample.name(m),
                m.offset,
                m.size
            ))
        };
        let len = usize::try_from(m.size).map_err(|e| fail(e.to_string()))?;
        let mut bytes = vec![0u8; len];
        shard.file.read_exact_at(&mut bytes, m.offset).map_err(|e| fail(e.to_string()))?;
        Ok(bytes)
    }
}

impl Dataset for TarDataset {
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
        for &id in samples {
            out.push(self.read_row(id));
        }
    }
}

impl TarDataset {
    /// Passes what the schedule says of `samples` (all of one shard) on to its archive, as
    /// the byte spans of their members.
    fn upcoming(&self, samples: &[SampleId], upcoming: Upcoming) {
        let Some(shard) = samples.first().and_then(|s| self.shards.get(s.shard as usize)) else { return };
        if upcoming.wanted_by(shard.file.as_ref()) {
            let spans = samples
                .iter()
                .filter_map(|s| shard.samples.get(s.row as usize))
                .flat_map(|s| s.members.iter().map(|m| (m.offset, m.offset.saturating_add(m.size))));
            upcoming.tell(shard.file.as_ref(), spans);
        }
    }
}

/// The message for a sample without its text: the member looked for, and what it has.
fn missing_text(sample: &Sample, field: &str) -> String {
    let key = &sample.key;
    let has: Vec<String> = sample.members.iter().map(|m| sample.name(m)).collect();
    match sample.member("json") {
        Some(j) => format!(
            "no member {:?}, and member {:?} has no field {field:?} (the sample has {})",
            format!("{key}.{field}"),
            sample.name(j),
            has.join(", ")
        ),
        None => format!("no member {:?} (the sample has {})", format!("{key}.{field}"), has.join(", ")),
    }
}

/// The extensions of a comma-separated list (`"jpg, .PNG"`), lowercase, without dots.
fn extensions(list: &str) -> std::result::Result<Vec<String>, String> {
    list.split(',')
        .map(|e| {
            let e = e.trim();
            let e = e.strip_prefix('.').unwrap_or(e);
            if e.is_empty() || e.contains('/') {
                Err(format!("`images` = {list:?}: {e:?} is not an extension (a list like \"jpg,png\" is expected)"))
            } else {
                Ok(e.to_ascii_lowercase())
            }
        })
        .collect()
}

/// Whether extension `ext` is, or ends with `.` and, one of `extensions` (case ignored):
/// `jpg` matches `jpg` and `0.jpg`, as webdataset's decoders look at the last part.
fn is_image(ext: &str, extensions: &[String]) -> bool {
    let ext = ext.as_bytes();
    extensions.iter().any(|w| {
        let w = w.as_bytes();
        ext.len() >= w.len()
            && ext[ext.len() - w.len()..].eq_ignore_ascii_case(w)
            && (ext.len() == w.len() || ext[ext.len() - w.len() - 1] == b'.')
    })
}

/// Opens one shard: its content hash, then its index from the cache, or by a scan of its
/// headers that is then cached.
fn open_shard(
    shard: &ShardRef,
    file: Arc<dyn Object>,
    cache: &Path,
) -> std::result::Result<(Shard, ShardManifest), String> {
    let hashed = content_hash(file.as_ref(), cache, &mut |_| {}).map_err(|e| format!("cannot read: {e}"))?;
    let size = file.size();
    let index_path = cache.join("tar-index").join(format!("{}.idx", hash_hex(&hashed.hash)));
    let samples = match index::load(&index_path, &hashed.hash, size) {
        Some(samples) => samples,
        None => {
            // The scan visits every member's header, across the whole object.
            file.prefetch(0..size);
            let members = header::scan(file.as_ref(), size).map_err(|e| format!("not a readable tar file: {e}"))?;
            let samples = index::group(members).map_err(|e| format!("not a usable WebDataset shard: {e}"))?;
            // The headers were read after the object was hashed: an index of another version
            // must not be kept under this version's hash.
            if !file.unchanged().unwrap_or(false) {
                return Err("the file changed while it was opened; open the dataset again".into());
            }
            #[cfg(test)]
            SCANS.with(|c| c.set(c.get() + 1));
            index::save(&index_path, &hashed.hash, size, &samples);
            samples
        }
    };
    let entry = manifest_entry(shard, file.as_ref(), samples.len() as u64, hashed.hash);
    Ok((Shard { path: shard.location(), file, samples }, entry))
}

impl std::fmt::Debug for TarDataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TarDataset")
            .field("name", &self.manifest.name)
            .field("shards", &self.manifest.shards.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
thread_local! {
    /// Shards scanned on this thread: evidence for tests that a cached index was used.
    static SCANS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
mod tests;
