//! The candle sink of zephon: a rank's local steps (or microbatches) become named candle
//! tensors on a chosen device, built ahead of the trainer on a background thread.
//!
//! - [`Sink`] turns a [`zephon_core::Batch`] into [`Tensors`]: every column under its own name
//!   (`input_ids`, `labels`, `positions`, `segment_ids`, `cu_seqlens`, `max_seqlen`,
//!   `loss_mask`, `image.pixel_values`, ...), dense columns as `[rows, ...]`, ragged ones as
//!   values plus offsets, with per-column target dtypes (labels as `i64`, pixels as `bf16`, ...).
//!   On the CPU, buffers the batch owns alone move into tensors without a copy.
//! - [`Prefetcher`] runs a [`StepSource`] (an [`EngineSource`], or any loader that implements
//!   the trait) on its own thread, `depth` steps ahead, over a bounded channel.
//!
//! The one design decision that shapes this crate: **a prefetched step carries its own
//! checkpoint.** The worker takes the source's [`ResumePoint`] (the lanes' states, small
//! numbers and lineage, never payloads) right after pulling each step, and the prefetcher
//! keeps the one of the last step the trainer took. So prefetching changes neither the data
//! nor the checkpoint position: a checkpoint taken while k steps wait in the queue resumes at
//! the step after the trainer's last, exactly as a run without prefetching would. No request
//! has to travel to the worker, and the worker never has to be paused or rewound.
//!
//! What this crate is not: a trainer or a model library (the `candle_lm` example trains a
//! tiny one), nor a collective-communication layer; it does not reorder, pad or otherwise
//! change the data: the tensors hold the batch's values, only converted to the asked dtypes.
//! CUDA is the `cuda` feature (off by default; it needs nvcc and the CUDA libraries to build).
//!
//! ```
//! use std::sync::Arc;
//! use zephon_candle::{EngineSource, PrefetchOptions, Prefetcher, Sink};
//! use zephon_core::*;
//! use zephon_operator::*;
//!
//! let text = vec![vec!["lanes".to_string(), "steps".into(), "ranks".into(), "again".into()]];
//! let datasets = Datasets::new(vec![Arc::new(MemoryDataset::from_texts("d", "text", text))]);
//! let spec = RunSpec {
//!     operators: Operators::new(),
//!     source: Arc::new(SequentialSource::new(&datasets.manifests(), 1, 1, 7)),
//!     datasets,
//!     seed: 7,
//!     bad_records: BadRecords::Fail,
//!     tail: Tail::Drop,
//!     token_estimates: Vec::new(),
//! };
//! let source = EngineSource::start(spec, Topology::builder().lanes(2).rows_per_step(2).build()?, ExecOptions::default())?;
//! let mut steps = Prefetcher::start(source, Sink::cpu(), PrefetchOptions::default())?;
//! let first = steps.next_step()?.expect("two steps of two rows");
//! let text = first.tensors().expect("one batch").require("text")?; // the rows' bytes, u8
//! assert_eq!(text.dims(), &[10]); // two rows of five bytes
//! assert_eq!(steps.position(), Step(1)); // the prefetched second step is not counted
//! # Ok::<(), zephon_candle::Error>(())
//! ```

#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

mod convert;
mod error;
mod prefetch;
mod sink;
mod source;
mod step;
mod tensors;

pub use candle_core;
pub use convert::candle_dtype;
pub use error::{BoxError, Error, Result};
pub use prefetch::{PrefetchOptions, Prefetcher};
pub use sink::{CuSeqlens, Sink, columns};
pub use source::{CheckpointHeader, EngineSource, ResumePoint, StepSource};
pub use step::StepTensors;
pub use tensors::Tensors;
