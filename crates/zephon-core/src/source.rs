//! Where samples come from: datasets (stored rows by [`SampleId`]) and the [`WorkSource`]
//! (which samples each lane processes, in what order).
//!
//! The interfaces are here so the engine and third-party sources share them; the real
//! implementations live in `zephon-io` (JSONL, Parquet) and `zephon-mix` (mixtures, shuffles,
//! epochs). The in-memory ones here are for tests and examples.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::OpError;
use zephon_operator::{Digest, Field, Lane, Permutation, Record, RngKey, SampleId, Settings, SettingsValue, Value};

/// One shard as the manifest records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardManifest {
    /// Where the shard is (a path or URL, or a name for in-memory data).
    pub path: String,
    /// Its name within its dataset: its path relative to the dataset's root (the file name
    /// for a dataset of one file). Empty: the file name of `path`.
    #[serde(default)]
    pub name: String,
    /// Number of rows.
    pub rows: u64,
    /// Size in bytes (the file's, or the text's for in-memory data).
    pub bytes: u64,
    /// Changes whenever the shard's content changes (for files: the SHA-256 of all their
    /// bytes; for in-memory data: a content hash).
    pub version: String,
}

/// What a dataset holds: its shards, row counts and sizes. Plain data, so that mixing and
/// checkpoint code never needs the readers (or their heavy dependencies).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetManifest {
    /// The dataset's name, used in errors and plans.
    pub name: String,
    /// The shards, in their fixed order.
    pub shards: Vec<ShardManifest>,
}

impl DatasetManifest {
    /// Rows over all shards.
    pub fn rows(&self) -> u64 {
        self.shards.iter().map(|s| s.rows).sum()
    }

    /// Bytes over all shards.
    pub fn bytes(&self) -> u64 {
        self.shards.iter().map(|s| s.bytes).sum()
    }

    /// A digest of the dataset's name and every shard's file name, rows, bytes and content
    /// version, in order: it changes when any shard's content, order or count changes, and not
    /// when the data is mounted elsewhere (the folder a shard sits in is not part of it).
    pub fn fingerprint(&self) -> Digest {
        Digest::of(format!("{}\n{}", self.name, self.shard_listing()).as_bytes())
    }

    /// One line per shard: file name, rows, bytes, content version. What a checkpoint keeps
    /// to say which shard changed.
    pub fn shard_listing(&self) -> String {
        self.shards.iter().map(ShardManifest::describe).collect::<Vec<_>>().join("\n")
    }
}

impl ShardManifest {
    /// The shard's file name, without the folder it sits in.
    pub fn file_name(&self) -> &str {
        self.path.rsplit(['/', '\\']).next().unwrap_or(&self.path)
    }

    /// Its name within its dataset ([`ShardManifest::name`], else the file name).
    pub fn name(&self) -> &str {
        if self.name.is_empty() { self.file_name() } else { &self.name }
    }

    /// `name rows bytes version`, the shard's identity without the folder its dataset is in.
    pub fn describe(&self) -> String {
        format!("{} rows={} bytes={} {}", self.name(), self.rows, self.bytes, self.version)
    }
}

/// A stored dataset that reads rows by id.
pub trait Dataset: Send + Sync {
    /// The dataset's shards and sizes.
    fn manifest(&self) -> &DatasetManifest;

    /// Reads `samples` — all of one shard of this dataset — appending one result per sample,
    /// in order, to `out`. A malformed row is an [`OpError::Data`]; a shard that cannot be
    /// opened is an [`OpError::Fatal`] for each of its samples. Returned records carry their
    /// sample's lineage (`Record::from_sample`).
    fn read(&self, samples: &[SampleId], out: &mut Vec<Result<Record, OpError>>);

    /// A hint from the schedule: `samples` (all of one shard) will be read soon, in this
    /// order. A dataset whose bytes are far away (an object store) starts fetching them; it
    /// must return at once, and never changes what [`Dataset::read`] returns. The default does
    /// nothing.
    fn prefetch(&self, samples: &[SampleId]) {
        let _ = samples;
    }

    /// A plan from the schedule: `samples` (all of one shard) are read as `read` says. A
    /// dataset with a cache that evicts by next use keeps what is read soonest; it must return
    /// at once and never changes what [`Dataset::read`] returns. The default does nothing.
    fn plan(&self, samples: &[SampleId], read: &PlannedRead) {
        let _ = (samples, read);
    }

