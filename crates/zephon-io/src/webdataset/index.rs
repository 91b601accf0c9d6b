//! A WebDataset shard's samples: members grouped by key, and the on-disk cache of that
//! grouping, keyed by the shard's content hash like the JSONL indexes.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::Path;

use super::header::Member;
use crate::shard::write_atomic;

/// v1: samples in first-appearance order, members in archive order.
const INDEX_MAGIC: &str = "ZEPHON-TAR-INDEX v1";

/// A member of a sample: `<key>.<ext>`, with its data's place in the shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The extension as written (everything after the first `.` of the name's last part).
    pub(crate) ext: String,
    pub(crate) offset: u64,
    pub(crate) size: u64,
}

/// The members sharing one key: one row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Sample {
    pub(crate) key: String,
    /// In archive order.
    pub(crate) members: Vec<Entry>,
}

impl Sample {
    /// The member with extension `ext` (case ignored, as webdataset lowercases extensions).
    pub(crate) fn member(&self, ext: &str) -> Option<&Entry> {
        self.members.iter().find(|m| m.ext.eq_ignore_ascii_case(ext))
    }

    /// The member's name as it is in the archive.
    pub(crate) fn name(&self, entry: &Entry) -> String {
        format!("{}.{}", self.key, entry.ext)
    }
}

/// `(key, extension)` of a member name by webdataset's rule: the key is the name up to the
/// first `.` of its last `/`-part (keys may hold `/`), the extension the rest. `None` for
/// members webdataset skips: no `.` in the last part, a last part starting with `.` (hidden
/// files, macOS `._*` resource forks) and `__*__` metadata.
pub(crate) fn split_name(name: &str) -> Option<(&str, &str)> {
    let first = name.split('/').next().unwrap_or(name);
    if first.len() >= 4 && first.starts_with("__") && first.ends_with("__") {
        return None;
    }
    let base_at = name.rfind('/').map_or(0, |i| i + 1);
    let dot = name[base_at..].find('.')?;
    if dot == 0 {
        return None;
    }
    Some((&name[..base_at + dot], &name[base_at + dot + 1..]))
}

/// Groups `members` into samples by key, in the order keys first appear (a key's members
/// need not be adjacent). Two members with one name (case ignored in the extension) make
/// the shard ambiguous and are refused.
pub(crate) fn group(members: Vec<Member>) -> Result<Vec<Sample>, String> {
    let mut samples: Vec<Sample> = Vec::new();
    let mut by_key: HashMap<String, usize> = HashMap::new();
    let mut headers: HashMap<(usize, String), u64> = HashMap::new();
    for m in members {
        let Some((key, ext)) = split_name(&m.name) else { continue };
        let i = *by_key.entry(key.to_string()).or_insert_with(|| {
            samples.push(Sample { key: key.to_string(), members: Vec::new() });
            samples.len() - 1
        });
        if let Some(first) = headers.insert((i, ext.to_ascii_lowercase()), m.header) {
            return Err(format!(
                "member {:?} (header at offset {}) repeats a member of sample {key:?} (header at offset {first}); \
                 which one is meant is ambiguous",
                m.name, m.header
            ));
        }
        samples[i].members.push(Entry { ext: ext.to_string(), offset: m.offset, size: m.size });
    }
    Ok(samples)
}

/// Writes the index of content `key` (a shard of `size` bytes) to `path`, atomically. A
/// cache that cannot be written (read-only disk) only costs a rescan next time.
pub(crate) fn save(path: &Path, key: &str, size: u64, samples: &[Sample]) {
    let mut bytes = format!("{INDEX_MAGIC}\nkey {key} {size}\nsamples {}\n", samples.len()).into_bytes();
    let put_str = |bytes: &mut Vec<u8>, s: &str| {
        bytes.extend_from_slice(&(s.len() as u64).to_le_bytes());
        bytes.extend_from_slice(s.as_bytes());
    };
    for s in samples {
        put_str(&mut bytes, &s.key);
        bytes.extend_from_slice(&(s.members.len() as u64).to_le_bytes());
        for m in &s.members {
            put_str(&mut bytes, &m.ext);
            bytes.extend_from_slice(&m.offset.to_le_bytes());
            bytes.extend_from_slice(&m.size.to_le_bytes());
        }
    }
    let _ = write_atomic(path, |f| f.write_all(&bytes));
}

