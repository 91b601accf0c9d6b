//! Measurements of the data (token estimates, row sizes) cached on disk and made once per host.
//!
//! Every rank of a launch would otherwise measure the same thing at the same time: eight
//! ranks of one host tokenizing the same corpus eight times over. Measuring is deterministic,
//! so whoever measures, all read the same result.

use std::path::{Path, PathBuf};

use crate::error::Result;

/// `ZEPHON_CACHE`, else `$XDG_CACHE_HOME/zephon`, else `~/.cache/zephon`; `estimates/` in it.
fn dir() -> PathBuf {
    zephon_core::disk::cache_dir().join("estimates")
}

/// What the cache file `name` holds (`decode` refuses what it cannot trust), or else the
/// result of `measure`, saved with `encode`. The measuring holds an exclusive lock on
/// `name.lock`: the other processes of the host wait for it and then read the file. The
/// lock dies with its process; a cache that cannot be read, locked or written only costs a
/// measurement.
pub(crate) fn once<T>(
    name: &str,
    decode: impl Fn(&[u8]) -> Option<T>,
    encode: impl FnOnce(&T) -> Vec<u8>,
    measure: impl FnOnce() -> Result<T>,
) -> Result<T> {
    once_in(&dir(), name, decode, encode, measure)
}

fn once_in<T>(
    dir: &Path,
    name: &str,
    decode: impl Fn(&[u8]) -> Option<T>,
    encode: impl FnOnce(&T) -> Vec<u8>,
    measure: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let path = dir.join(name);
    let saved = || std::fs::read(&path).ok().and_then(|b| decode(&b));
    if let Some(t) = saved() {
        return Ok(t);
    }
    let lock = dir.join(format!("{name}.lock"));
    let _held = std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock))
        .ok()
        .filter(|f| f.lock().is_ok());
    if let Some(t) = saved() {
        return Ok(t);
    }
    let t = measure()?;
    let bytes = encode(&t);
    let _ = zephon_core::disk::write_atomic(&path, |f| std::io::Write::write_all(f, &bytes));
    Ok(t)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::once_in;

    /// Four measurers of the same thing at once (as ranks of one host are): one measures, the
    /// others wait for its file and read it; a later one reads it too.
    #[test]
    fn concurrent_measurers_measure_once() {
        let dir = tempfile::tempdir().unwrap();
        let measured = AtomicUsize::new(0);
        let measure = || {
            measured.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(200));
            Ok(vec![7u8, 1, 2])
        };
        let get = || once_in(dir.path(), "x.rows", |b| Some(b.to_vec()), |v| v.clone(), measure).unwrap();
        let got: Vec<Vec<u8>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4).map(|_| s.spawn(get)).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(measured.load(Ordering::SeqCst), 1);
        assert!(got.iter().all(|g| *g == [7, 1, 2]));
        assert_eq!((get(), measured.load(Ordering::SeqCst)), (vec![7, 1, 2], 1));
    }
}
