//! The merge ranks of a BPE model as one flat open-addressing table.
//!
//! Merging a piece asks for the rank of each adjacent pair, and a piece the cache has not
//! seen asks a dozen times. A general hash map reads a control byte group and then the
//! bucket; this table keeps key, rank and merged id together in 16 bytes, at most half
//! full, so a lookup is usually one read of one cache line.

/// (left id, right id) → (rank, merged id).
pub(crate) struct MergeTable {
    /// `EMPTY` or a pair's key, with its rank and merged id.
    slots: Box<[(u64, u32, u32)]>,
    /// log2 of the slot count.
    bits: u32,
}

const EMPTY: u64 = u64::MAX;

fn key(a: u32, b: u32) -> u64 {
    (a as u64) << 32 | b as u64
}

impl MergeTable {
    /// A table of `merges` (left, right, merged id), ranked in their order, or why not.
    pub(crate) fn new(merges: &[(u32, u32, u32)]) -> Result<Self, String> {
        let bits = (merges.len().max(1) * 2).next_power_of_two().trailing_zeros().max(4);
        let mut table = MergeTable { slots: vec![(EMPTY, 0, 0); 1 << bits].into_boxed_slice(), bits };
        for (rank, &(a, b, merged)) in merges.iter().enumerate() {
            let k = key(a, b);
            if k == EMPTY {
                return Err(format!("a merge of token ids {a} and {b} (the largest possible)"));
            }
            let mut i = table.home(k);
            loop {
                match table.slots[i].0 {
                    EMPTY => break,
                    x if x == k => return Err(format!("the merge of token ids {a} and {b} is listed twice")),
                    _ => i = (i + 1) & table.mask(),
                }
            }
            table.slots[i] = (k, rank as u32, merged);
        }
        Ok(table)
    }

    fn mask(&self) -> usize {
        (1 << self.bits) - 1
    }

    fn home(&self, k: u64) -> usize {
        (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - self.bits)) as usize
    }

    /// The rank and merged id of the pair (`a`, `b`), if it merges.
    #[inline]
    pub(crate) fn get(&self, a: u32, b: u32) -> Option<(u32, u32)> {
        let k = key(a, b);
        let mut i = self.home(k);
        loop {
            let (x, rank, merged) = self.slots[i];
            if x == EMPTY {
                return None;
            }
            if x == k {
                return Some((rank, merged));
            }
            i = (i + 1) & self.mask();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_pair_and_only_those() {
        let merges: Vec<(u32, u32, u32)> = (0..5000).map(|i| (i % 97, i / 97, 10_000 + i)).collect();
        let t = MergeTable::new(&merges).unwrap();
        for (rank, &(a, b, m)) in merges.iter().enumerate() {
            assert_eq!(t.get(a, b), Some((rank as u32, m)));
        }
        assert_eq!(t.get(97, 0), None);
        assert_eq!(t.get(u32::MAX, u32::MAX), None);
        assert!(MergeTable::new(&[(1, 2, 3), (4, 5, 6), (1, 2, 7)]).err().unwrap().contains("listed twice"));
        assert!(MergeTable::new(&[(u32::MAX, u32::MAX, 0)]).is_err());
        assert_eq!(MergeTable::new(&[]).unwrap().get(0, 0), None);
    }
}
