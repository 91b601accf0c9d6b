//! What identifies a shard's content without reading all of it.

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use sha2::{Digest, Sha256};
use zephon_core::ShardManifest;

const WINDOW: u64 = 64 * 1024;

/// A content key for a file: its size plus SHA-256 of three 64 KiB windows (start, middle,
/// end), or of the whole file when it is smaller than that. Cheap at start-up on any dataset
/// size; it changes with any append, truncation or rewrite that touches a window, and with
/// any change at all to files under 192 KiB.
pub(crate) fn content_key(path: &Path) -> std::io::Result<String> {
    let mut f = fs::File::open(path)?;
    let size = f.metadata()?.len();
    let mut h = Sha256::new();
    h.update(size.to_le_bytes());
    let mut buf = vec![0u8; WINDOW as usize];
    let starts: Vec<u64> = if size <= 3 * WINDOW { vec![0] } else { vec![0, size / 2 - WINDOW / 2, size - WINDOW] };
    for start in starts {
        f.seek(SeekFrom::Start(start))?;
        let want = if size <= 3 * WINDOW { size as usize } else { WINDOW as usize };
        if buf.len() < want {
            buf.resize(want, 0);
        }
        f.read_exact(&mut buf[..want])?;
        h.update(&buf[..want]);
    }
    Ok(format!("{size}:{}", hex::encode(&h.finalize()[..16])))
}

/// A manifest entry for a shard file with `rows` rows.
pub(crate) fn manifest_entry(path: &Path, rows: u64) -> std::io::Result<ShardManifest> {
    let bytes = fs::metadata(path)?.len();
    Ok(ShardManifest { path: path.display().to_string(), rows, bytes, version: content_key(path)? })
}

/// The directory for index and decompression caches: `ZEPHON_CACHE`, else
/// `$XDG_CACHE_HOME/zephon`, else `~/.cache/zephon`.
pub(crate) fn default_cache_dir() -> std::path::PathBuf {
    if let Some(d) = std::env::var_os("ZEPHON_CACHE") {
        return d.into();
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("zephon")
}

/// Writes `bytes` to `path` atomically (temporary name in the same folder, then rename), so
/// concurrent ranks building the same cache entry never see a half-written file.
pub(crate) fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut fs::File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp.{}.{:?}", std::process::id(), std::thread::current().id()));
    let mut f = fs::File::create(&tmp)?;
    write(&mut f)?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, path)
}
