//! What `ensure_mixture` reports of one lane, read from its exported state: the counters it
//! keeps per dataset and the lineage of what it holds (see `EnsureMixture::report`).

use zephon_operator::AccumulatorState;

use crate::ensure::STATE_COUNTERS;

/// What ensure_mixture holds on one lane, per dataset, read from its exported state (for
/// reports): `(pieces held, their tokens)` per dataset of `datasets`.
pub(crate) fn held(state: &AccumulatorState, datasets: usize) -> Vec<(u64, u64)> {
    let mut out = vec![(0u64, 0u64); datasets];
    for lineage in &state.buffered {
        let Some(d) = lineage.first_sample().map(|s| s.dataset as usize) else { continue };
        if let Some(h) = out.get_mut(d) {
            h.0 += 1;
            h.1 += lineage.fragments().iter().map(|f| u64::from(f.len())).sum::<u64>();
        }
    }
    out
}

/// What ensure_mixture did on one lane, read from its exported state (for reports).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct EnsureCounts {
    /// Per dataset: tokens let through, documents dropped (an explicit `hold`), their tokens,
    /// and tokens let through before their turn because what it held reached its cap.
    pub datasets: Vec<EnsureDataset>,
    /// The most tokens it held at once.
    pub peak_held_tokens: u64,
}

/// What ensure_mixture did with one dataset on one lane (see [`EnsureCounts`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct EnsureDataset {
    /// Tokens let through.
    pub mixed_tokens: u64,
    /// Documents dropped past an explicit `hold`.
    pub dropped_documents: u64,
    /// Their tokens.
    pub dropped_tokens: u64,
    /// Tokens let through before their turn, past the cap on what it holds.
    pub released_tokens: u64,
}

impl EnsureCounts {
    /// Read from one lane's exported state; `None` when it is not an ensure_mixture state.
    pub(crate) fn of(state: &AccumulatorState) -> Option<Self> {
        let v = &state.values;
        if v.is_empty() || !(v.len() - 1).is_multiple_of(STATE_COUNTERS) {
            return None;
        }
        let k = (v.len() - 1) / STATE_COUNTERS;
        let datasets = (0..k)
            .map(|d| EnsureDataset {
                mixed_tokens: v[d],
                dropped_documents: v[k + d],
                dropped_tokens: v[2 * k + d],
                released_tokens: v[7 * k + d],
            })
            .collect();
        Some(EnsureCounts { datasets, peak_held_tokens: v[8 * k] })
    }
}
