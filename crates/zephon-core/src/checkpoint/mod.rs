//! Checkpoint files: per-lane state, versioned, checksummed and fingerprinted.
//!
//! Each rank writes one file holding the lanes it owns, atomically (temporary name, fsync,
//! rename), with no collective. A restore at any world size reads whichever files hold the
//! lanes it now owns.
//!
//! File layout (text header, deflate-compressed body):
//!
//! ```text
//! ZEPHON-CHECKPOINT
//! format 3
//! length <body bytes>
//! sha256 <hex of body>
//! <body: deflate of "<JSON length>\n", the JSON of the run fingerprint and the lanes' states
//!        without their lineage, then the lineage in its compact code (see lineage_code.rs)>
//! ```
//!
//! Nearly all of a checkpoint is the lineage of buffered records, so that is what the format
//! is shaped around: a sample is named by how far back in its lane's input it came, which the
//! run's work source can list again ([`LaneStreams`]).

mod lineage_code;

pub use lineage_code::{LaneStreams, WINDOW};

use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::id::Lane;
use crate::lineage::Lineage;
use crate::operator::AccumulatorState;

/// The checkpoint format this build writes and reads.
pub const FORMAT_VERSION: u32 = 3;
const MAGIC: &str = "ZEPHON-CHECKPOINT";
/// File name extension of checkpoint files.
pub const EXTENSION: &str = "zck";

/// A lane's position in its chunk stream: the next sample to push is sample `offset` of the
/// lane's chunk `chunk`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// The lane's chunk number (its n-th chunk, not the global chunk index).
    pub chunk: u64,
    /// The sample within that chunk.
    pub offset: u64,
}

/// Everything needed to continue one lane exactly: a few integers and lineage keys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaneState {
    /// The lane.
    pub lane: Lane,
    /// Where the lane's input continues.
    pub cursor: Cursor,
    /// How many of the cursor's input's records (the outputs of its stateless part) were
    /// already pushed: non-zero when the checkpoint's step ended inside one input that made
    /// many rows (a huge document). Restore re-runs that input's stateless part and skips them.
    #[serde(default)]
    pub input_progress: u64,
    /// Rows the lane has emitted so far (delivered in steps or pending).
    pub rows_emitted: u64,
    /// Records skipped under the skip policy so far, by dataset.
    pub skips: Skips,
    /// Whether the lane's input has ended and its accumulators are flushed.
    pub finished: bool,
    /// What the end of the input left out under `Tail::Drop`: the rows of a final partial
    /// step (with the token positions of each dataset they held).
    #[serde(default)]
    pub tail_dropped: TailDropped,
    /// One state per accumulator stage, in pipeline order.
    pub accumulators: Vec<AccumulatorState>,
    /// Rows emitted after the checkpoint's step but before the state was taken, by lineage.
    pub pending: Vec<Lineage>,
}

/// Rows the end of finite data left out (a final partial step under `Tail::Drop`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TailDropped {
    /// Rows left out.
    pub rows: u64,
    /// Positions (tokens) of each dataset those rows held, by dataset index.
    pub positions: BTreeMap<u32, u64>,
    /// The documents those rows held pieces of: each came in part or not at all.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub documents: std::collections::BTreeSet<crate::id::SampleId>,
}

/// Records skipped under the skip policy, by dataset index: how many, and why the first was.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skips(pub BTreeMap<u32, SkipTally>);

/// The skips of one dataset.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkipTally {
    /// Records skipped.
    pub count: u64,
    /// The error of the first one (sample and message), as an example of why.
    pub first: String,
}

impl Skips {
    /// Records skipped over all datasets.
    pub fn total(&self) -> u64 {
        self.0.values().map(|t| t.count).sum()
    }

    /// Counts one skip of `dataset` for `reason`.
    pub fn add(&mut self, dataset: u32, reason: impl FnOnce() -> String) {
        let t = self.0.entry(dataset).or_default();
        if t.count == 0 {
            t.first = reason();
        }
        t.count += 1;
    }

    /// Adds another tally to this one (counts summed; the first reason kept where there is one).
    pub fn merge(&mut self, other: &Skips) {
        for (d, t) in &other.0 {
            let mine = self.0.entry(*d).or_default();
            if mine.count == 0 {
                mine.first = t.first.clone();
            }
            mine.count += t.count;
        }
    }
}

