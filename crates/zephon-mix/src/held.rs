//! The documents ensure_mixture holds back, in arrival order, searchable by dataset.
//!
//! ensure_mixture releases "the oldest held document that is admissible", and whether a
//! document is admissible depends only on its dataset and its size, growing no easier as the
//! size grows. With one queue for all datasets' documents every push would scan every held
//! document: with a short-document dataset ahead of its share, hundreds of its documents
//! would be walked past to reach one of the dataset behind, on every push. So each dataset has
//! its own queue and the sizes it holds: a dataset whose smallest document is not admissible
//! is skipped without looking at its documents, and the oldest admissible one is the oldest
//! of each dataset's first admissible. Which document comes out is exactly what
//! one scan of one queue would give.

use std::collections::{BTreeMap, VecDeque};

use zephon_operator::Record;

/// One held document: its arrival number, tokens and record.
struct Doc {
    arrival: u64,
    tokens: u64,
    record: Record,
}

/// Held documents by dataset, each dataset's in arrival order.
pub(crate) struct Held {
    queues: Vec<VecDeque<Doc>>,
    /// Per dataset, how many held documents have each size (the smallest is the first key).
    sizes: Vec<BTreeMap<u64, u32>>,
    arrivals: u64,
    /// Tokens of every held document.
    tokens: u64,
}

impl Held {
    /// Nothing held, for `datasets` datasets.
    pub fn new(datasets: usize) -> Self {
        Held {
            queues: (0..datasets).map(|_| VecDeque::new()).collect(),
            sizes: vec![BTreeMap::new(); datasets],
            arrivals: 0,
            tokens: 0,
        }
    }

    /// Tokens of the documents held.
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// Documents held.
    pub fn len(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum()
    }

    /// Holds `record` of dataset `dataset` (an index below `datasets`), `tokens` long, as the
    /// newest document.
    pub fn push(&mut self, dataset: usize, tokens: u64, record: Record) {
        self.queues[dataset].push_back(Doc { arrival: self.arrivals, tokens, record });
        *self.sizes[dataset].entry(tokens).or_default() += 1;
        self.arrivals += 1;
        self.tokens += tokens;
    }

    /// Takes out the oldest document for which `admissible(dataset, tokens)` holds. The
    /// predicate must not become true as tokens grow (a dataset's smallest document decides
    /// whether any of it is admissible).
    pub fn take_oldest_admissible(&mut self, admissible: impl Fn(usize, u64) -> bool) -> Option<(usize, u64, Record)> {
        let mut oldest: Option<(u64, usize, usize)> = None;
        for (d, queue) in self.queues.iter().enumerate() {
            match self.sizes[d].first_key_value() {
                Some((&smallest, _)) if admissible(d, smallest) => {}
                _ => continue,
            }
            if let Some(i) = queue.iter().position(|doc| admissible(d, doc.tokens)) {
                let arrival = queue[i].arrival;
                if oldest.is_none_or(|(a, _, _)| arrival < a) {
                    oldest = Some((arrival, d, i));
                }
            }
        }
        let (_, d, i) = oldest?;
        self.remove(d, i)
    }

    /// Takes out the oldest document.
    pub fn take_oldest(&mut self) -> Option<(usize, u64, Record)> {
        let d = (0..self.queues.len())
            .filter(|&d| !self.queues[d].is_empty())
            .min_by_key(|&d| self.queues[d][0].arrival)?;
        self.remove(d, 0)
    }

    /// Every held document's dataset, tokens and record, oldest first.
    pub fn in_order(&self) -> Vec<(usize, u64, &Record)> {
        let mut all: Vec<(u64, usize, u64, &Record)> = Vec::with_capacity(self.len());
        for (d, queue) in self.queues.iter().enumerate() {
            all.extend(queue.iter().map(|doc| (doc.arrival, d, doc.tokens, &doc.record)));
        }
        all.sort_unstable_by_key(|x| x.0);
        all.into_iter().map(|(_, d, n, r)| (d, n, r)).collect()
    }

    /// Drops everything held.
    pub fn clear(&mut self) {
        *self = Held::new(self.queues.len());
    }

    fn remove(&mut self, d: usize, i: usize) -> Option<(usize, u64, Record)> {
        let doc = self.queues[d].remove(i)?;
        self.tokens -= doc.tokens;
        if let Some(count) = self.sizes[d].get_mut(&doc.tokens) {
            *count -= 1;
            if *count == 0 {
                self.sizes[d].remove(&doc.tokens);
            }
        }
        Some((d, doc.tokens, doc.record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use zephon_operator::{Fragment, Lineage, SampleId, Span};

    fn doc(d: usize, row: u64) -> Record {
        Record::new(Lineage::single(Fragment::span(SampleId::new(d as u32, 0, row), Span::prefix(1))))
    }

    fn row_of(r: &Record) -> u64 {
        r.lineage().first_sample().map(|s| s.row).unwrap_or(u64::MAX)
    }

    proptest! {
        /// Against one queue scanned from the front: the same document comes out every time,
        /// for thresholds per dataset (a size-monotone predicate) that change between takes.
        #[test]
        fn takes_what_one_scan_of_one_queue_takes(
            ops in prop::collection::vec((0usize..3, 1u64..40, prop::collection::vec(0u64..45, 3), 0u8..4), 1..200),
        ) {
            let mut held = Held::new(3);
            let mut flat: VecDeque<(usize, u64, u64)> = VecDeque::new();
            for (row, (d, n, limits, op)) in ops.into_iter().enumerate() {
                held.push(d, n, doc(d, row as u64));
                flat.push_back((d, n, row as u64));
                let ok = |d: usize, n: u64| n <= limits[d];
                let (got, want) = match op {
                    0 => (held.take_oldest(), flat.pop_front()),
                    _ => (held.take_oldest_admissible(ok), flat.iter().position(|&(d, n, _)| ok(d, n)).and_then(|i| flat.remove(i))),
                };
                prop_assert_eq!(got.map(|(d, n, r)| (d, n, row_of(&r))), want);
                prop_assert_eq!(held.len(), flat.len());
                prop_assert_eq!(held.tokens(), flat.iter().map(|&(_, n, _)| n).sum::<u64>());
                let order: Vec<_> = held.in_order().into_iter().map(|(d, n, r)| (d, n, row_of(r))).collect();
                prop_assert_eq!(order, flat.iter().copied().collect::<Vec<_>>());
            }
        }
    }
}
