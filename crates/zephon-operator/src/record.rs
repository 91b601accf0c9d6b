//! Records: named values, attachments anchored on the sequence axis, and the lineage that
//! says which samples made them.

use std::fmt;
use std::sync::Arc;

use crate::array::Array;
use crate::buffer::Buffer;
use crate::error::OpError;
use crate::id::SampleId;
use crate::lineage::{Fragment, Lineage, Span};

/// A field name. Names are interned: each distinct name is stored once for the life of the
/// process, so a clone copies a pointer and two fields are equal exactly when they point at
/// the same name.
///
/// Why not a shared reference count: every record a worker sets a field on would clone the
/// name, and every record dropped would release it, so with two workers the count's cache line
/// would move between cores on every record (and the name's bytes, beside it, with it). The
/// cost of interning is that a name, once made, is never freed: names come from configuration
/// and operators, a handful per pipeline, not from data.
#[derive(Clone, Eq, PartialOrd, Ord)]
pub struct Field(&'static str);

impl PartialEq for Field {
    fn eq(&self, other: &Field) -> bool {
        // Interned: the same name is the same pointer.
        std::ptr::eq(self.0, other.0)
    }
}

impl std::hash::Hash for Field {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // By the name, as equality is: the same name is the same pointer.
        self.0.hash(state);
    }
}

impl Field {
    /// The field called `name` (interned on first use; later calls find it).
    ///
    /// Each thread keeps the names it has used, so a call for a known name (an operator that
    /// makes its fields per record) takes no lock.
    pub fn new(name: &str) -> Self {
        thread_local! {
            static SEEN: std::cell::RefCell<std::collections::HashSet<&'static str>> = Default::default();
        }
        let known = |seen: &std::cell::RefCell<std::collections::HashSet<&'static str>>| {
            let mut seen = seen.borrow_mut();
            if let Some(&known) = seen.get(name) {
                return known;
            }
            let interned = intern(name);
            seen.insert(interned);
            interned
        };
        // A thread being torn down has no cache any more; it still gets the name.
        Field(SEEN.try_with(known).unwrap_or_else(|_| intern(name)))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        self.0
    }
}

/// The one copy of `name` for the process, made on first use.
fn intern(name: &str) -> &'static str {
    static NAMES: std::sync::Mutex<std::collections::BTreeSet<&'static str>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    // A poisoned set is still a valid set: an insertion cannot half-happen.
    let mut names = NAMES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&known) = names.get(name) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.into());
    names.insert(leaked);
    leaked
}

impl fmt::Debug for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.0, f)
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl From<&str> for Field {
    fn from(name: &str) -> Self {
        Field::new(name)
    }
}

/// The value of one field. Payloads are shared: cloning a value never copies its bytes.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// UTF-8 text.
    Str(Arc<str>),
    /// Opaque bytes (an encoded image, a raw payload).
    Bytes(Buffer<u8>),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// An array that is not aligned with the record's sequence axis; never sliced.
    Array(Array),
    /// An array whose outermost dimension is the record's sequence axis (token ids, per-token
    /// weights): sliced along it when the record is sliced.
    Seq(Array),
}

impl Value {
    /// Text.
    pub fn text(s: impl Into<Arc<str>>) -> Value {
        Value::Str(s.into())
    }

    /// A one-dimensional [`Value::Seq`] over `elements` (no copy).
    pub fn seq<T: crate::Element>(elements: Vec<T>) -> Value {
        Value::Seq(Array::from_vec(elements))
    }

    /// A one-dimensional [`Value::Array`] over `elements` (no copy).
    pub fn array<T: crate::Element>(elements: Vec<T>) -> Value {
        Value::Array(Array::from_vec(elements))
    }

    /// The array of an `Array` or `Seq` value.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) | Value::Seq(a) => Some(a),
            _ => None,
        }
    }

    /// What kind of value this is, for messages ("text", "a u32 array of shape \[3\]", ...).
    pub fn describe(&self) -> String {
        match self {
            Value::Str(_) => "text".into(),
            Value::Bytes(_) => "bytes".into(),
            Value::Int(_) => "an integer".into(),
            Value::Float(_) => "a float".into(),
            Value::Array(a) => format!("a {} Array of shape {}", a.dtype(), a.shape()),
            Value::Seq(a) => format!("a {} Seq of shape {}", a.dtype(), a.shape()),
        }
    }
}