/// The identity of a run, part by part, so a mismatch can say what changed.
pub type RunFingerprint = BTreeMap<String, String>;

#[derive(Debug, Serialize, Deserialize)]
struct Body {
    fingerprint: RunFingerprint,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
    /// The first step not yet delivered when the checkpoint was taken.
    next_step: u64,
    world_size: u32,
    rank: u32,
    lanes: Vec<LaneState>,
}

/// The file name rank-independent restores look for: the lane range it holds.
pub fn file_name(first: Lane, last: Lane) -> String {
    format!("lanes-{:06}-{:06}.{EXTENSION}", first.0, last.0)
}

/// The most bytes a checkpoint body may inflate to: beyond it the file is refused as corrupt
/// rather than allowed to exhaust memory.
const MAX_INFLATED: usize = 1 << 30;

/// Writes one rank's lanes into `dir` atomically; returns the file's path.
///
/// With `streams` (the run's work source and lane count), buffered samples are named by how
/// far back in their lane's input they came, which keeps files small; without, by their ids.
#[allow(clippy::too_many_arguments)]
pub fn write(
    dir: &Path,
    fingerprint: &RunFingerprint,
    metadata: &BTreeMap<String, String>,
    next_step: u64,
    world_size: u32,
    rank: u32,
    mut lanes: Vec<LaneState>,
    streams: Option<&LaneStreams>,
) -> Result<PathBuf> {
    let (Some(first), Some(last)) = (lanes.first(), lanes.last()) else {
        return Err(Error::Config("a checkpoint needs at least one lane".into()));
    };
    let name = file_name(first.lane, last.lane);
    let path = dir.join(&name);
    let cannot = |m: String| Error::CheckpointFile { path: path.clone(), message: format!("cannot encode: {m}") };
    let lineage = lineage_code::encode(&mut lanes, streams).map_err(cannot)?;
    let body =
        Body { fingerprint: fingerprint.clone(), metadata: metadata.clone(), next_step, world_size, rank, lanes };
    let json = serde_json::to_vec(&body).map_err(|e| cannot(e.to_string()))?;
    let mut raw = format!("{}\n", json.len()).into_bytes();
    raw.extend_from_slice(&json);
    raw.extend_from_slice(&lineage);
    let packed = miniz_oxide::deflate::compress_to_vec(&raw, 9);
    let mut bytes =
        format!("{MAGIC}\nformat {FORMAT_VERSION}\nlength {}\nsha256 {}\n", packed.len(), Digest::of(&packed).to_hex())
            .into_bytes();
    bytes.extend_from_slice(&packed);

    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    remove_stale_temporaries(dir);
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let write_tmp = || -> std::io::Result<()> {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()
    };
    write_tmp().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::io(&tmp, e)
    })?;
    fs::rename(&tmp, &path).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::io(&path, e)
    })?;
    // Make the rename itself durable: a checkpoint reported written must survive a crash.
    fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| Error::io(dir, e))?;
    Ok(path)
}

