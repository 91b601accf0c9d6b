//! The input side: checking a tokenized record and cutting it into pieces of at most T tokens.

use zephon_core::{Array, Fragment, Record, Value};

use crate::config::LongDocs;
use crate::error::PackError;

/// A tokenized document (or a piece of one): its fragment and exactly its tokens.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Doc {
    pub fragment: Fragment,
    pub tokens: Vec<u32>,
}

/// Takes the token ids out of `record` and checks them against its lineage. Every path that
/// brings tokens into a row (push, import, rebuild) goes through here, so they agree on what a
/// valid record is. `None` for an empty document: it has nothing to pack.
pub(crate) fn read_doc(mut record: Record, field: &str) -> Result<Option<Doc>, PackError> {
    let Some(&fragment) = record.lineage().as_single() else {
        return Err(PackError::NotOneFragment { lineage: record_name(&record) });
    };
    let tokens = match record.take(field) {
        Some(Value::Seq(Array::U32(t))) => t,
        Some(other) => {
            let found = describe(&other);
            return Err(PackError::WrongType { lineage: record_name(&record), field: field.into(), found });
        }
        None => return Err(PackError::MissingField { lineage: record_name(&record), field: field.into() }),
    };
    // A reversed fragment (end < start) is reported, not subtracted into a panic.
    let span = fragment.end.checked_sub(fragment.start);
    if span.map(|s| s as usize) != Some(tokens.len()) {
        return Err(PackError::LengthMismatch {
            lineage: record_name(&record),
            field: field.into(),
            span: i64::from(fragment.end) - i64::from(fragment.start),
            tokens: tokens.len(),
        });
    }
    if let Some(&id) = tokens.iter().find(|&&t| t > i32::MAX as u32) {
        return Err(PackError::TokenTooLarge { lineage: record_name(&record), id });
    }
    Ok((!tokens.is_empty()).then_some(Doc { fragment, tokens }))
}

/// The pieces of `doc` the fit algorithms place: at most T tokens each, per the long-document
/// policy. Split cuts `[0, T)`, `[T, 2T)`, ...; truncate keeps `[0, T)` only.
pub(crate) fn pieces(doc: &Doc, seq_len: usize, long: LongDocs) -> impl Iterator<Item = (Fragment, &[u32])> {
    let t = seq_len;
    let keep = match long {
        LongDocs::Split => doc.tokens.len(),
        LongDocs::Truncate => doc.tokens.len().min(t),
    };
    doc.tokens[..keep].chunks(t).enumerate().map(move |(i, chunk)| (sub(doc.fragment, i * t, chunk.len()), chunk))
}

/// The part of `fragment` that starts `offset` positions in and spans `len` positions. The
/// caller keeps it inside the fragment, so the u32 arithmetic cannot overflow.
pub(crate) fn sub(fragment: Fragment, offset: usize, len: usize) -> Fragment {
    let start = fragment.start + offset as u32;
    Fragment { sample: fragment.sample, start, end: start + len as u32 }
}

fn record_name(record: &Record) -> String {
    let s = record.lineage().to_string();
    if s.is_empty() { "(no lineage)".into() } else { s }
}

fn describe(value: &Value) -> &'static str {
    match value {
        Value::Str(_) => "text",
        Value::Bytes(_) => "bytes",
        Value::Int(_) => "an integer",
        Value::Float(_) => "a float",
        Value::Array(_) => "an Array (token ids must be a Seq, aligned with the lineage)",
        Value::Seq(Array::U8(_)) => "a Seq of u8",
        Value::Seq(Array::I32(_)) => "a Seq of i32",
        Value::Seq(Array::U32(_)) => "a Seq of u32",
        Value::Seq(Array::I64(_)) => "a Seq of i64",
        Value::Seq(Array::F32(_)) => "a Seq of f32",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zephon_core::{Lineage, SampleId};

    fn frag(start: u32, end: u32) -> Fragment {
        Fragment { sample: SampleId::new(0, 0, 3), start, end }
    }

    fn rec(f: Fragment, v: Value) -> Record {
        Record::new(Lineage::single(f)).with(&"tokens".into(), v)
    }

    #[test]
    fn reads_and_rejects() {
        let ok = rec(frag(4, 7), Value::Seq(Array::U32(vec![1, 2, 3])));
        assert_eq!(read_doc(ok, "tokens").unwrap(), Some(Doc { fragment: frag(4, 7), tokens: vec![1, 2, 3] }));
        let empty = rec(frag(4, 4), Value::Seq(Array::U32(vec![])));
        assert_eq!(read_doc(empty, "tokens").unwrap(), None);
        let err = |r: Record| read_doc(r, "tokens").unwrap_err();
        assert!(matches!(err(Record::new(Lineage::single(frag(0, 1)))), PackError::MissingField { .. }));
        assert!(matches!(err(rec(frag(0, 1), Value::Array(Array::U32(vec![1])))), PackError::WrongType { .. }));
        assert!(matches!(err(rec(frag(0, 1), Value::Seq(Array::I32(vec![1])))), PackError::WrongType { .. }));
        assert!(matches!(err(rec(frag(0, 2), Value::Seq(Array::U32(vec![1])))), PackError::LengthMismatch { .. }));
        assert!(matches!(
            err(rec(frag(0, 1), Value::Seq(Array::U32(vec![u32::MAX])))),
            PackError::TokenTooLarge { .. }
        ));
        let two = Record::new(Lineage::from_fragments(vec![frag(0, 1), frag(5, 6)]))
            .with(&"tokens".into(), Value::Seq(Array::U32(vec![1, 2])));
        assert!(matches!(err(two), PackError::NotOneFragment { .. }));
        let reversed = rec(frag(5, 4), Value::Seq(Array::U32(vec![1])));
        assert!(err(reversed).to_string().contains("spans -1 positions"));
        let none = Record::new(Lineage::default()).with(&"tokens".into(), Value::Seq(Array::U32(vec![])));
        assert!(err(none).to_string().contains("(no lineage)"));
    }

    #[test]
    fn pieces_split_and_truncate() {
        use crate::config::{Algorithm, PackConfig};
        let doc = Doc { fragment: frag(10, 17), tokens: (0..7).collect() };
        let split = PackConfig::new(Algorithm::FirstFit { bins: 1 }, 3);
        let got: Vec<_> = pieces(&doc, split.seq_len, split.long).map(|(f, t)| (f, t.to_vec())).collect();
        assert_eq!(got, vec![(frag(10, 13), vec![0, 1, 2]), (frag(13, 16), vec![3, 4, 5]), (frag(16, 17), vec![6])]);
        let trunc = PackConfig { long: LongDocs::Truncate, ..split };
        let got: Vec<_> = pieces(&doc, trunc.seq_len, trunc.long).map(|(f, t)| (f, t.to_vec())).collect();
        assert_eq!(got, vec![(frag(10, 13), vec![0, 1, 2])]);
    }
}
