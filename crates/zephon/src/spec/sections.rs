//! The tables of a spec file, one type each: every key is documented here and in
//! `docs/guide/spec-reference.md` (a test keeps them equal).

use serde::Deserialize;
use zephon_core::{BadRecords, RowsPerStep, Tail};
use zephon_mix::{Balance, Exhaustion};

use super::choices::*;

/// One `[[dataset]]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetSpec {
    /// Its name (in errors, plans and provenance).
    pub name: String,
    /// Where its shards are: a file, a folder (its subfolders too), a glob, or a list of these.
    pub path: Paths,
    /// Only its shards of this split (`train`, `validation` or `test`), as Hugging Face names
    /// files and folders.
    pub split: Option<String>,
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
    /// Its tokens' weight on the loss (default 1), in `[pack] loss_weights`.
    pub loss_weight: Option<f64>,
    /// The field holding each record's weight on the loss, times `loss_weight`.
    pub loss_weight_field: Option<String>,
}

/// A `path`: one location, or a list of them read in order.
#[derive(Clone, Debug)]
pub enum Paths {
    /// One file, folder or glob.
    One(String),
    /// Several, read in order.
    Many(Vec<String>),
}

/// A string or a list of strings. Formats that can say what comes next (TOML, JSON) decide by
/// the value; a format that cannot (a schema tracer, which is not human-readable) is told a
/// list, the general case.
impl<'de> Deserialize<'de> for Paths {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct OneOrMany;
        impl<'de> serde::de::Visitor<'de> for OneOrMany {
            type Value = Paths;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a path, or a list of paths")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Paths, E> {
                Ok(Paths::One(v.to_string()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Paths, A::Error> {
                let mut all = Vec::new();
                while let Some(p) = seq.next_element::<String>()? {
                    all.push(p);
                }
                Ok(Paths::Many(all))
            }
        }
        if deserializer.is_human_readable() {
            deserializer.deserialize_any(OneOrMany)
        } else {
            Vec::<String>::deserialize(deserializer).map(Paths::Many)
        }
    }
}

impl Paths {
    /// The locations, in order.
    pub fn all(&self) -> &[String] {
        match self {
            Paths::One(p) => std::slice::from_ref(p),
            Paths::Many(v) => v,
        }
    }
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
    pub order: SourceOrder,
    /// Rows per block for `order = "blocks"`.
    pub block_size: u64,
    /// Visit shards in a random order each pass.
    pub shuffle_shards: bool,
    /// `repeat`, `stop` or `redistribute`.
    pub exhaustion: Exhaustion,
    /// Passes over each dataset before it is exhausted.
    pub passes: u64,
    /// The source's own seed (default: the run's).
    pub seed: Option<u64>,
    /// How finite data's end is shared among lanes: `row_tokens` (every row is tokenized
    /// once, and lanes end together), `row_sizes` (every row's text length is read once) or
    /// `estimates`. Default: `row_tokens` for a text pipeline over at most 1 GiB of data,
    /// else `estimates`.
    pub balance: Option<Balance>,
}

impl Default for SourceSpec {
    fn default() -> Self {
        SourceSpec {
            chunk_size: None,
            chunk_tokens: None,
            order: SourceOrder::Shuffled,
            block_size: 1000,
            shuffle_shards: true,
            exhaustion: Exhaustion::Repeat,
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
    /// What tokenize does with a document longer than `max_tokens`: `keep`, `split` or
    /// `truncate` (default: at the packer's row length when there is a packer, `truncate` if
    /// the packer truncates and `split` if not; else `keep`; `zephon_text::LongDocuments`).
    pub long_documents: Option<TokenizeLongDocuments>,
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

/// `[chat]`: conversations rendered with a chat template and tokenized, with a loss mask on
/// the assistant's tokens (`zephon_text::Chat`). The datasets hold conversations: a list of
/// `{role, content}` messages in the field `field`, read as JSON.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatSpec {
    /// Path of a `tokenizer.json`.
    pub tokenizer: String,
    /// The chat template: a `tokenizer_config.json` (its `chat_template`, and its special
    /// tokens as variables) or a Jinja file.
    pub template: String,
    /// With a `tokenizer_config.json` holding several named templates, which one (default
    /// `default`).
    pub template_name: Option<String>,
    /// The field of the messages (default `messages`).
    pub field: Option<String>,
    /// `assistant_turns` (default), `last_assistant_turn` or `everything`.
    pub loss_on: Option<ChatLossOn>,
    /// Which tokens of an assistant message are its turn, for templates without
    /// `{% generation %}` blocks: `generated` (default) or `content`.
    pub assistant_span: Option<ChatAssistantSpan>,
    /// What a conversation longer than `max_tokens` becomes: `split_at_turns`, `truncate` or
    /// `skip`; counted and reported. Without it, conversations stay whole and a packer cuts
    /// long ones like documents.
    pub long_conversations: Option<ChatLongConversations>,
    /// The limit for `long_conversations` (default: the packer's row length).
    pub max_tokens: Option<usize>,
    /// Roles a message may have (default: system, user, assistant, tool).
    pub roles: Option<Vec<String>>,
    /// Text variables for the template (e.g. `date_string`, which templates that would read
    /// the clock take instead).
    #[serde(default)]
    pub variables: std::collections::BTreeMap<String, String>,
    /// True/false variables for the template (e.g. `enable_thinking`).
    #[serde(default)]
    pub flags: std::collections::BTreeMap<String, bool>,
    /// What the template writes for an image (a message part `{"type": "image"}`), which
    /// becomes the image's placeholders (default `<image>`; Qwen2-VL templates write
    /// `<|vision_start|><|image_pad|><|vision_end|>`).
    pub image_marker: Option<String>,
    /// The added token repeated for each image (needed when there is an `[images]` section).
    pub image_token: Option<String>,
    /// Tokens around each image's placeholders (e.g. `<|vision_start|>`).
    pub image_start: Option<String>,
    /// See `image_start` (e.g. `<|vision_end|>`).
    pub image_end: Option<String>,
}

/// The keys of `[tokenize]` and `[chat]` that say how images become placeholder tokens.
#[derive(Copy, Clone, Debug)]
pub struct ImageTokensSpec<'a> {
    /// `image_marker`.
    pub image_marker: Option<&'a str>,
    /// `image_token`.
    pub image_token: Option<&'a str>,
    /// `image_start`.
    pub image_start: Option<&'a str>,
    /// `image_end`.
    pub image_end: Option<&'a str>,
}

impl ImageTokensSpec<'_> {
    /// The first of the keys that is set, if any.
    pub fn first_set(&self) -> Option<&'static str> {
        [
            ("image_marker", self.image_marker),
            ("image_token", self.image_token),
            ("image_start", self.image_start),
            ("image_end", self.image_end),
        ]
        .into_iter()
        .find_map(|(k, v)| v.map(|_| k))
    }
}

