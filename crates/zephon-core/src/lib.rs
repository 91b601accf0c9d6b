//! The engine of zephon: elastic determinism for on-the-fly data pipelines.
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
//! What this crate is not: it is not the operator interface (records, lineage, the traits and
//! `check_operator` are `zephon-operator`, not re-exported here, which an operator crate depends on
//! alone); it reads no file formats (`zephon-io`), knows no mixtures or shuffles beyond a simple
//! in-memory source (`zephon-mix`), and tokenizes and packs nothing (`zephon-text`,
//! `zephon-pack`). It depends on nothing heavy.
//!
//! ```
//! use std::sync::Arc;
//! use zephon_core::*;
//! use zephon_operator::*;
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
//!     token_estimates: Vec::new(),
//! };
//! let mut engine = Engine::start(spec, Topology::builder().lanes(2).rows_per_step(2).build()?, ExecOptions::default())?;
//! let step = engine.next_step()?.expect("one step of two rows");
//! assert_eq!(step.len(), 2);
//! assert!(engine.next_step()?.is_none());
//! # Ok::<(), zephon_core::Error>(())
//! ```

#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

mod batch;
pub mod checkpoint;
pub mod disk;
mod engine;
mod error;
mod hash_log;
pub mod launch;
mod plan;
mod plan_node;
mod policy;
mod snapshot;
mod source;
mod step;
mod step_schedule;
pub mod testing;
mod token_estimate;
mod topology;

pub use batch::{Batch, Column, ColumnData, Ragged, RaggedLayout};
pub use checkpoint::{
    Cursor, LanePart, LaneState, RunFingerprint, RunMetadata, SkipTally, Skips, SplitCheckpoint, SteerState,
    TailDropped,
};
pub use engine::{BadRecords, CutOff, DefaultThreads, Engine, ExecOptions, RunSpec, StageTime, Tail};
pub use error::{Error, Result};
pub use hash_log::{HashLog, HashLogLine};
pub use plan::Operators;
pub use plan_node::PlanNode;
pub use source::{
    Chunk, Dataset, DatasetManifest, Datasets, MemoryDataset, PlannedRead, RowIndex, SequentialSource, ShardManifest,
    Steering, WorkSource, deal_chunk,
};
pub use step::{LaneStep, LocalStep, Microbatch, lane_digest, step_fingerprint};
pub use step_schedule::{RowsPerStep, ShareSchedule, StepSchedule};
pub use token_estimate::{ROW_QUANTILES, TokenEstimate};
pub use topology::{Place, RankEnv, Topology, TopologyBuilder};
// The operator interface, for this crate's own modules; users import it from
// `zephon-operator` (the engine does not re-export it).
#[allow(unused_imports)]
pub(crate) use zephon_operator::{
    Accumulator, AccumulatorState, Array, ArrayData, Assembly, Attachment, Buffer, DType, Digest, ENCODING_VERSION,
    Element, Extent, Field, Fragment, Hasher, Holding, Lane, LaneContext, Lineage, Neighbour, Offer, OpError, Operator,
    OperatorKind, Permutation, RebuildInput, Record, Rng, RngKey, SETTINGS_VERSION, SampleId, Settings, SettingsValue,
    Shape, ShapeError, Span, Step, TokenCounter, Value, columns, encode_record, half, rng, safe_cut, slice_attachments,
};
