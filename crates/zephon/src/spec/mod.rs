//! The pipeline as a TOML file, so that the command line needs no Rust code.
//!
//! Every table refuses unknown keys: a typo is an error naming the key and line, never a
//! silently ignored setting. Relative paths are relative to the spec file; `~` is the home
//! directory. The operators run in a fixed order: images, tokenize (or chat, or
//! pretokenized), ensure_mixture, pack, shuffle. Tables of sections registered with
//! [`Sections`] (operators from other crates) join them at their stage.
//!
//! ```toml
//! seed = 1234
//! lanes = 8
//! rows_per_step = 16            # G: rows per global step ([schedule] ramps it)
//!
//! [[dataset]]
//! name = "a"
//! path = "corpora/a/jsonl"      # a shard file or a folder of shards
//! share = 0.5                   # token share (or `weight = ...` for sample weights)
//!
//! [[dataset]]
//! name = "b"
//! path = "corpora/b/jsonl"
//! share = 0.5
//!
//! [source]
//! chunk_size = 64               # samples per chunk dealt to a lane (or chunk_tokens = estimated tokens)
//! order = "shuffled"            # sequential | shuffled | blocks | global
//! exhaustion = "repeat"         # repeat | stop | redistribute
//! # balance = "row_tokens"      # finite data: lanes end together (every row tokenized once)
//!
//! [tokenize]
//! tokenizer = "tokenizer.json"
//! eos = "<|endoftext|>"
//!
//! [ensure_mixture]
//! slack_tokens = 4096           # holds what runs ahead, drops nothing
//!
//! [pack]
//! algorithm = "best_fit"        # wrap | first_fit | best_fit
//! seq_len = 2048
//! pad_id = 50256
//!
//! [shuffle]
//! buffer = 64
//!
//! [run]
//! threads = 2
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;
use zephon_core::{ExecOptions, Place, RowsPerStep, Topology};

use crate::error::{Error, Result};

mod choices;
mod lower;
mod registry;
mod sections;

pub use choices::*;
pub use registry::{Registered, Sections};
pub use sections::*;

/// A parsed spec file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The run's seed.
    #[serde(default)]
    pub seed: u64,
    /// L, the number of lanes (fixed for the life of a run).
    pub lanes: u32,
    /// G, rows per global step (or `[schedule] rows_per_step` / `ramp`).
    pub rows_per_step: Option<u32>,
    /// The datasets.
    #[serde(rename = "dataset")]
    pub datasets: Vec<DatasetSpec>,
    /// The work source.
    #[serde(default)]
    pub source: SourceSpec,
    /// Token estimation sampling.
    #[serde(default)]
    pub estimate: Option<EstimateSpec>,
    /// Tokenization.
    pub tokenize: Option<TokenizeSpec>,
    /// Token ids stored with the data instead of text (tokenized offline).
    pub pretokenized: Option<PreTokenizedSpec>,
    /// Conversations, rendered with a chat template and tokenized.
    pub chat: Option<ChatSpec>,
    /// The token-share scheduler.
    pub ensure_mixture: Option<EnsureSpec>,
    /// Images (feature `vision`).
    pub images: Option<ImagesSpec>,
    /// Packing.
    pub pack: Option<PackSpec>,
    /// The shuffle buffer.
    pub shuffle: Option<ShuffleSpec>,
    /// Values that change at set steps: rows per step, token shares.
    pub schedule: Option<ScheduleSpec>,
    /// A validation pass over held-out datasets.
    pub validation: Option<ValidationSpec>,
    /// How object stores are reached and cached.
    pub storage: Option<StorageSpec>,
    /// Execution and policies.
    #[serde(default)]
    pub run: RunSection,
    /// The tables of registered sections ([`Sections`]), in registration order.
    #[serde(skip)]
    pub registered: Vec<Registered>,
    /// The directory relative paths are resolved against (the spec file's).
    #[serde(skip)]
    pub base_dir: PathBuf,
    /// What the spec is called in errors (its file).
    #[serde(skip)]
    pub file: String,
}