/// The cached index at `path` when it was built for content `key` of `size` bytes and is
/// well-formed (every member inside the file, every sample with a member), else `None`.
pub(crate) fn load(path: &Path, key: &str, size: u64) -> Option<Vec<Sample>> {
    let bytes = fs::read(path).ok()?;
    let header = format!("{INDEX_MAGIC}\nkey {key} {size}\nsamples ");
    let rest = bytes.strip_prefix(header.as_bytes())?;
    let nl = rest.iter().position(|&b| b == b'\n')?;
    let n: usize = std::str::from_utf8(&rest[..nl]).ok()?.parse().ok()?;
    let mut r = Reader(&rest[nl + 1..]);
    // A sample takes at least 8 + 8 bytes: a forged count cannot allocate more than the file.
    let mut samples = Vec::with_capacity(n.min(r.0.len() / 16));
    for _ in 0..n {
        let key = r.string()?;
        let count = r.u64()?;
        if count == 0 {
            return None;
        }
        let mut members = Vec::new();
        for _ in 0..count {
            let ext = r.string()?;
            let (offset, len) = (r.u64()?, r.u64()?);
            if offset.checked_add(len)? > size {
                return None;
            }
            members.push(Entry { ext, offset, size: len });
        }
        samples.push(Sample { key, members });
    }
    r.0.is_empty().then_some(samples)
}

/// Reads an index body front to back; `None` at the first thing out of place.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let (head, tail) = self.0.split_at_checked(n)?;
        self.0 = tail;
        Some(head)
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn string(&mut self) -> Option<String> {
        let n = usize::try_from(self.u64()?).ok()?;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, header: u64) -> Member {
        Member { name: name.into(), header, offset: header + 512, size: 10 }
    }

    #[test]
    fn names_split_by_webdataset_rules() {
        assert_eq!(split_name("a.jpg"), Some(("a", "jpg")));
        assert_eq!(split_name("dir/sub/x.seg.png"), Some(("dir/sub/x", "seg.png")));
        assert_eq!(split_name("a.b/c.jpg"), Some(("a.b/c", "jpg")), "dots in folders are not the key's");
        assert_eq!(split_name("./s0.txt"), Some(("./s0", "txt")));
        assert_eq!(split_name("a."), Some(("a", "")));
        for skipped in ["README", "dir/noext", "dir/", ".hidden.jpg", "d/._a.jpg", "__key__", "__meta__/x.json"] {
            assert_eq!(split_name(skipped), None, "{skipped}");
        }
        assert_eq!(split_name("__x.jpg"), Some(("__x", "jpg")), "not metadata: no closing __");
    }

    #[test]
    fn samples_are_grouped_in_first_appearance_order() {
        let s = group(vec![
            member("b.jpg", 0),
            member("a.txt", 1024),
            member("README", 2048),
            member("b.txt", 3072),
            member("a.0.jpg", 4096),
        ])
        .unwrap();
        let keys: Vec<_> = s.iter().map(|s| (s.key.as_str(), s.members.len())).collect();
        assert_eq!(keys, vec![("b", 2), ("a", 2)]);
        assert_eq!(s[1].members[1].ext, "0.jpg");
        assert_eq!(s[1].name(&s[1].members[1]), "a.0.jpg");
        let e = group(vec![member("a.jpg", 0), member("b.jpg", 1024), member("a.JPG", 2048)]).unwrap_err();
        assert!(e.contains("\"a.JPG\" (header at offset 2048)") && e.contains("offset 0"), "{e}");
    }

    #[test]
    fn a_damaged_index_is_not_trusted() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("t.idx");
        let samples = group(vec![member("x/a.jpg", 0), member("x/a.txt", 1024), member("b.txt", 2048)]).unwrap();
        save(&p, "sha256:ab", 4096, &samples);
        assert_eq!(load(&p, "sha256:ab", 4096), Some(samples.clone()));
        assert_eq!(load(&p, "sha256:cd", 4096), None, "another file");
        assert_eq!(load(&p, "sha256:ab", 2000), None, "a member past the end");
        let good = fs::read(&p).unwrap();
        for cut in 0..good.len() {
            fs::write(&p, &good[..cut]).unwrap();
            assert_eq!(load(&p, "sha256:ab", 4096), None, "cut at {cut}");
        }
        let mut longer = good.clone();
        longer.push(0);
        fs::write(&p, &longer).unwrap();
        assert_eq!(load(&p, "sha256:ab", 4096), None, "trailing bytes");
        let at = good.windows(8).position(|w| w == b"samples ").unwrap() + 8;
        let nl = at + good[at..].iter().position(|&b| b == b'\n').unwrap();
        let mut bytes = good[..at].to_vec();
        bytes.extend_from_slice(usize::MAX.to_string().as_bytes());
        bytes.extend_from_slice(&good[nl..]);
        fs::write(&p, &bytes).unwrap();
        assert_eq!(load(&p, "sha256:ab", 4096), None, "a forged sample count");
    }
}
