//! The input side: checking a tokenized record and cutting it into pieces that fit a row.

use zephon_operator::{Attachment, Buffer, Fragment, Record, Value, columns, slice_attachments};

use crate::config::{LongerThanRow, PackOptions};
use crate::error::PackError;
use zephon_operator::LossWeight;

/// A tokenized document (or a piece of one), checked: one fragment spanning exactly its
/// tokens, and its attachments placed within them.
///
/// The tokens are a view of the tokenizer's buffer and the attachments share their payloads:
/// cutting a document into pieces copies nothing.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Piece {
    pub fragment: Fragment,
    pub tokens: Buffer<u32>,
    /// The input's per-token loss mask (1: the loss is on this token), when it has one.
    pub mask: Option<Buffer<u8>>,
    pub attachments: Vec<Attachment>,
    /// The document's weight on the loss (1 unless the packer writes `loss_weights`).
    pub weight: f32,
}

/// Takes the token ids, attachments and loss weight out of `record` and checks them against
/// its lineage. Every path that brings tokens into a row (push, import, rebuild) goes through
/// here, so they agree on what a valid record is. `None` for an empty document: it has nothing
/// to pack.
pub(crate) fn read_piece(mut record: Record, config: &PackOptions) -> Result<Option<Piece>, PackError> {
    let field = config.input_field.as_str();
    let Some(&fragment) = record.lineage().as_single() else {
        return Err(PackError::NotOneFragment { lineage: record_name(&record) });
    };
    let dataset = fragment.sample.dataset;
    if config.source_ids && dataset >= u32::from(u16::MAX) {
        return Err(PackError::TooManySources(dataset));
    }
    let weight = match &config.loss_weights {
        None => 1.0,
        Some(weights) => {
            let (dataset_weight, field) = weights.of(dataset);
            let record_weight = match field {
                None => LossWeight::ONE,
                Some(f) => {
                    let w = match record.get(f) {
                        Some(Value::Float(x)) => LossWeight::new(*x as f32),
                        Some(Value::Int(x)) => LossWeight::new(*x as f32),
                        _ => None,
                    };
                    w.ok_or_else(|| PackError::LossWeight {
                        lineage: record_name(&record),
                        field: f.to_string(),
                        found: record.get(f).map_or_else(|| "nothing".into(), Value::describe),
                    })?
                }
            };
            dataset_weight * record_weight.get()
        }
    };
    let tokens = match record.take(field) {
        Some(Value::Seq(a)) if a.shape().ndim() == 1 && a.buffer::<u32>().is_some() => {
            a.buffer::<u32>().cloned().unwrap_or_default()
        }
        Some(other) => {
            return Err(PackError::WrongType {
                lineage: record_name(&record),
                field: field.into(),
                found: other.describe(),
            });
        }
        None => return Err(PackError::MissingField { lineage: record_name(&record), field: field.into() }),
    };
    let span = fragment.positions().map_or(-1, |p| i64::from(p.len()));
    if span != tokens.len() as i64 {
        return Err(PackError::LengthMismatch {
            lineage: record_name(&record),
            field: field.into(),
            span,
            tokens: tokens.len(),
        });
    }
    if let Some(&id) = tokens.iter().find(|&&t| t > i32::MAX as u32) {
        return Err(PackError::TokenTooLarge { lineage: record_name(&record), id });
    }
    let mask = match record.take(columns::LOSS_MASK) {
        None => None,
        Some(Value::Seq(a)) if a.shape().ndim() == 1 && a.buffer::<u8>().is_some_and(|m| m.len() == tokens.len()) => {
            a.buffer::<u8>().cloned()
        }
        Some(other) => {
            return Err(PackError::WrongType {
                lineage: record_name(&record),
                field: columns::LOSS_MASK.into(),
                found: format!("{} (a u8 per token is expected)", other.describe()),
            });
        }
    };
    let n = tokens.len() as u32;
    let attachments = record.take_attachments();
    for a in &attachments {
        match a.span() {
            Some(s) if s.end() <= n => {}
            other => {
                return Err(PackError::Attachment {
                    lineage: record_name(&record),
                    message: format!(
                        "{} #{} is at {} but the record has {n} tokens",
                        a.kind(),
                        a.item(),
                        other.map_or("no position".to_string(), |s| s.to_string())
                    ),
                });
            }
        }
    }
    Ok((!tokens.is_empty()).then_some(Piece { fragment, tokens, mask, attachments, weight }))
}