/// Removes temporaries (`.NAME.tmp.PID`) that a killed writer left in `dir`: those whose
/// process no longer runs. Best effort: a file that cannot be removed only costs disk.
fn remove_stale_temporaries(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = name.strip_prefix('.').and_then(|n| n.rsplit_once(&format!(".{EXTENSION}.tmp."))).map(|(_, p)| p);
        let running = |pid: &str| pid == std::process::id().to_string() || Path::new("/proc").join(pid).exists();
        if let Some(pid) = pid
            && pid.parse::<u32>().is_ok()
            && !running(pid)
        {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// A checkpoint to resume from, found under a root of `step-*` folders.
#[derive(Debug)]
pub struct Resolved {
    /// The folder whose files to restore.
    pub dir: PathBuf,
    /// Newer folders passed over, and why (incomplete: a rank had not written its file).
    pub passed_over: Vec<String>,
}

/// The checkpoint to resume from under `root`: `root` itself if it holds checkpoint files,
/// else its newest `step-*` folder whose files hold all `lanes` lanes.
///
/// Every rank reads the same folders and decides the same way. A newer folder with missing
/// lanes (some rank had not written yet) is passed over, and said so in
/// [`Resolved::passed_over`]; a newer folder with a file that is corrupt or unreadable is an
/// error, never silently passed over, because it may hold lanes no older folder can replace
/// consistently.
pub fn resolve(root: &Path, lanes: u32) -> Result<Resolved> {
    let is_ckpt = |p: &Path| {
        p.extension().is_some_and(|x| x == EXTENSION)
            && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'))
    };
    let files = |d: &Path| -> Result<Vec<PathBuf>> {
        let mut v: Vec<PathBuf> =
            fs::read_dir(d).map_err(|e| Error::io(d, e))?.flatten().map(|e| e.path()).filter(|p| is_ckpt(p)).collect();
        v.sort();
        Ok(v)
    };
    if !files(root)?.is_empty() {
        return Ok(Resolved { dir: root.to_path_buf(), passed_over: Vec::new() });
    }
    let mut steps: Vec<PathBuf> = fs::read_dir(root)
        .map_err(|e| Error::io(root, e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("step-")))
        .collect();
    steps.sort();
    let mut passed_over = Vec::new();
    for d in steps.iter().rev() {
        let mut covered = vec![false; lanes as usize];
        for p in files(d)? {
            let summary = fs::read(&p).map_err(|e| Error::io(&p, e)).and_then(|b| inspect(&p, &b)).map_err(|e| {
                Error::CheckpointMismatch {
                    dir: d.clone(),
                    message: format!(
                        "{e}; refusing to fall back to an older checkpoint without a word (remove {} to resume from \
                         the one before it)",
                        d.display()
                    ),
                }
            })?;
            for l in summary.lanes {
                if let Some(c) = covered.get_mut(l.index()) {
                    *c = true;
                }
            }
        }
        let missing: Vec<String> =
            covered.iter().enumerate().filter(|(_, c)| !**c).map(|(i, _)| i.to_string()).collect();
        if missing.is_empty() {
            return Ok(Resolved { dir: d.clone(), passed_over });
        }
        passed_over.push(format!("{} is incomplete (no file holds lane(s) {})", d.display(), missing.join(", ")));
    }
    Err(Error::CheckpointMismatch {
        dir: root.to_path_buf(),
        message: format!("no checkpoint files, and no step-* folder holds all {lanes} lanes"),
    })
}

/// Parses one checkpoint file, checking magic, version, length and checksum; the lanes'
/// lineage stays coded (see [`Parsed::lineage`]).
fn read_file(path: &Path) -> Result<Parsed> {
    let bytes = fs::read(path).map_err(|e| Error::io(path, e))?;
    parse(path, &bytes)
}

/// A checkpoint file's body, its lanes' lineage still coded.
struct Parsed {
    body: Body,
    lineage: Vec<u8>,
}

impl Parsed {
    /// The body with its lanes' lineage decoded; see [`lineage_code::decode`] for what
    /// decoding without `streams` gives.
    fn decoded(mut self, path: &Path, streams: Option<&LaneStreams>) -> Result<Body> {
        lineage_code::decode(&self.lineage, &mut self.body.lanes, streams).map_err(|m| Error::CheckpointFile {
            path: path.to_path_buf(),
            message: format!("lineage does not decode: {m}"),
        })?;
        Ok(self.body)
    }
}

/// What a checkpoint file says about itself.
#[derive(Debug)]
pub struct Summary {
    /// The first step a restore from it delivers.
    pub next_step: u64,
    /// The world size and rank that wrote it.
    pub written_by: (u32, u32),
    /// The lanes it holds.
    pub lanes: Vec<Lane>,
    /// The run fingerprint it was written under.
    pub fingerprint: RunFingerprint,
}

/// Checks the bytes of a checkpoint file (magic, version, length, checksum, body) and
/// summarizes it. Never panics on any input: this is what the fuzz target drives.
pub fn inspect(path: &Path, bytes: &[u8]) -> Result<Summary> {
    let body = parse(path, bytes)?.decoded(path, None)?;
    Ok(Summary {
        next_step: body.next_step,
        written_by: (body.world_size, body.rank),
        lanes: body.lanes.iter().map(|l| l.lane).collect(),
        fingerprint: body.fingerprint,
    })
}

fn parse(path: &Path, bytes: &[u8]) -> Result<Parsed> {
    let bad = |m: String| Error::CheckpointFile { path: path.to_path_buf(), message: m };
    let mut rest: &[u8] = bytes;
    let mut line = |what: &str| -> Result<String> {
        let nl =
            rest.iter().position(|&b| b == b'\n').ok_or_else(|| bad(format!("truncated before the {what} line")))?;
        let l = std::str::from_utf8(&rest[..nl]).map_err(|_| bad(format!("the {what} line is not text")))?.to_string();
        rest = &rest[nl + 1..];
        Ok(l)
    };
    if line("magic")? != MAGIC {
        return Err(bad("not a zephon checkpoint (bad magic line)".into()));
    }
    let field = |l: String, key: &str| -> Result<String> {
        l.strip_prefix(key)
            .and_then(|v| v.strip_prefix(' '))
            .map(str::to_string)
            .ok_or_else(|| bad(format!("expected a '{key}' line, found {l:?}")))
    };
    let format = field(line("format")?, "format")?;
    if format != FORMAT_VERSION.to_string() {
        return Err(bad(format!("format version {format}, this build reads version {FORMAT_VERSION}")));
    }
    let length: usize =
        field(line("length")?, "length")?.parse().map_err(|_| bad("the length is not a number".into()))?;
    let sum = field(line("sha256")?, "sha256")?;
    if rest.len() != length {
        return Err(bad(format!("{} body bytes, the header says {length} (truncated or appended to)", rest.len())));
    }
    if Digest::of(rest).to_hex() != sum {
        return Err(bad("checksum mismatch: the file is corrupt".into()));
    }
    let raw = miniz_oxide::inflate::decompress_to_vec_with_limit(rest, MAX_INFLATED)
        .map_err(|e| bad(format!("the body does not inflate: {e}")))?;
    let nl = raw.iter().position(|&b| b == b'\n').ok_or_else(|| bad("the body has no JSON length line".into()))?;
    let json_len: usize = std::str::from_utf8(&raw[..nl])
        .ok()
        .and_then(|l| l.parse().ok())
        .filter(|&n: &usize| n < raw.len() - nl)
        .ok_or_else(|| bad("the body's JSON length is not a number within the body".into()))?;
    let (json, lineage) = raw[nl + 1..].split_at(json_len);
    let body = serde_json::from_slice(json).map_err(|e| bad(format!("body does not decode: {e}")))?;
    Ok(Parsed { body, lineage: lineage.to_vec() })
}

/// The run metadata saved with the checkpoint in `dir` (see `RunSpec::metadata`), read from
/// its first valid file. Restores read this before building the run.
pub fn metadata(dir: &Path) -> Result<BTreeMap<String, String>> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == EXTENSION))
        .filter(|p| !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')))
        .collect();
    files.sort();
    let first = files.first().ok_or_else(|| Error::CheckpointMismatch {
        dir: dir.to_path_buf(),
        message: format!("no *.{EXTENSION} files"),
    })?;
    Ok(read_file(first)?.body.metadata)
}

