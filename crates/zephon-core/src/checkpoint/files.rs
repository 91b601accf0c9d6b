//! Checkpoint files: one per rank, holding the lanes it owns, written atomically.
//!
//! ```text
//! ZEPHON-CHECKPOINT            (the envelope of seal.rs)
//! format 6
//! length <body bytes>
//! sha256 <hex of body>
//! <body: deflate of "<JSON length>\n", the JSON of the run fingerprint, metadata, step and the
//!        lanes' states without their lineage, then the lineage in its compact code>
//! ```

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{
    EXTENSION, Gathered, LaneState, LaneStreams, Loaded, RunFingerprint, RunMetadata, fingerprint::fingerprint_diff,
    lineage_code, seal,
};
use crate::error::{Error, Result};
use zephon_operator::Lane;

const MAGIC: &str = "ZEPHON-CHECKPOINT";

#[derive(Debug, Serialize, Deserialize)]
struct Body {
    fingerprint: RunFingerprint,
    metadata: RunMetadata,
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

/// Writes one rank's lanes into `dir` atomically; returns the file's path.
///
/// With `streams` (the run's work source and lane count), buffered samples are named by how
/// far back in their lane's input they came, which keeps files small; without, by their ids.
#[allow(clippy::too_many_arguments)]
pub fn write(
    dir: &Path,
    fingerprint: &RunFingerprint,
    metadata: &RunMetadata,
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
    let bytes = seal::seal(MAGIC, &seal::join(&json, &lineage));

    crate::disk::remove_stale_temporaries(std::slice::from_ref(&dir.to_path_buf()));
    crate::disk::write_atomic(&path, |f| f.write_all(&bytes)).map_err(|e| Error::io(&path, e))?;
    Ok(path)
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
    let raw = seal::unseal(MAGIC, "a zephon checkpoint", bytes).map_err(bad)?;
    let (json, lineage) = seal::split(&raw).map_err(bad)?;
    let body = serde_json::from_slice(json).map_err(|e| bad(format!("body does not decode: {e}")))?;
    Ok(Parsed { body, lineage: lineage.to_vec() })
}

/// The run metadata saved with the checkpoint in `dir` (see `RunSpec::metadata`), read from
/// its first valid file. Restores read this before building the run.
pub fn metadata(dir: &Path) -> Result<RunMetadata> {
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

/// Reads the states of `wanted` lanes from whichever files in `dir` hold them, and checks that
/// the checkpoint belongs to this run.
///
/// Fails when a lane is missing, two files disagree about a lane, the files are at different
/// steps, or any part of the fingerprint differs (the error names the parts; a changed dataset
/// names its changed shards, from the run's `metadata`). `streams` are the run's, to decode
/// lineage named by distance (see [`write()`]).
pub fn load(
    dir: &Path,
    fingerprint: &RunFingerprint,
    metadata: &RunMetadata,
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
    let mut gathered = Gathered::new(dir.display().to_string(), "file");
    for path in files {
        let parsed = read_file(&path)?;
        let saved = &parsed.body;
        let diffs = fingerprint_diff(&saved.fingerprint, fingerprint, &saved.metadata, metadata);
        if !diffs.is_empty() {
            return Err(mismatch(format!("{} was written by a different run: {}", path.display(), diffs.join("; "))));
        }
        gathered.check_schedules(&saved.fingerprint, fingerprint, saved.next_step)?;
        let body = parsed.decoded(&path, Some(streams))?;
        gathered.add(&path.display().to_string(), body.next_step, body.lanes)?;
    }
    gathered.finish(wanted)
}