impl Spec {
    /// Reads and parses a spec file.
    pub fn from_file(path: &Path) -> Result<Spec> {
        Spec::from_file_with(path, &Sections::new())
    }

    /// Reads and parses a spec file whose tables may name `sections`.
    pub fn from_file_with(path: &Path, sections: &Sections) -> Result<Spec> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Spec { path: path.display().to_string(), message: e.to_string() })?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Spec::parse_with(&text, &path.display().to_string(), &base, sections)
    }

    /// Settings that are valid but combine to change data in a way a user may not expect,
    /// each as a sentence naming the settings and what to do instead: printed before a run
    /// starts, so that the loss is known before it is paid.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(e) = &self.ensure_mixture
            && (e.hold.is_some() || e.hold_total.is_some())
        {
            out.push(
                "[ensure_mixture] hold caps the documents held per lane: past it the oldest is dropped, leaving a \
                 hole in its document (the drops are reported per dataset at the end). Without it nothing is \
                 dropped and each lane's closed loop keeps what is held to about a chunk and a document."
                    .to_string(),
            );
        }
        // Shares are given by the datasets or by the schedule's segments.
        let given = self.datasets.iter().any(|d| d.share.is_some());
        let first = given.then(|| (0, self.datasets.iter().filter_map(|d| d.share).sum::<f64>()));
        let later =
            self.schedule.iter().flat_map(|s| s.shares.iter().flatten()).map(|(step, w)| (*step, w.values().sum()));
        out.extend(
            first.into_iter().chain(later).filter_map(|(step, sum)| crate::mixture::share_sum_notice(step, sum)),
        );
        out
    }

    /// Parses spec text; `name` labels errors and `base_dir` anchors relative paths.
    pub fn parse(text: &str, name: &str, base_dir: &Path) -> Result<Spec> {
        Spec::parse_with(text, name, base_dir, &Sections::new())
    }

    /// Parses spec text whose tables may name `sections` (see [`Spec::parse`]).
    pub fn parse_with(text: &str, name: &str, base_dir: &Path, sections: &Sections) -> Result<Spec> {
        let top = || toml::from_str::<toml::Table>(text).map(|t| t.keys().cloned().collect()).unwrap_or_default();
        let bad = |e: &dyn std::fmt::Display| Error::Spec {
            path: name.to_string(),
            message: unknown_hint(e, sections, top()),
        };
        let mut table: toml::Table = toml::from_str(text).map_err(|e| bad(&e))?;
        let mut spec: Spec = if !sections.names().iter().any(|n| table.contains_key(*n)) {
            // Straight from the text: errors keep their line numbers.
            toml::from_str(text).map_err(|e| bad(&e))?
        } else {
            let mut failed = None;
            let registered = sections.take(|n| {
                let v = table.remove(n)?;
                serde_json::to_value(v).map_err(|e| failed = Some(format!("[{n}] {e}"))).ok()
            });
            if let Some(m) = failed {
                return Err(Error::Spec { path: name.to_string(), message: m });
            }
            let mut spec: Spec = toml::Value::Table(table).try_into().map_err(|e| bad(&e))?;
            spec.registered = registered;
            spec
        };
        spec = spec.checked(name, base_dir)?;
        Ok(spec)
    }

    /// Parses the same keys given as JSON (what a program that holds the spec as a dictionary
    /// has at hand, the Python binding among them); `name` labels errors and `base_dir`
    /// anchors relative paths.
    pub fn from_json(text: &str, name: &str, base_dir: &Path) -> Result<Spec> {
        Spec::from_json_with(text, name, base_dir, &Sections::new())
    }

    /// As [`Spec::from_json`], with tables that may name `sections`.
    pub fn from_json_with(text: &str, name: &str, base_dir: &Path, sections: &Sections) -> Result<Spec> {
        let top = || match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Object(m)) => m.keys().cloned().collect(),
            _ => Vec::new(),
        };
        let bad = |e: &dyn std::fmt::Display| Error::Spec {
            path: name.to_string(),
            message: unknown_hint(e, sections, top()),
        };
        let mut value: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(&e))?;
        let registered = match value.as_object_mut() {
            Some(top) => sections.take(|n| top.remove(n)),
            None => Vec::new(),
        };
        let mut spec: Spec = serde_json::from_value(value).map_err(|e| bad(&e))?;
        spec.registered = registered;
        spec.checked(name, base_dir)
    }

    fn checked(mut self, name: &str, base_dir: &Path) -> Result<Spec> {
        self.base_dir = base_dir.to_path_buf();
        self.file = name.to_string();
        self.check().map_err(|m| Error::Spec { path: name.to_string(), message: m })?;
        Ok(self)
    }

    fn check(&self) -> std::result::Result<(), String> {
        if self.datasets.is_empty() {
            return Err("at least one [[dataset]] is needed".into());
        }
        let scheduled = self.schedule.as_ref().is_some_and(|s| s.shares.is_some());
        for d in &self.datasets {
            match (d.share, d.weight) {
                (Some(_), _) | (_, Some(_)) if scheduled => {
                    return Err(format!(
                        "dataset {}: [schedule] shares gives every dataset's share from step 0: leave out its \
                         `share` and `weight`",
                        d.name
                    ));
                }
                (Some(_), Some(_)) => return Err(format!("dataset {}: give `share` or `weight`, not both", d.name)),
                (None, None) if !scheduled => {
                    return Err(format!("dataset {}: give a `share` (of tokens) or a `weight` (on samples)", d.name));
                }
                _ => {}
            }
        }
        if self.datasets.iter().any(|d| d.share.is_some()) != self.datasets.iter().all(|d| d.share.is_some()) {
            return Err("give every dataset a `share`, or every dataset a `weight`".into());
        }
        if let Some(w) = self.schedule.as_ref().and_then(|s| s.shares.as_ref())
            && w.first().is_none_or(|(step, _)| *step != 0)
        {
            return Err("[schedule] shares starts at step 0: `[[0, { ... }], ...]`".into());
        }
        if let Some(p) = &self.pack
            && p.seq_len == 0
        {
            return Err("[pack] seq_len must be at least 1".into());
        }
        if let Some(c) = &self.chat {
            if self.tokenize.is_some() || self.pretokenized.is_some() {
                return Err("[chat] tokenizes the conversations: it goes without [tokenize] and [pretokenized]".into());
            }
            if let Some(d) = self.datasets.iter().find(|d| d.text_field.is_some()) {
                return Err(format!("dataset {}: `text_field` with [chat], which reads conversations", d.name));
            }
            if self.images.is_some()
                && (self.datasets.iter().any(|d| d.share.is_some())
                    || self.schedule.as_ref().is_some_and(|s| s.shares.is_some()))
            {
                return Err("[chat] with [images] and token shares: shares are planned by counting each \
                            conversation's tokens, and an image's count is known only once it is decoded; give the \
                            datasets a `weight`"
                    .into());
            }
            if c.max_tokens == Some(0) {
                return Err("[chat] max_tokens must be at least 1".into());
            }
            if c.max_tokens.is_some() && c.long_conversations.is_none() {
                return Err("[chat] max_tokens without long_conversations has no effect: say what a longer \
                            conversation becomes"
                    .into());
            }
            if c.long_conversations.is_some() && c.max_tokens.is_none() && self.pack.is_none() {
                return Err("[chat] long_conversations needs max_tokens, or a [pack] whose row length it takes".into());
            }
        }
        if let Some(v) = &self.validation {
            if self.pack.is_none() {
                return Err("[validation] needs [pack]: its rows, and the padding of its last step, take the \
                            packer's shape"
                    .into());
            }
            if v.datasets.is_empty() {
                return Err("[validation] needs at least one [[validation.dataset]]".into());
            }
            if let Some(d) = v.datasets.iter().find(|d| d.share.is_some() || d.weight.is_some()) {
                return Err(format!(
                    "[[validation.dataset]] {}: `share` and `weight` do not apply (a validation pass reads every \
                     record once)",
                    d.name
                ));
            }
            if v.rows_per_step.is_some_and(|g| g == 0 || !g.is_multiple_of(self.lanes)) {
                return Err(format!(
                    "[validation] rows_per_step must be a positive multiple of lanes ({})",
                    self.lanes
                ));
            }
            if v.shuffle == Some(0) {
                return Err("[validation] shuffle must be at least 1".into());
            }
        }
        if !self.pack.as_ref().is_some_and(|p| p.loss_weights)
            && let Some(d) = self.datasets.iter().find(|d| d.loss_weight.is_some() || d.loss_weight_field.is_some())
        {
            return Err(format!(
                "dataset {}: a loss weight is carried by the packer's loss_weights column: without [pack] \
                 loss_weights = true it has no effect",
                d.name
            ));
        }
        if self.pack.as_ref().is_some_and(|p| p.mask_labels) && self.chat.is_none() {
            return Err("[pack] mask_labels follows the loss mask of [chat] conversations: without [chat] it has \
                        no effect"
                .into());
        }
        if self.pretokenized.is_some() {
            if self.tokenize.is_some() || self.images.is_some() {
                return Err("[pretokenized] reads stored token ids: it goes without [tokenize] and [images]".into());
            }
            if let Some(d) = self.datasets.iter().find(|d| d.text_field.is_some()) {
                return Err(format!("dataset {}: `text_field` with [pretokenized], which reads no text", d.name));
            }
        }
        if let Some(s) = &self.shuffle {
            s.per_lane(self.lanes)?;
        }
        if let Some(p) = &self.pack {
            p.bins_per_lane(self.lanes)?;
        }
        if let Some(e) = &self.ensure_mixture {
            e.hold_per_lane(self.lanes)?;
        }
        if self.images.is_none() {
            if let Some(d) = self.datasets.iter().find(|d| d.images.is_some()) {
                return Err(format!("dataset {}: `images` needs an [images] table to decode them", d.name));
            }
            let sections = [
                self.tokenize.as_ref().map(|t| ("tokenize", t.image_tokens())),
                self.chat.as_ref().map(|c| ("chat", c.image_tokens())),
            ];
            if let Some((section, key)) = sections.into_iter().flatten().find_map(|(s, t)| Some((s, t.first_set()?))) {
                return Err(format!("[{section}] {key} places images, and there is no [images] table"));
            }
        }
        if self.tokenize.as_ref().is_some_and(|t| t.max_tokens == Some(0)) {
            return Err("[tokenize] max_tokens must be at least 1".into());
        }
        Topology::builder()
            .lanes(self.lanes)
            .rows_per_step(self.rows_per_step()?)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// The context a registered section's factory gets.
    pub fn section_context(&self) -> zephon_operator::SectionContext {
        zephon_operator::SectionContext::new(&self.file, &self.base_dir, self.seed, self.lanes)
    }

    /// G(step): the top-level `rows_per_step`, or `[schedule] rows_per_step` or `ramp`.
    pub fn rows_per_step(&self) -> std::result::Result<RowsPerStep, String> {
        let scheduled = match &self.schedule {
            Some(s) => s.rows_per_step()?,
            None => None,
        };
        match (self.rows_per_step, scheduled) {
            (Some(_), Some(_)) => {
                Err("rows_per_step is given twice: at the top level and in [schedule]; keep one".into())
            }
            (Some(g), None) => Ok(RowsPerStep::constant(g)),
            (None, Some(g)) => Ok(g),
            (None, None) => Err("rows_per_step is missing: give it at the top level, or [schedule] rows_per_step \
                                 or ramp"
                .into()),
        }
    }

    /// The topology for `world_size` and `rank`.
    pub fn topology(&self, world_size: u32, rank: u32) -> Result<Topology> {
        let rows = self.rows_per_step().map_err(|m| Error::Spec { path: self.file.clone(), message: m })?;
        Ok(Topology::builder().lanes(self.lanes).rows_per_step(rows).place(Place { rank, world_size }).build()?)
    }

    /// Where dataset `d`'s shards are (its `path` entries and `split`), found and in order.
    pub fn layout(&self, d: &DatasetSpec) -> Result<zephon_io::Layout> {
        let split = match &d.split {
            Some(s) => Some(zephon_io::Split::parse(s).ok_or_else(|| Error::Spec {
                path: self.file.clone(),
                message: format!("dataset {}: split {s:?} is not train, validation or test", d.name),
            })?),
            None => None,
        };
        let locations = d
            .path
            .all()
            .iter()
            .map(|p| zephon_io::Location::parse(&d.name, &self.resolve(p).to_string_lossy(), &self.storage_options()))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(zephon_io::Layout::resolve(&d.name, &locations, split)?)
    }

    /// How object stores are reached and cached (`[storage]`).
    pub fn storage_options(&self) -> zephon_io::StorageOptions {
        let Some(s) = &self.storage else { return zephon_io::StorageOptions::default() };
        zephon_io::StorageOptions {
            endpoint: s.endpoint.clone(),
            region: s.region.clone(),
            allow_http: s.allow_http,
            path_style: s.path_style,
            block_bytes: s.block_bytes,
            cache_dir: s.cache_dir.as_deref().map(|d| self.resolve(d)),
            cache_bytes: s.cache_bytes,
            eviction: s.eviction.map(|e| match e {
                EvictionSpec::NextUse => zephon_io::Eviction::NextUse,
                EvictionSpec::Lru => zephon_io::Eviction::Lru,
            }),
            timeout_s: s.timeout_s,
            stall_timeout_s: s.stall_timeout_s,
            retries: s.retries,
            prefetch_requests: s.prefetch_requests,
        }
    }

    /// Expands `~` and resolves a relative path against the spec's folder; an object-store
    /// URL (`s3://...`) stays as written.
    pub fn resolve(&self, path: &str) -> PathBuf {
        if zephon_io::storage::is_url(path) {
            return PathBuf::from(path);
        }
        let expanded = match path.strip_prefix("~/") {
            Some(rest) => std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default().join(rest),
            None => PathBuf::from(path),
        };
        if expanded.is_absolute() { expanded } else { self.base_dir.join(expanded) }
    }

    /// Execution settings from `[run]` (threads default to the machine's cores).
    pub fn exec(&self) -> ExecOptions {
        let mut e = ExecOptions::default();
        if let Some(t) = self.run.threads {
            e.threads = t;
        }
        e.prefetch_steps = self.run.prefetch_steps;
        e.unit_samples = self.run.unit_samples;
        e
    }
}

/// A parse error, with the registered sections named when a top-level table (one of `top`) is
/// unknown: the error then lists the built-in tables (serde's "expected one of") and these.
fn unknown_hint(e: &dyn std::fmt::Display, sections: &Sections, top: Vec<String>) -> String {
    let message = e.to_string();
    let unknown = message.split("unknown field `").nth(1).and_then(|rest| rest.split('`').next());
    match unknown {
        Some(key) if top.iter().any(|k| k == key) && !registry::BUILT_IN.contains(&key) => {
            format!(
                "{message}\n[{key}] is no built-in table, and the sections registered in this build are: {}",
                sections.listed()
            )
        }
        _ => message,
    }
}
