//! The byte-offset index of a JSONL shard: built in one pass over the file (decompressing a
//! compressed one into the cache on the way), saved beside the content hash it belongs to,
//! and read back only for that exact file version.

use std::fs;
use std::io::{self, Read, Write};
use std::path::Path;

use crate::shard::{HashingReader, write_atomic};
use crate::storage::Object;

/// The index file's format, changed with what an index means: keyed by the full content hash;
/// a leading byte-order mark is not part of row 0.
pub(super) const INDEX_MAGIC: &str = "ZEPHON-JSONL-INDEX v2";

/// The UTF-8 byte-order mark some Windows tools write at the start of a text file.
pub(super) const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

pub(super) const CHUNK: usize = 1 << 20;

/// How a JSONL shard is compressed, by file name.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    /// By file name: `.jsonl`, `.ndjson` and `.json` (which C4, Dolma and most exports use
    /// for one object per line), plain or `.gz` / `.zst`.
    pub(crate) fn of(path: &Path) -> Option<Compression> {
        let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
        let (stem, c) = if let Some(stem) = name.strip_suffix(".gz") {
            (stem, Compression::Gzip)
        } else if let Some(stem) = name.strip_suffix(".zst") {
            (stem, Compression::Zstd)
        } else {
            (name.as_str(), Compression::None)
        };
        [".jsonl", ".ndjson", ".json"].iter().any(|ext| stem.ends_with(ext)).then_some(c)
    }

    /// Whether the file name says `.json` rather than `.jsonl`: such a file may hold one JSON
    /// document (an array) instead of one object per line.
    pub(crate) fn says_json(path: &Path) -> bool {
        let name = path.file_name().map(|n| n.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
        let stem = name.strip_suffix(".gz").or_else(|| name.strip_suffix(".zst")).unwrap_or(&name);
        stem.ends_with(".json")
    }

    /// In cache file names: a plain file whose bytes happen to be some `.gz` file's bytes has
    /// that file's hash, and its index must not be taken for the decompressed copy's.
    pub(super) fn label(self) -> &'static str {
        match self {
            Compression::None => "plain",
            Compression::Gzip => "gz",
            Compression::Zstd => "zst",
        }
    }
}

/// Decompresses `file` into `target` (atomically), indexing the output on the way. The
/// compressed bytes are hashed as they are consumed: a copy is kept only if they are the
/// content `hash` names, so a shard rewritten while it was opened cannot leave a copy of one
/// version under the name of another.
pub(super) fn decompress(file: &dyn Object, c: Compression, hash: &str, target: &Path) -> io::Result<(Vec<u64>, u64)> {
    let mut source = HashingReader::new(file);
    let mut indexer = Indexer::default();
    write_atomic(target, |out| {
        let input = io::BufReader::with_capacity(CHUNK, &mut source);
        let mut decoder: Box<dyn Read + '_> = match c {
            Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(input)),
            Compression::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(input)?),
            Compression::None => Box::new(input),
        };
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = match decoder.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            indexer.feed(&buf[..n]);
            out.write_all(&buf[..n])?;
        }
        drop(decoder);
        let (read, _) = source.finish()?;
        // The bytes consumed are the version `hash` names: their SHA-256, or for an object
        // whose store names its content (an ETag) the object is still that version.
        let same = if hash.starts_with("sha256:") { read == hash } else { file.unchanged()? };
        if !same {
            return Err(io::Error::other("the file changed while it was read; open the dataset again"));
        }
        Ok(())
    })?;
    let end = indexer.offset;
    Ok((indexer.finish(), end))
}

/// Indexes `file` with one sequential pass.
pub(super) fn index_file(file: &dyn Object) -> io::Result<(Vec<u64>, u64)> {
    let mut indexer = Indexer::default();
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match file.read_at(&mut buf, indexer.offset) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        indexer.feed(&buf[..n]);
    }
    let end = indexer.offset;
    Ok((indexer.finish(), end))
}

/// Finds the offsets of the lines that hold something other than whitespace, fed the file's
/// bytes in order in pieces of any size.
#[derive(Default)]
pub(super) struct Indexer {
    starts: Vec<u64>,
    /// Bytes fed so far.
    offset: u64,
    line_start: u64,
    has_content: bool,
    /// Bytes of a leading byte-order mark matched so far, until `bom_decided`.
    bom_matched: usize,
    bom_decided: bool,
}

impl Indexer {
    pub(super) fn feed(&mut self, buf: &[u8]) {
        let mut pos = 0;
        while !self.bom_decided && pos < buf.len() {
            if buf[pos] == BOM[self.bom_matched] {
                self.bom_matched += 1;
                pos += 1;
                if self.bom_matched == BOM.len() {
                    self.bom_decided = true;
                    self.line_start = BOM.len() as u64;
                }
            } else {
                self.bom_decided = true;
                // A partial mark is just bytes of the first line.
                if self.bom_matched > 0 {
                    self.has_content = true;
                    self.starts.push(0);
                }
            }
        }
        let n = buf.len();
        while pos < n {
            let nl = memchr::memchr(b'\n', &buf[pos..n]);
            let seg_end = nl.map_or(n, |k| pos + k);
            if !self.has_content && buf[pos..seg_end].iter().any(|b| !b.is_ascii_whitespace()) {
                self.has_content = true;
                self.starts.push(self.line_start);
            }
            match nl {
                Some(_) => {
                    pos = seg_end + 1;
                    self.line_start = self.offset + pos as u64;
                    self.has_content = false;
                }
                None => pos = n,
            }
        }
        self.offset += n as u64;
    }

    pub(super) fn finish(mut self) -> Vec<u64> {
        if !self.bom_decided && self.bom_matched > 0 && !self.has_content {
            self.starts.push(0);
        }
        self.starts
    }
}

pub(super) fn save_index(path: &Path, key: &str, size: u64, starts: &[u64]) {
    let mut bytes = format!("{INDEX_MAGIC}\nkey {key} {size}\nrows {}\n", starts.len()).into_bytes();
    for s in starts {
        bytes.extend_from_slice(&s.to_le_bytes());
    }
    // A cache that cannot be written (read-only disk) only costs a rebuild next time.
    let _ = write_atomic(path, |f| f.write_all(&bytes));
}

/// The cached index at `path` when it was built for content `key` of `size` bytes and is
/// well-formed (offsets rising, inside the file), else `None`.
pub(super) fn load_index(path: &Path, key: &str, size: u64) -> Option<Vec<u64>> {
    let bytes = fs::read(path).ok()?;
    let header = format!("{INDEX_MAGIC}\nkey {key} {size}\nrows ");
    let rest = bytes.strip_prefix(header.as_bytes())?;
    let nl = rest.iter().position(|&b| b == b'\n')?;
    let rows: usize = std::str::from_utf8(&rest[..nl]).ok()?.parse().ok()?;
    let body = &rest[nl + 1..];
    if Some(body.len()) != rows.checked_mul(8) {
        return None;
    }
    let starts: Vec<u64> = body.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())).collect();
    let rising = starts.windows(2).all(|w| w[0] < w[1]);
    (rising && starts.last().is_none_or(|&last| last < size)).then_some(starts)
}
