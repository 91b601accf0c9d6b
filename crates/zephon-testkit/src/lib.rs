//! Test support shared by zephon's crates (never a dependency of a library).
//!
//! - A test pipeline whose output depends on history: a byte "tokenizer" (stateless), a wrap
//!   packer and a shuffle buffer (accumulators), so the invariants are tested on state, not
//!   only on maps.
//! - Runners that execute every rank of a world size side by side ([`run_ranks`], a shorthand
//!   for `zephon_core::testing::Ranks`, the one in-process rank runner), and separate rank
//!   processes (the multi-process harness).
//! - [`SpecText`], the one builder of TOML specs for tests.
//! - [`many_sources`], a mixture of a hundred datasets carved from the test corpora.
//! - The fetched test data (`scripts/fetch-testdata.sh`): tests that need it fail loudly when
//!   it is missing.

#![allow(missing_docs)]

mod faults;
mod images;
mod many;
mod ranks;
mod s3;
mod spec_text;

pub use faults::{Fault, FaultCounts, FaultProxy, Faults};
pub use images::{IMAGE, ImageTokenize, Split, image_corpus, images_of, span_len};
pub use many::{ManySources, many_sources};
pub use ranks::{rank_process, spawn_ranks};
pub use s3::S3Server;
pub use spec_text::{SpecText, TomlValue};

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;

use zephon_core::testing::Ranks;
use zephon_core::*;
use zephon_operator::*;

pub const EOS: u32 = 256;

/// Text to byte tokens plus EOS. Lineage becomes `[0, n)` of the sample's tokens.
pub struct ByteTokenize;

impl Operator for ByteTokenize {
    fn name(&self) -> &str {
        "byte-tokenize"
    }
    fn fingerprint(&self) -> Settings {
        Settings::new("bytes+eos", 1)
    }
    fn apply(&self, mut record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        let text = match record.take("text") {
            Some(Value::Str(t)) => t,
            _ => return Err(OpError::Data("no text field".into())),
        };
        if text.is_empty() {
            return Err(OpError::Data("empty document".into()));
        }
        let mut ids: Vec<u32> = text.bytes().map(u32::from).collect();
        ids.push(EOS);
        let sample = record.lineage().first_sample().expect("read records have a sample");
        record.set_lineage(Lineage::single(Fragment::span(sample, Span::prefix(ids.len() as u32))));
        record.set(&Field::new("tokens"), Value::seq(ids));
        out.push(record);
        Ok(())
    }
}

/// Concatenate-and-chunk packing into rows of `len` tokens.
pub struct WrapPack {
    pub len: usize,
}

impl Operator for WrapPack {
    fn name(&self) -> &str {
        "wrap-pack"
    }
    fn fingerprint(&self) -> Settings {
        Settings::new("chunk", 1).set("len", self.len)
    }
    fn kind(&self) -> OperatorKind {
        OperatorKind::Accumulate
    }
    fn accumulator(&self, _: LaneContext) -> Option<Box<dyn Accumulator>> {
        Some(Box::new(WrapAcc { len: self.len, docs: VecDeque::new(), used: 0, avail: 0 }))
    }
}

struct WrapAcc {
    len: usize,
    docs: VecDeque<Record>,
    /// Tokens of the front document already packed.
    used: usize,
    avail: usize,
}

fn tokens(r: &Record) -> &[u32] {
    r.get("tokens").and_then(Value::as_array).and_then(Array::as_u32).unwrap_or_default()
}

fn assemble(pieces: Vec<Record>) -> Record {
    let mut ids = Vec::new();
    let mut lineage = Lineage::default();
    for p in &pieces {
        ids.extend_from_slice(tokens(p));
        for f in p.lineage().fragments() {
            lineage.push(*f);
        }
    }
    Record::new(lineage).with(&Field::new("input_ids"), Value::array(ids))
}

