//! A spec section an operator crate owns: the name of its table in a spec (`[sentences]`),
//! where its operator goes in the pipeline, and a factory from the table's settings to the
//! operator.
//!
//! The facade (`zephon`) keeps a registry of sections; a spec table that names one is handed
//! to it, so an operator written against this crate alone runs from TOML, the `zephon` command
//! (a binary built with its section registered) and JSON specs alike, with nothing in the
//! facade naming it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::Operator;

/// Where a section's operator goes among the built-in stages, which run in a fixed order:
/// images, tokenization (`[tokenize]`, `[chat]` or `[pretokenized]`), `[ensure_mixture]`,
/// `[pack]`, `[shuffle]`. Sections of one stage run in the order they were registered.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    /// On the records as read (and their images decoded), before tokenization.
    Records,
    /// On tokenized records, before the mixture is enforced and rows are packed.
    Tokens,
    /// On rows, after packing and before the shuffle.
    Rows,
}

/// What a section's factory may know of the spec beyond its own table.
#[derive(Clone, Debug)]
pub struct SectionContext {
    base_dir: PathBuf,
    seed: u64,
    lanes: u32,
    spec: String,
}

impl SectionContext {
    /// The context of a spec named `spec` (its file, in errors), whose relative paths are
    /// relative to `base_dir`.
    pub fn new(spec: &str, base_dir: &Path, seed: u64, lanes: u32) -> Self {
        SectionContext { base_dir: base_dir.to_path_buf(), seed, lanes, spec: spec.to_string() }
    }

    /// A path the table gives, resolved as the spec resolves its own: `~/` is the home
    /// folder, a relative path is relative to the spec's folder.
    pub fn resolve(&self, path: &str) -> PathBuf {
        let expanded = match path.strip_prefix("~/") {
            Some(rest) => std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default().join(rest),
            None => PathBuf::from(path),
        };
        if expanded.is_absolute() { expanded } else { self.base_dir.join(expanded) }
    }

    /// The run's seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The run's number of lanes.
    pub fn lanes(&self) -> u32 {
        self.lanes
    }

    /// The spec's name (its file), for errors.
    pub fn spec(&self) -> &str {
        &self.spec
    }
}

/// A section's table as the spec gives it (TOML and JSON specs alike).
#[derive(Clone, Debug, PartialEq)]
pub struct SectionTable(serde_json::Value);

impl SectionTable {
    /// The table's settings (a JSON value: what TOML and JSON specs both become).
    pub fn new(value: serde_json::Value) -> Self {
        SectionTable(value)
    }

    /// The table as the section's settings type. Give that type
    /// `#[serde(deny_unknown_fields)]`: a typo is then an error naming the key, never a
    /// setting silently ignored.
    pub fn parse<C: DeserializeOwned>(&self) -> Result<C, String> {
        C::deserialize(&self.0).map_err(|e| e.to_string())
    }

    /// The raw value.
    pub fn value(&self) -> &serde_json::Value {
        &self.0
    }
}

/// A spec section: implement it next to the operator and register it with the facade
/// (`zephon::Sections::with`).
pub trait Section: Send + Sync + 'static {
    /// The table's name in a spec (`sentences` for `[sentences]`).
    fn name(&self) -> &str;

    /// Where the operator goes.
    fn stage(&self) -> Stage;

    /// The operator the table describes; an error says what is wrong with the table (the
    /// facade adds the spec's file and the table's name).
    fn build(&self, table: &SectionTable, context: &SectionContext) -> Result<Arc<dyn Operator>, String>;
}

impl fmt::Debug for dyn Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] ({:?})", self.name(), self.stage())
    }
}
