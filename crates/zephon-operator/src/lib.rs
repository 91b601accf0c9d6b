//! The operator interface of zephon: what a third-party operator, format reader or sink is
//! written against, and nothing else.
//!
//! A record ([`Record`]) is an ordered set of named values ([`Value`]: text, bytes, integers,
//! typed arrays) plus its [`Lineage`], the pieces of stored samples ([`SampleId`]) it was made
//! of. An [`Operator`] turns records into records.
//!
//! The one design decision that shapes this crate: an operator is split into a **stateless
//! part** ([`Operator::apply`], a pure function of one record that may run on any thread, any
//! number of times) and an optional **per-lane accumulator** ([`Accumulator`], which sees one
//! lane's records in order and exports its state as small numbers plus the lineage of the
//! records it holds). Those two rules are what let the engine make every global step the same
//! bytes at any world size and after any restore, without saving payloads and without replay.
//! [`testing::check_operator`] checks both rules for an operator in one call.
//!
//! What this crate is not: it has no executor, lanes, topology, checkpoint files or sources
//! (`zephon-core`, the engine), reads no file formats and tokenizes nothing. It depends only on
//! `serde`, `serde_json`, `sha2`, `hex`, `half` and `thiserror`, so an operator crate builds in
//! seconds. A [`Section`] makes an operator usable from spec files: its table's name, its
//! [`Stage`] and a factory from the table to the operator.
//!
//! ```
//! use zephon_operator::*;
//!
//! /// Upper-cases the `text` field: a pure function of the record, lineage unchanged.
//! struct Upper;
//! impl Operator for Upper {
//!     fn name(&self) -> &str { "upper" }
//!     fn fingerprint(&self) -> Settings { Settings::new("upper", 1) }
//!     fn apply(&self, mut r: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
//!         let t = r.str("text").ok_or_else(|| OpError::Data("no text".into()))?.to_uppercase();
//!         r.set(&"text".into(), Value::text(t));
//!         out.push(r);
//!         Ok(())
//!     }
//! }
//! let input = Record::from_sample(SampleId::new(0, 0, 0)).with(&"text".into(), Value::text("hello"));
//! let mut out = Vec::new();
//! Upper.apply(input, &mut out)?;
//! assert_eq!(out[0].str("text"), Some("HELLO"));
//! # Ok::<(), OpError>(())
//! ```

#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

mod array;
mod assembly;
mod buffer;
pub mod columns;
mod digest;
mod encoding;
mod error;
mod id;
mod lineage;
mod operator;
mod record;
pub mod rng;
mod section;
mod settings;
pub mod testing;

pub use array::{Array, ArrayData, DType, Element, Shape, ShapeError};
pub use assembly::{Assembly, DatasetLossWeight, Holding, LossWeight, Neighbour, Offer, TokenCounter};
pub use buffer::Buffer;
pub use digest::{Digest, Hasher};
pub use encoding::{ENCODING_VERSION, encode_record};
pub use error::OpError;
pub use half;
pub use id::{Lane, SampleId, Step};
pub use lineage::{Extent, Fragment, Lineage, Span};
pub use operator::{Accumulator, AccumulatorState, LaneContext, Operator, OperatorKind, RebuildInput, Tally};
pub use record::{Attachment, Field, Record, Value, safe_cut, slice_attachments};
pub use rng::{Permutation, Rng, RngKey};
pub use section::{Section, SectionContext, SectionTable, Stage};
pub use settings::{SETTINGS_VERSION, Settings, SettingsValue};
