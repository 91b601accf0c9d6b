//! The pipeline as a TOML file, so that the command line needs no Rust code.
//!
//! Every table refuses unknown keys: a typo is an error naming the key and line, never a
//! silently ignored setting. Relative paths are relative to the spec file; `~` is the home
//! directory. The operators run in a fixed order: tokenize, ensure_mixture, pack, shuffle.
//!
//! ```toml
//! seed = 1234
//! lanes = 8
//! rows_per_step = 16            # G: rows per global step
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
use zephon_core::{BadRecords, ExecOptions, Tail, Topology};
use zephon_io::Fields;
use zephon_mix::{Balance, EstimateConfig, Exhaustion, Order, RowOrder};
use zephon_pack::{Algorithm, EndOfData, LongDocs, Pack, PackConfig};

use crate::error::{Error, Result};
use crate::mixture::{Dataset, Mixture};
use crate::pipeline::Pipeline;

/// A parsed spec file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The run's seed.
    #[serde(default)]
    pub seed: u64,
    /// L, the number of lanes (fixed for the life of a run).
    pub lanes: u32,
    /// G, rows per global step.
    pub rows_per_step: u32,
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
    /// The token-share scheduler.
    pub ensure_mixture: Option<EnsureSpec>,
    /// Images (feature `vision`).
    pub images: Option<ImagesSpec>,
    /// Packing.
    pub pack: Option<PackSpec>,
    /// The shuffle buffer.
    pub shuffle: Option<ShuffleSpec>,
    /// Execution and policies.
    #[serde(default)]
    pub run: RunSection,
    /// The directory relative paths are resolved against (the spec file's).
    #[serde(skip)]
    pub base_dir: PathBuf,
    /// What the spec is called in errors (its file).
    #[serde(skip)]
    pub file: String,
}

/// One `[[dataset]]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetSpec {
    /// Its name (in errors, plans and provenance).
    pub name: String,
    /// A shard file or folder.
    pub path: String,
    /// Token share.
    pub share: Option<f64>,
    /// Sample weight.
    pub weight: Option<f64>,
    /// The text field (default `text`).
    pub text_field: Option<String>,
    /// Other fields to carry (ids, sources).
    #[serde(default)]
    pub extra_fields: Vec<String>,
    /// Rows larger than this many bytes are bad records.
    pub max_row_bytes: Option<u64>,
    /// Whether empty documents are allowed (default: they are bad records).
    #[serde(default)]
    pub allow_empty: bool,
    /// Where images come from: an image column (Parquet), a field of image paths (JSONL), or
    /// comma-separated member extensions (WebDataset tar, e.g. `"jpg,png"`).
    pub images: Option<String>,
}

/// `[source]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SourceSpec {
    /// Samples per chunk (default 256).
    pub chunk_size: Option<u32>,
    /// Estimated tokens per chunk, instead of `chunk_size` samples.
    pub chunk_tokens: Option<u64>,
    /// `sequential`, `shuffled`, `blocks` or `global`.
    pub order: String,
    /// Rows per block for `order = "blocks"`.
    pub block_size: u64,
    /// Visit shards in a random order each pass.
    pub shuffle_shards: bool,
    /// `repeat`, `stop` or `redistribute`.
    pub exhaustion: String,
    /// Passes over each dataset before it is exhausted.
    pub passes: u64,
    /// The source's own seed (default: the run's).
    pub seed: Option<u64>,
    /// How finite data's end is shared among lanes: `row_tokens` (every row is tokenized
    /// once, and lanes end together), `row_sizes` (every row's text length is read once) or
    /// `estimates`. Default: `row_tokens` for a text pipeline over at most 1 GiB of data,
    /// else `estimates`.
    pub balance: Option<String>,
}

impl Default for SourceSpec {
    fn default() -> Self {
        SourceSpec {
            chunk_size: None,
            chunk_tokens: None,
            order: "shuffled".into(),
            block_size: 1000,
            shuffle_shards: true,
            exhaustion: "repeat".into(),
            passes: 1,
            seed: None,
            balance: None,
        }
    }
}

