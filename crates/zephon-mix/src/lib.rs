//! The zephon work source: what to train on, in what mixture and order, as a pure function of
//! configuration and seed.
//!
//! The one design decision: **every position of the stream is computed, never walked.** The
//! mixture is an exact integer interleave (weighted round-robin) whose counts before any
//! position have a closed form; each dataset's order in each pass is a counter-based
//! permutation (a Feistel network) keyed by (seed, dataset, pass); chunks are dealt to lanes
//! by a seeded permutation per block of L chunks. So a lane seeks to its n-th chunk in O(1),
//! the cost of a pointer does not grow with the lane count, and a checkpoint of the work
//! source is one cursor per lane. The one exception is the end of finite data: given each
//! row's tokens, it is planned once, up front, so that every lane ends with the same tokens
//! ([`Balance`]).
//!
//! Two accumulators live here too, because they are about *what* is trained on: [`Shuffle`]
//! (a shuffle buffer keyed by record lineage, which can keep token shares) and
//! [`EnsureMixture`] (a token-deficit scheduler that keeps realized token shares on target
//! after tokenization).
//!
//! What this crate is not: it reads no files (it sees dataset manifests, plain data from
//! `zephon-core`, so it never compiles Arrow), and it does not tokenize; token estimation
//! takes a counting function from the caller.
//!
//! ```
//! use zephon_core::{DatasetManifest, ShardManifest, WorkSource};
//! use zephon_operator::Lane;
//! use zephon_mix::{MixtureSource, SourceOptions, Exhaustion};
//!
//! let ds = |name: &str, rows| DatasetManifest {
//!     name: name.into(),
//!     shards: vec![ShardManifest { path: name.into(), name: String::new(), rows, bytes: rows * 100, version: "v1".into() }],
//! };
//! let config = SourceOptions { seed: 7, chunk_size: 64, exhaustion: Exhaustion::Redistribute, ..Default::default() };
//! let source = MixtureSource::new(&[ds("a", 1000), ds("b", 300)], &[0.7, 0.3], config).unwrap();
//! // 1,300 rows in chunks of 64: 21 chunks. Lane 3 of 8, its second chunk, computed directly:
//! let chunk = source.chunk(Lane(3), 8, 1).unwrap().unwrap();
//! assert_eq!(chunk.samples.len(), 64);
//! assert!((8..16).contains(&chunk.index));
//! // Lane 3's fourth chunk would be chunk 24 or later: past the end.
//! assert!(source.chunk(Lane(3), 8, 3).unwrap().is_none());
//! ```

#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

mod balance;
mod ensure;
mod ensure_report;
mod error;
mod estimate;
mod held;
mod interleave;
mod once;
mod order;
mod shuffle;
mod source;
mod steer;

pub use balance::{Balance, Measure, row_sizes};
pub use ensure::EnsureMixture;
pub use error::{Error, Result};
pub use estimate::{EstimateOptions, ROW_QUANTILES, TokenEstimate, declared, estimate, weights_for_token_shares};
pub use once::OnceInOrder;
pub use order::{Order, RowOrder};
pub use shuffle::Shuffle;
pub use source::{Exhaustion, MixtureSource, SourceOptions};
pub use steer::{STEERED_CHUNK_TOKENS, SteeredSource};
