//! Settings: which algorithm, how long a row is, what fills the padding. Checked once, when the
//! operator is built, so that running never meets a bad setting.

use std::fmt;

use zephon_operator::DatasetLossWeight;

use crate::error::PackError;

/// How documents are placed into rows.
///
/// All three are deterministic functions of the lane's input order. The fit algorithms share
/// these rules: a row that becomes exactly full (T tokens) or reaches `max_segments` is emitted
/// at once; when no open row has room for a piece, a new row opens for it, after emitting the
/// fullest open row (ties: the oldest) if `bins` rows are already open; a piece that is a
/// complete row by itself (T tokens, or any piece when `max_segments` is 1) is emitted
/// directly and evicts nothing; `finish` emits the open rows in creation order.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Concatenate and chunk: documents go into the current row in arrival order and a row is
    /// cut every `seq_len` tokens, so a document can span rows. Its continuation in the next
    /// row is a new segment there (positions restart at 0). Rows are full except when
    /// `max_segments` ends one early, and the last one. Holds one partial row per lane.
    Wrap,
    /// Each document goes into the oldest open row with room for it. Keeps up to `bins` rows
    /// open per lane.
    FirstFit {
        /// Open rows per lane (≥ 1).
        bins: usize,
    },
    /// Each document goes into the open row it fills most tightly (least room left after it;
    /// ties to the oldest row). Keeps up to `bins` rows open per lane.
    BestFit {
        /// Open rows per lane (≥ 1).
        bins: usize,
    },
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Algorithm::Wrap => f.write_str("wrap"),
            Algorithm::FirstFit { bins } => write!(f, "first-fit bins={bins}"),
            Algorithm::BestFit { bins } => write!(f, "best-fit bins={bins}"),
        }
    }
}

/// What the packer does with a document (or piece) longer than a row, `seq_len` tokens.
///
/// This is the packer's own setting, at its own limit. It is not the tokenizer's long-document
/// policy (`zephon_text::LongDocuments`), which cuts documents at any `max_tokens` into
/// records of their own as they are tokenized, or keeps them whole; whatever reaches the packer
/// still longer than a row is cut here. The packer has no "keep": a row holds `seq_len` tokens.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum LongerThanRow {
    /// Cut it into `seq_len`-sized pieces (the last one shorter), placed independently. For
    /// [`Algorithm::Wrap`] this is what concatenate-and-chunk does anyway.
    #[default]
    Split,
    /// Keep its first `seq_len` tokens and drop the rest. Applies to every algorithm,
    /// [`Algorithm::Wrap`] included.
    Truncate,
}

impl fmt::Display for LongerThanRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LongerThanRow::Split => "split",
            LongerThanRow::Truncate => "truncate",
        })
    }
}

/// What the fit algorithms do with their open rows when the lane's input ends.
///
/// `KeepPieces` emits each open row as it is, so no piece is ever cut. Each row is then up to
/// a piece's worth short, and at the end of finite data a lane emits its `bins` open rows
/// whatever they hold: lanes that took equal tokens end a few rows apart, and under
/// `tail = "drop"` the rows past the lane with the fewest are dropped. `FillRows` lays the open
/// rows' pieces out as [`Algorithm::Wrap`] would, in the rows' creation order, cutting every T
/// tokens (never inside an atomic attachment): every row but the last is full, so lanes with
/// equal tokens end within a row of each other. Only the pieces held at the end can be cut;
/// [`Algorithm::Wrap`] has nothing else to do either way.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum EndOfData {
    /// Emit the open rows as they are.
    #[default]
    KeepPieces,
    /// Re-lay the open rows' pieces into full rows.
    FillRows,
}

impl fmt::Display for EndOfData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EndOfData::KeepPieces => "keep_pieces",
            EndOfData::FillRows => "fill_rows",
        })
    }
}