/// What a restore needs from a checkpoint directory: the states of some lanes, all at one step.
#[derive(Debug)]
pub struct Loaded {
    /// The first step the restored run delivers.
    pub next_step: u64,
    /// The requested lanes' states, in the requested order.
    pub lanes: Vec<LaneState>,
}

/// Reads the states of `wanted` lanes from whichever files in `dir` hold them, and checks that
/// the checkpoint belongs to this run.
///
/// Fails when a lane is missing, two files disagree about a lane, the files are at different
/// steps, or any part of the fingerprint differs (the error names the parts; with `notes`,
/// the run's shard listings, a changed dataset names its changed shards). `streams` are the
/// run's, to decode lineage named by distance (see [`write()`]).
pub fn load(
    dir: &Path,
    fingerprint: &RunFingerprint,
    notes: &BTreeMap<String, String>,
    wanted: &[Lane],
    streams: &LaneStreams,
) -> Result<Loaded> {
    let mismatch = |m: String| Error::CheckpointMismatch { dir: dir.to_path_buf(), message: m };
    let entries = fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut files: Vec<PathBuf> = Vec::new();
    for e in entries {
        let p = e.map_err(|e| Error::io(dir, e))?.path();
        let is_ckpt = p.extension().is_some_and(|x| x == EXTENSION)
            && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if is_ckpt {
            files.push(p);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(mismatch(format!("no *.{EXTENSION} files")));
    }
    let mut step: Option<(u64, PathBuf)> = None;
    let mut found: BTreeMap<Lane, (LaneState, PathBuf)> = BTreeMap::new();
    for path in files {
        let parsed = read_file(&path)?;
        let saved = &parsed.body;
        let diffs = fingerprint_diff(&saved.fingerprint, fingerprint, &saved.metadata, notes);
        if !diffs.is_empty() {
            return Err(mismatch(format!("{} was written by a different run: {}", path.display(), diffs.join("; "))));
        }
        let body = parsed.decoded(&path, Some(streams))?;
        match &step {
            Some((s, other)) if *s != body.next_step => {
                return Err(mismatch(format!(
                    "{} is at step {} but {} is at step {s}: files from different checkpoints are mixed",
                    path.display(),
                    body.next_step,
                    other.display()
                )));
            }
            _ => step = Some((body.next_step, path.clone())),
        }
        for st in body.lanes {
            if let Some((prev, prev_path)) = found.get(&st.lane) {
                if *prev != st {
                    return Err(mismatch(format!(
                        "{} is in both {} and {} with different states",
                        st.lane,
                        prev_path.display(),
                        path.display()
                    )));
                }
                continue;
            }
            found.insert(st.lane, (st, path.clone()));
        }
    }
    let missing: Vec<String> = wanted.iter().filter(|l| !found.contains_key(l)).map(|l| l.0.to_string()).collect();
    if !missing.is_empty() {
        return Err(mismatch(format!("no file holds lane(s) {}", missing.join(", "))));
    }
    let lanes = wanted.iter().filter_map(|l| found.remove(l).map(|(s, _)| s)).collect();
    Ok(Loaded { next_step: step.map(|s| s.0).unwrap_or(0), lanes })
}

/// What differs between a saved fingerprint and the run's, part by part: for a dataset, its
/// changed shards (from the notes); for an operator, its first changed setting.
fn fingerprint_diff(
    saved: &RunFingerprint,
    now: &RunFingerprint,
    saved_notes: &BTreeMap<String, String>,
    now_notes: &BTreeMap<String, String>,
) -> Vec<String> {
    let keys: std::collections::BTreeSet<&String> = saved.keys().chain(now.keys()).collect();
    keys.into_iter()
        .filter(|k| saved.get(*k) != now.get(*k))
        .map(|k| {
            let shards = k.strip_prefix("dataset ").map(|name| format!("shards {name}"));
            if let Some((was, is)) = shards.and_then(|n| Some((saved_notes.get(&n)?, now_notes.get(&n)?))) {
                return format!("{k} changed: {}", shard_diff(was, is));
            }
            match (saved.get(k), now.get(k)) {
                (Some(was), Some(is)) => {
                    let (was, is) = first_difference(was, is);
                    format!("{k} was {was} and is now {is}")
                }
                (was, is) => {
                    format!(
                        "{k} was {} and is now {}",
                        show(was.map_or("(absent)", |v| v)),
                        show(is.map_or("(absent)", |v| v))
                    )
                }
            }
        })
        .collect()
}

fn show(v: &str) -> String {
    const MAX: usize = 100;
    if v.chars().count() <= MAX { v.to_string() } else { format!("{}…", v.chars().take(MAX).collect::<String>()) }
}

/// The first differing `key=value` word of two settings lines (the whole lines when they have
/// none in common).
fn first_difference(was: &str, is: &str) -> (String, String) {
    let (a, b): (Vec<&str>, Vec<&str>) = (was.split(' ').collect(), is.split(' ').collect());
    if a.len() == b.len()
        && a.len() > 1
        && let Some((x, y)) = a.iter().zip(&b).find(|(x, y)| x != y)
    {
        return (show(x), show(y));
    }
    (show(was), show(is))
}

/// Which shards differ between two shard listings (one line per shard).
fn shard_diff(was: &str, is: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (was.lines().collect(), is.lines().collect());
    let mut out = Vec::new();
    if a.len() != b.len() {
        out.push(format!("{} shards, now {}", a.len(), b.len()));
    }
    let changed: Vec<String> = a
        .iter()
        .zip(&b)
        .enumerate()
        .filter(|(_, (x, y))| x != y)
        .map(|(i, (x, y))| format!("shard {i} was {x}, now {y}"))
        .collect();
    let n = changed.len();
    out.extend(changed.into_iter().take(3));
    if n > 3 {
        out.push(format!("and {} more changed shards", n - 3));
    }
    out.join("; ")
}
