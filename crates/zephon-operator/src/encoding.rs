//! The canonical encoding of a record: the bytes that lane digests and step fingerprints hash.
//!
//! It covers everything a model trains on (every field's name, type, dtype, shape and
//! elements; every attachment) and nothing else (no lineage). Integers are little-endian;
//! floats are their IEEE bits, little-endian. The README describes it byte for byte.
//!
//! ```text
//! record      = fields attachments
//! fields      = u32 count, field × count        (fields sorted by name, bytewise)
//! field       = u32 name length, name (UTF-8), value
//! value       = u8 tag, then by tag:
//!               0x01 text:   u64 byte length, UTF-8 bytes
//!               0x02 bytes:  u64 length, bytes
//!               0x03 int:    i64
//!               0x04 float:  f64 bits as u64
//!               0x05 Array:  array
//!               0x06 Seq:    array
//! array       = u8 dtype, u32 ndim, u64 × ndim dims (outermost first), elements
//!               dtype: 1 u8, 2 i32, 3 u32, 4 i64, 5 f32, 6 f64, 7 bf16, 8 f16
//! attachments = u32 count, attachment × count   (in the record's order)
//! attachment  = u32 kind length, kind (UTF-8), u32 item,
//!               u8 placed (0 or 1), [u32 span start, u32 span end  if placed],
//!               u8 atomic (0 or 1), fields
//! ```

use crate::array::Array;
use crate::record::{Field, Record, Value};

/// The version of the encoding below; part of every checkpoint fingerprint, so digests made
/// under another encoding are never compared with these.
pub const ENCODING_VERSION: u32 = 2;

const TAG_TEXT: u8 = 0x01;
const TAG_BYTES: u8 = 0x02;
const TAG_INT: u8 = 0x03;
const TAG_FLOAT: u8 = 0x04;
const TAG_ARRAY: u8 = 0x05;
const TAG_SEQ: u8 = 0x06;

/// Feeds the canonical encoding of `record` to `sink`.
pub fn encode_record(record: &Record, sink: &mut dyn FnMut(&[u8])) {
    encode_fields(record.fields_slice(), sink);
    let attachments = record.attachments();
    sink(&(attachments.len() as u32).to_le_bytes());
    for a in attachments {
        encode_name(a.kind(), sink);
        sink(&a.item().to_le_bytes());
        match a.span() {
            Some(s) => {
                sink(&[1]);
                sink(&s.start().to_le_bytes());
                sink(&s.end().to_le_bytes());
            }
            None => sink(&[0]),
        }
        sink(&[a.is_atomic() as u8]);
        encode_fields(a.values_slice(), sink);
    }
}

fn encode_fields(fields: &[(Field, Value)], sink: &mut dyn FnMut(&[u8])) {
    sink(&(fields.len() as u32).to_le_bytes());
    let field = |(name, value): &(Field, Value)| {
        encode_name(name, sink);
        encode_value(value, sink);
    };
    // Digests run once per row: skip the sort (and its allocation) when the fields were set in
    // name order already.
    if fields.is_sorted_by(|a, b| a.0 <= b.0) {
        fields.iter().for_each(field);
    } else {
        let mut order: Vec<&(Field, Value)> = fields.iter().collect();
        order.sort_by(|a, b| a.0.cmp(&b.0));
        order.into_iter().for_each(field);
    }
}

fn encode_name(name: &Field, sink: &mut dyn FnMut(&[u8])) {
    sink(&(name.as_str().len() as u32).to_le_bytes());
    sink(name.as_str().as_bytes());
}

fn encode_value(value: &Value, sink: &mut dyn FnMut(&[u8])) {
    match value {
        Value::Str(s) => {
            sink(&[TAG_TEXT]);
            sink(&(s.len() as u64).to_le_bytes());
            sink(s.as_bytes());
        }
        Value::Bytes(b) => {
            sink(&[TAG_BYTES]);
            sink(&(b.len() as u64).to_le_bytes());
            sink(b);
        }
        Value::Int(i) => {
            sink(&[TAG_INT]);
            sink(&i.to_le_bytes());
        }
        Value::Float(x) => {
            sink(&[TAG_FLOAT]);
            sink(&x.to_bits().to_le_bytes());
        }
        Value::Array(a) => encode_array(TAG_ARRAY, a, sink),
        Value::Seq(a) => encode_array(TAG_SEQ, a, sink),
    }
}

