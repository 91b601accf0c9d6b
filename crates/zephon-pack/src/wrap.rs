//! Concatenate and chunk: one partial row per lane, cut every T tokens.

use std::sync::Arc;

use zephon_core::{Accumulator, AccumulatorState, Lineage, OpError, RebuildInput, Record};

use crate::config::{LongDocs, PackConfig};
use crate::doc::{read_piece, too_long};
use crate::error::PackError;
use crate::row::{self, OpenRow};
use crate::state;

/// The wrap accumulator. Each document is consumed as soon as it arrives: what does not fit
/// the current row starts the next one, so the only state is the row under construction.
pub(crate) struct WrapAcc {
    config: Arc<PackConfig>,
    row: OpenRow,
}

impl WrapAcc {
    pub fn new(config: Arc<PackConfig>) -> Self {
        let row = OpenRow::new(&config);
        WrapAcc { config, row }
    }

    fn emit(&mut self, out: &mut Vec<Record>) -> Result<(), PackError> {
        let row = std::mem::replace(&mut self.row, OpenRow::new(&self.config));
        out.push(row.into_record(&self.config)?);
        Ok(())
    }
}

impl Accumulator for WrapAcc {
    /// Fills the current row from the document; a cut at the row's end that would fall inside
    /// an atomic attachment moves back to the attachment's start, and the row goes out early
    /// (padded) so that the attachment starts the next row whole.
    fn push(&mut self, record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        let Some(doc) = read_piece(record, &self.config.input_field)? else { return Ok(()) };
        let t = self.config.seq_len;
        let keep = match self.config.long {
            LongDocs::Split => doc.len(),
            LongDocs::Truncate => doc.safe_cut(doc.len().min(t)),
        };
        let mut at = 0;
        while at < keep {
            // An open row is never complete, so it has room for at least one token.
            let mut end = at + self.row.room(&self.config).min(keep - at);
            if end < doc.len() {
                end = doc.safe_cut(end);
            }
            if end <= at {
                if self.row.is_empty() {
                    return Err(too_long(&doc, at, t).into());
                }
                self.emit(out)?;
                continue;
            }
            self.row.push(doc.cut(at, end)?)?;
            at = end;
            if self.row.is_complete(&self.config) {
                self.emit(out)?;
            }
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<Record>) -> Result<(), OpError> {
        if !self.row.is_empty() {
            self.emit(out)?;
        }
        Ok(())
    }

    fn export(&self) -> AccumulatorState {
        AccumulatorState { values: state::wrap_values(&self.row), buffered: self.row.lineages().collect() }
    }

    fn import(&mut self, saved: AccumulatorState, buffered: Vec<Record>) -> Result<(), OpError> {
        let mut rows = state::restore(&saved, buffered, &self.config, state::Kind::Wrap)?;
        self.row = rows.pop().unwrap_or_else(|| OpenRow::new(&self.config));
        Ok(())
    }

    fn rebuild(&self, lineage: &Lineage, input: &mut dyn RebuildInput) -> Result<Record, OpError> {
        row::rebuild(&self.config, lineage, input)
    }
}
