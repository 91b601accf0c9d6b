//! Files on disk that are whole or absent: atomic writes, the removal of temporaries left by
//! writers that died, and the one cache folder every part of zephon writes under.
//!
//! Several ranks of a host share cache folders and checkpoint folders, and any of them may be
//! killed mid-write. Every file is therefore written to a temporary in the same folder, synced,
//! renamed into place and the folder synced ([`write_atomic`]); a temporary names the process
//! that writes it, so that a later writer can tell a dead writer's leftovers from a live one's
//! work in progress ([`remove_stale_temporaries`]).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use sha2::{Digest as _, Sha256};

/// Temporaries older than this are removed whoever made them.
pub const STALE_AGE: Duration = Duration::from_secs(24 * 3600);

/// The folder zephon caches under: `ZEPHON_CACHE`, else `$XDG_CACHE_HOME/zephon`, else
/// `~/.cache/zephon`, else `zephon` in the temporary folder.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("ZEPHON_CACHE") {
        return d.into();
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("zephon")
}

/// Removes a temporary when dropped, unless it was renamed into place: an error or a panic
/// half-way through a write leaves nothing behind.
struct Temporary(Option<PathBuf>);

impl Drop for Temporary {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = fs::remove_file(p);
        }
    }
}

/// Writes `path` atomically (a temporary in the same folder, then rename), so concurrent ranks
/// building the same cache entry never see a half-written file. The temporary is removed on
/// every error.
pub fn write_atomic(path: &Path, write: impl FnOnce(&mut fs::File) -> io::Result<()>) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let tmp = temporary_name(path);
    let mut guard = Temporary(Some(tmp.clone()));
    let mut f = fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
    write(&mut f)?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, path)?;
    guard.0 = None;
    // The rename itself made durable: a file reported written must survive a crash.
    if let Some(dir) = path.parent() {
        fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// `.<name>.tmp.<space>.<pid>.<n>`: hidden, so that a listing of the folder (a checkpoint's
/// lanes, a cache) never takes it for a file; `space` tells whether `pid` is a process this one
/// can see.
fn temporary_name(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.tmp.{}.{}.{n}", process_space(), std::process::id()))
}

/// Names the process-id space this process lives in: the kernel boot and the pid namespace.
/// Two processes with the same tag see the same `/proc`; ranks in other containers or on other
/// hosts sharing the cache folder get other tags, so their live temporaries are never taken
/// for dead ones. `0` when unknown (liveness is then never judged by pid).
fn process_space() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        let boot = fs::read_to_string("/proc/sys/kernel/random/boot_id").ok();
        let ns = fs::read_link("/proc/self/ns/pid").ok();
        match (boot, ns) {
            (Some(b), Some(n)) => {
                let mut h = Sha256::new();
                h.update(b.trim().as_bytes());
                h.update(n.to_string_lossy().as_bytes());
                hex::encode(&h.finalize()[..6])
            }
            _ => "0".to_string(),
        }
    })
}

/// Removes temporaries left in `dirs` by writers that died (a killed rank): those of a process
/// of this pid space that no longer runs, and any older than a day.
pub fn remove_stale_temporaries(dirs: &[PathBuf]) {
    let here = process_space();
    let now = SystemTime::now();
    for dir in dirs {
        let Ok(entries) = fs::read_dir(dir) else { continue };
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            let Some((space, pid)) = parse_temporary(&name) else { continue };
            let ours = space == here && here != "0";
            let dead = ours && !Path::new(&format!("/proc/{pid}")).exists();
            let old = || {
                e.metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| now.duration_since(t).ok())
                    .is_some_and(|age| age > STALE_AGE)
            };
            if dead || old() {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

/// `(space tag, pid)` of a temporary's name, `.<target>.tmp.<space>.<pid>.<n>` (see
/// [`temporary_name`]).
fn parse_temporary(name: &str) -> Option<(&str, u32)> {
    let name = name.strip_prefix('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let parts: Vec<&str> = name.rsplitn(5, '.').collect();
    match parts[..] {
        [n, pid, space, "tmp", _target] if digits(n) && digits(pid) => Some((space, pid.parse().ok()?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_atomic_leaves_nothing_on_error() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("d").join("entry");
        let err = write_atomic(&target, |_| Err(io::Error::other("boom"))).unwrap_err();
        assert_eq!(err.to_string(), "boom");
        assert_eq!(fs::read_dir(tmp.path().join("d")).unwrap().count(), 0);
        write_atomic(&target, |f| io::Write::write_all(f, b"ok")).unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"ok");
        assert_eq!(fs::read_dir(tmp.path().join("d")).unwrap().count(), 1);
    }

    #[test]
    fn temporaries_of_dead_processes_and_old_ones_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let here = process_space();
        let me = std::process::id();
        // A pid above the kernel's maximum (4194304) never runs.
        let dead = dir.join(format!(".k.idx.tmp.{here}.4294967295.0"));
        let alive = dir.join(format!(".k.idx.tmp.{here}.{me}.0"));
        let elsewhere = dir.join(".k.idx.tmp.abcdef012345.4294967295.0");
        let old_elsewhere = dir.join(".j.idx.tmp.abcdef012345.4294967295.1");
        let not_ours = dir.join("notes.tmp.txt");
        let visible = dir.join(format!("k.idx.tmp.{here}.4294967295.0"));
        for p in [&dead, &alive, &elsewhere, &old_elsewhere, &not_ours, &visible] {
            fs::write(p, b"x").unwrap();
        }
        let two_days = SystemTime::now() - Duration::from_secs(48 * 3600);
        fs::File::options().write(true).open(&old_elsewhere).unwrap().set_modified(two_days).unwrap();
        remove_stale_temporaries(std::slice::from_ref(&dir));
        assert!(!dead.exists() || here == "0");
        assert!(alive.exists() && elsewhere.exists() && not_ours.exists() && visible.exists());
        assert!(!old_elsewhere.exists());
    }
}