fn encode_array(tag: u8, a: &Array, sink: &mut dyn FnMut(&[u8])) {
    let dims = a.shape().dims();
    // One small write for the header: tag, dtype, ndim and up to four dims.
    let mut head = [0u8; 2 + 4 + 8 * 4];
    head[0] = tag;
    head[1] = a.dtype().tag();
    head[2..6].copy_from_slice(&(dims.len() as u32).to_le_bytes());
    if dims.len() <= 4 {
        for (i, d) in dims.iter().enumerate() {
            head[6 + 8 * i..14 + 8 * i].copy_from_slice(&(*d as u64).to_le_bytes());
        }
        sink(&head[..6 + 8 * dims.len()]);
    } else {
        sink(&head[..6]);
        for d in dims {
            sink(&(*d as u64).to_le_bytes());
        }
    }
    a.data().feed_le(sink);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::array::Array;
    use crate::id::SampleId;
    use crate::lineage::Span;
    use crate::record::Attachment;

    fn enc(r: &Record) -> Vec<u8> {
        let mut v = Vec::new();
        encode_record(r, &mut |b| v.extend_from_slice(b));
        v
    }

    #[test]
    fn ignores_field_order_and_lineage_not_values() {
        let a = Record::from_sample(SampleId::new(0, 0, 0))
            .with(&"x".into(), Value::Int(1))
            .with(&"y".into(), Value::text("a"));
        let b = Record::from_sample(SampleId::new(9, 9, 9))
            .with(&"y".into(), Value::text("a"))
            .with(&"x".into(), Value::Int(1));
        assert_eq!(enc(&a), enc(&b));
        let c = a.clone().with(&"x".into(), Value::Int(2));
        assert_ne!(enc(&a), enc(&c));
    }

    #[test]
    fn shape_and_dtype_are_part_of_the_bytes() {
        let r = |v: Value| Record::from_sample(SampleId::new(0, 0, 0)).with(&"a".into(), v);
        let flat = r(Value::Array(Array::from_vec(vec![1u8, 2, 3, 4, 5, 6])));
        let square = r(Value::Array(Array::with_shape(vec![1u8, 2, 3, 4, 5, 6], [2, 3]).unwrap()));
        let tall = r(Value::Array(Array::with_shape(vec![1u8, 2, 3, 4, 5, 6], [3, 2]).unwrap()));
        let seq = r(Value::Seq(Array::with_shape(vec![1u8, 2, 3, 4, 5, 6], [3, 2]).unwrap()));
        let wide = r(Value::Array(Array::with_shape(vec![1i32, 2, 3, 4, 5, 6], [3, 2]).unwrap()));
        let all = [enc(&flat), enc(&square), enc(&tall), enc(&seq), enc(&wide)];
        for i in 0..all.len() {
            for j in i + 1..all.len() {
                assert_ne!(all[i], all[j], "{i} and {j} encode the same");
            }
        }
        // The documented layout, byte for byte.
        let mut want = vec![1, 0, 0, 0, 1, 0, 0, 0, b'a', 0x05, 1, 2, 0, 0, 0];
        want.extend_from_slice(&2u64.to_le_bytes());
        want.extend_from_slice(&3u64.to_le_bytes());
        want.extend_from_slice(&[1, 2, 3, 4, 5, 6]);
        want.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(enc(&square), want);
    }

    #[test]
    fn attachments_are_encoded() {
        let base = Record::from_sample(SampleId::new(0, 0, 0)).with(&"t".into(), Value::Int(0));
        let img = |px: u8| {
            Attachment::new(&"image".into(), 0)
                .placed(Span::at(3, 2).unwrap(), true)
                .with(&"pixels".into(), Value::array(vec![px; 3]))
        };
        let mut one = base.clone();
        one.attach(img(1));
        let mut other = base.clone();
        other.attach(img(2));
        assert_ne!(enc(&base), enc(&one));
        assert_ne!(enc(&one), enc(&other));
        let mut moved = base.clone();
        moved.attach(
            Attachment::new(&"image".into(), 0)
                .placed(Span::at(4, 2).unwrap(), true)
                .with(&"pixels".into(), Value::array(vec![1u8; 3])),
        );
        assert_ne!(enc(&one), enc(&moved), "the position is part of the bytes");
    }
}
