//! The local disk as a store: files read with positioned reads (`pread`), never a memory map,
//! so a shard truncated under a running job gives an error naming it, never a bus error.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{Object, Store, hidden};

/// How recent a change must be for a file to count as still changing. File systems stamp
/// ctime from a clock that lags the real one by up to a tick (1–10 ms), so a second edit right
/// after hashing can carry the same ctime as the version that was hashed; such a file's hash
/// is not cached (git calls this "racily clean"). Generous, because it costs nothing on data
/// that sits still.
pub(crate) const RACY_WINDOW: Duration = Duration::from_millis(100);

/// What the content-hash cache's entries begin with.
pub(crate) const CONTENT_MAGIC: &str = "ZEPHON-CONTENT-HASH v1";

/// A file version as the file system identifies it. When all of it is unchanged, so is the
/// content (short of a clock set back or a raw disk write).
#[derive(Clone, Debug)]
struct Stat {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    /// The wall clock just before the file was stat'ed (not part of the identity).
    observed_ns: i128,
}

impl Stat {
    fn of(file: &fs::File) -> io::Result<Stat> {
        let observed_ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i128);
        let meta = file.metadata()?;
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Ok(Stat {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.len(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
            observed_ns,
        })
    }

    fn line(&self) -> String {
        format!("dev {} ino {} size {} mtime {} ctime {}", self.dev, self.ino, self.size, self.mtime_ns, self.ctime_ns)
    }

    /// Whether a change after this stat could carry the same ctime (see [`RACY_WINDOW`]).
    fn racy(&self) -> bool {
        self.ctime_ns >= self.observed_ns - RACY_WINDOW.as_nanos() as i128
    }
}

/// A local file, open for positioned reads.
#[derive(Debug)]
pub struct LocalObject {
    location: String,
    file: fs::File,
    stat: Stat,
    version: String,
}

impl LocalObject {
    /// Opens the regular file at `path`, refusing anything else: opening a FIFO blocks until
    /// someone writes to it, so a FIFO named `x.jsonl` would hang the run instead of failing.
    pub fn open(path: &Path) -> io::Result<LocalObject> {
        let meta = fs::metadata(path)?;
        if !meta.is_file() {
            let what = if meta.is_dir() { "a directory" } else { "not a regular file (a FIFO, socket or device?)" };
            return Err(io::Error::new(io::ErrorKind::InvalidInput, what));
        }
        let file = fs::File::open(path)?;
        // The name may have been swapped between the check and the open: check what was opened.
        if !file.metadata()?.is_file() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
        }
        let stat = Stat::of(&file)?;
        let absolute = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        // The content cache's key line, unchanged from before the seam so that caches stay valid.
        let version = format!("{CONTENT_MAGIC}\n{}\n{}\n", absolute.display(), stat.line());
        Ok(LocalObject { location: path.display().to_string(), file, stat, version })
    }
}

impl Object for LocalObject {
    fn location(&self) -> &str {
        &self.location
    }

    fn size(&self) -> u64 {
        self.stat.size
    }

    fn version(&self) -> &str {
        &self.version
    }

    fn settled(&self) -> bool {
        !self.stat.racy()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.file.read_at(buf, offset)
    }

    fn unchanged(&self) -> io::Result<bool> {
        Ok(Stat::of(&self.file)?.line() == self.stat.line())
    }
}

/// A folder of the local disk as a store.
#[derive(Clone, Debug)]
pub struct LocalStore {
    root: PathBuf,
    shown: String,
}

impl LocalStore {
    /// The store rooted at the folder `root`.
    pub fn new(root: impl Into<PathBuf>) -> LocalStore {
        let root = root.into();
        LocalStore { shown: root.display().to_string(), root }
    }

    fn path_of(&self, relative: &str) -> PathBuf {
        if Path::new(relative).is_absolute() { PathBuf::from(relative) } else { self.root.join(relative) }
    }

    /// Lists `dir` (relative `prefix`) into `out`, following links; `seen` holds the folders
    /// entered, so that a link to a folder above cannot loop.
    fn walk(&self, dir: &Path, prefix: &str, seen: &mut BTreeSet<PathBuf>, out: &mut Vec<String>) -> io::Result<()> {
        let named = |e: io::Error, p: &Path| io::Error::new(e.kind(), format!("{}: {e}", p.display()));
        let canonical = fs::canonicalize(dir).map_err(|e| named(e, dir))?;
        if !seen.insert(canonical) {
            return Ok(());
        }
        for entry in fs::read_dir(dir).map_err(|e| named(e, dir))? {
            let entry = entry.map_err(|e| named(e, dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if hidden(&name) {
                continue;
            }
            let path = entry.path();
            let relative = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
            let meta = fs::metadata(&path).map_err(|e| {
                let why = if fs::symlink_metadata(&path).is_ok() { "a broken link" } else { "cannot be read" };
                io::Error::new(e.kind(), format!("{} is {why}: {e}", path.display()))
            })?;
            if meta.is_dir() {
                self.walk(&path, &relative, seen, out)?;
            } else {
                out.push(relative);
            }
        }
        Ok(())
    }
}

impl Store for LocalStore {
    fn root(&self) -> &str {
        &self.shown
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        self.walk(&self.root, "", &mut BTreeSet::new(), &mut out)?;
        out.sort();
        Ok(out)
    }

    fn open(&self, relative: &str) -> io::Result<Arc<dyn Object>> {
        Ok(Arc::new(LocalObject::open(&self.path_of(relative))?))
    }

    fn location_of(&self, relative: &str) -> String {
        self.path_of(relative).display().to_string()
    }
}
