//! Where a dataset's shards are, as users hold datasets: a file, a folder (recursive), a glob,
//! or a list of these; which split; and the shards in the order they are read.
//!
//! Order: each location's files sorted by their path relative to its root (byte order), the
//! locations in the order given. The order decides which shard is which (`SampleId::shard`), so
//! it is part of the data: a run over a nested layout reads the same as over the same files
//! copied flat in the same order.
//!
//! Splits are recognised as Hugging Face names them: a path component or a name part (between
//! `/`, `-`, `_` and `.`) `train`, `validation` (`valid`, `val`, `dev`) or `test`, the one
//! nearest the file name deciding (`data/train-00000-of-00042.parquet`,
//! `en/c4-validation.00000-of-00008.json.gz`, `validation/part-0.jsonl`). A dataset whose files
//! fall in more than one split (or some in a split, some in none) is refused unless a split is
//! chosen.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::storage::{LocalStore, Object, Store, hidden};
use crate::{Error, Format, Result};

/// A split of a dataset, as Hugging Face names them.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Split {
    /// `train`.
    Train,
    /// `validation` (also written `valid`, `val`, `dev`).
    Validation,
    /// `test`.
    Test,
}

impl Split {
    /// The split a name means (`train`, `validation`, `valid`, `val`, `dev`, `test`; any case).
    pub fn parse(name: &str) -> Option<Split> {
        match name.to_ascii_lowercase().as_str() {
            "train" => Some(Split::Train),
            "validation" | "valid" | "val" | "dev" => Some(Split::Validation),
            "test" => Some(Split::Test),
            _ => None,
        }
    }

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Validation => "validation",
            Split::Test => "test",
        }
    }

    /// The split a file's path (relative to its root) says: the name part nearest the file
    /// name that names one.
    pub fn of_path(relative: &str) -> Option<Split> {
        relative.rsplit(['/', '-', '_', '.']).find_map(Split::parse)
    }
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Names of files that hold a dataset's metadata, not its rows, in the formats zephon reads
/// (Hugging Face `save_to_disk` and hub exports).
const METADATA_FILES: [&str; 4] = ["dataset_info.json", "dataset_infos.json", "dataset_dict.json", "state.json"];

/// Whether a listed file is a shard: a format zephon reads, and not a metadata file.
fn is_shard(relative: &str) -> bool {
    let name = relative.rsplit('/').next().unwrap_or(relative);
    Format::of(Path::new(name)).is_some() && !METADATA_FILES.contains(&name)
}

/// One shard of a dataset: an object of a store, by its path relative to the store's root.
#[derive(Clone)]
pub struct ShardRef {
    store: Arc<dyn Store>,
    path: String,
}

impl ShardRef {
    /// The shard at `path` (relative to the root) of `store`.
    pub fn new(store: Arc<dyn Store>, path: &str) -> ShardRef {
        ShardRef { store, path: path.to_string() }
    }

    /// A local file.
    pub fn local(path: &Path) -> ShardRef {
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
        ShardRef::new(Arc::new(LocalStore::new(parent)), &name)
    }

    /// Its path relative to its root: its name within the dataset.
    pub fn name(&self) -> &str {
        &self.path
    }

    /// Where it is, as a user names it.
    pub fn location(&self) -> String {
        self.store.location_of(&self.path)
    }

    /// Opens it.
    pub fn open(&self) -> std::io::Result<Arc<dyn Object>> {
        self.store.open(&self.path)
    }

    /// Opens a file it names by a path relative to its own folder (an image path in a row),
    /// or an absolute one; its location for messages, and the object.
    pub fn open_beside(&self, written: &str) -> (String, std::io::Result<Arc<dyn Object>>) {
        let relative = if Path::new(written).is_absolute() {
            written.to_string()
        } else {
            let dir = self.path.rsplit_once('/').map_or("", |(d, _)| d);
            normalize(&if dir.is_empty() { written.to_string() } else { format!("{dir}/{written}") })
        };
        (self.store.location_of(&relative), self.store.open(&relative))
    }
}

impl fmt::Debug for ShardRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ShardRef({})", self.location())
    }
}

/// `a/./b/../c` as `a/c`; `..` above the root is kept (the store decides what it means).
fn normalize(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." if out.last().is_some_and(|p| *p != "..") => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out.join("/")
}

