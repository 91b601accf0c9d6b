//! The per-thread cache of short pieces' ids for the byte-level BPE fast path.
//!
//! Most words recur, and a word's ids never change, so merging a piece twice is waste. The
//! cache is a fixed table of 64-byte slots (a cache line each) in sets of two, chosen by a
//! hash of the piece: a lookup reads two adjacent lines, and a new piece goes first in its
//! set, pushing out the set's older one. That keeps the table's memory fixed and lets it
//! follow the text (a table that stops taking pieces once full keeps the words of the first
//! documents it saw). In front of it, a 256 KiB direct-mapped table of one-token pieces of up
//! to 8 bytes answers the most frequent words without a trip to shared cache. Only speed
//! depends on what the cache holds; the ids are the merges' ids either way.

use std::cell::RefCell;

/// Pieces up to this many bytes are cached.
pub(crate) const MAX_PIECE: usize = 32;

/// Pieces whose ids fit in a slot; the rest are merged every time (a 32-byte piece that
/// stays more than 6 tokens is rare: random strings, long numbers).
const MAX_IDS: usize = 6;

/// Slots per table: 4 MiB per thread and tokenizer.
const SLOTS: usize = 1 << 16;

/// Pieces up to this many bytes that are one token also go to the hot table.
pub(crate) const HOT_PIECE: usize = 8;

/// Entries of the hot table: 256 KiB, which stays in a core's own cache (L2).
const HOT: usize = 1 << 14;

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

/// A one-token piece of up to `HOT_PIECE` bytes in the hot table.
#[derive(Clone, Copy)]
struct Hot {
    /// The piece's bytes, little-endian, zero past its end.
    word: u64,
    /// The piece's length; 0 for an empty entry.
    len: u32,
    id: u32,
}

/// One tokenizer's table on one thread, in two tiers. The main table is larger than a core's
/// cache, so a lookup in it mostly waits on shared cache or memory. In front of it, a small
/// direct-mapped table of short one-token pieces: the words that make most of any text recur
/// so often that a newer piece rarely pushes them out between two of their uses, and they
/// are found without leaving the core.
pub(crate) struct PieceCache {
    owner: usize,
    slots: Box<[Slot]>,
    hot: Box<[Hot]>,
}

fn hot_index(word: u64, len: usize) -> usize {
    ((word ^ len as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - HOT.trailing_zeros())) as usize
}

/// The bytes of a piece of up to `HOT_PIECE` bytes, little-endian, zero past its end.
fn hot_word(piece: &[u8]) -> u64 {
    words(piece)[0]
}

/// The bytes of `piece` (up to 32), little-endian in words, zero past its end.
pub(crate) fn words(piece: &[u8]) -> [u64; 4] {
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
        let hot = vec![Hot { word: 0, len: 0, id: 0 }; HOT].into_boxed_slice();
        PieceCache { owner, slots: vec![EMPTY; SLOTS].into_boxed_slice(), hot }
    }

    /// Appends the id of `piece` (2..=`HOT_PIECE` bytes) to `out` if the hot table has it.
    pub(crate) fn get_hot(&self, piece: &[u8], out: &mut Vec<u32>) -> bool {
        let word = hot_word(piece);
        let h = self.hot[hot_index(word, piece.len())];
        let found = h.word == word && h.len as usize == piece.len();
        if found {
            out.push(h.id);
        }
        found
    }

    /// Remembers that `piece` (2..=`HOT_PIECE` bytes) is the one token `id`, in the hot table.
    pub(crate) fn put_hot(&mut self, piece: &[u8], id: u32) {
        let word = hot_word(piece);
        self.hot[hot_index(word, piece.len())] = Hot { word, len: piece.len() as u32, id };
    }

    /// Appends the cached ids of `piece` (2..=`MAX_PIECE` bytes) to `out`; whether it was there.
    /// A short one-token piece found here moves into the hot table.
    pub(crate) fn get(&mut self, piece: &[u8], out: &mut Vec<u32>) -> bool {
        let words = words(piece);
        let set = set(&words, piece.len());
        let found = self.slots[set..set + 2].iter().find(|s| s.len as usize == piece.len() && s.words == words);
        let Some(slot) = found.copied() else { return false };
        out.extend_from_slice(&slot.ids[..slot.n as usize]);
        if slot.n == 1 && piece.len() <= HOT_PIECE {
            self.put_hot(piece, slot.ids[0]);
        }
        true
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
        if let [id] = ids
            && piece.len() <= HOT_PIECE
        {
            self.put_hot(piece, *id);
        }
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
    fn the_hot_table_holds_short_one_token_pieces_and_answers_only_for_them() {
        let mut c = PieceCache::new(0);
        let mut out = Vec::new();
        c.put(b"the", &[5]);
        c.put(b"them", &[6, 7]);
        c.put(b"thereupon", &[8]);
        assert!(c.get_hot(b"the", &mut out), "short and one token: hot");
        assert!(!c.get_hot(b"them", &mut out), "two tokens: main table only");
        assert!(!c.get_hot(b"the\0", &mut out), "same bytes, another length");
        assert!(!c.get_hot(b"thereupon", &mut out), "longer than 8 bytes: main table only");
        assert_eq!(out, [5]);
        assert!(c.get(b"them", &mut out) && c.get(b"thereupon", &mut out));
        assert_eq!(out, [5, 6, 7, 8]);
        // A piece pushed out of the hot table comes back into it from the main table.
        let slot = hot_index(hot_word(b"the"), 3);
        let other = (0..1_000_000u32)
            .map(|i| format!("w{i}").into_bytes())
            .find(|p| p.len() <= HOT_PIECE && hot_index(hot_word(p), p.len()) == slot)
            .expect("a piece with the same hot entry");
        c.put_hot(&other, 9);
        out.clear();
        assert!(!c.get_hot(b"the", &mut out) && c.get_hot(&other, &mut out));
        assert!(c.get(b"the", &mut out) && c.get_hot(b"the", &mut out));
        assert_eq!(out, [9, 5, 5]);
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
