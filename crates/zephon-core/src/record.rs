//! Records: named fields plus the lineage that says which samples made them.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::id::SampleId;

/// A field name. Cheap to clone: records of one pipeline share their names.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Field(Arc<str>);

impl Field {
    /// A field called `name`.
    pub fn new(name: &str) -> Self {
        Field(Arc::from(name))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for Field {
    fn from(name: &str) -> Self {
        Field::new(name)
    }
}

/// A typed array.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    /// Bytes or pixels.
    U8(Vec<u8>),
    /// Signed 32-bit integers (labels with an ignore index, positions).
    I32(Vec<i32>),
    /// Unsigned 32-bit integers (token ids).
    U32(Vec<u32>),
    /// Signed 64-bit integers.
    I64(Vec<i64>),
    /// 32-bit floats.
    F32(Vec<f32>),
}

impl Array {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F32(v) => v.len(),
        }
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements `start..end` as a new array. The caller checks the bounds.
    fn slice(&self, start: usize, end: usize) -> Array {
        match self {
            Array::U8(v) => Array::U8(v[start..end].to_vec()),
            Array::I32(v) => Array::I32(v[start..end].to_vec()),
            Array::U32(v) => Array::U32(v[start..end].to_vec()),
            Array::I64(v) => Array::I64(v[start..end].to_vec()),
            Array::F32(v) => Array::F32(v[start..end].to_vec()),
        }
    }
}

/// The value of one field.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// UTF-8 text.
    Str(String),
    /// Opaque bytes (an encoded image, a raw payload).
    Bytes(Vec<u8>),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// An array that is not aligned with the record's sequence axis; never sliced.
    Array(Array),
    /// An array with one element per position of the record's sequence axis: sliced when the
    /// record is sliced (token ids, per-token weights).
    Seq(Array),
}

/// A piece of one sample: positions `start..end` of its sequence axis.
///
/// The positions count in whatever unit the stateless operators give the sample's sequence
/// axis (tokens after tokenization). A record read from storage and not yet given an axis
/// has the empty range `0..0`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fragment {
    /// The sample.
    pub sample: SampleId,
    /// First position, inclusive.
    pub start: u32,
    /// Last position, exclusive.
    pub end: u32,
}

impl Fragment {
    /// The whole of `sample` before any operator gave it a sequence axis.
    pub const fn whole(sample: SampleId) -> Self {
        Fragment { sample, start: 0, end: 0 }
    }

    /// Number of positions.
    pub fn len(&self) -> u32 {
        self.end - self.start
    }

    /// Whether the fragment spans no positions.
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    /// Whether `other` lies inside `self` (same sample, contained range).
    pub fn covers(&self, other: &Fragment) -> bool {
        self.sample == other.sample && self.start <= other.start && other.end <= self.end
    }
}

/// Checkpoints hold thousands of fragments: each is written as five numbers,
/// `[dataset, shard, row, start, end]`, not as a keyed object.
impl Serialize for Fragment {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (self.sample.dataset, self.sample.shard, self.sample.row, self.start, self.end).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Fragment {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (dataset, shard, row, start, end) = <(u32, u32, u64, u32, u32)>::deserialize(d)?;
        if start > end {
            return Err(serde::de::Error::custom(format!("fragment range {start}..{end} is reversed")));
        }
        Ok(Fragment { sample: SampleId::new(dataset, shard, row), start, end })
    }
}

impl fmt::Display for Fragment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [{}..{})", self.sample, self.start, self.end)
    }
}

/// Which pieces of which samples made a record, in order.
///
/// Lineage is the record's identity for checkpoints: an accumulator exports the lineage of the
/// records it buffers, and restore rebuilds them from storage. Operators that split one record
/// into several must give the pieces disjoint ranges, so that lineage identifies each.
///
/// Most records come from one sample, so one fragment is stored inline (no allocation);
/// longer lineages are shared, so that exporting a buffer of packed rows at every checkpoint
/// boundary costs a reference count per row, not a copy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Lineage(Repr);

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
enum Repr {
    #[default]
    Empty,
    One(Fragment),
    Many(std::sync::Arc<Vec<Fragment>>),
}

