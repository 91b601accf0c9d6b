//! Shared, immutable payload buffers: cloning and slicing never copy.

use std::fmt;
use std::ops::{Deref, Range};
use std::sync::Arc;

/// A run of elements shared by every clone and slice made from it.
///
/// Payloads (token ids, pixels, encoded images) are written once, by the operator that makes
/// them, and then only read: a record cloned for a restore cache, a document split into pieces
/// or a row that keeps a piece of an attachment all point at the same memory. A sink that owns
/// the only reference to a whole buffer takes its `Vec` back without a copy
/// ([`Buffer::into_vec`]).
pub struct Buffer<T> {
    owner: Arc<Vec<T>>,
    start: usize,
    len: usize,
}

impl<T> Buffer<T> {
    /// A buffer owning `elements` (no copy: the vector moves in).
    pub fn new(elements: Vec<T>) -> Self {
        let len = elements.len();
        Buffer { owner: Arc::new(elements), start: 0, len }
    }

    /// The elements.
    pub fn as_slice(&self) -> &[T] {
        // `start + len <= owner.len()` holds by construction (`new` and `slice` keep it).
        &self.owner[self.start..self.start + self.len]
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Elements `range` of this buffer, sharing its memory; `None` when the range is reversed
    /// or out of bounds.
    pub fn slice(&self, range: Range<usize>) -> Option<Buffer<T>> {
        if range.start > range.end || range.end > self.len {
            return None;
        }
        Some(Buffer { owner: self.owner.clone(), start: self.start + range.start, len: range.end - range.start })
    }

    /// Whether `self` and `other` point into the same allocation.
    pub fn shares_memory_with(&self, other: &Buffer<T>) -> bool {
        Arc::ptr_eq(&self.owner, &other.owner)
    }

    /// Whether this is the only reference to its allocation and spans all of it, so that
    /// [`Buffer::into_vec`] moves rather than copies.
    pub fn is_exclusive(&self) -> bool {
        Arc::strong_count(&self.owner) == 1 && self.start == 0 && self.len == self.owner.len()
    }
}

impl<T: Clone> Buffer<T> {
    /// The elements as a `Vec`: moved out without a copy when this buffer is the only
    /// reference to a whole allocation ([`Buffer::is_exclusive`]), copied otherwise.
    pub fn into_vec(self) -> Vec<T> {
        if self.start == 0 && self.len == self.owner.len() {
            match Arc::try_unwrap(self.owner) {
                Ok(v) => v,
                Err(shared) => shared.to_vec(),
            }
        } else {
            self.as_slice().to_vec()
        }
    }
}

impl<T> Clone for Buffer<T> {
    fn clone(&self) -> Self {
        Buffer { owner: self.owner.clone(), start: self.start, len: self.len }
    }
}

impl<T> Deref for Buffer<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T> AsRef<[T]> for Buffer<T> {
    fn as_ref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T> Default for Buffer<T> {
    fn default() -> Self {
        Buffer::new(Vec::new())
    }
}

impl<T> From<Vec<T>> for Buffer<T> {
    fn from(elements: Vec<T>) -> Self {
        Buffer::new(elements)
    }
}

impl<T: Clone> From<&[T]> for Buffer<T> {
    fn from(elements: &[T]) -> Self {
        Buffer::new(elements.to_vec())
    }
}

impl<T> FromIterator<T> for Buffer<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Buffer::new(iter.into_iter().collect())
    }
}

impl<T: PartialEq> PartialEq for Buffer<T> {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<T: fmt::Debug> fmt::Debug for Buffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 16;
        let s = self.as_slice();
        if s.len() <= SHOWN { fmt::Debug::fmt(s, f) } else { write!(f, "{:?}… ({} elements)", &s[..SHOWN], s.len()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_share_and_into_vec_moves_when_exclusive() {
        let v: Vec<u32> = (0..10).collect();
        let ptr = v.as_ptr();
        let b = Buffer::new(v);
        let s = b.slice(2..5).unwrap();
        assert_eq!(&*s, &[2, 3, 4]);
        assert!(s.shares_memory_with(&b));
        assert!(b.slice(5..11).is_none());
        assert_eq!(s.slice(1..3).unwrap().as_slice(), &[3, 4]);
        assert!(!b.is_exclusive());
        drop(s);
        assert!(b.is_exclusive());
        let back = b.into_vec();
        assert_eq!(back.as_ptr(), ptr, "the exclusive buffer moved out without a copy");
    }
}