/// The `loss_weights` column's settings: per dataset (by its index in the run), its weight and
/// its records' weight field; a dataset past the list weighs 1. Empty, the pipeline fills it
/// from the datasets' own settings when the packer is assembled.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LossWeights {
    /// By dataset index.
    pub datasets: Vec<DatasetLossWeight>,
}

impl LossWeights {
    /// Dataset `d`'s weight and its records' weight field (weight 1 and none past the list).
    pub fn of(&self, d: u32) -> (f32, Option<&str>) {
        self.datasets.get(d as usize).map_or((1.0, None), |w| (w.weight.get(), w.field.as_deref()))
    }

    /// The settings in one canonical line: `weight` or `weight*field` a dataset, `;` between.
    fn encode(&self) -> String {
        let one = |d: &DatasetLossWeight| match &d.field {
            Some(f) => format!("{}*{f}", d.weight),
            None => d.weight.to_string(),
        };
        self.datasets.iter().map(one).collect::<Vec<_>>().join(";")
    }
}

/// Every setting of a packer. Build one with [`PackOptions::new`] and change fields with
/// struct update syntax; [`crate::Pack::new`] checks it.
///
/// ```
/// use zephon_pack::{Algorithm, LongerThanRow, Pack, PackOptions};
/// let config = PackOptions {
///     max_segments: 32,
///     longer_than_row: LongerThanRow::Truncate,
///     pad_id: 50256,
///     ..PackOptions::new(Algorithm::BestFit { bins: 64 }, 2048)
/// };
/// let pack = Pack::new(config)?;
/// assert_eq!(pack.config().seq_len, 2048);
/// # Ok::<(), zephon_pack::PackError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PackOptions {
    /// How documents are placed into rows.
    pub algorithm: Algorithm,
    /// Tokens per row, T (≥ 1). Every per-token field of a row has exactly T elements.
    pub seq_len: usize,
    /// The most documents (segments) in one row, S (1 ≤ S ≤ T). `cu_seqlens` has S + 2
    /// elements so that rows stack into a batch.
    pub max_segments: usize,
    /// What happens to a document longer than a row (T tokens).
    pub longer_than_row: LongerThanRow,
    /// The token id written into padding.
    pub pad_id: u32,
    /// The label of positions that have no next token in their segment (negative).
    pub ignore_index: i32,
    /// The input field holding the token ids (`Value::Seq` of `u32`).
    pub input_field: String,
    /// What the fit algorithms do with their open rows when the input ends.
    pub end_of_data: EndOfData,
    /// Whether the fit algorithms warm up: a lane starts with one open row and may keep twice
    /// as many with each row it emits, up to `bins` (1, 2, 4, ... open rows after 0, 1, 2, ...
    /// rows). Without it a lane whose documents rarely fill a row exactly emits its first row
    /// only once `bins` rows are open; with as many lanes as rows, that wait is most of the
    /// time to the first batch. The first rows are emptier (at 1,024 lanes of one row a step,
    /// GPT-2 on corpora A + B: fill 0.967 over the first 3 steps, 0.9965 over 30, against 1.0).
    /// A function of the lane's own stream, like everything a packer does.
    pub warm_up: bool,
    /// With a per-token loss mask on the input (`loss_mask`, a chat conversation's), whether
    /// labels are `ignore_index` where the mask is 0, not only `loss_mask`: for a trainer whose
    /// loss reads labels alone.
    pub mask_labels: bool,
    /// Whether rows carry `source_ids`: each position's dataset (its index in the run, `u16`;
    /// `u16::MAX` in padding), by the same boundaries as `loss_mask`.
    pub source_ids: bool,
    /// When set, rows carry `loss_weights` (`f32` a position): `loss_mask` times the weight of
    /// the document the position is in (its dataset's, times its record's).
    pub loss_weights: Option<LossWeights>,
}