impl Lineage {
    /// A lineage of one fragment.
    pub fn single(fragment: Fragment) -> Self {
        Lineage(Repr::One(fragment))
    }

    /// A lineage from fragments in order.
    pub fn from_fragments(fragments: Vec<Fragment>) -> Self {
        match fragments.as_slice() {
            [] => Lineage(Repr::Empty),
            [f] => Lineage(Repr::One(*f)),
            _ => Lineage(Repr::Many(std::sync::Arc::new(fragments))),
        }
    }

    /// The fragments in order.
    pub fn fragments(&self) -> &[Fragment] {
        match &self.0 {
            Repr::Empty => &[],
            Repr::One(f) => std::slice::from_ref(f),
            Repr::Many(v) => v,
        }
    }

    /// Appends a fragment.
    pub fn push(&mut self, fragment: Fragment) {
        self.0 = match std::mem::take(&mut self.0) {
            Repr::Empty => Repr::One(fragment),
            Repr::One(f) => Repr::Many(std::sync::Arc::new(vec![f, fragment])),
            Repr::Many(mut v) => {
                std::sync::Arc::make_mut(&mut v).push(fragment);
                Repr::Many(v)
            }
        };
    }

    /// The only fragment, if there is exactly one.
    pub fn as_single(&self) -> Option<&Fragment> {
        match &self.0 {
            Repr::One(f) => Some(f),
            _ => None,
        }
    }

    /// The first fragment's sample: the record's origin for error messages.
    pub fn first_sample(&self) -> Option<SampleId> {
        self.fragments().first().map(|f| f.sample)
    }

    /// Whether this lineage identifies a record that contains the record `wanted` identifies:
    /// equal lineages, or single fragments of one sample with a contained range.
    pub fn covers(&self, wanted: &Lineage) -> bool {
        match (self.as_single(), wanted.as_single()) {
            (Some(have), Some(want)) => have.covers(want),
            _ => self == wanted,
        }
    }
}

impl Serialize for Lineage {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.fragments().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Lineage {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<Fragment>::deserialize(d).map(Lineage::from_fragments)
    }
}

impl fmt::Display for Lineage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, frag) in self.fragments().iter().enumerate() {
            if i > 0 {
                f.write_str(" + ")?;
            }
            write!(f, "{frag}")?;
        }
        Ok(())
    }
}

/// One item flowing through a pipeline: named fields plus lineage.
///
/// Field order is insertion order; [`Record::encode_canonical`] sorts by name, so two records
/// with the same fields and values encode the same whatever order operators set them in.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    fields: Vec<(Field, Value)>,
    lineage: Lineage,
}

impl Record {
    /// An empty record made from `lineage`.
    pub fn new(lineage: Lineage) -> Self {
        Record { fields: Vec::new(), lineage }
    }

    /// A record read from storage: the whole of `sample`, no fields yet.
    pub fn from_sample(sample: SampleId) -> Self {
        Record::new(Lineage::single(Fragment::whole(sample)))
    }

    /// The record's lineage.
    pub fn lineage(&self) -> &Lineage {
        &self.lineage
    }

    /// Replaces the lineage (operators that change the sequence axis do this).
    pub fn set_lineage(&mut self, lineage: Lineage) {
        self.lineage = lineage;
    }

