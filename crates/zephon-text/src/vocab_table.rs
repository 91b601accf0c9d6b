//! The vocabulary of an `ignore_merges` tokenizer by each token's bytes, as one flat
//! open-addressing table.
//!
//! Such a tokenizer looks every piece up whole before it merges anything, so this lookup is
//! on the path of every piece. A general map of byte strings reads its bucket and then the
//! key behind a pointer: two trips to memory, the second one dependent on the first. Here a
//! key of up to 16 bytes sits in its slot beside its id, 32 bytes to a slot, the table at most
//! half full, so a lookup is usually one read of one cache line. Longer keys (rare in text:
//! pieces are words) are kept in an ordinary map.

use std::collections::HashMap;

use crate::piece_cache::words;

/// Keys of up to this many bytes are kept in the table itself.
const INLINE: usize = 16;

#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Slot {
    /// The key's bytes, little-endian in words, zero past its end.
    words: [u64; 2],
    /// The key's length; 0 for an empty slot.
    len: u32,
    id: u32,
}

const EMPTY: Slot = Slot { words: [0; 2], len: 0, id: 0 };

/// Token bytes → token id.
pub(crate) struct VocabTable {
    slots: Box<[Slot]>,
    /// log2 of the slot count.
    bits: u32,
    /// Keys longer than `INLINE` bytes, and the empty key.
    long: HashMap<Vec<u8>, u32>,
}

fn short_words(key: &[u8]) -> [u64; 2] {
    let w = words(key);
    [w[0], w[1]]
}

impl VocabTable {
    /// The table of `entries` (a token's bytes and its id); of two equal keys, the last.
    pub(crate) fn new(entries: impl IntoIterator<Item = (Vec<u8>, u32)>) -> Self {
        let (short, long): (Vec<_>, Vec<_>) = entries.into_iter().partition(|(k, _)| (1..=INLINE).contains(&k.len()));
        let bits = (short.len().max(1) * 2).next_power_of_two().trailing_zeros().max(4);
        let mut table = VocabTable { slots: vec![EMPTY; 1 << bits].into_boxed_slice(), bits, long: HashMap::new() };
        for (key, id) in short {
            let words = short_words(&key);
            let mut i = table.home(words, key.len());
            while table.slots[i].len != 0
                && !(table.slots[i].words == words && table.slots[i].len as usize == key.len())
            {
                i = (i + 1) & table.mask();
            }
            table.slots[i] = Slot { words, len: key.len() as u32, id };
        }
        table.long = long.into_iter().collect();
        table
    }

    fn mask(&self) -> usize {
        (1 << self.bits) - 1
    }

    fn home(&self, words: [u64; 2], len: usize) -> usize {
        let h = (words[0] ^ len as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ words[1];
        (h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - self.bits)) as usize
    }

    /// The id of the token whose bytes are `key`, if there is one.
    #[inline]
    pub(crate) fn get(&self, key: &[u8]) -> Option<u32> {
        if !(1..=INLINE).contains(&key.len()) {
            return self.long.get(key).copied();
        }
        let words = short_words(key);
        let mut i = self.home(words, key.len());
        loop {
            let slot = &self.slots[i];
            if slot.len == 0 {
                return None;
            }
            if slot.words == words && slot.len as usize == key.len() {
                return Some(slot.id);
            }
            i = (i + 1) & self.mask();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_key_and_nothing_else() {
        let keys: Vec<Vec<u8>> = (0..5000u32)
            .map(|i| format!("{}{i}", "x".repeat(i as usize % 24)).into_bytes())
            .chain([b"\0".to_vec(), b"a\0".to_vec(), Vec::new()])
            .collect();
        let table = VocabTable::new(keys.iter().cloned().zip(0..));
        for (id, k) in keys.iter().enumerate() {
            assert_eq!(table.get(k), Some(id as u32), "{k:?}");
        }
        // Same leading bytes, other lengths; a key's prefix; bytes never added.
        for absent in [&b"a"[..], b"a\0\0", b"\0\0", b"x", b"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx1", b"zz"] {
            assert_eq!(table.get(absent), None, "{absent:?}");
        }
    }

    #[test]
    fn of_two_equal_keys_the_last_is_kept() {
        let table =
            VocabTable::new([(b"ab".to_vec(), 1), (b"ab".to_vec(), 2), (b"c".repeat(20), 3), (b"c".repeat(20), 4)]);
        assert_eq!(table.get(b"ab"), Some(2));
        assert_eq!(table.get(&b"c".repeat(20)), Some(4));
    }
}