impl TokenizeSpec {
    /// How images become placeholder tokens.
    pub fn image_tokens(&self) -> ImageTokensSpec<'_> {
        ImageTokensSpec {
            image_marker: self.image_marker.as_deref(),
            image_token: self.image_token.as_deref(),
            image_start: self.image_start.as_deref(),
            image_end: self.image_end.as_deref(),
        }
    }
}

impl ChatSpec {
    /// How images become placeholder tokens.
    pub fn image_tokens(&self) -> ImageTokensSpec<'_> {
        ImageTokensSpec {
            image_marker: self.image_marker.as_deref(),
            image_token: self.image_token.as_deref(),
            image_start: self.image_start.as_deref(),
            image_end: self.image_end.as_deref(),
        }
    }
}

/// `[images]`: decode, resize and normalise the images datasets carry (feature `vision`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImagesSpec {
    /// `llava` (336 centre crop, ViT patches of 14, 576 tokens) or `qwen2_vl` (dynamic
    /// resolution, Qwen2-VL patches); the keys below change it.
    pub preset: Option<ImagePreset>,
    /// A fixed square side in pixels (with `fit`).
    pub size: Option<u32>,
    /// `center_crop`, `pad_to_square` or `stretch`.
    pub fit: Option<ImageFit>,
    /// Dynamic resolution instead of a fixed size: `[min_pixels, max_pixels]`.
    pub dynamic_pixels: Option<[u64; 2]>,
    /// `bilinear`, `bicubic` or `lanczos3`.
    pub filter: Option<ImageFilter>,
    /// `clip`, `imagenet` or `half`.
    pub normalize: Option<ImageNormalize>,
    /// `f32`, `bf16` or `f16`.
    pub dtype: Option<ImageDtype>,
    /// `vit`, `qwen2_vl` or `chw`.
    pub layout: Option<ImageLayout>,
    /// Patch side for `vit`.
    pub patch: Option<u32>,
    /// Placeholder tokens per image (default: from the patch grid).
    pub tokens: Option<u32>,
    /// Refuse images whose header declares more pixels.
    pub max_pixels: Option<u64>,
    /// `zune` or `libjpeg-turbo` (the latter needs the `turbojpeg` build).
    pub backend: Option<JpegDecoder>,
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
    /// The most tokens held per lane: past it the oldest held piece goes out before its
    /// turn (reported as `released_tokens`; nothing is dropped). Default 16 × `slack_tokens`
    /// plus 4 rows.
    pub max_held_tokens: Option<u64>,
}