    /// Sets a field, replacing a field of the same name.
    pub fn set(&mut self, name: &Field, value: Value) {
        match self.fields.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => *v = value,
            None => self.fields.push((name.clone(), value)),
        }
    }

    /// Builder form of [`Record::set`].
    pub fn with(mut self, name: &Field, value: Value) -> Self {
        self.set(name, value);
        self
    }

    /// The value of field `name`.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.fields.iter().find(|(n, _)| n.as_str() == name).map(|(_, v)| v)
    }

    /// Removes field `name` and returns its value.
    pub fn take(&mut self, name: &str) -> Option<Value> {
        let i = self.fields.iter().position(|(n, _)| n.as_str() == name)?;
        Some(self.fields.remove(i).1)
    }

    /// The fields in insertion order.
    pub fn fields(&self) -> impl Iterator<Item = (&Field, &Value)> {
        self.fields.iter().map(|(n, v)| (n, v))
    }

    /// Text field `name`, if present and text.
    pub fn str(&self, name: &str) -> Option<&str> {
        match self.get(name)? {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Length of the sequence axis: the length of the `Seq` fields, which must agree.
    /// `None` when the record has no `Seq` field.
    pub fn seq_len(&self) -> Option<usize> {
        self.fields.iter().find_map(|(_, v)| match v {
            Value::Seq(a) => Some(a.len()),
            _ => None,
        })
    }

    /// Positions `start..end` of the sequence axis: every `Seq` field is sliced, other fields
    /// are kept, and a single-fragment lineage is narrowed to match.
    ///
    /// Fails when the range is out of bounds, the `Seq` fields disagree in length, or the
    /// lineage has several fragments (a record made of several samples is not sliced).
    pub fn slice(&self, start: usize, end: usize) -> Result<Record, String> {
        let frag = self
            .lineage
            .as_single()
            .ok_or_else(|| format!("cannot slice a record made of several fragments ({})", self.lineage))?;
        if start > end || end > frag.len() as usize {
            return Err(format!("slice {start}..{end} outside {frag}"));
        }
        let mut fields = Vec::with_capacity(self.fields.len());
        for (name, value) in &self.fields {
            let value = match value {
                Value::Seq(a) => {
                    if a.len() != frag.len() as usize {
                        return Err(format!(
                            "field {name} has {} positions but the lineage {frag} has {}",
                            a.len(),
                            frag.len()
                        ));
                    }
                    Value::Seq(a.slice(start, end))
                }
                other => other.clone(),
            };
            fields.push((name.clone(), value));
        }
        // Positions fit in u32 because the fragment's do.
        let narrowed = Fragment { sample: frag.sample, start: frag.start + start as u32, end: frag.start + end as u32 };
        Ok(Record { fields, lineage: Lineage::single(narrowed) })
    }

    /// Narrows this record to exactly `lineage`: unchanged when the lineages are equal, sliced
    /// when both are single fragments of one sample and `lineage` lies inside.
    pub fn narrow_to(self, lineage: &Lineage) -> Result<Record, String> {
        if &self.lineage == lineage {
            return Ok(self);
        }
        match (self.lineage.as_single(), lineage.as_single()) {
            (Some(have), Some(want)) if have.covers(want) => {
                self.slice((want.start - have.start) as usize, (want.end - have.start) as usize)
            }
            _ => Err(format!("record {} does not cover {lineage}", self.lineage)),
        }
    }

    /// Feeds the canonical encoding of the record's fields to `sink`.
    ///
    /// The number of fields (u32 LE), then the fields in name order; each as: name length (u32 LE), name bytes, a type tag (u8), an
    /// element count (u64 LE), then the elements little-endian (floats as IEEE bits). Lineage
    /// is not part of the encoding: the bytes of a row are what the model trains on.
    pub fn encode_canonical(&self, sink: &mut dyn FnMut(&[u8])) {
        sink(&(self.fields.len() as u32).to_le_bytes());
        let field = |(name, value): &(Field, Value)| {
            sink(&(name.as_str().len() as u32).to_le_bytes());
            sink(name.as_str().as_bytes());
            encode_value(value, sink);
        };
        // Digests run once per row: skip the sort (and its allocation) when the fields were
        // set in name order already.
        if self.fields.is_sorted_by(|a, b| a.0 <= b.0) {
            self.fields.iter().for_each(field);
        } else {
            let mut order: Vec<&(Field, Value)> = self.fields.iter().collect();
            order.sort_by(|a, b| a.0.cmp(&b.0));
            order.into_iter().for_each(field);
        }
    }
}

fn encode_value(value: &Value, sink: &mut dyn FnMut(&[u8])) {
    let header = |sink: &mut dyn FnMut(&[u8]), tag: u8, n: usize| {
        sink(&[tag]);
        sink(&(n as u64).to_le_bytes());
    };
    match value {
        Value::Str(s) => {
            header(sink, 1, s.len());
            sink(s.as_bytes());
        }
        Value::Bytes(b) => {
            header(sink, 2, b.len());
            sink(b);
        }
        Value::Int(i) => {
            header(sink, 3, 1);
            sink(&i.to_le_bytes());
        }
        Value::Float(x) => {
            header(sink, 4, 1);
            sink(&x.to_bits().to_le_bytes());
        }
        Value::Array(a) => encode_array(a, 0x10, sink),
        Value::Seq(a) => encode_array(a, 0x20, sink),
    }
}

fn encode_array(a: &Array, base: u8, sink: &mut dyn FnMut(&[u8])) {
    let (tag, n) = match a {
        Array::U8(v) => (0, v.len()),
        Array::I32(v) => (1, v.len()),
        Array::U32(v) => (2, v.len()),
        Array::I64(v) => (3, v.len()),
        Array::F32(v) => (4, v.len()),
    };
    sink(&[base | tag]);
    sink(&(n as u64).to_le_bytes());
    match a {
        Array::U8(v) => sink(v),
        Array::I32(v) => feed_le(v, |x| x.to_le_bytes(), sink),
        Array::U32(v) => feed_le(v, |x| x.to_le_bytes(), sink),
        Array::I64(v) => feed_le(v, |x| x.to_le_bytes(), sink),
        Array::F32(v) => feed_le(v, |x| x.to_bits().to_le_bytes(), sink),
    }
}

/// Converts elements to little-endian bytes through a stack buffer: no allocation, no unsafe.
fn feed_le<T: Copy, const N: usize>(v: &[T], to_bytes: impl Fn(T) -> [u8; N], sink: &mut dyn FnMut(&[u8])) {
    let mut buf = [0u8; 4096];
    let per = buf.len() / N;
    for chunk in v.chunks(per) {
        for (i, &x) in chunk.iter().enumerate() {
            buf[i * N..(i + 1) * N].copy_from_slice(&to_bytes(x));
        }
        sink(&buf[..chunk.len() * N]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(tokens: Vec<u32>) -> Record {
        let sample = SampleId::new(0, 1, 2);
        Record::new(Lineage::single(Fragment { sample, start: 10, end: 10 + tokens.len() as u32 }))
            .with(&Field::new("ids"), Value::Seq(Array::U32(tokens)))
            .with(&Field::new("src"), Value::Int(7))
    }

    #[test]
    fn slice_narrows_lineage_and_seq_fields() {
        let r = rec(vec![1, 2, 3, 4, 5]).slice(1, 3).unwrap();
        assert_eq!(r.get("ids"), Some(&Value::Seq(Array::U32(vec![2, 3]))));
        assert_eq!(r.get("src"), Some(&Value::Int(7)));
        let f = r.lineage().as_single().unwrap();
        assert_eq!((f.start, f.end), (11, 13));
        assert!(rec(vec![1, 2]).slice(1, 3).is_err());
    }

    #[test]
    fn canonical_encoding_ignores_field_order_not_values() {
        let a = Record::from_sample(SampleId::new(0, 0, 0))
            .with(&"x".into(), Value::Int(1))
            .with(&"y".into(), Value::Str("a".into()));
        let b = Record::from_sample(SampleId::new(9, 9, 9))
            .with(&"y".into(), Value::Str("a".into()))
            .with(&"x".into(), Value::Int(1));
        let enc = |r: &Record| {
            let mut v = Vec::new();
            r.encode_canonical(&mut |b| v.extend_from_slice(b));
            v
        };
        assert_eq!(enc(&a), enc(&b));
        let c = a.clone().with(&"x".into(), Value::Int(2));
        assert_ne!(enc(&a), enc(&c));
    }

    #[test]
    fn feed_le_matches_per_element_encoding() {
        let v: Vec<u32> = (0..3000).map(|i| i * 7919).collect();
        let mut got = Vec::new();
        feed_le(&v, |x: u32| x.to_le_bytes(), &mut |b| got.extend_from_slice(b));
        let want: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(got, want);
    }
}