    /// How many bytes of its reads ahead the dataset wants planned ([`Dataset::plan`]); 0, the
    /// default: none, and the engine computes no plan.
    fn plans_ahead(&self) -> u64 {
        0
    }
}

/// A read the schedule plans ([`Dataset::plan`]): which stream of chunks reads (a lane, or
/// one dataset's chunks within a steered lane), in which of its chunks, and where that stream
/// is now, so that a cache can tell when the read comes.
///
/// When is measured in thousandths of a step, a clock common to all lanes (they make steps
/// together, within the prefetch): the stream reads chunk `c` at about `step_milli +
/// (c - chunk_now) * milli_per_chunk`. The newest plan of a stream says where it is; a read of
/// a chunk below its `chunk_now` is past.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PlannedRead {
    /// The stream that reads: the lane, or for a steered lane `lane * datasets + dataset`.
    pub stream: u64,
    /// Its chunk (the stream's n-th) that holds the samples.
    pub chunk: u64,
    /// The chunk the stream reads now.
    pub chunk_now: u64,
    /// The step its lane makes now, in thousandths.
    pub step_milli: u64,
    /// The stream's pace: thousandths of a step per chunk (at least 1).
    pub milli_per_chunk: u64,
}

impl PlannedRead {
    /// When the read comes, in thousandths of a step, by the lane's pace as this plan gives it;
    /// `None` when it is past.
    pub fn when(&self, chunk: u64) -> Option<u64> {
        let ahead = chunk.checked_sub(self.chunk_now)?;
        Some(self.step_milli.saturating_add(ahead.saturating_mul(self.milli_per_chunk.max(1))))
    }
}

/// The run's datasets, numbered in order: reads any mix of samples, one batch per shard.
#[derive(Clone, Default)]
pub struct Datasets {
    list: Vec<Arc<dyn Dataset>>,
}

impl Datasets {
    /// The datasets, numbered by position.
    pub fn new(list: Vec<Arc<dyn Dataset>>) -> Self {
        Datasets { list }
    }

    /// Number of datasets.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The manifests, in dataset order.
    pub fn manifests(&self) -> Vec<DatasetManifest> {
        self.list.iter().map(|d| d.manifest().clone()).collect()
    }

    /// The dataset names, in order.
    pub fn names(&self) -> Vec<String> {
        self.list.iter().map(|d| d.manifest().name.clone()).collect()
    }

    /// A digest over all manifests: changes when any dataset changes.
    pub fn fingerprint(&self) -> Digest {
        let parts: Vec<[u8; 32]> = self.list.iter().map(|d| d.manifest().fingerprint().0).collect();
        Digest::of_parts(parts.iter().map(|p| p.as_slice()))
    }

    /// Hints that `samples` will be read soon, in this order ([`Dataset::prefetch`]), one
    /// call per run of samples of one shard.
    pub fn prefetch(&self, samples: &[SampleId]) {
        self.each_shard_run(samples, |ds, run| ds.prefetch(run));
    }

    /// Plans the reads of `samples` ([`Dataset::plan`]), one call per run of samples of one
    /// shard.
    pub fn plan(&self, samples: &[SampleId], read: &PlannedRead) {
        self.each_shard_run(samples, |ds, run| ds.plan(run, read));
    }

    /// The most bytes of reads ahead any dataset wants planned ([`Dataset::plans_ahead`]).
    pub fn plans_ahead(&self) -> u64 {
        self.list.iter().map(|d| d.plans_ahead()).max().unwrap_or(0)
    }

    /// The mean stored bytes of a row over all datasets (at least 1).
    pub fn bytes_per_row(&self) -> u64 {
        let (bytes, rows) = self.list.iter().fold((0u64, 0u64), |(b, r), d| {
            let m = d.manifest();
            (b.saturating_add(m.bytes()), r.saturating_add(m.rows()))
        });
        bytes.checked_div(rows).unwrap_or(0).max(1)
    }