impl EnsureSpec {
    /// The cap on documents held per lane, if one is set.
    pub(super) fn hold_per_lane(&self, lanes: u32) -> std::result::Result<Option<usize>, String> {
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
    pub algorithm: PackAlgorithm,
    /// Tokens per row.
    pub seq_len: usize,
    /// Open rows per lane for the fit algorithms (default 64).
    pub bins: Option<usize>,
    /// Open rows of all lanes together, instead of `bins`: each lane gets this divided by
    /// the lanes (rounded up), so the open rows do not multiply with L.
    pub bins_total: Option<usize>,
    /// Documents per row at most.
    pub max_segments: Option<usize>,
    /// What the packer does with a document still longer than a row: `split` or `truncate`
    /// (default `split`; [`zephon_pack::LongerThanRow`]).
    pub long_documents: Option<PackLongDocuments>,
    /// What the fit algorithms do with their open rows when finite data ends: `keep_pieces`
    /// (emit them as they are) or `fill_rows` (lay their pieces out into full rows, as `wrap`
    /// would). Default `fill_rows` where it matters: finite data (`exhaustion` `stop` or
    /// `redistribute`) under `[run] tail = "drop"`, where rows left short at the end make
    /// lanes end rows apart and the drop lose more than a step; `keep_pieces` otherwise.
    pub end_of_data: Option<PackEndOfData>,
    /// Fit algorithms: start with one open row per lane, doubling with each row emitted up to
    /// `bins` (first rows sooner, a little emptier). Default false.
    #[serde(default)]
    pub warm_up: bool,
    /// Padding token id.
    pub pad_id: Option<u32>,
    /// Label of positions without a next token (default -100).
    pub ignore_index: Option<i32>,
    /// With `[chat]`, whether labels are `ignore_index` where the loss mask is 0 (default:
    /// only `loss_mask` is 0 there).
    #[serde(default)]
    pub mask_labels: bool,
    /// Rows carry `source_ids`: each token's dataset (u16).
    #[serde(default)]
    pub source_ids: bool,
    /// Rows carry `loss_weights`: each position's weight on the loss (f32).
    #[serde(default)]
    pub loss_weights: bool,
}

impl PackSpec {
    /// Open rows per lane for the fit algorithms.
    pub(super) fn bins_per_lane(&self, lanes: u32) -> std::result::Result<usize, String> {
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
    pub(super) fn per_lane(&self, lanes: u32) -> std::result::Result<usize, String> {
        split_across_lanes(("[shuffle]", "buffer"), self.buffer, self.buffer_total, None, lanes)
    }
}

/// `[schedule]`: values that change at set steps, each a pure function of the step.
///
/// ```toml
/// [schedule]
/// rows_per_step = [[0, 256], [1000, 512], [3000, 1024]]    # G(step); or `ramp`
/// shares = [[0, { a = 0.7, b = 0.3 }], [5000, { a = 0.3, b = 0.7 }]]
/// ```
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// G(step) as `[first step, rows per step]` pairs, from step 0, in increasing steps.
    pub rows_per_step: Option<Vec<(u64, u32)>>,
    /// G(step) as a linear ramp instead of `rows_per_step`.
    pub ramp: Option<RampSpec>,
    /// w(step) as `[first step, { dataset = share, ... }]` pairs, from step 0, every dataset
    /// named in each, summing to 1. The datasets then take no `share` of their own.
    pub shares: Option<Vec<(u64, std::collections::BTreeMap<String, f64>)>>,
}

/// `[schedule.ramp]`: rows per step from `from` to `to` in increments of `by`, evenly spaced
/// over the first `steps` steps (Megatron-LM's batch-size ramp-up, counted in steps).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RampSpec {
    /// G at step 0.
    pub from: u32,
    /// G from step `steps` on.
    pub to: u32,
    /// The increment.
    pub by: u32,
    /// The steps the ramp takes.
    pub steps: u64,
}

