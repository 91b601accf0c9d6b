//! zephon: elastically deterministic data loading for foundation-model training.
//!
//! Every global batch is a pure function of configuration and seed: the same bytes at any GPU
//! count, thread count or microbatch size, and after any number of restores at other GPU
//! counts. This crate is the front door: a builder DSL ([`Pipeline`]) and a TOML [`Spec`] that
//! assemble the workspace's crates —
//!
//! - `zephon-core` (re-exported as [`lane_core`]): lanes, values, the ordered parallel
//!   executor, steps, batches, checkpoints;
//! - `zephon-io` ([`io`]): JSONL, Parquet (feature `parquet`) and WebDataset tar shards;
//! - `zephon-mix` ([`mix`]): mixtures, shuffles, epochs, token estimation, `ensure_mixture`;
//! - `zephon-text` (feature `text`): tokenization;
//! - `zephon-pack` ([`pack`]): packing into rows with flash-attn varlen metadata;
//! - `zephon-vision` (feature `vision`): images decoded, resized and patched;
//! - `zephon-candle` (features `candle`, `cuda`): batches as candle tensors, prefetched.
//!
//! **Where to start.** Training on data: [`Pipeline`] (or a TOML [`Spec`]; every key is
//! documented in [`spec`]), then [`Loader::next_step`], [`LocalStep::microbatches`] and
//! `to_batch`. Writing an operator: the contract is on [`Operator`], a
//! complete one is `examples/custom_operator.rs`, and [`lane_core::testing::check_operator`]
//! proves one in a call.
//!
//! The one design decision: **the spec is the run's identity.** Everything that changes a byte
//! of the output (datasets, weights and token estimates, operators and their settings, lanes,
//! rows per step, seed) is fingerprinted into every checkpoint; everything that does not
//! (world size, rank, threads, prefetch, microbatch size) is free to change at every restart.
//!
//! What this crate is not: a trainer. It hands out steps ([`zephon_core::LocalStep`]) and
//! columnar batches; tensors are the sink's business.

#![deny(missing_docs)]

mod assembled;
mod error;
mod loader;
mod mixture;
mod pipeline;
pub mod spec;

pub use error::{Error, Result};
pub use loader::{DataReport, DatasetReport, Loader};
pub use mixture::{Amount, Dataset, Mixture};
pub use pipeline::{Pipeline, TOKEN_ESTIMATES};
pub use spec::Spec;

// The core is re-exported as `lane_core`, not `core`: a glob import of this crate must not
// shadow Rust's own `core`.
#[cfg(feature = "candle")]
pub use zephon_candle::{self as candle, Prefetcher, Sink};
pub use zephon_core::{
    self as lane_core, BadRecords, Batch, Digest, ExecOptions, Lane, LocalStep, Operator, PreTokenized, Record,
    SampleId, StageTime, Step, Tail, Topology, Value, step_fingerprint,
};
pub use zephon_io::{self as io, Fields};
pub use zephon_mix::{self as mix, EstimateConfig, Exhaustion, Order, RowOrder, TokenEstimate};
pub use zephon_pack::{self as pack, Algorithm, LongDocs, Pack, PackConfig};
#[cfg(feature = "text")]
pub use zephon_text::{self as text, ImagePlaceholders, LongDocuments, Tokenize, Tokenizer};
#[cfg(feature = "vision")]
pub use zephon_vision::{self as vision, ImageTokens, Images, ImagesConfig, PixelLayout};

/// The README's Rust blocks, compiled as doctests so that the front page's example stays true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