/// An item carried by a record beside its fields (an image, later audio), placed at a span of
/// the record's sequence axis: the placeholder tokens that stand for it.
///
/// Spans are relative to the record's own axis (position 0 is the record's first token), so
/// slicing a record moves them, and a packed row holds its attachments at their positions in
/// the row. An attachment is identified by its sample and `(kind, item)`; `item` numbers the
/// sample's attachments of one kind from 0.
///
/// Slicing keeps exactly the attachments whose anchor (span start) falls in the slice, so a
/// split never duplicates or loses one. An **atomic** attachment's span must never be cut:
/// a slice boundary inside it is an error, and packers place the span whole.
#[derive(Clone, Debug, PartialEq)]
pub struct Attachment {
    kind: Field,
    item: u32,
    span: Option<Span>,
    atomic: bool,
    values: Vec<(Field, Value)>,
}

impl Attachment {
    /// Item `item` of kind `kind`, not yet placed on the sequence axis.
    pub fn new(kind: &Field, item: u32) -> Self {
        Attachment { kind: kind.clone(), item, span: None, atomic: false, values: Vec::new() }
    }

    /// Its kind (`image`).
    pub fn kind(&self) -> &Field {
        &self.kind
    }

    /// Its number among the sample's attachments of this kind.
    pub fn item(&self) -> u32 {
        self.item
    }

    /// Where it sits on the record's axis, once placed.
    pub fn span(&self) -> Option<Span> {
        self.span
    }

    /// Whether its span must never be cut.
    pub fn is_atomic(&self) -> bool {
        self.atomic
    }

    /// Places it at `span` of the record's axis; `atomic` forbids cutting the span.
    #[must_use]
    pub fn placed(mut self, span: Span, atomic: bool) -> Self {
        self.span = Some(span);
        self.atomic = atomic;
        self
    }

    /// Sets a value, replacing one of the same name.
    pub fn set(&mut self, name: &Field, value: Value) {
        set_in(&mut self.values, name, value);
    }

    /// Builder form of [`Attachment::set`].
    #[must_use]
    pub fn with(mut self, name: &Field, value: Value) -> Self {
        self.set(name, value);
        self
    }

    /// The value called `name`.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.values.iter().find(|(n, _)| n.as_str() == name).map(|(_, v)| v)
    }

    /// Removes value `name` and returns it.
    pub fn take(&mut self, name: &str) -> Option<Value> {
        let i = self.values.iter().position(|(n, _)| n.as_str() == name)?;
        Some(self.values.remove(i).1)
    }

    /// The values in insertion order.
    pub fn values(&self) -> impl ExactSizeIterator<Item = (&Field, &Value)> {
        self.values.iter().map(|(n, v)| (n, v))
    }

    pub(crate) fn values_slice(&self) -> &[(Field, Value)] {
        &self.values
    }

    /// Whether a boundary at `p` would cut this attachment's span.
    fn cut_by(&self, p: u32) -> bool {
        self.atomic && self.span.is_some_and(|s| s.start() < p && p < s.end())
    }
}

/// The attachments that positions `start..end` of an axis of `len` positions keep, moved to
/// the slice's positions: those anchored (span start) inside, and one anchored exactly at the
/// end of the whole axis goes with the slice that ends it. Fails when an attachment has no
/// place yet, or a boundary would cut an atomic one. [`Record::slice`] uses it; so do
/// operators that cut their own views of a record.
pub fn slice_attachments(
    attachments: &[Attachment],
    start: u32,
    end: u32,
    len: u32,
) -> Result<Vec<Attachment>, OpError> {
    let mut kept = Vec::new();
    for a in attachments {
        let span = a.span.ok_or_else(|| {
            OpError::Data(format!(
                "attachment {} #{} has no place on the sequence axis, so the record cannot be sliced",
                a.kind, a.item
            ))
        })?;
        if a.cut_by(start) || a.cut_by(end) {
            return Err(OpError::Data(format!(
                "slice [{start}..{end}) would cut atomic attachment {} #{} at {span}",
                a.kind, a.item
            )));
        }
        let anchor = span.start();
        let inside = (start <= anchor && anchor < end) || (anchor == end && end == len && start < end);
        if inside {
            let mut moved = a.clone();
            moved.span = span.shifted(-i64::from(start));
            kept.push(moved);
        }
    }
    Ok(kept)
}

