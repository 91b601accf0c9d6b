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
//! complete one is the crate `examples/sentences`, and [`operator::testing::check_operator`]
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
#![deny(missing_debug_implementations)]

mod assembled;
mod error;
mod loader;
mod measured;
mod memory;
mod mixture;
mod pipeline;
pub mod spec;
pub mod testing;
mod validation;

pub use error::{Error, Result};
pub use loader::{DataReport, DatasetReport, Loader};
pub use memory::MemoryBound;
pub use mixture::{Amount, Dataset, Mixture, SHARE_SUM_TOLERANCE};
pub use pipeline::{Pipeline, ROW_TOKENS_BY_DEFAULT};
pub use spec::{Sections, Spec};
pub use validation::{Validation, ValidationLoader};

// The crates are inlined as modules so that their docs are part of this crate's (links to
// them work under `cargo doc --no-deps`). The core is `lane_core`, not `core`: a glob import
// of this crate must not shadow Rust's own `core`.
#[cfg(feature = "candle")]
#[doc(inline)]
pub use zephon_candle as candle;
#[cfg(feature = "candle")]
pub use zephon_candle::{Prefetcher, Sink};
#[doc(inline)]
pub use zephon_core as lane_core;
pub use zephon_core::{
    BadRecords, Batch, ExecOptions, LanePart, LocalStep, Place, SplitCheckpoint, StageTime, Tail, Topology,
    step_fingerprint,
};
#[doc(inline)]
pub use zephon_io as io;
pub use zephon_io::{Fields, Split};
#[doc(inline)]
pub use zephon_mix as mix;
pub use zephon_mix::{Balance, EnsureMixture, EstimateOptions, Exhaustion, Order, RowOrder, Shuffle, TokenEstimate};
#[doc(inline)]
pub use zephon_operator as operator;
pub use zephon_operator::{Digest, Lane, Operator, Record, SampleId, Settings, Step, Value};
#[doc(inline)]
pub use zephon_pack as pack;
pub use zephon_pack::{Algorithm, LongerThanRow, LossWeights, Pack, PackOptions};
#[cfg(feature = "text")]
#[doc(inline)]
pub use zephon_text as text;
#[cfg(feature = "text")]
pub use zephon_text::{ImagePlaceholders, LongDocuments, PreTokenized, Tokenize, Tokenizer};
#[cfg(feature = "vision")]
#[doc(inline)]
pub use zephon_vision as vision;
#[cfg(feature = "vision")]
pub use zephon_vision::{ImageTokens, Images, ImagesOptions, PixelLayout};

/// The README's Rust blocks, compiled as doctests so that the front page's example stays true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