impl Accumulator for WrapAcc {
    fn push(&mut self, record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        self.avail += tokens(&record).len();
        self.docs.push_back(record);
        while self.avail >= self.len {
            let mut need = self.len;
            let mut pieces = Vec::new();
            while need > 0 {
                let front = &self.docs[0];
                let n = tokens(front).len() - self.used;
                let take = n.min(need);
                pieces.push(front.slice(self.used, self.used + take).map_err(OpError::fatal)?);
                need -= take;
                if take == n {
                    self.docs.pop_front();
                    self.used = 0;
                } else {
                    self.used += take;
                }
            }
            self.avail -= self.len;
            out.push(assemble(pieces));
        }
        Ok(())
    }
    fn finish(&mut self, out: &mut Vec<Record>) -> Result<(), OpError> {
        if self.docs.is_empty() {
            return Ok(());
        }
        let mut pieces = Vec::new();
        for (i, d) in self.docs.drain(..).enumerate() {
            let skip = if i == 0 { self.used } else { 0 };
            let n = tokens(&d).len();
            pieces.push(d.slice(skip, n).map_err(OpError::fatal)?);
        }
        self.used = 0;
        self.avail = 0;
        out.push(assemble(pieces));
        Ok(())
    }
    fn export(&self) -> AccumulatorState {
        let mut buffered = Vec::new();
        for (i, d) in self.docs.iter().enumerate() {
            let f = d.lineage().as_single().copied().expect("docs are single fragments");
            let skip = if i == 0 { self.used as u32 } else { 0 };
            buffered.push(Lineage::single(f.sub(skip, f.len() - skip).expect("inside the document")));
        }
        AccumulatorState { values: vec![], buffered }
    }
    fn import(&mut self, _: AccumulatorState, buffered: Vec<Record>) -> Result<(), OpError> {
        self.avail = buffered.iter().map(|r| tokens(r).len()).sum();
        self.docs = buffered.into();
        self.used = 0;
        Ok(())
    }
    fn rebuild(&self, lineage: &Lineage, input: &mut dyn RebuildInput) -> Result<Record, OpError> {
        let pieces =
            lineage.fragments().iter().map(|f| input.exact(&Lineage::single(*f))).collect::<Result<Vec<_>, _>>()?;
        Ok(assemble(pieces))
    }
}

/// A shuffle buffer of `size` records; randomness keyed by (seed, lane) and a counter.
pub struct ShuffleBuffer {
    pub size: usize,
}

impl Operator for ShuffleBuffer {
    fn name(&self) -> &str {
        "shuffle-buffer"
    }
    fn fingerprint(&self) -> Settings {
        Settings::new("buffer", 1).set("size", self.size)
    }
    fn kind(&self) -> OperatorKind {
        OperatorKind::Accumulate
    }
    fn accumulator(&self, ctx: LaneContext) -> Option<Box<dyn Accumulator>> {
        Some(Box::new(ShuffleAcc {
            size: self.size,
            key: RngKey::new(ctx.seed, "test-shuffle").with(ctx.lane.0 as u64),
            count: 0,
            buf: Vec::new(),
        }))
    }
}

struct ShuffleAcc {
    size: usize,
    key: RngKey,
    count: u64,
    buf: Vec<Record>,
}

impl Accumulator for ShuffleAcc {
    fn push(&mut self, record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        self.count += 1;
        if self.buf.len() < self.size {
            self.buf.push(record);
            return Ok(());
        }
        let j = self.key.below_at(self.count, self.size as u64) as usize;
        out.push(std::mem::replace(&mut self.buf[j], record));
        Ok(())
    }
    fn finish(&mut self, out: &mut Vec<Record>) -> Result<(), OpError> {
        out.append(&mut self.buf);
        Ok(())
    }
    fn export(&self) -> AccumulatorState {
        AccumulatorState { values: vec![self.count], buffered: self.buf.iter().map(|r| r.lineage().clone()).collect() }
    }
    fn import(&mut self, state: AccumulatorState, buffered: Vec<Record>) -> Result<(), OpError> {
        self.count = *state.values.first().ok_or_else(|| OpError::Fatal("missing count".into()))?;
        self.buf = buffered;
        Ok(())
    }
}