    /// Calls `f` with each run of consecutive samples of one shard and its dataset.
    fn each_shard_run(&self, samples: &[SampleId], f: impl Fn(&dyn Dataset, &[SampleId])) {
        let mut start = 0;
        while start < samples.len() {
            let first = samples[start];
            let end = start + Self::run_of_one_shard(&samples[start..]);
            if let Some(ds) = self.list.get(first.dataset as usize) {
                f(ds.as_ref(), &samples[start..end]);
            }
            start = end;
        }
    }

    /// How many of the first samples of `samples` are of the first one's shard.
    fn run_of_one_shard(samples: &[SampleId]) -> usize {
        let first = samples[0];
        samples.iter().take_while(|s| s.dataset == first.dataset && s.shard == first.shard).count()
    }

    /// Reads `samples` in any order, grouping consecutive samples of one shard into one call.
    /// Returns one result per sample, in order.
    pub fn read(&self, samples: &[SampleId]) -> Vec<Result<Record, OpError>> {
        let mut out = Vec::with_capacity(samples.len());
        let mut start = 0;
        while start < samples.len() {
            let first = samples[start];
            let end = start + Self::run_of_one_shard(&samples[start..]);
            match self.list.get(first.dataset as usize) {
                Some(ds) => {
                    let before = out.len();
                    ds.read(&samples[start..end], &mut out);
                    if out.len() != before + (end - start) {
                        out.truncate(before);
                        out.extend(
                            (start..end).map(|_| {
                                Err(OpError::Fatal("dataset reader returned the wrong number of rows".into()))
                            }),
                        );
                    }
                }
                None => out.extend((start..end).map(|_| {
                    Err(OpError::Fatal(format!("no dataset #{} (the run has {})", first.dataset, self.list.len())))
                })),
            }
            start = end;
        }
        out
    }
}

/// The global index of lane `lane`'s `n`-th chunk in a run of `lanes` lanes.
///
/// Block `n` of `lanes` consecutive chunks is dealt one chunk per lane by a permutation keyed
/// by `(seed, n)`: every lane gets one chunk of each block, so lanes stay balanced, and a lane
/// finds its `n`-th chunk in O(1) whatever the lane count. Every work source deals through
/// this function. `lane` must be one of the `lanes` lanes; an `n` so large that the index
/// overflows (only a corrupt cursor asks for one) gives `u64::MAX`, past every stream's end.
pub fn deal_chunk(seed: u64, lane: Lane, lanes: u32, n: u64) -> u64 {
    let deal = Permutation::new(u64::from(lanes), RngKey::new(seed, "chunk-deal").with(n));
    n.saturating_mul(u64::from(lanes)).saturating_add(deal.apply(u64::from(lane.0)))
}

/// A piece of work for one lane: samples to process in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// The chunk's global index (which chunk of the whole stream this is).
    pub index: u64,
    /// The samples, in processing order.
    pub samples: Vec<SampleId>,
}

/// A deterministic stream of chunks dealt to lanes: what to train on, in what order.
///
/// Must be a pure function of its configuration: `chunk(lane, lanes, n)` returns the same
/// chunk whenever and wherever it is called, so a lane can seek to any position on restore.
/// It must not depend on the world size (only on the lane count).
pub trait WorkSource: Send + Sync {
    /// The `n`-th chunk of `lane` in a run with `lanes` lanes, or `None` when the lane has no
    /// more work (it then has none for any larger `n`).
    fn chunk(&self, lane: Lane, lanes: u32, n: u64) -> crate::Result<Option<Chunk>>;

    /// Everything that changes the stream, typed and canonically encoded, for the checkpoint
    /// fingerprint.
    fn fingerprint(&self) -> Settings;

    /// One line for `explain`. The default is the text form of [`WorkSource::fingerprint`].
    fn describe(&self) -> String {
        self.fingerprint().to_text()
    }

    /// The closed loop of a source that steers each lane by what it delivered (see
    /// [`Steering`]); `None` for a position-addressed source (the default), whose lanes read
    /// [`WorkSource::chunk`].
    fn steering(&self) -> Option<&dyn Steering> {
        None
    }
}

