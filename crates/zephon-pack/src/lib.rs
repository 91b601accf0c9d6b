//! Packing for zephon: per-lane accumulators that turn tokenized documents into fixed-length
//! training rows for document-masked attention (flash-attn varlen kernels).
//!
//! [`Pack`] is one operator with three algorithms ([`Algorithm`]): concatenate-and-chunk
//! (`Wrap`), and `FirstFit` / `BestFit` over a bounded number of open rows per lane. Documents
//! longer than a row are split or truncated ([`LongerThanRow`]; the tokenizer may have cut them
//! before, at a limit of its own). Every row has the same shape, so rows stack into a batch
//! (T = `seq_len`, S = `max_segments`, k segments in the row):
//!
//! | field | value | content |
//! |---|---|---|
//! | [`INPUT_IDS`] | `Array` U32\[T\] | the segments' tokens in order, then `pad_id` |
//! | [`LABELS`] | `Array` I32\[T\] | the next token within the segment, else `ignore_index` |
//! | [`POSITIONS`] | `Array` I32\[T\] | 0, 1, 2, ... restarting at each segment; 0 on padding |
//! | [`SEGMENT_IDS`] | `Array` I32\[T\] | 1..=k; 0 on padding |
//! | [`CU_SEQLENS`] | `Array` I32\[S+2\] | 0, each segment's end, T if padded, then T repeated |
//! | [`MAX_SEQLEN`] | `Int` | the longest segment or padding run |
//! | [`LOSS_MASK`] | `Array` U8\[T\] | 1 where the label is not `ignore_index` |
//! | [`NUM_TOKENS`] | `Int` | non-padding tokens |
//!
//! A row's lineage lists its segments' fragments in order: which samples and token ranges
//! made it.
//!
//! **Attachments** (images) travel with their tokens: a piece's attachments move into the row
//! at their positions there and get a [`SEGMENT`] value (the segment they belong to). An
//! atomic attachment's span is never cut: `Wrap` closes a row early rather than cut one, the
//! fit algorithms cut long documents before one, and one longer than T is an error for that
//! record. A position whose next token is inside an attachment's span gets no label.
//!
//! The one design decision that shapes this crate: **a row is a pure function of its
//! lineage.** A row's lineage lists the pieces (sample, token range) it was made of, and the
//! single function that lays a row out takes nothing else. So a checkpoint stores only the
//! lineage of the pieces in open rows plus their grouping, never tokens; restore re-reads
//! those pieces, and `rebuild` reproduces any emitted row from its lineage through the same
//! function `push` used: byte-identical by construction, at any world size.
//!
//! Input is what a tokenizer emits: a field (`tokens` by default) holding a `Value::Seq` of
//! u32 ids, and a lineage of one fragment spanning exactly those ids. Anything else is an
//! [`zephon_operator::OpError::Data`] for that record. Empty documents are skipped silently: they
//! have no tokens to train on and must not become empty segments.
//!
//! What this crate is not: it does not tokenize (put a tokenizer before it), shuffle rows (put
//! a shuffle after it), or carry input fields other than the tokens and attachments into rows. Its algorithms see one lane's
//! stream in order and depend on nothing else, so they cannot look ahead across lanes.
//!
//! ```
//! use zephon_operator::{Fragment, LaneContext, Lane, Lineage, Operator, Record, SampleId, Span, Value};
//! use zephon_pack::{Algorithm, Pack, PackOptions};
//!
//! let pack = Pack::new(PackOptions { max_segments: 4, ..PackOptions::new(Algorithm::BestFit { bins: 8 }, 8) })?;
//! let mut acc = pack.accumulator(LaneContext { lane: Lane(0), seed: 1 }).unwrap();
//! let doc = |row: u64, ids: Vec<u32>| {
//!     let fragment = Fragment::span(SampleId::new(0, 0, row), Span::prefix(ids.len() as u32));
//!     Record::new(Lineage::single(fragment)).with(&"tokens".into(), Value::seq(ids))
//! };
//! let mut rows = Vec::new();
//! acc.push(doc(0, vec![1, 2, 3, 4, 5]), &mut rows).unwrap();
//! acc.push(doc(1, vec![6, 7, 8]), &mut rows).unwrap(); // fills the row exactly: emitted at once
//! assert_eq!(rows.len(), 1);
//! assert_eq!(rows[0].get("segment_ids"), Some(&Value::array(vec![1i32, 1, 1, 1, 1, 2, 2, 2])));
//! assert_eq!(rows[0].get("cu_seqlens"), Some(&Value::array(vec![0i32, 5, 8, 8, 8, 8])));
//! # Ok::<(), zephon_pack::PackError>(())
//! ```