impl ScheduleSpec {
    /// G(step), if the schedule gives it.
    pub(super) fn rows_per_step(&self) -> std::result::Result<Option<RowsPerStep>, String> {
        match (&self.rows_per_step, &self.ramp) {
            (Some(_), Some(_)) => Err("[schedule] rows_per_step and ramp exclude each other: give one".into()),
            (Some(g), None) => {
                RowsPerStep::new(g.clone()).map(Some).map_err(|e| format!("[schedule] rows_per_step: {e}"))
            }
            (None, Some(r)) => {
                RowsPerStep::ramp(r.from, r.to, r.by, r.steps).map(Some).map_err(|e| format!("[schedule] ramp: {e}"))
            }
            (None, None) => Ok(None),
        }
    }
}

/// `[validation]`: a validation pass over held-out datasets (see `zephon::Validation`):
/// every record once, in order, one record a row of the `[pack]` row length, the same steps at
/// every world size, the last ones padded so that every rank ends after the same step. The
/// training spec's `[images]`, `[tokenize]` / `[pretokenized]` / `[chat]` and `[pack]` settings
/// apply; `ensure_mixture`, the schedules and the shuffle do not.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValidationSpec {
    /// Rows of a validation step, a multiple of `lanes` (default: the run's rows per step at
    /// step 0).
    pub rows_per_step: Option<u32>,
    /// A shuffle buffer per lane (default: none; the order stays the datasets').
    pub shuffle: Option<usize>,
    /// The held-out datasets, read in this order (`share` and `weight` do not apply).
    #[serde(rename = "dataset")]
    pub datasets: Vec<DatasetSpec>,
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
    pub bad_records: BadRecords,
    /// `drop` or `partial`.
    pub tail: Tail,
}

impl Default for RunSection {
    fn default() -> Self {
        RunSection {
            threads: None,
            prefetch_steps: 2,
            unit_samples: 16,
            bad_records: BadRecords::Fail,
            tail: Tail::Drop,
        }
    }
}

/// `[storage]`: how object stores (`s3://`, `gs://`, `az://`, `https://` paths) are reached,
/// beyond what each cloud's SDK finds in the environment and profiles, and how their blocks are
/// cached on the node. It holds no credentials: those come from the environment, AWS profiles
/// and instance roles, so that no spec or checkpoint can carry one.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageSpec {
    /// The endpoint of an S3-compatible server.
    pub endpoint: Option<String>,
    /// The region.
    pub region: Option<String>,
    /// Allow `http://` endpoints.
    #[serde(default)]
    pub allow_http: bool,
    /// S3 path-style addressing (`endpoint/bucket/key`).
    pub path_style: Option<bool>,
    /// Bytes of a block, the unit fetched and cached (default 8 MiB).
    pub block_bytes: Option<u64>,
    /// The node's block cache folder (default `blocks/` under the cache folder).
    pub cache_dir: Option<String>,
    /// The most bytes the block cache holds (default 16 GiB).
    pub cache_bytes: Option<u64>,
    /// Which blocks go when the cache is full (default `next_use`).
    pub eviction: Option<EvictionSpec>,
    /// Seconds one try of a request may take in all (default: no limit).
    pub timeout_s: Option<f64>,
    /// Seconds a request may go without a byte arriving before it is tried again (default 30).
    pub stall_timeout_s: Option<f64>,
    /// Tries of a request after the first (default 10).
    pub retries: Option<u32>,
    /// Requests in flight fetching ahead by the schedule (default 8; 0: none).
    pub prefetch_requests: Option<usize>,
}