/// The largest position at or before `at` that no atomic attachment among `attachments`
/// contains strictly inside: where a cut near `at` may fall. A span's start is a safe cut.
pub fn safe_cut(attachments: &[Attachment], at: usize) -> usize {
    let mut at = at;
    // Spans may overlap: moving before one span can land inside another.
    while let Some(s) = attachments.iter().filter(|a| a.cut_by(at as u32)).find_map(|a| a.span) {
        at = s.start() as usize;
    }
    at
}

fn set_in(fields: &mut Vec<(Field, Value)>, name: &Field, value: Value) {
    match fields.iter_mut().find(|(n, _)| n == name) {
        Some((_, v)) => *v = value,
        None => fields.push((name.clone(), value)),
    }
}

/// One item flowing through a pipeline: named fields, attachments, and lineage.
///
/// Field order is insertion order; the canonical encoding ([`crate::encode_record`]) sorts by
/// name, so two records with the same fields and values encode the same whatever order
/// operators set them in.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    fields: Vec<(Field, Value)>,
    attachments: Vec<Attachment>,
    lineage: Lineage,
}

impl Record {
    /// An empty record made from `lineage`.
    pub fn new(lineage: Lineage) -> Self {
        Record { fields: Vec::new(), attachments: Vec::new(), lineage }
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
        set_in(&mut self.fields, name, value);
    }

    /// Builder form of [`Record::set`].
    #[must_use]
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
    pub fn fields(&self) -> impl ExactSizeIterator<Item = (&Field, &Value)> {
        self.fields.iter().map(|(n, v)| (n, v))
    }

    pub(crate) fn fields_slice(&self) -> &[(Field, Value)] {
        &self.fields
    }