#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

mod config;
mod doc;
mod error;
mod fit;
mod row;
mod state;
mod wrap;

use std::sync::Arc;

use zephon_operator::{Accumulator, Assembly, Holding, LaneContext, Offer, OpError, Operator, OperatorKind};

pub use config::{
    Algorithm, DEFAULT_IGNORE_INDEX, DEFAULT_TOKENS_PER_SEGMENT, EndOfData, LongerThanRow, LossWeights, PackOptions,
};
pub use error::PackError;
pub use row::{CU_SEQLENS, INPUT_IDS, LABELS, LOSS_MASK, MAX_SEQLEN, NUM_TOKENS, POSITIONS, SEGMENT, SEGMENT_IDS};

use fit::{Choice, FitAcc};
use wrap::WrapAcc;

/// The packing operator: an accumulator only ([`OperatorKind::Accumulate`]), one per lane.
#[derive(Clone, Debug)]
pub struct Pack {
    config: Arc<PackOptions>,
}

impl Pack {
    /// A packer with `config`, after checking every setting.
    pub fn new(config: PackOptions) -> Result<Self, PackError> {
        config.validate()?;
        Ok(Pack { config: Arc::new(config) })
    }

    /// Concatenate-and-chunk into rows of `seq_len`, other settings default.
    pub fn wrap(seq_len: usize) -> Result<Self, PackError> {
        Pack::new(PackOptions::new(Algorithm::Wrap, seq_len))
    }

    /// First-fit over `bins` open rows of `seq_len`, other settings default.
    pub fn first_fit(seq_len: usize, bins: usize) -> Result<Self, PackError> {
        Pack::new(PackOptions::new(Algorithm::FirstFit { bins }, seq_len))
    }

    /// Best-fit over `bins` open rows of `seq_len`, other settings default.
    pub fn best_fit(seq_len: usize, bins: usize) -> Result<Self, PackError> {
        Pack::new(PackOptions::new(Algorithm::BestFit { bins }, seq_len))
    }

    /// The settings.
    pub fn config(&self) -> &PackOptions {
        &self.config
    }

    /// A row of padding only, laid out as this packer lays out rows: it fills a step a lane has
    /// no data for (a validation pass's last step), and nothing in it is trained on.
    pub fn padding_row(&self) -> zephon_operator::Record {
        row::padding(&self.config)
    }

    /// The most token positions one lane's packer holds between pushes: its partial row
    /// (wrap) or its open rows (first-fit, best-fit).
    pub fn holds_positions(&self) -> u64 {
        let rows = match self.config.algorithm {
            Algorithm::Wrap => 1,
            Algorithm::FirstFit { bins } | Algorithm::BestFit { bins } => bins,
        };
        (rows as u64).saturating_mul(self.config.seq_len as u64)
    }
}

impl Operator for Pack {
    fn name(&self) -> &str {
        "pack"
    }

    fn offer(&self) -> Offer {
        let offer = Offer::none()
            .with_held_positions(self.holds_positions())
            .with_holding(Holding::Positions(self.holds_positions()))
            .with_row_length(self.config.seq_len);
        match self.config.longer_than_row {
            LongerThanRow::Truncate => offer.with_truncation(self.config.seq_len as u64),
            LongerThanRow::Split => offer,
        }
    }