impl Piece {
    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Positions `start..end` of this piece, as a piece: views, no copies (the whole piece is a
    /// clone of reference counts). Fails when the cut would fall inside an atomic attachment.
    pub fn cut(&self, start: usize, end: usize) -> Result<Piece, PackError> {
        if start == 0 && end == self.len() {
            return Ok(self.clone());
        }
        let bad = |m: String| PackError::Attachment { lineage: self.fragment.to_string(), message: m };
        let (s, e) = (start as u32, end as u32);
        let tokens =
            self.tokens.slice(start..end).ok_or_else(|| bad(format!("cut {start}..{end} outside the piece")))?;
        let fragment = self
            .fragment
            .sub(s, e.saturating_sub(s))
            .ok_or_else(|| bad(format!("cut {start}..{end} outside the piece")))?;
        let attachments =
            slice_attachments(&self.attachments, s, e, self.len() as u32).map_err(|e| bad(e.to_string()))?;
        let mask = match &self.mask {
            Some(m) => Some(m.slice(start..end).ok_or_else(|| bad(format!("cut {start}..{end} outside the mask")))?),
            None => None,
        };
        Ok(Piece { fragment, tokens, mask, attachments, weight: self.weight })
    }

    /// The largest position at or before `at` that does not fall inside an atomic attachment.
    pub fn safe_cut(&self, at: usize) -> usize {
        zephon_operator::safe_cut(&self.attachments, at)
    }
}

/// The pieces of `piece` the fit algorithms place: at most T tokens each, per the
/// long-document policy. Split cuts every T tokens, moving a cut back to the start of an atomic
/// attachment it would fall inside; truncate keeps the first piece only. An atomic attachment
/// longer than T is an error: no row can hold it whole.
pub(crate) fn pieces(piece: Piece, seq_len: usize, long: LongerThanRow) -> Result<Vec<Piece>, PackError> {
    let n = piece.len();
    if n <= seq_len {
        return Ok(vec![piece]);
    }
    let mut out = Vec::with_capacity(n.div_ceil(seq_len));
    let mut at = 0;
    while at < n {
        let mut end = (at + seq_len).min(n);
        if end < n {
            end = piece.safe_cut(end);
            if end <= at {
                return Err(too_long(&piece, at, seq_len));
            }
        }
        out.push(piece.cut(at, end)?);
        if long == LongerThanRow::Truncate {
            break;
        }
        at = end;
    }
    Ok(out)
}

/// The error for an atomic attachment starting at `at` that no row of `seq_len` can hold.
pub(crate) fn too_long(piece: &Piece, at: usize, seq_len: usize) -> PackError {
    let what = piece
        .attachments
        .iter()
        .find(|a| a.is_atomic() && a.span().is_some_and(|s| s.start() as usize >= at))
        .map_or("an atomic attachment".to_string(), |a| {
            format!("{} #{} of {} tokens", a.kind(), a.item(), a.span().map_or(0, |s| s.len()))
        });
    PackError::Attachment {
        lineage: piece.fragment.to_string(),
        message: format!("{what} cannot fit a row of {seq_len} tokens (a row never cuts it)"),
    }
}

fn record_name(record: &Record) -> String {
    let s = record.lineage().to_string();
    if s.is_empty() { "(no lineage)".into() } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zephon_operator::{Array, Lineage, SampleId, Span};

    fn frag(start: u32, end: u32) -> Fragment {
        Fragment::range(SampleId::new(0, 0, 3), start, end).unwrap()
    }

    fn rec(f: Fragment, v: Value) -> Record {
        Record::new(Lineage::single(f)).with(&"tokens".into(), v)
    }

    fn opts() -> PackOptions {
        PackOptions::new(crate::Algorithm::Wrap, 16)
    }

    fn piece(f: Fragment, tokens: Vec<u32>) -> Piece {
        Piece { fragment: f, tokens: tokens.into(), mask: None, attachments: Vec::new(), weight: 1.0 }
    }

    #[test]
    fn reads_and_rejects() {
        let ok = rec(frag(4, 7), Value::seq(vec![1u32, 2, 3]));
        assert_eq!(read_piece(ok, &opts()).unwrap(), Some(piece(frag(4, 7), vec![1, 2, 3])));
        let empty = rec(frag(4, 4), Value::seq(Vec::<u32>::new()));
        assert_eq!(read_piece(empty, &opts()).unwrap(), None);
        let err = |r: Record| read_piece(r, &opts()).unwrap_err();
        assert!(matches!(err(Record::new(Lineage::single(frag(0, 1)))), PackError::MissingField { .. }));
        assert!(matches!(err(rec(frag(0, 1), Value::array(vec![1u32]))), PackError::WrongType { .. }));
        assert!(matches!(err(rec(frag(0, 1), Value::seq(vec![1i32]))), PackError::WrongType { .. }));
        let two_d = Value::Seq(Array::with_shape(vec![1u32, 2], [1, 2]).unwrap());
        assert!(matches!(err(rec(frag(0, 1), two_d)), PackError::WrongType { .. }));
        assert!(matches!(err(rec(frag(0, 2), Value::seq(vec![1u32]))), PackError::LengthMismatch { .. }));
        assert!(matches!(err(rec(frag(0, 1), Value::seq(vec![u32::MAX]))), PackError::TokenTooLarge { .. }));
        let two = Record::new(Lineage::from_fragments(vec![frag(0, 1), frag(5, 6)]))
            .with(&"tokens".into(), Value::seq(vec![1u32, 2]));
        assert!(matches!(err(two), PackError::NotOneFragment { .. }));
        let whole = rec(Fragment::whole(SampleId::new(0, 0, 3)), Value::seq(vec![1u32]));
        assert!(err(whole).to_string().contains("spans -1 positions"));
        let none = Record::new(Lineage::default()).with(&"tokens".into(), Value::seq(Vec::<u32>::new()));
        assert!(err(none).to_string().contains("(no lineage)"));
        let mut outside = rec(frag(0, 2), Value::seq(vec![1u32, 2]));
        outside.attach(Attachment::new(&"image".into(), 0).placed(Span::at(1, 2).unwrap(), true));
        assert!(err(outside).to_string().contains("image #0 is at [1..3) but the record has 2 tokens"));
    }

    #[test]
    fn pieces_split_and_truncate_without_copying() {
        let doc = piece(frag(10, 17), (0..7).collect());
        let got: Vec<_> = pieces(doc.clone(), 3, LongerThanRow::Split)
            .unwrap()
            .into_iter()
            .map(|p| {
                assert!(p.tokens.shares_memory_with(&doc.tokens));
                (p.fragment, p.tokens.to_vec())
            })
            .collect();
        assert_eq!(got, vec![(frag(10, 13), vec![0, 1, 2]), (frag(13, 16), vec![3, 4, 5]), (frag(16, 17), vec![6])]);
        let got = pieces(doc, 3, LongerThanRow::Truncate).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].fragment, got[0].tokens.to_vec()), (frag(10, 13), vec![0, 1, 2]));
    }

    #[test]
    fn pieces_never_cut_atomic_attachments() {
        let mut doc = piece(frag(0, 10), (0..10).collect());
        doc.attachments.push(Attachment::new(&"image".into(), 0).placed(Span::at(2, 3).unwrap(), true));
        doc.attachments.push(Attachment::new(&"image".into(), 1).placed(Span::at(7, 2).unwrap(), true));
        let got = pieces(doc.clone(), 4, LongerThanRow::Split).unwrap();
        let ends: Vec<_> = got.iter().map(|p| p.fragment.positions().unwrap().end()).collect();
        assert_eq!(ends, vec![2, 6, 10], "cuts at 4 and 8 fall inside images, so they move back");
        assert_eq!(got[1].attachments[0].span(), Span::at(0, 3));
        assert_eq!(got[2].attachments[0].span(), Span::at(1, 2));
        let e = pieces(doc, 2, LongerThanRow::Split).unwrap_err().to_string();
        assert!(e.contains("image #0 of 3 tokens cannot fit a row of 2"), "{e}");
    }

    #[test]
    fn a_piece_weighs_its_datasets_weight_times_its_records() {
        use crate::config::LossWeights;
        use zephon_operator::DatasetLossWeight;
        let weights = LossWeights {
            datasets: vec![
                DatasetLossWeight { weight: LossWeight::new(0.5).unwrap(), field: Some("w".into()) },
                DatasetLossWeight { weight: LossWeight::new(2.0).unwrap(), field: None },
            ],
        };
        let config = PackOptions { loss_weights: Some(weights), ..opts() };
        let doc = |dataset: u32, w: Option<Value>| {
            let f = Fragment::range(SampleId::new(dataset, 0, 3), 0, 2).unwrap();
            let r = rec(f, Value::seq(vec![1u32, 2]));
            match w {
                Some(w) => r.with(&"w".into(), w),
                None => r,
            }
        };
        let weight = |r: Record| read_piece(r, &config).map(|p| p.map(|p| p.weight));
        assert_eq!(weight(doc(0, Some(Value::Float(3.0)))), Ok(Some(1.5)));
        assert_eq!(weight(doc(0, Some(Value::Int(0)))), Ok(Some(0.0)));
        assert_eq!(weight(doc(1, None)), Ok(Some(2.0)), "a dataset without a field: its weight alone");
        assert_eq!(weight(doc(7, None)), Ok(Some(1.0)), "a dataset past the list weighs 1");
        for bad in [None, Some(Value::Float(-1.0)), Some(Value::Float(f64::NAN)), Some(Value::text("x"))] {
            let e = weight(doc(0, bad.clone())).unwrap_err();
            assert!(e.is_data() && e.to_string().contains("field `w`"), "{bad:?}: {e}");
        }
        // Without loss weights, every piece weighs 1 and the field is not read.
        assert_eq!(read_piece(doc(0, None), &opts()).map(|p| p.map(|p| p.weight)), Ok(Some(1.0)));
    }
}