/// One place a dataset's shards are: a file, a folder (everything under it), or the files of
/// a folder that a glob matches.
#[derive(Clone)]
pub struct Location {
    given: String,
    store: Arc<dyn Store>,
    target: Target,
}

#[derive(Clone, Debug)]
enum Target {
    File(String),
    All,
    Glob(Glob),
}

impl Location {
    /// A location as a user writes it: an object-store URL (`s3://bucket/prefix`, `gs://`,
    /// `az://`, `https://`, with the `remote` feature) or a local path (see
    /// [`Location::local`]). A URL names an object, a prefix (everything under it) or a glob.
    pub fn parse(dataset: &str, text: &str, storage: &crate::StorageOptions) -> Result<Location> {
        if !crate::storage::is_url(text) {
            return Location::local(dataset, text);
        }
        let fail = |message: String| Error::Open { dataset: dataset.to_string(), path: PathBuf::from(text), message };
        #[cfg(feature = "remote")]
        {
            let (scheme, rest) = text.split_once("://").unwrap_or(("", text));
            let parts: Vec<&str> = rest.split('/').collect();
            let literal = parts.iter().take_while(|p| !Glob::is_pattern(p)).count().max(1);
            let root = format!("{scheme}://{}", parts[..literal].join("/"));
            let store = crate::storage::RemoteStore::open(&root, storage).map_err(|e| fail(e.to_string()))?;
            let store: Arc<dyn Store> = Arc::new(store);
            let target = if literal < parts.len() {
                Target::Glob(Glob::new(&parts[literal..].join("/")).map_err(fail)?)
            } else if literal > 1 && Format::of(Path::new(parts[literal - 1])).is_some() {
                // An object name: its store is the prefix above it.
                let parent = format!("{scheme}://{}", parts[..literal - 1].join("/"));
                let store = crate::storage::RemoteStore::open(&parent, storage).map_err(|e| fail(e.to_string()))?;
                return Ok(Location {
                    given: text.to_string(),
                    store: Arc::new(store),
                    target: Target::File(parts[literal - 1].to_string()),
                });
            } else {
                Target::All
            };
            Ok(Location { given: text.to_string(), store, target })
        }
        #[cfg(not(feature = "remote"))]
        {
            let _ = storage;
            Err(fail("this build reads no object stores: build zephon with the `remote` feature".into()))
        }
    }

    /// A local path as a user writes it: a file, a folder, or a glob (`*`, `?`, `[...]`, and
    /// `**` for any number of folders) whose part before the first pattern is a folder.
    pub fn local(dataset: &str, text: &str) -> Result<Location> {
        let fail = |message: String| Error::Open { dataset: dataset.to_string(), path: PathBuf::from(text), message };
        if Glob::is_pattern(text) {
            let parts: Vec<&str> = text.split('/').collect();
            let literal = parts.iter().take_while(|p| !Glob::is_pattern(p)).count();
            let root = match parts[..literal].join("/") {
                r if r.is_empty() && text.starts_with('/') => "/".to_string(),
                r if r.is_empty() => ".".to_string(),
                r => r,
            };
            let glob = Glob::new(&parts[literal..].join("/")).map_err(fail)?;
            if !Path::new(&root).is_dir() {
                return Err(fail(format!("the glob's folder {root} does not exist")));
            }
            return Ok(Location {
                given: text.to_string(),
                store: Arc::new(LocalStore::new(root)),
                target: Target::Glob(glob),
            });
        }
        let path = Path::new(text);
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => {
                Ok(Location { given: text.to_string(), store: Arc::new(LocalStore::new(path)), target: Target::All })
            }
            Ok(_) => {
                let shard = ShardRef::local(path);
                Ok(Location { given: text.to_string(), store: shard.store, target: Target::File(shard.path) })
            }
            Err(e) if std::fs::symlink_metadata(path).is_ok() => Err(fail(format!("a broken link: {e}"))),
            Err(e) => Err(fail(e.to_string())),
        }
    }

    /// The objects of `store` that `pattern` names: everything (`""`), a glob, or one path.
    pub fn in_store(store: Arc<dyn Store>, pattern: &str) -> std::result::Result<Location, String> {
        let target = if pattern.is_empty() {
            Target::All
        } else if Glob::is_pattern(pattern) {
            Target::Glob(Glob::new(pattern)?)
        } else {
            Target::File(pattern.to_string())
        };
        Ok(Location { given: store.location_of(pattern), store, target })
    }

    /// The location as given.
    pub fn given(&self) -> &str {
        &self.given
    }

    /// The shard paths it names (relative to its store's root), sorted; metadata and files of
    /// formats zephon does not read are left out of folders and globs.
    fn files(&self, dataset: &str) -> Result<Vec<String>> {
        let fail =
            |message: String| Error::Open { dataset: dataset.to_string(), path: PathBuf::from(&self.given), message };
        match &self.target {
            Target::File(path) => {
                if Format::of(Path::new(path)).is_none() {
                    return Err(Error::UnknownFormat {
                        dataset: dataset.to_string(),
                        path: PathBuf::from(&self.given),
                    });
                }
                Ok(vec![path.clone()])
            }
            Target::All => {
                let files: Vec<String> =
                    self.store.list().map_err(|e| fail(e.to_string()))?.into_iter().filter(|p| is_shard(p)).collect();
                if files.is_empty() {
                    return Err(Error::NoShards { dataset: dataset.to_string(), path: PathBuf::from(&self.given) });
                }
                Ok(files)
            }
            Target::Glob(glob) => {
                let matched: Vec<String> = self
                    .store
                    .list()
                    .map_err(|e| fail(e.to_string()))?
                    .into_iter()
                    .filter(|p| glob.matches(p))
                    .collect();
                let files: Vec<String> = matched.iter().filter(|p| is_shard(p)).cloned().collect();
                match (files.is_empty(), matched.first()) {
                    (false, _) => Ok(files),
                    (true, None) => Err(fail("the glob matches no file".into())),
                    (true, Some(other)) => Err(fail(format!(
                        "the glob matches {} file(s) but none of a format zephon reads (e.g. {other})",
                        matched.len()
                    ))),
                }
            }
        }
    }
}

