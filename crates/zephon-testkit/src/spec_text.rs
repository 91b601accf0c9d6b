//! TOML specs for tests, written by one builder: a test names the parts it varies (datasets,
//! chunking, tokenizer, packer, threads) and gets the text a user would write, so that every
//! test spec has the same layout and a new key is added in one way.

use std::fmt;
use std::path::{Path, PathBuf};

/// A value as a TOML spec writes it.
pub trait TomlValue {
    /// The TOML literal.
    fn toml(&self) -> String;
}

impl<T: TomlValue + ?Sized> TomlValue for &T {
    fn toml(&self) -> String {
        (**self).toml()
    }
}

impl TomlValue for str {
    fn toml(&self) -> String {
        format!("\"{}\"", self.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

impl TomlValue for String {
    fn toml(&self) -> String {
        self.as_str().toml()
    }
}

impl TomlValue for Path {
    fn toml(&self) -> String {
        self.display().to_string().toml()
    }
}

impl TomlValue for PathBuf {
    fn toml(&self) -> String {
        self.as_path().toml()
    }
}

impl TomlValue for bool {
    fn toml(&self) -> String {
        self.to_string()
    }
}

impl TomlValue for f64 {
    /// Always a float (`1.0`, never `1`), and TOML's spelling of the special values.
    fn toml(&self) -> String {
        match self {
            x if x.is_nan() => "nan".into(),
            x if x.is_infinite() => (if *x > 0.0 { "inf" } else { "-inf" }).into(),
            x => format!("{x:?}"),
        }
    }
}

impl<T: TomlValue> TomlValue for [T] {
    /// An array of the values.
    fn toml(&self) -> String {
        format!("[{}]", self.iter().map(TomlValue::toml).collect::<Vec<_>>().join(", "))
    }
}
impl<T: TomlValue> TomlValue for Vec<T> {
    fn toml(&self) -> String {
        self.as_slice().toml()
    }
}
macro_rules! integers {
    ($($t:ty),*) => {$(
        impl TomlValue for $t {
            fn toml(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
integers!(u32, u64, usize, i32, i64);

/// A spec's text, built by named parts. Top-level keys come first, then the `[[dataset]]`
/// tables in the order added, then the other tables in the order first touched, each after a
/// blank line; a key set twice keeps its place and takes the new value.
///
/// ```
/// use zephon_testkit::SpecText;
///
/// let text = SpecText::new(2, 4)
///     .seed(1)
///     .dataset("a", "/data/a")
///     .share(0.5)
///     .chunk_size(8)
///     .pack("wrap", 256)
///     .set("pack", "pad_id", 50256)
///     .text();
/// assert_eq!(
///     text,
///     "seed = 1\nlanes = 2\nrows_per_step = 4\n\n[[dataset]]\nname = \"a\"\npath = \"/data/a\"\nshare = 0.5\n\n\
///      [source]\nchunk_size = 8\n\n[pack]\nalgorithm = \"wrap\"\nseq_len = 256\npad_id = 50256\n"
/// );
/// ```
#[derive(Clone, Debug)]
pub struct SpecText {
    seed: Option<u64>,
    lanes: u32,
    rows_per_step: u32,
    top: String,
    datasets: Vec<Vec<String>>,
    tables: Vec<(String, Vec<String>)>,
    end: String,
}

impl SpecText {
    /// A spec of `lanes` lanes and `rows_per_step` rows a step, and nothing else yet.
    pub fn new(lanes: u32, rows_per_step: u32) -> Self {
        SpecText {
            seed: None,
            lanes,
            rows_per_step,
            top: String::new(),
            datasets: Vec::new(),
            tables: Vec::new(),
            end: String::new(),
        }
    }

    /// The run's `seed` (unset, the spec's default).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// A `[[dataset]]` named `name` at `path`; the dataset setters that follow apply to it.
    pub fn dataset(mut self, name: &str, path: impl AsRef<Path>) -> Self {
        self.datasets.push(vec![line("name", name), line("path", path.as_ref())]);
        self
    }

    /// The last dataset's token `share`.
    pub fn share(self, share: f64) -> Self {
        self.dataset_key("share", share)
    }

    /// The last dataset's sampling `weight`.
    pub fn weight(self, weight: f64) -> Self {
        self.dataset_key("weight", weight)
    }

    /// Any key of the last dataset (`text_field`, `images`...).
    ///
    /// Panics before any [`SpecText::dataset`]: a test written wrong, not data.
    pub fn dataset_key(mut self, key: &str, value: impl TomlValue) -> Self {
        let dataset = self.datasets.last_mut().expect("SpecText: a dataset key before any dataset");
        put(dataset, key, line(key, value));
        self
    }

    /// `[source] chunk_size`: samples per chunk.
    pub fn chunk_size(self, samples: u64) -> Self {
        self.set("source", "chunk_size", samples)
    }

    /// `[tokenize]` with the tokenizer file at `path` and its end-of-document token `eos`.
    pub fn tokenizer(self, path: impl AsRef<Path>, eos: &str) -> Self {
        self.set("tokenize", "tokenizer", path.as_ref()).set("tokenize", "eos", eos)
    }

    /// `[pack]` by `algorithm` into rows of `seq_len` tokens.
    pub fn pack(self, algorithm: &str, seq_len: u64) -> Self {
        self.set("pack", "algorithm", algorithm).set("pack", "seq_len", seq_len)
    }

    /// `[shuffle] buffer`: rows a lane's shuffle buffer holds.
    pub fn shuffle(self, buffer: u64) -> Self {
        self.set("shuffle", "buffer", buffer)
    }

    /// `[run] threads`.
    pub fn threads(self, threads: usize) -> Self {
        self.set("run", "threads", threads)
    }

    /// `[run] tail`: what the end of finite data does with a partial step.
    pub fn tail(self, tail: &str) -> Self {
        self.set("run", "tail", tail)
    }

    /// `key = value` in `[table]`.
    pub fn set(mut self, table: &str, key: &str, value: impl TomlValue) -> Self {
        put(self.table(table), key, line(key, value));
        self
    }

    /// `key = value` lines written out by hand into `[table]` (blank lines are left out), for
    /// tests whose cases are settings as a user writes them.
    pub fn lines(mut self, table: &str, lines: &str) -> Self {
        let keys = self.table(table);
        for l in lines.lines().map(str::trim).filter(|l| !l.is_empty()) {
            put(keys, key_of(l), l.to_string());
        }
        self
    }

    /// Leaves `[table]` out.
    pub fn without(mut self, table: &str) -> Self {
        self.tables.retain(|(name, _)| name != table);
        self
    }

    /// Text written out by hand right after the top-level keys (before any table): keys the
    /// spec should refuse, tables a test writes itself.
    pub fn top_text(mut self, text: &str) -> Self {
        self.top.push_str(text);
        if !text.is_empty() && !text.ends_with('\n') {
            self.top.push('\n');
        }
        self
    }

    /// Text written out by hand at the end, as it is.
    pub fn append(mut self, text: &str) -> Self {
        self.end.push_str(text);
        self
    }

    /// The spec's text.
    pub fn text(&self) -> String {
        self.to_string()
    }

    fn table(&mut self, name: &str) -> &mut Vec<String> {
        let i = match self.tables.iter().position(|(n, _)| n == name) {
            Some(i) => i,
            None => {
                self.tables.push((name.to_string(), Vec::new()));
                self.tables.len() - 1
            }
        };
        &mut self.tables[i].1
    }
}

impl fmt::Display for SpecText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(seed) = self.seed {
            writeln!(f, "seed = {seed}")?;
        }
        writeln!(f, "lanes = {}\nrows_per_step = {}", self.lanes, self.rows_per_step)?;
        f.write_str(&self.top)?;
        let datasets = self.datasets.iter().map(|keys| ("[[dataset]]".to_string(), keys));
        let tables = self.tables.iter().map(|(name, keys)| (format!("[{name}]"), keys));
        for (header, keys) in datasets.chain(tables) {
            writeln!(f, "\n{header}")?;
            for l in keys {
                writeln!(f, "{l}")?;
            }
        }
        f.write_str(&self.end)
    }
}

fn line(key: &str, value: impl TomlValue) -> String {
    format!("{key} = {}", value.toml())
}

fn key_of(line: &str) -> &str {
    line.split('=').next().unwrap_or(line).trim()
}

/// Sets `key` in `keys` to `line`: in the place of an earlier value, else last.
fn put(keys: &mut Vec<String>, key: &str, line: String) {
    match keys.iter_mut().find(|l| key_of(l) == key) {
        Some(l) => *l = line,
        None => keys.push(line),
    }
}