/// `[estimate]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EstimateSpec {
    /// Rows per dataset whose length is read.
    pub length_rows: Option<u64>,
    /// Windows per dataset tokenized.
    pub token_windows: Option<u64>,
    /// Bytes per window.
    pub window_bytes: Option<usize>,
}

/// `[tokenize]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenizeSpec {
    /// Path of a `tokenizer.json`.
    pub tokenizer: String,
    /// Token prepended to each document.
    pub bos: Option<String>,
    /// Token appended to each document.
    pub eos: Option<String>,
    /// `keep`, `split` or `truncate` (default: at the packer's row length when there is a
    /// packer, `truncate` if the packer truncates and `split` if not; else `keep`).
    pub long_documents: Option<String>,
    /// Tokens per piece for `split` and `truncate` (default: the packer's row length).
    pub max_tokens: Option<usize>,
    /// Where images go in the text (default `<image>`; without markers, images come first).
    pub image_marker: Option<String>,
    /// The added token repeated for each image (needed when there is an `[images]` section).
    pub image_token: Option<String>,
    /// Tokens around each image's placeholders (e.g. `<|vision_start|>`).
    pub image_start: Option<String>,
    /// See `image_start` (e.g. `<|vision_end|>`).
    pub image_end: Option<String>,
    /// Whether special tokens written in document text act as control tokens (default: no,
    /// text is text).
    #[serde(default)]
    pub special_tokens_in_text: bool,
}

/// `[images]`: decode, resize and normalise the images datasets carry (feature `vision`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImagesSpec {
    /// `llava` (336 centre crop, ViT patches of 14, 576 tokens) or `qwen2_vl` (dynamic
    /// resolution, Qwen2-VL patches); the keys below change it.
    pub preset: Option<String>,
    /// A fixed square side in pixels (with `fit`).
    pub size: Option<u32>,
    /// `center_crop`, `pad_to_square` or `stretch`.
    pub fit: Option<String>,
    /// Dynamic resolution instead of a fixed size: `[min_pixels, max_pixels]`.
    pub dynamic_pixels: Option<[u64; 2]>,
    /// `bilinear`, `bicubic` or `lanczos3`.
    pub filter: Option<String>,
    /// `clip`, `imagenet` or `half`.
    pub normalize: Option<String>,
    /// `f32`, `bf16` or `f16`.
    pub dtype: Option<String>,
    /// `vit`, `qwen2_vl` or `chw`.
    pub layout: Option<String>,
    /// Patch side for `vit`.
    pub patch: Option<u32>,
    /// Placeholder tokens per image (default: from the patch grid).
    pub tokens: Option<u32>,
    /// Refuse images whose header declares more pixels.
    pub max_pixels: Option<u64>,
    /// `zune` or `libjpeg-turbo` (the latter needs the `turbojpeg` build).
    pub backend: Option<String>,
    /// Decode at a reduced scale in the DCT domain when the target is at most half the
    /// source, keeping at least this factor (≥ 1; 2 as Pillow's `thumbnail`) over the target
    /// before the resize. Faster; the pixels differ slightly from a full decode. Needs
    /// `backend = "libjpeg-turbo"`.
    pub reduced_decode: Option<f64>,
    /// Random resized crop (torchvision's defaults).
    #[serde(default)]
    pub random_resized_crop: bool,
    /// Random horizontal flip with probability 0.5.
    #[serde(default)]
    pub random_flip: bool,
}

/// `[pretokenized]`: every dataset holds token ids (a JSON array or a Parquet `list<int>` per
/// row), made
/// the token sequence by `zephon_text::PreTokenized`; instead of `[tokenize]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreTokenizedSpec {
    /// The field holding the ids (default `input_ids`).
    pub field: Option<String>,
    /// An id appended to every document.
    pub eos: Option<u32>,
    /// Ids at or over this are bad records (the model's vocabulary size).
    pub vocab_size: Option<u32>,
}

