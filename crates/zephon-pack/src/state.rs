//! The checkpoint encoding of open rows: small numbers plus each held piece's lineage.
//!
//! `values` is `[kind, ...]`:
//! - wrap: `[1, n]`, n pieces in the row under construction;
//! - first/best fit: `[2, c₀, c₁, ...]`, the piece count of each open row in creation order;
//! - first/best fit warming up: `[3, e, c₀, c₁, ...]`, with e the rows emitted so far (at most
//!   `bins`: past that the cap no longer grows).
//!
//! `buffered` is every held piece, row by row, in order: one single-fragment lineage each. No
//! tokens are saved; restore hands the pieces back rebuilt and [`restore`] regroups them.

use zephon_operator::{AccumulatorState, Record};

use crate::config::PackOptions;
use crate::error::PackError;
use crate::row::OpenRow;

const WRAP: u64 = 1;
const FIT: u64 = 2;
const FIT_WARMING: u64 = 3;

/// Which accumulator a state belongs to.
#[derive(Copy, Clone, Debug)]
pub(crate) enum Kind {
    Wrap,
    /// `warm_up`: the state also says how many rows were emitted, which sets how many rows
    /// may be open ([`open_cap`]).
    Fit {
        bins: usize,
        warm_up: bool,
    },
}

/// The open rows a fit packer may hold after emitting `emitted` rows: `bins`, or while warming
/// up 1, 2, 4, ... up to `bins`.
pub(crate) fn open_cap(bins: usize, warm_up: bool, emitted: u64) -> usize {
    if warm_up { bins.min(1usize << emitted.min(usize::BITS as u64 - 1)) } else { bins }
}

/// What a checkpoint restores: the open rows, and the rows emitted so far (what a warming-up
/// fit packer saved; 0 otherwise).
pub(crate) struct Restored {
    pub rows: Vec<OpenRow>,
    pub emitted: u64,
}

pub(crate) fn wrap_values(row: &OpenRow) -> Vec<u64> {
    vec![WRAP, row.segments() as u64]
}

/// A fit packer's values; `warming` is the rows emitted so far when it warms up.
pub(crate) fn fit_values(open: &[OpenRow], warming: Option<u64>) -> Vec<u64> {
    let head = match warming {
        Some(emitted) => vec![FIT_WARMING, emitted],
        None => vec![FIT],
    };
    head.into_iter().chain(open.iter().map(|r| r.segments() as u64)).collect()
}

/// The open rows a state describes, checked: the shape must be one this packer can be in.
pub(crate) fn restore(
    saved: &AccumulatorState,
    buffered: Vec<Record>,
    config: &PackOptions,
    kind: Kind,
) -> Result<Restored, PackError> {
    let bad = |m: String| PackError::State(m);
    let (tag, rest) = saved.values.split_first().ok_or_else(|| bad("no values".into()))?;
    let (emitted, counts) = match (kind, *tag, rest) {
        (Kind::Wrap, WRAP, [_]) => (0, rest),
        (Kind::Fit { warm_up: false, .. }, FIT, _) => (0, rest),
        (Kind::Fit { bins, warm_up: true }, FIT_WARMING, [e, counts @ ..]) if *e <= bins as u64 => (*e, counts),
        _ => return Err(bad(format!("values {:?} are not a state of this packer ({kind:?})", saved.values))),
    };
    if let Kind::Fit { bins, warm_up } = kind {
        let cap = open_cap(bins, warm_up, emitted);
        if counts.len() > cap || counts.contains(&0) {
            return Err(bad(format!(
                "values {:?} are not a fit state of at most {cap} open rows after {emitted} emitted",
                saved.values
            )));
        }
    }
    let total = counts.iter().try_fold(0u64, |a, &c| a.checked_add(c));
    if total != Some(saved.buffered.len() as u64) || buffered.len() != saved.buffered.len() {
        return Err(bad(format!(
            "values {:?} do not match {} saved pieces and {} rebuilt ones",
            saved.values,
            saved.buffered.len(),
            buffered.len()
        )));
    }
    let mut pieces = saved.buffered.iter().zip(buffered);
    let mut rows = Vec::with_capacity(counts.len());
    for &count in counts {
        let mut row = OpenRow::growing(config);
        for (lineage, record) in pieces.by_ref().take(count as usize) {
            let wanted =
                *lineage.as_single().ok_or_else(|| bad(format!("a held piece is one fragment, not {lineage}")))?;
            row.push_restored(wanted, record, config)?;
        }
        if row.is_complete(config) {
            return Err(bad(format!(
                "an open row of {} segments and {} tokens should have been emitted",
                row.segments(),
                row.len()
            )));
        }
        if !row.is_empty() {
            rows.push(row);
        }
    }
    Ok(Restored { rows, emitted })
}