impl fmt::Debug for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Location({})", self.given)
    }
}

/// What one location of a dataset held: for `explain`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The location as given.
    pub location: String,
    /// Its root (the folder listed).
    pub root: String,
    /// Shards taken from it.
    pub files: usize,
    /// Shards of another split (or none) left out by the chosen split.
    pub left_out: usize,
    /// Their split (`None`: no split named).
    pub split: Option<Split>,
    /// The first and last shard taken, relative to the root.
    pub first: String,
    /// See `first`.
    pub last: String,
}

/// A dataset's shards, in order, their format, and what each location held.
#[derive(Clone, Debug)]
pub struct Layout {
    /// The format of every shard.
    pub format: Format,
    /// The shards, in the order they are read.
    pub shards: Vec<ShardRef>,
    /// What each location held.
    pub found: Vec<Found>,
}

impl Layout {
    /// The shards `locations` name, of `split` when one is chosen.
    ///
    /// Refused, naming what to change: a location that names nothing (a missing path, a
    /// broken link, a glob that matches nothing, a folder without shards), a file named twice,
    /// shards of several formats, shards of several splits (or some of a split, some of none)
    /// without a chosen split, a chosen split that no shard is of.
    pub fn resolve(dataset: &str, locations: &[Location], split: Option<Split>) -> Result<Layout> {
        let bad = |message: String| Error::Layout { dataset: dataset.to_string(), message };
        let mut shards = Vec::new();
        let mut found = Vec::new();
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        for loc in locations {
            let files = loc.files(dataset)?;
            let total = files.len();
            let of_split: Vec<(String, Option<Split>)> =
                files.into_iter().map(|f| (f.clone(), Split::of_path(&f))).collect();
            let taken: Vec<&(String, Option<Split>)> = match split {
                Some(s) => of_split.iter().filter(|(_, f)| *f == Some(s)).collect(),
                None => of_split.iter().collect(),
            };
            for (path, _) in &taken {
                let at = loc.store.location_of(path);
                if let Some(first) = seen.insert(at.clone(), loc.given.clone()) {
                    return Err(bad(format!("{at} is named twice (by {first} and by {})", loc.given)));
                }
                shards.push((
                    ShardRef::new(loc.store.clone(), path),
                    of_split.iter().find(|(p, _)| p == path).and_then(|x| x.1),
                ));
            }
            found.push(Found {
                location: loc.given.clone(),
                root: loc.store.root().to_string(),
                files: taken.len(),
                left_out: total - taken.len(),
                split: taken.first().and_then(|(_, s)| *s),
                first: taken.first().map(|(p, _)| p.clone()).unwrap_or_default(),
                last: taken.last().map(|(p, _)| p.clone()).unwrap_or_default(),
            });
            if taken.is_empty() {
                let splits: Vec<String> = of_split
                    .iter()
                    .map(|(_, s)| s.map_or("none".into(), |s| s.to_string()))
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect();
                return Err(bad(format!(
                    "{}: no shard of split {:?} (its {total} shard(s) are of {})",
                    loc.given,
                    split.map_or("", Split::as_str),
                    splits.join(", ")
                )));
            }
        }
        if split.is_none() {
            let mut by_split: BTreeMap<Option<Split>, &ShardRef> = BTreeMap::new();
            for (shard, s) in &shards {
                by_split.entry(*s).or_insert(shard);
            }
            if by_split.len() > 1 {
                let mut two = by_split.iter().take(2);
                let (Some((a, x)), Some((b, y))) = (two.next(), two.next()) else { unreachable!("two splits") };
                let name = |s: &Option<Split>| s.map_or("no split".to_string(), |s| format!("split {s}"));
                return Err(bad(format!(
                    "its shards are of more than one split ({} is of {}, {} of {}): choose one with `split = \"train\"` \
                     (spec) or `Dataset::split` (builder), and point `[[validation.dataset]]` at the same path with \
                     `split = \"validation\"`",
                    x.location(),
                    name(a),
                    y.location(),
                    name(b)
                )));
            }
        }
        let formats: Vec<(Format, &ShardRef)> =
            shards.iter().filter_map(|(s, _)| Format::of(Path::new(&s.path)).map(|f| (f, s))).collect();
        let Some(&(format, first)) = formats.first() else {
            return Err(bad("no shards".into()));
        };
        if let Some((_, other)) = formats.iter().find(|(f, _)| *f != format) {
            return Err(Error::MixedFormats {
                dataset: dataset.to_string(),
                first: PathBuf::from(first.location()),
                second: PathBuf::from(other.location()),
            });
        }
        Ok(Layout { format, shards: shards.into_iter().map(|(s, _)| s).collect(), found })
    }

