//! Objects held in memory, as a store: for tests (a reader that opened a file by itself would
//! find nothing on disk) and for data a program makes on the fly.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};

use super::{Object, Store, hidden};

/// A store of objects in memory, by relative path. It counts the bytes read from it.
#[derive(Debug)]
pub struct MemoryStore {
    root: String,
    objects: Mutex<BTreeMap<String, Arc<MemoryObject>>>,
}

#[derive(Debug)]
struct MemoryObject {
    location: String,
    bytes: Arc<[u8]>,
    version: String,
    generation: u64,
    read: std::sync::atomic::AtomicU64,
}

impl MemoryStore {
    /// An empty store, named `root` in messages.
    pub fn new(root: &str) -> Arc<MemoryStore> {
        Arc::new(MemoryStore { root: root.to_string(), objects: Mutex::new(BTreeMap::new()) })
    }

    /// Puts `bytes` at `relative` (replacing what was there: a new version).
    pub fn put(&self, relative: &str, bytes: impl Into<Arc<[u8]>>) {
        let mut objects = self.objects.lock().unwrap_or_else(PoisonError::into_inner);
        let generation = objects.get(relative).map_or(0, |o| o.generation) + 1;
        let bytes = bytes.into();
        let object = MemoryObject {
            location: self.location_of(relative),
            version: format!("memory {} {} {} {generation}", self.root, relative, bytes.len()),
            generation,
            bytes,
            read: Default::default(),
        };
        objects.insert(relative.to_string(), Arc::new(object));
    }

    /// Bytes read so far from the object at `relative`.
    pub fn bytes_read(&self, relative: &str) -> u64 {
        let objects = self.objects.lock().unwrap_or_else(PoisonError::into_inner);
        objects.get(relative).map_or(0, |o| o.read.load(std::sync::atomic::Ordering::Relaxed))
    }
}

impl Object for MemoryObject {
    fn location(&self) -> &str {
        &self.location
    }

    fn size(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn version(&self) -> &str {
        &self.version
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(self.bytes.len());
        let n = buf.len().min(self.bytes.len() - start);
        buf[..n].copy_from_slice(&self.bytes[start..start + n]);
        self.read.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }

    fn unchanged(&self) -> io::Result<bool> {
        Ok(true)
    }
}

impl Store for MemoryStore {
    fn root(&self) -> &str {
        &self.root
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let objects = self.objects.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(objects.keys().filter(|k| !k.split('/').any(hidden)).cloned().collect())
    }

    fn open(&self, relative: &str) -> io::Result<Arc<dyn Object>> {
        let objects = self.objects.lock().unwrap_or_else(PoisonError::into_inner);
        match objects.get(relative.trim_start_matches("./")) {
            Some(o) => Ok(o.clone() as Arc<dyn Object>),
            None => {
                Err(io::Error::new(io::ErrorKind::NotFound, format!("{} does not exist", self.location_of(relative))))
            }
        }
    }
}