/// A work source whose lanes choose which dataset to read next by a closed loop on the tokens
/// each lane delivered: the dataset of a lane's next input is a pure function of the lane's
/// own history, and within a dataset a lane's `k`-th chunk is position-addressed.
///
/// The engine keeps, per lane, the tokens it delivered of each dataset (the positions its
/// records made, counted in order as the lane pushes them) and its place in each dataset's
/// stream (a chunk, an offset, and how many records of that input it pushed); before each
/// record it asks [`Steering::next_dataset`] which dataset the record comes from, and pushes
/// that dataset's next record: the next piece of the input it is inside (a long document split
/// by tokenize), or the first of its next input. That state is a few
/// integers a dataset and travels in the lane's checkpoint
/// ([`crate::checkpoint::SteerState`]), so a restore seeks in O(1) and replays nothing, and
/// since it depends on the lane's stream alone it is the same at every world size and thread
/// count.
///
/// Reading is not done input by input: the engine reads ahead, in units of several inputs of
/// any datasets, those the loop will most likely ask for next (the same rule over the
/// estimated tokens of [`Steering::input_tokens`]), and keeps each dataset's inputs in order
/// until the loop takes them. What it reads ahead changes when an input is read, never which.
///
/// The targets are [`Steering::shares`], a schedule over steps. A lane reads by the shares in
/// force at the step it is making rows for; when that step enters a new segment the lane
/// counts what it delivers afresh and tells its accumulators
/// ([`zephon_operator::Accumulator::targets_changed`]). That is a pure function of the lane's
/// stream too: the step a lane's next row goes to is a count of its rows.
pub trait Steering: Send + Sync {
    /// Number of datasets.
    fn datasets(&self) -> u32;

    /// Lane `lane`'s `k`-th chunk of dataset `d` in a run of `lanes` lanes, or `None` when
    /// the lane has no more of that dataset (it then has none for any larger `k`). A chunk
    /// may be empty.
    fn dataset_chunk(&self, lane: Lane, lanes: u32, d: u32, k: u64) -> crate::Result<Option<Chunk>>;

    /// The target token shares by step, one share a dataset, each segment summing to 1.
    fn shares(&self) -> &crate::ShareSchedule;

    /// The dataset of a lane's next record, given the `shares` in force, the tokens it
    /// delivered of each dataset since they took effect and which datasets it has no more
    /// inputs of; `None` when the lane's input ends.
    fn next_dataset(&self, shares: &[f64], delivered: &[u64], exhausted: &[bool]) -> Option<u32>;

    /// The tokens one input of dataset `d` is expected to make (an estimate, positive): what
    /// the engine counts an input it has read ahead but not pushed as, to choose what to read
    /// next. It changes what is read ahead, never the data.
    fn input_tokens(&self, d: u32) -> f64;
}

/// An in-memory dataset of named fields, for tests and examples.
pub struct MemoryDataset {
    manifest: DatasetManifest,
    shards: Vec<Vec<Vec<(Field, Value)>>>,
}

impl MemoryDataset {
    /// A dataset called `name` whose shards hold one text field `field` per row.
    pub fn from_texts(name: &str, field: &str, shards: Vec<Vec<String>>) -> Self {
        let field = Field::new(field);
        let shards = shards
            .into_iter()
            .map(|rows| rows.into_iter().map(|t| vec![(field.clone(), Value::text(t))]).collect())
            .collect();
        MemoryDataset::from_rows(name, shards)
    }

    /// A dataset called `name` from rows of named fields, grouped in shards.
    pub fn from_rows(name: &str, shards: Vec<Vec<Vec<(Field, Value)>>>) -> Self {
        let manifest = DatasetManifest {
            name: name.to_string(),
            shards: shards
                .iter()
                .enumerate()
                .map(|(i, rows)| {
                    let mut bytes = 0u64;
                    let mut h = zephon_operator::Hasher::new();
                    for row in rows {
                        let r = Record::from_sample(SampleId::new(0, 0, 0));
                        let r = row.iter().fold(r, |r, (f, v)| r.with(f, v.clone()));
                        zephon_operator::encode_record(&r, &mut |b| {
                            bytes += b.len() as u64;
                            h.update(b)
                        });
                    }
                    ShardManifest {
                        path: format!("memory:{name}/{i}"),
                        name: String::new(),
                        rows: rows.len() as u64,
                        bytes,
                        version: h.finish().to_hex(),
                    }
                })
                .collect(),
        };
        MemoryDataset { manifest, shards }
    }
}

impl Dataset for MemoryDataset {
    fn manifest(&self) -> &DatasetManifest {
        &self.manifest
    }