    /// Refuses a pad id that is not a token of the tokenizer before it; takes the datasets'
    /// loss weights when it writes `loss_weights` and was given none of its own, and refuses
    /// them when it does not write the column.
    fn assemble(&self, plan: &Assembly<'_>) -> Result<Option<Arc<dyn Operator>>, OpError> {
        if let Some((_, v)) = plan.before(|o| o.vocab_size)
            && self.config.pad_id as usize >= v
        {
            return Err(OpError::Fatal(format!(
                "pad_id {} is not a token of the tokenizer (its vocabulary has {v} ids)",
                self.config.pad_id
            )));
        }
        let weighted = plan.loss_weights.iter().position(|w| *w != zephon_operator::DatasetLossWeight::default());
        match (&self.config.loss_weights, weighted) {
            (None, Some(d)) => Err(OpError::Fatal(format!(
                "dataset {} has a loss weight, which only the packer's loss_weights column carries: turn it on \
                 ([pack] loss_weights = true, or PackOptions::loss_weights)",
                plan.datasets.get(d).map_or("?", String::as_str)
            ))),
            (Some(own), Some(_)) if own.datasets.is_empty() => {
                let config = PackOptions {
                    loss_weights: Some(LossWeights { datasets: plan.loss_weights.to_vec() }),
                    ..(*self.config).clone()
                };
                Ok(Some(Arc::new(Pack::new(config).map_err(|e| OpError::Fatal(e.to_string()))?)))
            }
            (Some(own), Some(_)) if own.datasets != plan.loss_weights => Err(OpError::Fatal(
                "the datasets' loss weights are given twice, by the datasets and by PackOptions::loss_weights, \
                 and differ: give them once"
                    .into(),
            )),
            _ => Ok(None),
        }
    }

    fn fingerprint(&self) -> zephon_operator::Settings {
        self.config.fingerprint()
    }

    fn kind(&self) -> OperatorKind {
        OperatorKind::Accumulate
    }

    fn accumulator(&self, _lane: LaneContext) -> Option<Box<dyn Accumulator>> {
        let config = self.config.clone();
        Some(match config.algorithm {
            Algorithm::Wrap => Box::new(WrapAcc::new(config)),
            Algorithm::FirstFit { bins } => Box::new(FitAcc::new(config, Choice::First, bins)),
            Algorithm::BestFit { bins } => Box::new(FitAcc::new(config, Choice::Best, bins)),
        })
    }

    fn describe(&self) -> String {
        let c = &*self.config;
        let (how, holds) = match c.algorithm {
            Algorithm::Wrap => ("concatenate and chunk".to_string(), "1 partial row".to_string()),
            Algorithm::FirstFit { bins } => {
                (format!("first-fit over {bins} open rows"), format!("{bins} partial rows"))
            }
            Algorithm::BestFit { bins } => (format!("best-fit over {bins} open rows"), format!("{bins} partial rows")),
        };
        let long = match c.longer_than_row {
            LongerThanRow::Split => "longer documents split",
            LongerThanRow::Truncate => "longer documents truncated",
        };
        let mut end = match (c.algorithm, c.end_of_data) {
            (Algorithm::Wrap, _) | (_, EndOfData::KeepPieces) => String::new(),
            (_, EndOfData::FillRows) => ", open rows re-laid into full rows at the end of the data".to_string(),
        };
        if c.warm_up && c.algorithm != Algorithm::Wrap {
            end.push_str(", warming up from 1 open row (doubling with each row emitted)");
        }
        if c.source_ids {
            end.push_str(", each token's dataset in source_ids");
        }
        if let Some(w) = &c.loss_weights {
            let weighted = w.datasets.iter().any(|d| *d != zephon_operator::DatasetLossWeight::default());
            end.push_str(if weighted {
                ", each position's loss weight in loss_weights (by dataset and record)"
            } else {
                ", loss_weights (every document weighs 1)"
            });
        }
        format!(
            "pack: {how} into rows of {} tokens, at most {} documents a row, {long}, pad {}{end}; holds up to {holds} per lane",
            c.seq_len, c.max_segments, c.pad_id
        )
    }
}