/// A corpus of `docs` documents of 1..=max_len words, split over 3 shards, from `seed`.
pub fn corpus(docs: usize, max_words: u64, seed: u64) -> Datasets {
    const WORDS: [&str; 12] =
        ["lane", "step", "seed", "rank", "pack", "row", "token", "shard", "mix", "epoch", "data", "batch"];
    let key = RngKey::new(seed, "test-corpus");
    let texts: Vec<String> = (0..docs as u64)
        .map(|d| {
            let n = 1 + key.with(d).below_at(0, max_words);
            (0..n)
                .map(|w| WORDS[key.with(d).below_at(w + 1, WORDS.len() as u64) as usize])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let per = texts.len().div_ceil(3);
    let shards: Vec<Vec<String>> = texts.chunks(per.max(1)).map(|c| c.to_vec()).collect();
    Datasets::new(vec![Arc::new(MemoryDataset::from_texts("corpus", "text", shards))])
}

/// The standard test pipeline: tokenize, pack to `row_len`, shuffle rows in a buffer.
pub fn operators(row_len: usize, shuffle: usize) -> Operators {
    let p = Operators::new().then(ByteTokenize).then(WrapPack { len: row_len });
    if shuffle > 0 { p.then(ShuffleBuffer { size: shuffle }) } else { p }
}

pub fn spec(datasets: Datasets, operators: Operators, chunk: u64, epochs: u64, tail: Tail) -> RunSpec {
    let source = SequentialSource::new(&datasets.manifests(), chunk, epochs, 11);
    RunSpec {
        operators,
        source: Arc::new(source),
        datasets,
        seed: 5,
        bad_records: BadRecords::Fail,
        tail,
        token_estimates: Vec::new(),
    }
}

pub fn opts(threads: usize, unit: usize, prefetch: u64) -> ExecOptions {
    ExecOptions { threads, prefetch_steps: prefetch, unit_samples: unit, snapshot_every: 1, ..ExecOptions::default() }
}

/// Global fingerprints of the next `steps` steps at world size `w` (fewer where the data
/// ends), every rank in this process: `zephon_core::testing::Ranks` over engines of `spec`,
/// started or resumed from `resume`, and checkpointed after the last step into `save`. Panics
/// on any error, as a test should.
#[allow(clippy::too_many_arguments)]
pub fn run_ranks(
    spec: &RunSpec,
    lanes: u32,
    rows: impl Into<RowsPerStep>,
    w: u32,
    o: ExecOptions,
    steps: u64,
    resume: Option<&Path>,
    save: Option<&Path>,
) -> Vec<Digest> {
    let mut ranks = Ranks::engines(spec, lanes, rows, w, o, resume).unwrap();
    let out = ranks.fingerprints(steps).unwrap();
    if let Some(dir) = save {
        ranks.checkpoint(dir).unwrap();
    }
    out
}

/// Where the fetched test data lives (`ZEPHON_TESTDATA`, else the fetch script's default),
/// whether or not it has been fetched.
pub fn testdata_dir() -> std::path::PathBuf {
    std::env::var_os("ZEPHON_TESTDATA").map(std::path::PathBuf::from).unwrap_or_else(|| {
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .map(std::path::PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache")))
            .unwrap_or_else(|| std::path::PathBuf::from(".cache"));
        cache.join("zephon-testdata")
    })
}

/// Where the fetched test data lives (`ZEPHON_TESTDATA`, else the fetch script's default).
/// Panics, naming the command to run, when it has not been fetched: a test that needs real
/// data must fail, never pass without it.
pub fn testdata() -> std::path::PathBuf {
    let dir = testdata_dir();
    assert!(
        dir.join("READY").is_file(),
        "test data missing at {}: run `bash scripts/fetch-testdata.sh` (scripts/test.sh does)",
        dir.display()
    );
    dir
}

/// The fetched test data, or `None` when it is missing and `ZEPHON_REQUIRE_TESTDATA` is unset
/// (the test then returns early after saying so on stderr). With the variable set, as
/// `scripts/test.sh` does, missing data fails the test like [`testdata`].
pub fn testdata_or_skip(test: &str) -> Option<std::path::PathBuf> {
    let dir = testdata_dir();
    if dir.join("READY").is_file() || std::env::var_os("ZEPHON_REQUIRE_TESTDATA").is_some() {
        return Some(testdata());
    }
    eprintln!(
        "SKIP {test}: test data missing at {} (run `bash scripts/fetch-testdata.sh`; \
         ZEPHON_REQUIRE_TESTDATA=1 makes this a failure)",
        dir.display()
    );
    None
}
