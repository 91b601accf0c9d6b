//! The lane core of zephon: elastic determinism for on-the-fly data pipelines.
//!
//! A training run's data is split into L **lanes**, independent sample streams that are fixed
//! for the life of the run and dealt to ranks (rank r of W owns lanes `[r·L/W, (r+1)·L/W)`).
//! Global step s is, lane by lane in order, rows `[s·R, (s+1)·R)` of each lane, with
//! R = G/L. Because every stateful operator keeps per-lane state and sees its lane's records
//! in order, the bytes of every step are a pure function of configuration and seed: the same
//! at any world size, thread count, prefetch depth or microbatch size, and after any number of
//! restores at other world sizes.
//!
//! The one design decision that shapes this crate: operators are split into a **stateless
//! part** ([`Operator::apply`], a pure function of one record, run on any thread) and an
//! optional **per-lane accumulator** ([`Accumulator`], run in order). Work carries per-lane
//! sequence numbers, and results are put back in order before any accumulator
//! ([`Engine`]). Accumulator state is checkpointed as small numbers plus the
//! [`Lineage`] of held records, so a restore rebuilds what was buffered and replays nothing.
//!
//! What this crate is not: it reads no file formats (`zephon-io`), knows no mixtures or
//! shuffles beyond a simple in-memory source (`zephon-mix`), and tokenizes and packs nothing
//! (`zephon-text`, `zephon-pack`). It depends on nothing heavy, so an operator author can
//! depend on it alone.
//!
//! ```
//! use std::sync::Arc;
//! use zephon_core::*;
//!
//! let data = MemoryDataset::from_texts("greetings", "text", vec![vec!["hello".into(), "world".into()]]);
//! let datasets = Datasets::new(vec![Arc::new(data)]);
//! let source = SequentialSource::new(&datasets.manifests(), 1, 1, 7);
//! let spec = RunSpec {
//!     operators: Operators::new(),
//!     source: Arc::new(source),
//!     datasets,
//!     seed: 7,
//!     bad_records: BadRecords::Fail,
//!     tail: Tail::Drop,
//!     metadata: Default::default(),
//! };
//! let mut engine = Engine::start(spec, Topology::single(2, 2)?, ExecOptions::default())?;
//! let step = engine.next_step()?.expect("one step of two rows");
//! assert_eq!(step.len(), 2);
//! assert!(engine.next_step()?.is_none());
//! # Ok::<(), zephon_core::Error>(())
//! ```

#![deny(missing_docs)]

mod array;
mod batch;
mod buffer;
pub mod checkpoint;
mod digest;
mod encoding;
mod engine;
mod error;
mod hash_log;
mod id;
mod lineage;
mod operator;
mod operators;
mod pretokenized;
mod record;
pub mod rng;
mod source;
mod step;
pub mod testing;
mod topology;

pub use array::{Array, ArrayData, DType, Element, Shape, ShapeError};
pub use batch::{Batch, Column, ColumnData, Ragged, RaggedLayout};
pub use buffer::Buffer;
pub use checkpoint::{
    Cursor, LanePart, LaneState, RunFingerprint, SkipTally, Skips, SplitCheckpoint, SteerState, TailDropped,
};
pub use digest::{Digest, Hasher};
pub use encoding::{ENCODING_VERSION, encode_record};
pub use engine::{BadRecords, Engine, ExecOptions, Held, RunSpec, StageTime, Tail};
pub use error::{Error, OpError, Result};
pub use half;
pub use hash_log::{HashLog, HashLogLine};
pub use id::{Lane, SampleId, Step};
pub use lineage::{Extent, Fragment, Lineage, Span};
pub use operator::{Accumulator, AccumulatorState, LaneContext, Operator, OperatorKind, RebuildInput};
pub use operators::Operators;
pub use pretokenized::PreTokenized;
pub use record::{Attachment, Field, Record, Value, safe_cut, slice_attachments};
pub use rng::{Permutation, Rng, RngKey};
pub use source::{
    Chunk, Dataset, DatasetManifest, Datasets, MemoryDataset, SequentialSource, ShardManifest, Steering, WorkSource,
    deal_chunk,
};
pub use step::{LaneStep, LocalStep, Microbatch, lane_digest, step_fingerprint};
pub use topology::{RankEnv, Topology};
