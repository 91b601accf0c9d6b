//! Concatenate and chunk: one partial row per lane, cut every T tokens.

use std::sync::Arc;

use zephon_operator::{Accumulator, AccumulatorState, Lineage, OpError, RebuildInput, Record};

use crate::config::{LongerThanRow, PackOptions};
use crate::doc::{Piece, read_piece, too_long};
use crate::error::PackError;
use crate::row::{self, OpenRow};
use crate::state;

/// The wrap accumulator. Each document is consumed as soon as it arrives: what does not fit
/// the current row starts the next one, so the only state is the row under construction.
pub(crate) struct WrapAcc {
    config: Arc<PackOptions>,
    row: OpenRow,
}

impl WrapAcc {
    pub fn new(config: Arc<PackOptions>) -> Self {
        let row = OpenRow::new(&config);
        WrapAcc { config, row }
    }
}

/// Lays the first `keep` tokens of `doc` into `row` and the rows after it, emitting every row
/// it completes. A cut at a row's end that would fall inside an atomic attachment moves back to
/// the attachment's start, and the row goes out early (padded) so that the attachment starts
/// the next row whole. The fit algorithms' [`crate::EndOfData::FillRows`] lays their open
/// rows' pieces out with it too.
pub(crate) fn lay(
    row: &mut OpenRow,
    doc: &Piece,
    keep: usize,
    config: &PackOptions,
    out: &mut Vec<Record>,
) -> Result<(), PackError> {
    let mut at = 0;
    while at < keep {
        // An open row is never complete, so it has room for at least one token.
        let mut end = at + row.room(config).min(keep - at);
        if end < doc.len() {
            end = doc.safe_cut(end);
        }
        if end <= at {
            if row.is_empty() {
                return Err(too_long(doc, at, config.seq_len));
            }
            emit(row, config, out)?;
            continue;
        }
        row.push(doc.cut(at, end)?)?;
        at = end;
        if row.is_complete(config) {
            emit(row, config, out)?;
        }
    }
    Ok(())
}

/// Emits `row` and starts a new one in its place.
fn emit(row: &mut OpenRow, config: &PackOptions, out: &mut Vec<Record>) -> Result<(), PackError> {
    let full = std::mem::replace(row, OpenRow::new(config));
    out.push(full.into_record(config)?);
    Ok(())
}

impl Accumulator for WrapAcc {
    fn push(&mut self, record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        let Some(doc) = read_piece(record, &self.config)? else { return Ok(()) };
        let keep = match self.config.longer_than_row {
            LongerThanRow::Split => doc.len(),
            LongerThanRow::Truncate => doc.safe_cut(doc.len().min(self.config.seq_len)),
        };
        lay(&mut self.row, &doc, keep, &self.config, out)?;
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<Record>) -> Result<(), OpError> {
        if !self.row.is_empty() {
            emit(&mut self.row, &self.config, out)?;
        }
        Ok(())
    }

    fn export(&self) -> AccumulatorState {
        AccumulatorState { values: state::wrap_values(&self.row), buffered: self.row.lineages().collect() }
    }

    fn import(&mut self, saved: AccumulatorState, buffered: Vec<Record>) -> Result<(), OpError> {
        let mut rows = state::restore(&saved, buffered, &self.config, state::Kind::Wrap)?.rows;
        self.row = rows.pop().unwrap_or_else(|| OpenRow::new(&self.config));
        Ok(())
    }

    fn rebuild(&self, lineage: &Lineage, input: &mut dyn RebuildInput) -> Result<Record, OpError> {
        row::rebuild(&self.config, lineage, input)
    }
}
