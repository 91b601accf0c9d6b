//! The checkpoint encoding of open rows: small numbers plus each held piece's lineage.
//!
//! `values` is `[kind, ...]`:
//! - wrap: `[1, n]`, n pieces in the row under construction;
//! - first/best fit: `[2, c₀, c₁, ...]`, the piece count of each open row in creation order.
//!
//! `buffered` is every held piece, row by row, in order: one single-fragment lineage each. No
//! tokens are saved; restore hands the pieces back rebuilt and [`restore`] regroups them.

use zephon_core::{AccumulatorState, Record};

use crate::config::PackConfig;
use crate::error::PackError;
use crate::row::OpenRow;

const WRAP: u64 = 1;
const FIT: u64 = 2;

/// Which accumulator a state belongs to.
#[derive(Copy, Clone, Debug)]
pub(crate) enum Kind {
    Wrap,
    Fit { bins: usize },
}

pub(crate) fn wrap_values(row: &OpenRow) -> Vec<u64> {
    vec![WRAP, row.segments() as u64]
}

pub(crate) fn fit_values(open: &[OpenRow]) -> Vec<u64> {
    std::iter::once(FIT).chain(open.iter().map(|r| r.segments() as u64)).collect()
}

/// The open rows a state describes, checked: the shape must be one this packer can be in.
pub(crate) fn restore(
    saved: &AccumulatorState,
    buffered: Vec<Record>,
    config: &PackConfig,
    kind: Kind,
) -> Result<Vec<OpenRow>, PackError> {
    let bad = |m: String| PackError::State(m);
    let (tag, counts) = saved.values.split_first().ok_or_else(|| bad("no values".into()))?;
    match kind {
        Kind::Wrap if *tag != WRAP || counts.len() != 1 => {
            return Err(bad(format!("values {:?} are not a wrap state", saved.values)));
        }
        Kind::Fit { bins } if *tag != FIT || counts.len() > bins || counts.contains(&0) => {
            return Err(bad(format!("values {:?} are not a fit state of at most {bins} open rows", saved.values)));
        }
        _ => {}
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
        let mut row = OpenRow::growing();
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
    Ok(rows)
}