/// `[ensure_mixture]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnsureSpec {
    /// Tokens a dataset may run ahead of its share (default 4096).
    pub slack_tokens: Option<u64>,
    /// A cap on the documents held per lane: past it the oldest is dropped (and reported).
    /// Default: no cap, nothing dropped (each lane's closed loop keeps what is held small).
    pub hold: Option<usize>,
    /// The same cap for all lanes together, instead of `hold`: each lane holds this divided
    /// by the lanes (rounded up).
    pub hold_total: Option<usize>,
}

impl EnsureSpec {
    /// The cap on documents held per lane, if one is set.
    fn hold_per_lane(&self, lanes: u32) -> std::result::Result<Option<usize>, String> {
        match (self.hold, self.hold_total) {
            (None, None) => Ok(None),
            _ => split_across_lanes(("[ensure_mixture]", "hold"), self.hold, self.hold_total, None, lanes).map(Some),
        }
    }
}

/// `[pack]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackSpec {
    /// `wrap`, `first_fit`, `best_fit`, or `one_per_row` (each document alone in a padded
    /// row).
    pub algorithm: String,
    /// Tokens per row.
    pub seq_len: usize,
    /// Open rows per lane for the fit algorithms (default 64).
    pub bins: Option<usize>,
    /// Open rows of all lanes together, instead of `bins`: each lane gets this divided by
    /// the lanes (rounded up), so the open rows do not multiply with L.
    pub bins_total: Option<usize>,
    /// Documents per row at most.
    pub max_segments: Option<usize>,
    /// `split` or `truncate`.
    pub long_documents: Option<String>,
    /// What the fit algorithms do with their open rows when finite data ends: `keep_pieces`
    /// (emit them as they are) or `fill_rows` (lay their pieces out into full rows, as `wrap`
    /// would). Default `fill_rows` where it matters: finite data (`exhaustion` `stop` or
    /// `redistribute`) under `[run] tail = "drop"`, where rows left short at the end make
    /// lanes end rows apart and the drop lose more than a step; `keep_pieces` otherwise.
    pub end_of_data: Option<String>,
    /// Fit algorithms: start with one open row per lane, doubling with each row emitted up to
    /// `bins` (first rows sooner, a little emptier). Default false.
    #[serde(default)]
    pub warm_up: bool,
    /// Padding token id.
    pub pad_id: Option<u32>,
    /// Label of positions without a next token (default -100).
    pub ignore_index: Option<i32>,
}

impl PackSpec {
    /// Open rows per lane for the fit algorithms.
    fn bins_per_lane(&self, lanes: u32) -> std::result::Result<usize, String> {
        split_across_lanes(("[pack]", "bins"), self.bins, self.bins_total, Some(64), lanes)
    }
}

/// A size given per lane (`key`) or for the whole run (`key_total`, divided by the lanes and
/// rounded up), one of them; `default` when neither is given (an error where there is none).
fn split_across_lanes(
    (section, key): (&str, &str),
    per_lane: Option<usize>,
    total: Option<usize>,
    default: Option<usize>,
    lanes: u32,
) -> std::result::Result<usize, String> {
    match (per_lane, total, default) {
        (Some(n), None, _) => Ok(n),
        (None, Some(t), _) => Ok(t.div_ceil(lanes.max(1) as usize)),
        (None, None, Some(d)) => Ok(d),
        _ => Err(format!("{section} give `{key}` (per lane) or `{key}_total` (all lanes), one of them")),
    }
}

/// `[shuffle]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShuffleSpec {
    /// Records per lane in the buffer.
    pub buffer: Option<usize>,
    /// Records in the buffers of all lanes together, instead of `buffer`: each lane gets
    /// this divided by the lanes (rounded up), so the run's memory does not grow with L.
    pub buffer_total: Option<usize>,
    /// Emit from the start, the buffer growing as records arrive, instead of waiting until
    /// it is full (with many lanes, most of the time to the first batch).
    #[serde(default)]
    pub warm_up: bool,
}

impl ShuffleSpec {
    /// Records per lane.
    fn per_lane(&self, lanes: u32) -> std::result::Result<usize, String> {
        split_across_lanes(("[shuffle]", "buffer"), self.buffer, self.buffer_total, None, lanes)
    }
}

