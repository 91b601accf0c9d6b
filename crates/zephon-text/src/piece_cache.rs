//! The per-thread cache of short pieces' ids for the byte-level BPE fast path.
//!
//! Most words recur, and a word's ids never change, so merging a piece twice is waste. The
//! cache is a fixed table of 64-byte slots (a cache line each) in sets of two, chosen by a
//! hash of the piece: a lookup reads two adjacent lines, and a new piece goes first in its
//! set, pushing out the set's older one. That keeps the table's memory fixed and lets it
//! follow the text (a table that stops taking pieces once full keeps the words of the first
//! documents it saw). Only speed depends on what the cache holds; the ids are the merges'
//! ids either way.

use std::cell::RefCell;

/// Pieces up to this many bytes are cached.
pub(crate) const MAX_PIECE: usize = 32;

/// Pieces whose ids fit in a slot; the rest are merged every time (a 32-byte piece that
/// stays more than 6 tokens is rare: random strings, long numbers).
const MAX_IDS: usize = 6;

/// Slots per table: 4 MiB per thread and tokenizer.
const SLOTS: usize = 1 << 16;

/// Tables one thread keeps (one per tokenizer it encodes with, least recently used out).
const TABLES: usize = 4;

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Slot {
    /// The piece's bytes, little-endian in words, zero past its end.
    words: [u64; 4],
    /// The piece's length; 0 for an empty slot (only pieces of 2 bytes or more are cached).
    len: u8,
    /// How many of `ids` are the piece's.
    n: u8,
    ids: [u32; MAX_IDS],
}

const EMPTY: Slot = Slot { words: [0; 4], len: 0, n: 0, ids: [0; MAX_IDS] };

/// One tokenizer's table on one thread.
pub(crate) struct PieceCache {
    owner: usize,
    slots: Box<[Slot]>,
}

fn words(piece: &[u8]) -> [u64; 4] {
    let mut words = [0u64; 4];
    for (w, chunk) in words.iter_mut().zip(piece.chunks(8)) {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        *w = u64::from_le_bytes(b);
    }
    words
}

/// The first slot of the piece's set.
fn set(words: &[u64; 4], len: usize) -> usize {
    let mut h = len as u64;
    for w in &words[..len.div_ceil(8)] {
        h = (h ^ w).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        h ^= h >> 32;
    }
    (h as usize) & (SLOTS - 2)
}

impl PieceCache {
    fn new(owner: usize) -> Self {
        PieceCache { owner, slots: vec![EMPTY; SLOTS].into_boxed_slice() }
    }

    /// Appends the cached ids of `piece` (2..=`MAX_PIECE` bytes) to `out`; whether it was there.
    pub(crate) fn get(&self, piece: &[u8], out: &mut Vec<u32>) -> bool {
        let words = words(piece);
        let set = set(&words, piece.len());
        let found = self.slots[set..set + 2].iter().find(|s| s.len as usize == piece.len() && s.words == words);
        found.map(|slot| out.extend_from_slice(&slot.ids[..slot.n as usize])).is_some()
    }

    /// Remembers the ids of `piece` (2..=`MAX_PIECE` bytes), if they fit in a slot.
    pub(crate) fn put(&mut self, piece: &[u8], ids: &[u32]) {
        if ids.len() > MAX_IDS {
            return;
        }
        let words = words(piece);
        let mut slot = Slot { words, len: piece.len() as u8, n: ids.len() as u8, ids: [0; MAX_IDS] };
        slot.ids[..ids.len()].copy_from_slice(ids);
        let set = set(&words, piece.len());
        self.slots[set + 1] = self.slots[set];
        self.slots[set] = slot;
    }
}

thread_local! {
    static TABLES_OF_THREAD: RefCell<Vec<PieceCache>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with this thread's table for the tokenizer `owner`, made on first use.
pub(crate) fn with<R>(owner: usize, f: impl FnOnce(&mut PieceCache) -> R) -> R {
    TABLES_OF_THREAD.with(|tables| {
        let mut tables = tables.borrow_mut();
        // Most recently used first, so the common case (one tokenizer) finds it at once.
        match tables.iter().position(|t| t.owner == owner) {
            Some(0) => {}
            Some(i) => tables[..=i].rotate_right(1),
            None => {
                tables.truncate(TABLES - 1);
                tables.insert(0, PieceCache::new(owner));
            }
        }
        f(&mut tables[0])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_answers_only_for_its_own_piece() {
        let mut c = PieceCache::new(0);
        let mut out = Vec::new();
        assert!(!c.get(b"hello", &mut out));
        c.put(b"hello", &[1, 2]);
        assert!(c.get(b"hello", &mut out));
        assert_eq!(out, [1, 2]);
        // Same leading bytes, another length: not the same piece.
        assert!(!c.get(b"hell", &mut out));
        assert!(!c.get(b"hello\0", &mut out));
        // Too many ids to keep: not cached.
        c.put(b"abcdefgh", &[1, 2, 3, 4, 5, 6, 7]);
        assert!(!c.get(b"abcdefgh", &mut out));
        assert_eq!(out, [1, 2]);
    }

    #[test]
    fn a_set_keeps_its_two_newest_pieces() {
        let target = set(&words(b"p0"), 2);
        let same: Vec<Vec<u8>> = (0..1_000_000u32)
            .map(|i| format!("p{i}").into_bytes())
            .filter(|p| set(&words(p), p.len()) == target)
            .take(3)
            .collect();
        assert_eq!(same.len(), 3, "three pieces of one set");
        let mut c = PieceCache::new(0);
        for (id, p) in same.iter().enumerate() {
            c.put(p, &[id as u32]);
        }
        let mut out = Vec::new();
        assert!(!c.get(&same[0], &mut out), "the oldest was pushed out");
        assert!(c.get(&same[1], &mut out) && c.get(&same[2], &mut out));
        assert_eq!(out, [1, 2]);
    }

    #[test]
    fn each_tokenizer_has_its_own_table_on_a_thread() {
        // Owners far from the ids real tokenizers get.
        let (a, b) = (usize::MAX, usize::MAX - 1);
        with(a, |c| c.put(b"ab", &[7]));
        with(b, |c| c.put(b"ab", &[8]));
        let mut out = Vec::new();
        assert!(with(a, |c| c.get(b"ab", &mut out)));
        assert!(with(b, |c| c.get(b"ab", &mut out)));
        assert_eq!(out, [7, 8]);
        for k in 0..TABLES {
            with(usize::MAX - 2 - k, |_| ());
        }
        assert!(!with(a, |c| c.get(b"ab", &mut out)), "the least recently used table is dropped");
    }
}
