//! Lineage: which pieces of which stored samples made a record.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::id::SampleId;

/// Positions `start..end` of a sequence axis (tokens, once a tokenizer gave the sample one).
/// Never reversed: the constructors refuse `end < start`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Span {
    start: u32,
    end: u32,
}

impl Span {
    /// `start..end`; `None` when reversed.
    pub const fn new(start: u32, end: u32) -> Option<Span> {
        if start <= end { Some(Span { start, end }) } else { None }
    }

    /// `len` positions from `start`; `None` when the end overflows `u32`.
    pub const fn at(start: u32, len: u32) -> Option<Span> {
        match start.checked_add(len) {
            Some(end) => Some(Span { start, end }),
            None => None,
        }
    }

    /// `0..len`.
    pub const fn prefix(len: u32) -> Span {
        Span { start: 0, end: len }
    }

    /// First position, inclusive.
    pub const fn start(&self) -> u32 {
        self.start
    }

    /// Last position, exclusive.
    pub const fn end(&self) -> u32 {
        self.end
    }

    /// Number of positions.
    pub const fn len(&self) -> u32 {
        self.end - self.start
    }

    /// Whether the span has no positions.
    pub const fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Whether `other` lies inside this span.
    pub const fn contains(&self, other: &Span) -> bool {
        self.start <= other.start && other.end <= self.end
    }

    /// Whether position `p` lies inside.
    pub const fn contains_pos(&self, p: u32) -> bool {
        self.start <= p && p < self.end
    }

    /// The part `offset..offset + len` of this span (relative positions); `None` when it does
    /// not fit inside.
    pub fn sub(&self, offset: u32, len: u32) -> Option<Span> {
        let s = Span::at(self.start.checked_add(offset)?, len)?;
        self.contains(&s).then_some(s)
    }

    /// This span moved by `delta` positions; `None` when it leaves `0..=u32::MAX`.
    pub fn shifted(&self, delta: i64) -> Option<Span> {
        let start = u32::try_from(i64::from(self.start) + delta).ok()?;
        Span::at(start, self.len())
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}..{})", self.start, self.end)
    }
}

/// How much of a sample a fragment is.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Extent {
    /// The whole sample, before any operator gave it a sequence axis (a record as read).
    Whole,
    /// Positions of the sample's sequence axis.
    Span(Span),
}

/// A piece of one sample: the whole of it, or positions of its sequence axis.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fragment {
    /// The sample.
    pub sample: SampleId,
    /// Which part of it.
    pub extent: Extent,
}

impl Fragment {
    /// The whole of `sample` before any operator gave it a sequence axis.
    pub const fn whole(sample: SampleId) -> Self {
        Fragment { sample, extent: Extent::Whole }
    }

    /// Positions `span` of `sample`.
    pub const fn span(sample: SampleId, span: Span) -> Self {
        Fragment { sample, extent: Extent::Span(span) }
    }

    /// Positions `start..end` of `sample`; `None` when reversed.
    pub const fn range(sample: SampleId, start: u32, end: u32) -> Option<Self> {
        match Span::new(start, end) {
            Some(s) => Some(Fragment::span(sample, s)),
            None => None,
        }
    }

    /// The positions, if the sample has a sequence axis yet.
    pub const fn positions(&self) -> Option<Span> {
        match self.extent {
            Extent::Whole => None,
            Extent::Span(s) => Some(s),
        }
    }

    /// Number of positions (0 for a whole sample, which has no axis yet).
    pub const fn len(&self) -> u32 {
        match self.extent {
            Extent::Whole => 0,
            Extent::Span(s) => s.len(),
        }
    }

    /// Whether the fragment spans no positions (a whole sample never does).
    pub const fn is_empty(&self) -> bool {
        matches!(self.extent, Extent::Span(s) if s.is_empty())
    }