    /// What its stores did so far (bytes fetched, requests, block cache hits and misses, retries),
    /// summed over its distinct stores; `None` when none counts (local files).
    pub fn stats(&self) -> Option<crate::storage::StoreStats> {
        let mut seen: Vec<*const ()> = Vec::new();
        let mut total: Option<crate::storage::StoreStats> = None;
        for shard in &self.shards {
            let id = Arc::as_ptr(&shard.store) as *const ();
            if seen.contains(&id) {
                continue;
            }
            seen.push(id);
            if let Some(s) = shard.store.stats() {
                *total.get_or_insert_with(Default::default) += s;
            }
        }
        total
    }

    /// What was found, one line a location: for `explain`.
    pub fn describe(&self) -> Vec<String> {
        self.found
            .iter()
            .map(|f| {
                let split = f.split.map_or("no split".to_string(), |s| format!("split {s}"));
                let left =
                    if f.left_out > 0 { format!(" ({} of other splits left out)", f.left_out) } else { String::new() };
                let range = if f.files == 1 { f.first.clone() } else { format!("{} … {}", f.first, f.last) };
                format!("{} {} file(s), {split}{left}, under {}: {range}", f.files, self.format.as_str(), f.root)
            })
            .collect()
    }
}

/// A glob over paths relative to a root: `*` and `?` within a name, `[abc]` / `[a-z]` / `[!a]`
/// a character, `**` any number of folders (a whole component).
#[derive(Clone, Debug)]
pub struct Glob {
    parts: Vec<String>,
}

impl Glob {
    /// Whether `text` holds a pattern character.
    pub fn is_pattern(text: &str) -> bool {
        text.contains(['*', '?', '['])
    }

    /// The glob `pattern`; refused when a `[` is not closed or `**` is part of a name.
    pub fn new(pattern: &str) -> std::result::Result<Glob, String> {
        let parts: Vec<String> = pattern.split('/').filter(|p| !p.is_empty()).map(str::to_string).collect();
        for p in &parts {
            if p.contains("**") && p != "**" {
                return Err(format!("`**` must be a whole path component in the glob {pattern:?}"));
            }
            let mut open = false;
            for c in p.chars() {
                match c {
                    '[' => open = true,
                    ']' => open = false,
                    _ => {}
                }
            }
            if open {
                return Err(format!("a `[` is not closed in the glob {pattern:?}"));
            }
        }
        Ok(Glob { parts })
    }