    /// Text field `name`, if present and text.
    pub fn str(&self, name: &str) -> Option<&str> {
        match self.get(name)? {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The attachments, in the order they were added (packers keep them in axis order).
    pub fn attachments(&self) -> &[Attachment] {
        &self.attachments
    }

    /// The attachments, to change their values in place (a decoder replacing encoded bytes
    /// with pixels). Their spans are fixed by [`Record::slice`] and the packers.
    pub fn attachments_mut(&mut self) -> impl Iterator<Item = &mut Attachment> {
        self.attachments.iter_mut()
    }

    /// Adds an attachment.
    pub fn attach(&mut self, attachment: Attachment) {
        self.attachments.push(attachment);
    }

    /// Removes and returns every attachment.
    pub fn take_attachments(&mut self) -> Vec<Attachment> {
        std::mem::take(&mut self.attachments)
    }

    /// Length of the sequence axis: the outermost dimension of the `Seq` fields, which must
    /// agree. `None` when the record has no `Seq` field.
    pub fn seq_len(&self) -> Option<usize> {
        self.fields.iter().find_map(|(_, v)| match v {
            Value::Seq(a) => Some(a.shape().outer()),
            _ => None,
        })
    }

    /// Positions `start..end` of the sequence axis (relative to this record): every `Seq`
    /// field is sliced along its outermost dimension without copying, other fields are kept,
    /// attachments anchored in the range are kept (moved to the slice's positions), and the
    /// single-fragment lineage is narrowed to match.
    ///
    /// Fails when the range is out of bounds, a `Seq` field does not span the lineage, the
    /// record is made of several fragments or has no sequence axis yet, an attachment has not
    /// been placed, or a boundary would cut an atomic attachment.
    pub fn slice(&self, start: usize, end: usize) -> Result<Record, OpError> {
        let frag = self.lineage.as_single().ok_or_else(|| {
            OpError::Data(format!("cannot slice a record made of several fragments ({})", self.lineage))
        })?;
        let whole = frag
            .positions()
            .ok_or_else(|| OpError::Data(format!("cannot slice {frag}: it has no sequence axis yet")))?;
        let n = whole.len() as usize;
        if start > end || end > n {
            return Err(OpError::Data(format!("slice {start}..{end} outside {frag}")));
        }
        // Positions fit in u32 because the fragment's do.
        let (s32, e32) = (start as u32, end as u32);
        let mut fields = Vec::with_capacity(self.fields.len());
        for (name, value) in &self.fields {
            let value = match value {
                Value::Seq(a) => {
                    if a.shape().outer() != n {
                        return Err(OpError::Data(format!(
                            "field {name} has {} positions but the lineage {frag} has {n}",
                            a.shape().outer()
                        )));
                    }
                    Value::Seq(
                        a.slice_outer(start, end)
                            .ok_or_else(|| OpError::Data(format!("field {name} cannot be sliced")))?,
                    )
                }
                other => other.clone(),
            };
            fields.push((name.clone(), value));
        }
        let attachments = self.attachments_in(s32, e32, n as u32)?;
        let narrowed =
            whole.sub(s32, e32 - s32).ok_or_else(|| OpError::Data(format!("slice {start}..{end} outside {frag}")))?;
        Ok(Record { fields, attachments, lineage: Lineage::single(Fragment::span(frag.sample, narrowed)) })
    }

    /// The attachments a slice `start..end` of an axis of `len` positions keeps.
    fn attachments_in(&self, start: u32, end: u32, len: u32) -> Result<Vec<Attachment>, OpError> {
        slice_attachments(&self.attachments, start, end, len)
    }

    /// The largest position at or before `at` that no atomic attachment's span contains
    /// strictly inside: where a cut near `at` may fall. A span's start is a safe cut.
    pub fn safe_cut(&self, at: usize) -> usize {
        safe_cut(&self.attachments, at)
    }

    /// The ends of the pieces that cut this record's axis into pieces of at most `max`
    /// positions, each cut moved back to the start of any atomic attachment it would fall
    /// inside. Fails when an atomic attachment is longer than `max` (no cut can keep it whole).
    pub fn piece_ends(&self, max: usize) -> Result<Vec<usize>, OpError> {
        let len = self.seq_len().unwrap_or(0);
        let mut ends = Vec::with_capacity(len / max.max(1) + 1);
        let mut at = 0;
        while at < len {
            let mut end = (at + max.max(1)).min(len);
            if end < len {
                let cut = self.safe_cut(end);
                if cut <= at {
                    let a = self.attachments.iter().find(|a| a.cut_by(end as u32));
                    let what = a.map_or("an atomic attachment".to_string(), |a| {
                        format!("{} #{} ({} positions)", a.kind, a.item, a.span.map_or(0, |s| s.len()))
                    });
                    return Err(OpError::Data(format!("{what} is longer than the {max} positions a piece may have")));
                }
                end = cut;
            }
            ends.push(end);
            at = end;
        }
        Ok(ends)
    }

    /// Narrows this record to exactly `lineage`: unchanged when the lineages are equal, sliced
    /// when both are single fragments of one sample and `lineage` lies inside.
    pub fn narrow_to(self, lineage: &Lineage) -> Result<Record, OpError> {
        if &self.lineage == lineage {
            return Ok(self);
        }
        match (self.lineage.as_single(), lineage.as_single()) {
            (Some(have), Some(want)) if have.covers(want) => match (have.positions(), want.positions()) {
                (Some(h), Some(w)) => self.slice((w.start() - h.start()) as usize, (w.end() - h.start()) as usize),
                _ => Err(OpError::Data(format!("record {} has no sequence axis to narrow to {lineage}", self.lineage))),
            },
            _ => Err(OpError::Data(format!("record {} does not cover {lineage}", self.lineage))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_of_one_name_are_one_field_whoever_made_them() {
        let here = Field::new("tokens");
        let (there, other) = std::thread::spawn(|| (Field::new(&String::from("tokens")), Field::new("token")))
            .join()
            .expect("the thread makes two fields");
        assert_eq!(here, there);
        assert_eq!(here.as_str(), "tokens");
        assert_ne!(here, other, "a prefix is another name");
        assert!(Field::new("a") < Field::new("b"), "fields order by name, as the canonical encoding sorts them");
        let mut r = Record::new(Lineage::default()).with(&here, Value::Int(1));
        r.set(&there, Value::Int(2));
        assert_eq!(r.fields().len(), 1, "setting the same name twice replaces the value");
        assert_eq!(r.get("tokens"), Some(&Value::Int(2)));
    }

    fn rec(tokens: Vec<u32>) -> Record {
        let sample = SampleId::new(0, 1, 2);
        let n = tokens.len() as u32;
        Record::new(Lineage::single(Fragment::range(sample, 10, 10 + n).unwrap()))
            .with(&Field::new("ids"), Value::seq(tokens))
            .with(&Field::new("src"), Value::Int(7))
    }

    fn image(item: u32, start: u32, len: u32, atomic: bool) -> Attachment {
        Attachment::new(&"image".into(), item)
            .placed(Span::at(start, len).unwrap(), atomic)
            .with(&"pixels".into(), Value::array(vec![item as u8; 4]))
    }

    #[test]
    fn slice_narrows_lineage_and_seq_fields() {
        let r = rec(vec![1, 2, 3, 4, 5]).slice(1, 3).unwrap();
        assert_eq!(r.get("ids"), Some(&Value::seq(vec![2u32, 3])));
        assert_eq!(r.get("src"), Some(&Value::Int(7)));
        let f = r.lineage().as_single().unwrap().positions().unwrap();
        assert_eq!((f.start(), f.end()), (11, 13));
        assert!(rec(vec![1, 2]).slice(1, 3).is_err());
        let whole = Record::from_sample(SampleId::new(0, 0, 0));
        assert!(whole.slice(0, 0).unwrap_err().to_string().contains("no sequence axis"));
    }

    #[test]
    fn slices_keep_each_attachment_once_and_never_cut_atomic_ones() {
        let mut r = rec((0..10).collect());
        r.attach(image(0, 0, 2, true));
        r.attach(image(1, 4, 3, true));
        r.attach(image(2, 10, 0, false)); // anchored at the very end
        let pieces = [(0, 4), (4, 7), (7, 10)];
        let mut seen = Vec::new();
        for (s, e) in pieces {
            let p = r.slice(s, e).unwrap();
            for a in p.attachments() {
                seen.push((a.item(), s as u32 + a.span().unwrap().start()));
            }
        }
        assert_eq!(seen, vec![(0, 0), (1, 4), (2, 10)]);
        let e = r.slice(0, 5).unwrap_err();
        assert!(e.to_string().contains("would cut atomic attachment image #1"), "{e}");
        // Non-atomic spans may be cut; the attachment stays with its anchor.
        let mut loose = rec((0..10).collect());
        loose.attach(image(0, 4, 3, false));
        assert_eq!(loose.slice(0, 5).unwrap().attachments().len(), 1);
        assert_eq!(loose.slice(5, 10).unwrap().attachments().len(), 0);
    }

    #[test]
    fn slicing_shares_payloads() {
        let mut r = rec((0..1000).collect());
        r.attach(image(0, 500, 1, false));
        let p = r.slice(400, 600).unwrap();
        let ids = |r: &Record| r.get("ids").and_then(Value::as_array).unwrap().buffer::<u32>().unwrap().clone();
        assert!(ids(&p).shares_memory_with(&ids(&r)));
        let px = |r: &Record| {
            r.attachments()[0].get("pixels").and_then(Value::as_array).unwrap().buffer::<u8>().unwrap().clone()
        };
        assert!(px(&p).shares_memory_with(&px(&r)));
    }
}