/// Default [`PackOptions::max_segments`] is `seq_len / DEFAULT_TOKENS_PER_SEGMENT`: a row caps
/// its documents only when they average fewer than this many tokens, so short documents fill
/// rows (a fixed cap of 64 would leave 1024-token rows of 14-token documents 8 % empty), and
/// `cu_seqlens` stays a quarter of the row's width.
pub const DEFAULT_TOKENS_PER_SEGMENT: usize = 4;

/// Default [`PackOptions::ignore_index`]: what PyTorch's cross-entropy ignores by default.
pub const DEFAULT_IGNORE_INDEX: i32 = -100;

impl PackOptions {
    /// `algorithm` into rows of `seq_len` tokens, with the defaults: at most
    /// `seq_len / DEFAULT_TOKENS_PER_SEGMENT` documents a row (at least 1), long documents split,
    /// padding id 0, ignore index -100, input field `tokens`, open rows kept as they are at the
    /// end of the input, no warm-up.
    pub fn new(algorithm: Algorithm, seq_len: usize) -> Self {
        PackOptions {
            algorithm,
            seq_len,
            max_segments: (seq_len / DEFAULT_TOKENS_PER_SEGMENT).max(1),
            longer_than_row: LongerThanRow::Split,
            pad_id: 0,
            ignore_index: DEFAULT_IGNORE_INDEX,
            input_field: "tokens".into(),
            end_of_data: EndOfData::KeepPieces,
            warm_up: false,
            mask_labels: false,
            source_ids: false,
            loss_weights: None,
        }
    }

    /// Checks every setting.
    pub fn validate(&self) -> Result<(), PackError> {
        if self.seq_len == 0 {
            return Err(PackError::ZeroSeqLen);
        }
        // i32 positions and cu_seqlens; the u32 fragment offsets are then safe too.
        if self.seq_len > i32::MAX as usize {
            return Err(PackError::SeqLenTooLarge(self.seq_len));
        }
        if let Algorithm::FirstFit { bins: 0 } | Algorithm::BestFit { bins: 0 } = self.algorithm {
            return Err(PackError::ZeroBins);
        }
        if self.max_segments == 0 {
            return Err(PackError::ZeroMaxSegments);
        }
        if self.max_segments > self.seq_len {
            return Err(PackError::TooManySegments { max_segments: self.max_segments, seq_len: self.seq_len });
        }
        if self.ignore_index >= 0 {
            return Err(PackError::IgnoreIndex(self.ignore_index));
        }
        if self.input_field.is_empty() {
            return Err(PackError::EmptyInputField);
        }
        Ok(())
    }