    /// Whether `other` lies inside `self`: the same sample, and `self` whole or a span that
    /// contains `other`'s.
    pub fn covers(&self, other: &Fragment) -> bool {
        self.sample == other.sample
            && match (self.extent, other.extent) {
                (Extent::Whole, _) => true,
                (Extent::Span(a), Extent::Span(b)) => a.contains(&b),
                (Extent::Span(_), Extent::Whole) => false,
            }
    }

    /// The part `offset..offset + len` of this fragment's positions; `None` for a whole sample
    /// or a part that does not fit.
    pub fn sub(&self, offset: u32, len: u32) -> Option<Fragment> {
        Some(Fragment::span(self.sample, self.positions()?.sub(offset, len)?))
    }
}

/// Checkpoints hold thousands of fragments: each is written as three numbers
/// `[dataset, shard, row]` for a whole sample, or five `[dataset, shard, row, start, end]`.
impl Serialize for Fragment {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let id = &self.sample;
        match self.extent {
            Extent::Whole => (id.dataset, id.shard, id.row).serialize(s),
            Extent::Span(p) => (id.dataset, id.shard, id.row, p.start, p.end).serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Fragment {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Vec::<u64>::deserialize(d)?;
        let small = |x: u64, what: &str| {
            u32::try_from(x).map_err(|_| serde::de::Error::custom(format!("fragment {what} {x} is out of range")))
        };
        match v.as_slice() {
            &[dataset, shard, row] => {
                Ok(Fragment::whole(SampleId::new(small(dataset, "dataset")?, small(shard, "shard")?, row)))
            }
            &[dataset, shard, row, start, end] => {
                let sample = SampleId::new(small(dataset, "dataset")?, small(shard, "shard")?, row);
                Fragment::range(sample, small(start, "start")?, small(end, "end")?)
                    .ok_or_else(|| serde::de::Error::custom(format!("fragment range {start}..{end} is reversed")))
            }
            other => Err(serde::de::Error::custom(format!("a fragment has 3 or 5 numbers, not {}", other.len()))),
        }
    }
}

impl fmt::Display for Fragment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.extent {
            Extent::Whole => write!(f, "{} (whole)", self.sample),
            Extent::Span(s) => write!(f, "{} {s}", self.sample),
        }
    }
}

/// Which pieces of which samples made a record, in order.
///
/// Lineage is the record's identity for checkpoints: an accumulator exports the lineage of the
/// records it buffers, and restore rebuilds them from storage. Operators that split one record
/// into several must give the pieces disjoint spans, so that lineage identifies each.
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
    Many(Arc<Vec<Fragment>>),
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
            _ => Lineage(Repr::Many(Arc::new(fragments))),
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
            Repr::One(f) => Repr::Many(Arc::new(vec![f, fragment])),
            Repr::Many(mut v) => {
                Arc::make_mut(&mut v).push(fragment);
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
    /// equal lineages, or single fragments of one sample where this one covers the other.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_is_not_an_empty_span() {
        let id = SampleId::new(1, 2, 3);
        let whole = Fragment::whole(id);
        let empty = Fragment::range(id, 0, 0).unwrap();
        assert_ne!(whole, empty);
        assert!(whole.covers(&empty) && !empty.covers(&whole));
        assert!(!whole.is_empty() && empty.is_empty());
        assert!(Fragment::range(id, 5, 4).is_none());
        for f in [whole, Fragment::range(id, 7, 9).unwrap()] {
            let json = serde_json::to_string(&f).unwrap();
            assert_eq!(serde_json::from_str::<Fragment>(&json).unwrap(), f, "{json}");
        }
        assert!(serde_json::from_str::<Fragment>("[1,2,3,9,4]").is_err());
        assert!(serde_json::from_str::<Fragment>("[1,2]").is_err());
    }

    #[test]
    fn span_arithmetic_is_checked() {
        let s = Span::new(10, 20).unwrap();
        assert_eq!(s.sub(2, 3), Span::new(12, 15));
        assert_eq!(s.sub(8, 3), None);
        assert_eq!(Span::at(u32::MAX, 1), None);
        assert_eq!(s.shifted(-10), Span::new(0, 10));
        assert_eq!(s.shifted(-11), None);
    }
}