/// `[run]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunSection {
    /// Worker threads (default: all cores).
    pub threads: Option<usize>,
    /// Steps each lane prepares ahead.
    pub prefetch_steps: u64,
    /// Samples per unit of work.
    pub unit_samples: usize,
    /// `fail` or `skip`.
    pub bad_records: String,
    /// `drop` or `partial`.
    pub tail: String,
}

impl Default for RunSection {
    fn default() -> Self {
        RunSection {
            threads: None,
            prefetch_steps: 2,
            unit_samples: 16,
            bad_records: "fail".into(),
            tail: "drop".into(),
        }
    }
}

impl Spec {
    /// Reads and parses a spec file.
    pub fn from_file(path: &Path) -> Result<Spec> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Spec { path: path.display().to_string(), message: e.to_string() })?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Spec::parse(&text, &path.display().to_string(), &base)
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
        out
    }

    /// Parses spec text; `name` labels errors and `base_dir` anchors relative paths.
    pub fn parse(text: &str, name: &str, base_dir: &Path) -> Result<Spec> {
        let spec: Spec =
            toml::from_str(text).map_err(|e| Error::Spec { path: name.to_string(), message: e.to_string() })?;
        spec.checked(name, base_dir)
    }

    /// Parses the same keys given as JSON (what a program that holds the spec as a dictionary
    /// has at hand, the Python binding among them); `name` labels errors and `base_dir`
    /// anchors relative paths.
    pub fn from_json(text: &str, name: &str, base_dir: &Path) -> Result<Spec> {
        let spec: Spec =
            serde_json::from_str(text).map_err(|e| Error::Spec { path: name.to_string(), message: e.to_string() })?;
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
        for d in &self.datasets {
            match (d.share, d.weight) {
                (Some(_), Some(_)) => return Err(format!("dataset {}: give `share` or `weight`, not both", d.name)),
                (None, None) => {
                    return Err(format!("dataset {}: give a `share` (of tokens) or a `weight` (on samples)", d.name));
                }
                _ => {}
            }
        }
        if self.datasets.iter().any(|d| d.share.is_some()) != self.datasets.iter().all(|d| d.share.is_some()) {
            return Err("give every dataset a `share`, or every dataset a `weight`".into());
        }
        if let Some(p) = &self.pack
            && p.seq_len == 0
        {
            return Err("[pack] seq_len must be at least 1".into());
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
            if let Some(t) = &self.tokenize {
                let set = [
                    ("image_marker", &t.image_marker),
                    ("image_token", &t.image_token),
                    ("image_start", &t.image_start),
                    ("image_end", &t.image_end),
                ];
                if let Some((key, _)) = set.iter().find(|(_, v)| v.is_some()) {
                    return Err(format!("[tokenize] {key} places images, and there is no [images] table"));
                }
            }
        }
        if self.tokenize.as_ref().is_some_and(|t| t.max_tokens == Some(0)) {
            return Err("[tokenize] max_tokens must be at least 1".into());
        }
        Topology::single(self.lanes, self.rows_per_step).map_err(|e| e.to_string())?;
        Ok(())
    }

    /// The topology for `world_size` and `rank`.
    pub fn topology(&self, world_size: u32, rank: u32) -> Result<Topology> {
        Ok(Topology::new(self.lanes, self.rows_per_step, world_size, rank)?)
    }

    /// Expands `~` and resolves a relative path against the spec's folder.
    pub fn resolve(&self, path: &str) -> PathBuf {
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

    /// The pipeline the spec describes (opens nothing yet).
    pub fn pipeline(&self) -> Result<Pipeline> {
        let bad = |m: String| Error::Spec { path: self.file.clone(), message: m };
        let mut mixture = Mixture::new();
        for d in &self.datasets {
            let ids = self.pretokenized.as_ref().map(|p| p.field.clone().unwrap_or_else(|| "input_ids".into()));
            let mut ds = Dataset::new(&d.name, self.resolve(&d.path)).fields(Fields {
                text: match ids {
                    Some(_) => None,
                    None => Some(d.text_field.clone().unwrap_or_else(|| "text".into())),
                },
                extra: d.extra_fields.iter().cloned().chain(ids).collect(),
                allow_empty: d.allow_empty,
                max_row_bytes: d.max_row_bytes,
                images: d.images.clone(),
            });
            ds = match (d.share, d.weight) {
                (Some(s), _) => ds.share(s),
                (_, Some(w)) => ds.weight(w),
                _ => ds,
            };
            mixture = mixture.dataset(ds);
        }
        let src = &self.source;
        let rows = match src.order.as_str() {
            "sequential" => RowOrder::Sequential,
            "shuffled" => RowOrder::Shuffled,
            "blocks" => RowOrder::Blocks { size: src.block_size },
            "global" => RowOrder::Global,
            other => {
                return Err(bad(format!(
                    "[source] order = {other:?}: expected sequential, shuffled, blocks or global"
                )));
            }
        };
        let exhaustion = match src.exhaustion.as_str() {
            "repeat" => Exhaustion::Repeat,
            "stop" => Exhaustion::Stop,
            "redistribute" => Exhaustion::Redistribute,
            other => {
                return Err(bad(format!("[source] exhaustion = {other:?}: expected repeat, stop or redistribute")));
            }
        };
        mixture = match (src.chunk_size, src.chunk_tokens) {
            (Some(_), Some(_)) => {
                return Err(bad("[source] chunk_size and chunk_tokens exclude each other: give one".into()));
            }
            (_, Some(t)) => mixture.chunk_tokens(t),
            (Some(n), None) => mixture.chunk_size(n),
            (None, None) => mixture,
        };
        mixture = mixture.order(Order { shuffle_shards: src.shuffle_shards, rows }).exhaustion(exhaustion, src.passes);
        if let Some(seed) = src.seed {
            mixture = mixture.seed(seed);
        }
        match src.balance.as_deref() {
            None => {}
            Some("row_tokens") => mixture = mixture.balance(Balance::RowTokens),
            Some("row_sizes") => mixture = mixture.balance(Balance::RowSizes),
            Some("estimates") => mixture = mixture.balance(Balance::Estimates),
            Some(other) => {
                return Err(bad(format!("[source] balance = {other:?}: expected row_tokens, row_sizes or estimates")));
            }
        }
        if let Some(e) = &self.estimate {
            let d = EstimateConfig::default();
            mixture = mixture.estimate(EstimateConfig {
                length_rows: e.length_rows.unwrap_or(d.length_rows),
                token_rows: e.token_windows.unwrap_or(d.token_rows),
                max_token_bytes: e.window_bytes.unwrap_or(d.max_token_bytes),
                ..d
            });
        }

        let bad_records = match self.run.bad_records.as_str() {
            "fail" => BadRecords::Fail,
            "skip" => BadRecords::Skip,
            other => return Err(bad(format!("[run] bad_records = {other:?}: expected fail or skip"))),
        };
        let tail = match self.run.tail.as_str() {
            "drop" => Tail::Drop,
            "partial" => Tail::Partial,
            other => return Err(bad(format!("[run] tail = {other:?}: expected drop or partial"))),
        };
        let mut p = Pipeline::new(mixture).seed(self.seed).bad_records(bad_records).tail(tail).exec(self.exec());

        let seq_len = self.pack.as_ref().map(|p| p.seq_len);
        if let Some(im) = &self.images {
            #[cfg(feature = "vision")]
            {
                p = p.images(self.images_op(im)?);
            }
            #[cfg(not(feature = "vision"))]
            {
                let _ = im;
                return Err(Error::Build("this build has no `vision` feature: [images] is unavailable".into()));
            }
        }
        if let Some(pt) = &self.pretokenized {
            #[cfg(feature = "text")]
            {
                let v = |m: String| bad(format!("[pretokenized] {m}"));
                let mut op = zephon_text::PreTokenized::new(pt.field.as_deref().unwrap_or("input_ids"));
                if let Some(n) = pt.vocab_size {
                    op = op.vocab_size(n).map_err(v)?;
                }
                if let Some(e) = pt.eos {
                    op = op.eos(e).map_err(v)?;
                }
                p = p.then(op);
            }
            #[cfg(not(feature = "text"))]
            {
                let _ = pt;
                return Err(Error::Build("this build has no `text` feature: [pretokenized] is unavailable".into()));
            }
        }
        if let Some(t) = &self.tokenize {
            #[cfg(feature = "text")]
            {
                p = p.tokenize(self.tokenize_op(t, seq_len)?);
            }
            #[cfg(not(feature = "text"))]
            {
                let _ = (t, seq_len);
                return Err(Error::Build("this build has no `text` feature: [tokenize] is unavailable".into()));
            }
        }
        if let Some(e) = &self.ensure_mixture {
            let slack = e.slack_tokens.unwrap_or(4096);
            p = match e.hold_per_lane(self.lanes).map_err(bad)? {
                Some(hold) => p.ensure_mixture_holding(slack, hold),
                None => p.ensure_mixture(slack),
            };
        }
        if let Some(pk) = &self.pack {
            let bins = pk.bins_per_lane(self.lanes).map_err(bad)?;
            let algorithm = match pk.algorithm.as_str() {
                "wrap" => Algorithm::Wrap,
                "first_fit" => Algorithm::FirstFit { bins },
                "best_fit" => Algorithm::BestFit { bins },
                "one_per_row" => Algorithm::FirstFit { bins: 1 },
                other => {
                    return Err(bad(format!(
                        "[pack] algorithm = {other:?}: expected wrap, first_fit, best_fit or one_per_row"
                    )));
                }
            };
            let mut config = PackConfig::new(algorithm, pk.seq_len);
            match (pk.algorithm.as_str(), pk.max_segments) {
                ("one_per_row", Some(m)) if m != 1 => {
                    return Err(bad(format!(
                        "[pack] algorithm = \"one_per_row\" puts one document in each row: max_segments = {m} \
                         contradicts it"
                    )));
                }
                ("one_per_row", _) => config.max_segments = 1,
                (_, Some(m)) => config.max_segments = m,
                (_, None) => {}
            }
            config.long = match pk.long_documents.as_deref().unwrap_or("split") {
                "split" => LongDocs::Split,
                "truncate" => LongDocs::Truncate,
                other => return Err(bad(format!("[pack] long_documents = {other:?}: expected split or truncate"))),
            };
            let finite = self.source.exhaustion != "repeat";
            config.end_of_data = match pk.end_of_data.as_deref() {
                None if finite && tail == Tail::Drop && algorithm != Algorithm::Wrap => EndOfData::FillRows,
                None | Some("keep_pieces") => EndOfData::KeepPieces,
                Some("fill_rows") => EndOfData::FillRows,
                Some(other) => {
                    return Err(bad(format!("[pack] end_of_data = {other:?}: expected keep_pieces or fill_rows")));
                }
            };
            config.warm_up = pk.warm_up;
            if let Some(id) = pk.pad_id {
                config.pad_id = id;
            }
            if let Some(i) = pk.ignore_index {
                config.ignore_index = i;
            }
            p = p.pack(Pack::new(config)?);
        }
        if let Some(s) = &self.shuffle {
            let buffer = s.per_lane(self.lanes).map_err(bad)?;
            p = if s.warm_up { p.shuffle_warming_up(buffer) } else { p.shuffle(buffer) };
        }
        Ok(p)
    }

    #[cfg(feature = "vision")]
    fn images_op(&self, im: &ImagesSpec) -> Result<zephon_vision::Images> {
        use zephon_vision::normalize::{Dtype, Normalize};
        use zephon_vision::resize::{Filter, Fit, ResizeSpec};
        use zephon_vision::{ImageTokens, Images, ImagesConfig, JpegBackend, PixelLayout, PixelLimit, SmartResize};
        let bad = |m: String| Error::Spec { path: self.file.clone(), message: format!("[images] {m}") };
        let v = |e: zephon_vision::VisionError| bad(e.to_string());
        let mut c = match im.preset.as_deref() {
            None | Some("llava") => ImagesConfig::llava(self.seed).map_err(v)?,
            Some("qwen2_vl") => ImagesConfig::qwen2_vl(self.seed),
            Some(other) => return Err(bad(format!("preset = {other:?}: expected llava or qwen2_vl"))),
        };
        let filter = match im.filter.as_deref() {
            None => None,
            Some("bilinear") => Some(Filter::Bilinear),
            Some("bicubic") => Some(Filter::Bicubic),
            Some("lanczos3") => Some(Filter::Lanczos3),
            Some(other) => return Err(bad(format!("filter = {other:?}: expected bilinear, bicubic or lanczos3"))),
        };
        // A setting that would have no effect is refused, never ignored.
        if im.fit.is_some() && im.size.is_none() {
            return Err(bad("fit applies to a fixed size: give `size` with it".into()));
        }
        if im.size.is_some() && im.dynamic_pixels.is_some() {
            return Err(bad("give `size` (a fixed square) or `dynamic_pixels`, not both".into()));
        }
        // A new size keeps the preset's filter unless `filter` names another.
        let preset_filter = c.resize.filter();
        if let Some(side) = im.size {
            let fit = match im.fit.as_deref().unwrap_or("center_crop") {
                "center_crop" => Fit::CenterCrop,
                "pad_to_square" => Fit::PadToSquare { fill: zephon_vision::resize::mean_fill(Normalize::CLIP.mean()) },
                "stretch" => Fit::Stretch,
                other => return Err(bad(format!("fit = {other:?}: expected center_crop, pad_to_square or stretch"))),
            };
            c.resize = ResizeSpec::fixed(side, side, fit).map_err(v)?;
        }
        if let Some([min, max]) = im.dynamic_pixels {
            c.resize = ResizeSpec::smart(SmartResize::new(28, min, max).map_err(v)?);
        }
        c.resize = c.resize.with_filter(filter.unwrap_or(preset_filter));
        if let Some(n) = &im.normalize {
            c.normalize = match n.as_str() {
                "clip" => Normalize::CLIP,
                "imagenet" => Normalize::IMAGENET,
                "half" => Normalize::HALF,
                other => return Err(bad(format!("normalize = {other:?}: expected clip, imagenet or half"))),
            };
        }
        if let Some(d) = &im.dtype {
            c.dtype = match d.as_str() {
                "f32" => Dtype::F32,
                "bf16" => Dtype::Bf16,
                "f16" => Dtype::F16,
                other => return Err(bad(format!("dtype = {other:?}: expected f32, bf16 or f16"))),
            };
        }
        if let Some(l) = &im.layout {
            c.layout = match l.as_str() {
                "vit" => PixelLayout::Vit { patch: 14 },
                "qwen2_vl" => PixelLayout::Qwen2Vl(zephon_vision::patch::QwenPatching::QWEN2_VL),
                "chw" => PixelLayout::Chw,
                other => return Err(bad(format!("layout = {other:?}: expected vit, qwen2_vl or chw"))),
            };
        }
        if let Some(p) = im.patch {
            match c.layout {
                PixelLayout::Vit { .. } => c.layout = PixelLayout::Vit { patch: p },
                _ => return Err(bad("patch is the side of ViT patches: it needs layout = \"vit\"".into())),
            }
        }
        if let Some(n) = im.tokens {
            c.tokens = ImageTokens::Fixed(n);
        }
        if let Some(max) = im.max_pixels {
            c.decode = c.decode.limit(PixelLimit::new(max).map_err(v)?);
        }
        if let Some(b) = &im.backend {
            let backend = match b.as_str() {
                "zune" => JpegBackend::Zune,
                "libjpeg-turbo" => JpegBackend::LibjpegTurbo,
                other => return Err(bad(format!("backend = {other:?}: expected zune or libjpeg-turbo"))),
            };
            c.decode = c.decode.jpeg_backend(backend).map_err(v)?;
        }
        if let Some(g) = im.reduced_decode {
            if im.backend.as_deref() != Some("libjpeg-turbo") {
                return Err(bad(
                    "reduced_decode needs backend = \"libjpeg-turbo\" (zune-jpeg decodes at full scale)".into()
                ));
            }
            c.reduced_decode = Some(zephon_vision::resize::ReducingGap::new(g).map_err(v)?);
        }
        if im.random_resized_crop {
            c.crop = Some(zephon_vision::augment::RandomResizedCrop::DEFAULT);
        }
        if im.random_flip {
            c.flip = Some(zephon_vision::augment::RandomFlip::HALF);
        }
        Images::new(c).map_err(v)
    }

    #[cfg(feature = "text")]
    fn tokenize_op(&self, t: &TokenizeSpec, seq_len: Option<usize>) -> Result<zephon_text::Tokenize> {
        use zephon_text::{LongDocuments, Tokenize, Tokenizer};
        let tokenizer = Tokenizer::from_file(&self.resolve(&t.tokenizer))?;
        // Each dataset's own `text_field` is set by the pipeline when it opens the datasets.
        let tokenizer = tokenizer.allow_special_tokens_in_text(t.special_tokens_in_text);
        let mut op = Tokenize::new(tokenizer.clone());
        if self.images.is_some() {
            let token = t.image_token.as_deref().ok_or_else(|| Error::Spec {
                path: self.file.clone(),
                message:
                    "[tokenize] image_token is needed with [images]: the added token each image's placeholders use"
                        .into(),
            })?;
            let mut im = zephon_text::ImagePlaceholders::new(
                &tokenizer,
                "image",
                t.image_marker.as_deref().unwrap_or("<image>"),
                token,
            )?;
            match (&t.image_start, &t.image_end) {
                (Some(a), Some(b)) => im = im.around(&tokenizer, a, b)?,
                (None, None) => {}
                _ => {
                    return Err(Error::Spec {
                        path: self.file.clone(),
                        message: "[tokenize] image_start and image_end go together: give both or neither".into(),
                    });
                }
            }
            op = op.images(im);
        }
        if let Some(b) = &t.bos {
            op = op.bos(b)?;
        }
        if let Some(e) = &t.eos {
            op = op.eos(e)?;
        }
        let max = t.max_tokens.or(seq_len);
        // A packer that truncates only sees what tokenize passes on: split pieces fit a row and
        // would never be cut, so by default tokenize truncates too.
        let pack_truncates = self.pack.as_ref().is_some_and(|p| p.long_documents.as_deref() == Some("truncate"));
        let policy = match (t.long_documents.as_deref(), max) {
            (None, Some(m)) if pack_truncates => LongDocuments::Truncate { max_tokens: m },
            (Some("split"), Some(m)) if pack_truncates && seq_len.is_some_and(|s| m <= s) => {
                return Err(Error::Spec {
                    path: self.file.clone(),
                    message: format!(
                        "[pack] long_documents = \"truncate\" would cut nothing: [tokenize] long_documents = \"split\" \
                         cuts documents into pieces of {m} tokens first, and each fits a row; to keep only the start \
                         of long documents, set [tokenize] long_documents = \"truncate\""
                    ),
                });
            }
            (None, Some(m)) | (Some("split"), Some(m)) => LongDocuments::Split { max_tokens: m },
            (Some("truncate"), Some(m)) => LongDocuments::Truncate { max_tokens: m },
            (None, None) | (Some("keep"), _) => LongDocuments::Keep,
            (Some("split" | "truncate"), None) => {
                return Err(Error::Spec {
                    path: self.file.clone(),
                    message: "[tokenize] long_documents needs max_tokens (or a [pack] section)".into(),
                });
            }
            (Some(other), _) => {
                return Err(Error::Spec {
                    path: self.file.clone(),
                    message: format!("[tokenize] long_documents = {other:?}: expected keep, split or truncate"),
                });
            }
        };
        Ok(op.long_documents(policy)?)
    }
}