    fn read(&self, samples: &[SampleId], out: &mut Vec<Result<Record, OpError>>) {
        for &id in samples {
            let row = self.shards.get(id.shard as usize).and_then(|s| s.get(id.row as usize));
            out.push(match row {
                Some(fields) => {
                    let mut r = Record::from_sample(id);
                    for (f, v) in fields {
                        r.set(f, v.clone());
                    }
                    Ok(r)
                }
                None => Err(OpError::Fatal(format!("{}: no such row", self.manifest.name))),
            });
        }
    }
}

/// Every row of some datasets in one order (datasets, then shards, then rows, as listed),
/// addressed by its index in that order: what work sources that read rows in order share.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowIndex {
    /// (dataset, shard, rows) in reading order, empty shards left out.
    shards: Vec<(u32, u32, u64)>,
    total: u64,
}

impl RowIndex {
    /// The rows of `manifests`, in order.
    pub fn new(manifests: &[DatasetManifest]) -> Self {
        let shards: Vec<(u32, u32, u64)> = manifests
            .iter()
            .enumerate()
            .flat_map(|(d, m)| m.shards.iter().enumerate().map(move |(s, sh)| (d as u32, s as u32, sh.rows)))
            .filter(|&(_, _, rows)| rows > 0)
            .collect();
        let total = shards.iter().map(|s| s.2).sum();
        RowIndex { shards, total }
    }

    /// How many rows.
    pub fn len(&self) -> u64 {
        self.total
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The `i`-th row, or `None` past the end.
    pub fn sample_at(&self, mut i: u64) -> Option<SampleId> {
        for &(d, s, rows) in &self.shards {
            if i < rows {
                return Some(SampleId::new(d, s, i));
            }
            i -= rows;
        }
        None
    }

    /// The listing as settings values (`[dataset, shard, rows]` a shard), for fingerprints.
    pub fn settings(&self) -> SettingsValue {
        SettingsValue::List(
            self.shards
                .iter()
                .map(|&(d, s, rows)| SettingsValue::List(vec![d.into(), s.into(), rows.into()]))
                .collect(),
        )
    }
}

/// A simple work source over datasets: all rows of all datasets in order, cut into chunks of
/// `chunk_size`, for a number of epochs. Block `n` of L consecutive chunks is dealt one chunk
/// per lane by a seeded permutation, so lane `l`'s `n`-th chunk is found in O(1).
///
/// For tests and examples; `zephon-mix` has the real one (mixtures, shuffles, exhaustion).
#[derive(Clone, Debug)]
pub struct SequentialSource {
    rows: RowIndex,
    chunk_size: u64,
    epochs: u64,
    seed: u64,
}

impl SequentialSource {
    /// All rows of `manifests` in order, `chunk_size` per chunk, repeated `epochs` times.
    pub fn new(manifests: &[DatasetManifest], chunk_size: u64, epochs: u64, seed: u64) -> Self {
        SequentialSource { rows: RowIndex::new(manifests), chunk_size: chunk_size.max(1), epochs, seed }
    }
}

impl WorkSource for SequentialSource {
    fn chunk(&self, lane: Lane, lanes: u32, n: u64) -> crate::Result<Option<Chunk>> {
        let per_epoch = self.rows.len().div_ceil(self.chunk_size);
        let g = deal_chunk(self.seed, lane, lanes, n);
        if per_epoch == 0 || g >= per_epoch.saturating_mul(self.epochs) {
            return Ok(None);
        }
        let c = g % per_epoch;
        let start = c * self.chunk_size;
        let end = (start + self.chunk_size).min(self.rows.len());
        // Every index is below the total, so every row exists.
        Ok(Some(Chunk { index: g, samples: (start..end).filter_map(|i| self.rows.sample_at(i)).collect() }))
    }

    fn fingerprint(&self) -> Settings {
        Settings::new("sequential", 1)
            .set("shards", self.rows.settings())
            .set("chunk_size", self.chunk_size)
            .set("epochs", self.epochs)
            .set("seed", self.seed)
    }
}

impl std::fmt::Debug for MemoryDataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryDataset")
            .field("name", &self.manifest.name)
            .field("shards", &self.manifest.shards.len())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Datasets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.list.iter().map(|d| d.manifest().name.clone())).finish()
    }
}
