//! The smooth weighted interleave, in closed form, with exact integer arithmetic.
//!
//! Dataset d with integer weight `m_d` owns "ticks" at times (2k+1)/m_d, k = 0, 1, 2, ...
//! (Webster/Sainte-Laguë divisors). Sorting all ticks by time (ties by dataset index) gives
//! the global sequence: position p belongs to the owner of the p-th tick. Every prefix of the
//! sequence is as close to the weights as whole samples allow (each dataset within one sample
//! of its share), the sequence is smooth (a weighted round-robin), and the counts before any
//! position are computed directly, without walking the stream: that is what lets a lane seek
//! to its n-th chunk in O(1).

/// A weighted interleave of datasets with positive integer weights.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Interleave {
    /// Integer weights; 0 means the dataset takes no part.
    m: Vec<u64>,
}

impl Interleave {
    pub fn new(m: Vec<u64>) -> Self {
        Interleave { m }
    }

    pub fn active(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.m.len()).filter(|&d| self.m[d] > 0)
    }

    /// Ticks of dataset `d` that come before tick `j` of dataset `e` in the global order.
    fn before(&self, d: usize, e: usize, j: u64) -> u64 {
        let (md, me) = (self.m[d] as u128, self.m[e] as u128);
        // Tick k of d precedes tick j of e when (2k+1)·m_e < (2j+1)·m_d (ties: lower index).
        let x = (2 * j as u128 + 1) * md;
        let o_max = if d < e { x / me } else { (x - 1) / me };
        o_max.div_ceil(2) as u64
    }

    /// Global position of tick `j` of dataset `e`.
    fn position(&self, e: usize, j: u64) -> u64 {
        j + self.active().filter(|&d| d != e).map(|d| self.before(d, e, j)).sum::<u64>()
    }

    /// How many of the first `p` positions each dataset owns. Sums to `p`.
    pub fn counts_before(&self, p: u64) -> Vec<u64> {
        let mut counts = vec![0; self.m.len()];
        if p == 0 {
            return counts;
        }
        // Find the owner (e, j) of position p-1: for each dataset, binary-search its tick
        // index; exactly one dataset has a tick at that position.
        let q = p - 1;
        for e in self.active() {
            let (mut lo, mut hi) = (0u64, q);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if self.position(e, mid) < q {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            if self.position(e, lo) == q {
                for d in self.active() {
                    counts[d] = if d == e { lo + 1 } else { self.before(d, e, lo) };
                }
                return counts;
            }
        }
        unreachable!("every position has an owner")
    }

    /// The owners of the `n` positions after a point where the counts are `counts`
    /// (advancing `counts`), appended to `out`.
    pub fn next_owners(&self, counts: &mut [u64], n: u64, out: &mut Vec<usize>) {
        for _ in 0..n {
            let mut best: Option<usize> = None;
            for d in self.active() {
                best = match best {
                    None => Some(d),
                    // Next tick of d: (2c_d+1)/m_d; earlier time wins, ties to the lower index.
                    Some(b) => {
                        let td = (2 * counts[d] as u128 + 1) * self.m[b] as u128;
                        let tb = (2 * counts[b] as u128 + 1) * self.m[d] as u128;
                        if td < tb { Some(d) } else { Some(b) }
                    }
                };
            }
            let Some(d) = best else { return };
            counts[d] += 1;
            out.push(d);
        }
    }

    /// The position right after dataset `d`'s `k`-th tick (0-based): when it has `k+1` draws.
    pub fn end_of_tick(&self, d: usize, k: u64) -> u64 {
        self.position(d, k) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(m: &[u64], n: u64) -> Vec<usize> {
        let il = Interleave::new(m.to_vec());
        let mut counts = vec![0; m.len()];
        let mut out = Vec::new();
        il.next_owners(&mut counts, n, &mut out);
        out
    }

    #[test]
    fn closed_form_counts_match_the_walk() {
        for m in [vec![1, 1], vec![3, 1], vec![7, 5, 0, 2], vec![1_000_003, 7, 999]] {
            let il = Interleave::new(m.clone());
            let seq = walk(&m, 2000);
            let mut counts = vec![0u64; m.len()];
            for (p, &d) in seq.iter().enumerate() {
                assert_eq!(il.counts_before(p as u64), counts, "m={m:?} p={p}");
                counts[d] += 1;
            }
            // Seeking then walking gives the same owners as walking from the start.
            let mut c = il.counts_before(777);
            let mut out = Vec::new();
            il.next_owners(&mut c, 50, &mut out);
            assert_eq!(out, seq[777..827]);
        }
    }

    #[test]
    fn every_prefix_is_within_one_sample_of_the_weights() {
        let m = [5u64, 3, 2];
        let seq = walk(&m, 10_000);
        let mut counts = [0f64; 3];
        for (p, &d) in seq.iter().enumerate() {
            counts[d] += 1.0;
            for k in 0..3 {
                let ideal = (p + 1) as f64 * m[k] as f64 / 10.0;
                assert!((counts[k] - ideal).abs() <= 1.0, "p={p} d={k}");
            }
        }
    }

    #[test]
    fn end_of_tick_is_where_the_draw_lands() {
        let il = Interleave::new(vec![4, 9, 1]);
        let seq = walk(&[4, 9, 1], 500);
        let mut seen = [0u64; 3];
        for (p, &d) in seq.iter().enumerate() {
            assert_eq!(il.end_of_tick(d, seen[d]), p as u64 + 1);
            seen[d] += 1;
        }
    }
}