    /// Whether `path` (relative, `/`-separated) matches. Hidden components never match a
    /// pattern (listings leave them out already).
    pub fn matches(&self, path: &str) -> bool {
        let comps: Vec<&str> = path.split('/').collect();
        if comps.iter().any(|c| hidden(c)) {
            return false;
        }
        match_parts(&self.parts, &comps)
    }
}

fn match_parts(pattern: &[String], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((p, rest)) if p == "**" => (0..=path.len()).any(|skip| match_parts(rest, &path[skip..])),
        Some((p, rest)) => path
            .split_first()
            .is_some_and(|(c, more)| match_name(p.as_bytes(), c.as_bytes()) && match_parts(rest, more)),
    }
}

/// One name against one pattern component (`*`, `?`, `[...]`), by bytes: names and patterns
/// are compared as written.
fn match_name(p: &[u8], s: &[u8]) -> bool {
    match p.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => (0..=s.len()).any(|k| match_name(rest, &s[k..])),
        Some((b'?', rest)) => !s.is_empty() && match_name(rest, &s[1..]),
        Some((b'[', rest)) => {
            let Some(close) = rest.iter().skip(1).position(|&c| c == b']').map(|i| i + 1) else { return false };
            let (set, after) = (&rest[..close], &rest[close + 1..]);
            let Some((&c, more)) = s.split_first() else { return false };
            let (negate, set) = match set.split_first() {
                Some((b'!' | b'^', tail)) => (true, tail),
                _ => (false, set),
            };
            let mut hit = false;
            let mut i = 0;
            while i < set.len() {
                if i + 2 < set.len() && set[i + 1] == b'-' {
                    hit |= set[i] <= c && c <= set[i + 2];
                    i += 3;
                } else {
                    hit |= set[i] == c;
                    i += 1;
                }
            }
            hit != negate && match_name(after, more)
        }
        Some((&c, rest)) => s.first() == Some(&c) && match_name(rest, &s[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_names_folders_and_any_depth() {
        let g = |p: &str| Glob::new(p).unwrap();
        assert!(g("data/CC-MAIN-*/*.parquet").matches("data/CC-MAIN-2024-10/000_00000.parquet"));
        assert!(!g("data/CC-MAIN-*/*.parquet").matches("data/CC-MAIN-2024-10/sub/000.parquet"));
        assert!(g("**/*.jsonl.zst").matches("train/chunk1/example_train_0.jsonl.zst"));
        assert!(g("**/*.jsonl.zst").matches("top.jsonl.zst"));
        assert!(g("part-[0-9][0-9].jsonl").matches("part-07.jsonl"));
        assert!(!g("part-[!0-9]*.jsonl").matches("part-07.jsonl"));
        assert!(g("c4-train.?????-of-01024.json.gz").matches("c4-train.00000-of-01024.json.gz"));
        assert!(!g("*.jsonl").matches(".hidden.jsonl"));
        assert!(!g("**/*.jsonl").matches("_temporary/x.jsonl"));
        assert!(Glob::new("a**b/*.jsonl").is_err());
        assert!(Glob::new("part-[0-9.jsonl").is_err());
    }

    #[test]
    fn splits_are_read_as_hugging_face_names_them() {
        for (path, want) in [
            ("data/train-00000-of-00042.parquet", Some(Split::Train)),
            ("data/validation-00000-of-00002.parquet", Some(Split::Validation)),
            ("en/c4-validation.00000-of-00008.json.gz", Some(Split::Validation)),
            ("en/c4-train.00000-of-01024.json.gz", Some(Split::Train)),
            ("train/chunk1/example_train_0.jsonl.zst", Some(Split::Train)),
            ("validation/part-0.jsonl", Some(Split::Validation)),
            ("test/part-0.jsonl", Some(Split::Test)),
            ("dev.jsonl", Some(Split::Validation)),
            ("trainer/notes.jsonl", None),
            ("data/CC-MAIN-2024-10/000_00000.parquet", None),
            ("documents/v1_5-sample-0000.json.gz", None),
            ("train/valid_split_of_train.jsonl", Some(Split::Train)),
        ] {
            assert_eq!(Split::of_path(path), want, "{path}");
        }
    }

    #[test]
    fn paths_beside_a_shard_are_normalised() {
        assert_eq!(normalize("a/./b/../c"), "a/c");
        assert_eq!(normalize("../x"), "../x");
        assert_eq!(normalize("a//b/"), "a/b");
    }
}