    /// Every setting in one canonical line (the operator's checkpoint fingerprint). `v1` names
    /// the row layout: a change to what rows contain must change it. The end-of-data policy
    /// and the warm-up are named only where they change rows (not wrap) and differ from the
    /// default: the line without them means the default.
    pub fn fingerprint(&self) -> zephon_operator::Settings {
        let (algorithm, bins) = match self.algorithm {
            Algorithm::Wrap => ("wrap", None),
            Algorithm::FirstFit { bins } => ("first-fit", Some(bins)),
            Algorithm::BestFit { bins } => ("best-fit", Some(bins)),
        };
        let mut s = zephon_operator::Settings::new("pack", 1)
            .set("algorithm", algorithm)
            .set("bins", bins)
            .set("seq_len", self.seq_len)
            .set("max_segments", self.max_segments)
            .set("long", self.longer_than_row.to_string())
            .set("pad_id", self.pad_id)
            .set("ignore_index", self.ignore_index)
            .set("input_field", self.input_field.as_str());
        // Settings without effect are left out, so that they do not refuse a restore.
        match (self.algorithm, self.end_of_data) {
            (Algorithm::Wrap, _) | (_, EndOfData::KeepPieces) => {}
            (_, other) => s = s.set("end_of_data", other.to_string()),
        }
        if self.warm_up && self.algorithm != Algorithm::Wrap {
            s = s.set("warm_up", "doubling");
        }
        if self.mask_labels {
            s = s.set("mask_labels", true);
        }
        if self.source_ids {
            s = s.set("source_ids", true);
        }
        if let Some(w) = &self.loss_weights {
            s = s.set("loss_weights", w.encode());
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_settings() {
        let ok = PackOptions::new(Algorithm::Wrap, 16);
        assert_eq!(ok.validate(), Ok(()));
        let bad = |c: PackOptions| c.validate().unwrap_err();
        assert_eq!(bad(PackOptions::new(Algorithm::Wrap, 0)), PackError::ZeroSeqLen);
        assert_eq!(bad(PackOptions::new(Algorithm::FirstFit { bins: 0 }, 16)), PackError::ZeroBins);
        assert_eq!(bad(PackOptions::new(Algorithm::BestFit { bins: 0 }, 16)), PackError::ZeroBins);
        assert_eq!(bad(PackOptions { max_segments: 0, ..ok.clone() }), PackError::ZeroMaxSegments);
        assert!(matches!(bad(PackOptions { max_segments: 17, ..ok.clone() }), PackError::TooManySegments { .. }));
        assert_eq!(bad(PackOptions { ignore_index: 0, ..ok.clone() }), PackError::IgnoreIndex(0));
        assert_eq!(bad(PackOptions { input_field: String::new(), ..ok.clone() }), PackError::EmptyInputField);
        assert!(matches!(bad(PackOptions::new(Algorithm::Wrap, 1 << 31)), PackError::SeqLenTooLarge(_)));
    }

    #[test]
    fn default_max_segments_never_exceeds_seq_len() {
        assert_eq!(PackOptions::new(Algorithm::Wrap, 8).max_segments, 2);
        assert_eq!(PackOptions::new(Algorithm::Wrap, 3).max_segments, 1);
        assert_eq!(PackOptions::new(Algorithm::Wrap, 64).max_segments, 16, "cu_seqlens of 18, not 66");
        assert_eq!(PackOptions::new(Algorithm::Wrap, 1024).max_segments, 256);
        assert_eq!(PackOptions::new(Algorithm::Wrap, 8).validate(), Ok(()));
    }

    #[test]
    fn fingerprint_names_every_setting() {
        let base = PackOptions::new(Algorithm::BestFit { bins: 4 }, 16);
        let variants = [
            PackOptions { algorithm: Algorithm::FirstFit { bins: 4 }, ..base.clone() },
            PackOptions { algorithm: Algorithm::BestFit { bins: 5 }, ..base.clone() },
            PackOptions { seq_len: 17, ..base.clone() },
            PackOptions { max_segments: 3, ..base.clone() },
            PackOptions { longer_than_row: LongerThanRow::Truncate, ..base.clone() },
            PackOptions { pad_id: 1, ..base.clone() },
            PackOptions { ignore_index: -1, ..base.clone() },
            PackOptions { input_field: "ids".into(), ..base.clone() },
            PackOptions { end_of_data: EndOfData::FillRows, ..base.clone() },
            PackOptions { warm_up: true, ..base.clone() },
            PackOptions { source_ids: true, ..base.clone() },
            PackOptions { loss_weights: Some(LossWeights::default()), ..base.clone() },
            PackOptions {
                loss_weights: Some(LossWeights {
                    datasets: vec![DatasetLossWeight {
                        weight: zephon_operator::LossWeight::new(0.5).unwrap(),
                        field: None,
                    }],
                }),
                ..base.clone()
            },
            PackOptions {
                loss_weights: Some(LossWeights {
                    datasets: vec![DatasetLossWeight {
                        weight: zephon_operator::LossWeight::ONE,
                        field: Some("w".into()),
                    }],
                }),
                ..base.clone()
            },
        ];
        let mut seen = vec![base.fingerprint()];
        for v in variants {
            let fp = v.fingerprint();
            assert!(!seen.contains(&fp), "{fp}");
            seen.push(fp);
        }
    }
}
