//! First-fit and best-fit: up to `bins` open rows per lane; each piece goes into one of them.

use std::sync::Arc;

use zephon_operator::{Accumulator, AccumulatorState, Lineage, OpError, RebuildInput, Record};

use crate::config::{EndOfData, PackOptions};
use crate::doc::{Piece, pieces, read_piece};
use crate::error::PackError;
use crate::row::{self, OpenRow};
use crate::state;
use crate::wrap;

/// Which open row a piece goes into.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Choice {
    /// The oldest row with room.
    First,
    /// The row with the least room left after the piece; ties to the oldest.
    Best,
}

/// The first-fit / best-fit accumulator. Open rows are kept in creation order, so "oldest" is
/// "first in the list" and the state needs no creation counters.
pub(crate) struct FitAcc {
    config: Arc<PackOptions>,
    choice: Choice,
    bins: usize,
    open: Vec<OpenRow>,
    /// Rows emitted so far, up to `bins` (all a warm-up needs).
    emitted: u64,
}

impl FitAcc {
    pub fn new(config: Arc<PackOptions>, choice: Choice, bins: usize) -> Self {
        FitAcc { config, choice, bins, open: Vec::new(), emitted: 0 }
    }

    /// Places one piece of at most T tokens.
    fn place(&mut self, piece: Piece, out: &mut Vec<Record>) -> Result<(), PackError> {
        let config = &*self.config;
        let n = piece.len();
        // A piece that completes a row on its own (T tokens, or one segment a row) is a row:
        // no open row could take it, and evicting one for it would only waste that row's room.
        if n >= config.seq_len || config.max_segments <= 1 {
            let mut row = OpenRow::new(config);
            row.push(piece)?;
            out.push(row.into_record(config)?);
            return Ok(());
        }
        let mut fitting = self.open.iter().enumerate().filter(|(_, r)| r.room(config) >= n);
        let target = match self.choice {
            Choice::First => fitting.next().map(|(i, _)| i),
            // `min_by_key` keeps the first of equal keys: the oldest row.
            Choice::Best => fitting.min_by_key(|(_, r)| r.room(config) - n).map(|(i, _)| i),
        };
        match target {
            Some(i) => {
                self.open[i].push(piece)?;
                if self.open[i].is_complete(config) {
                    out.push(self.open.remove(i).into_record(config)?);
                }
            }
            None => {
                if self.open.len() >= state::open_cap(self.bins, config.warm_up, self.emitted) {
                    // The fullest row (least room; ties to the oldest) makes way.
                    let fullest = self.open.iter().enumerate().min_by_key(|(_, r)| r.room(config)).map(|(i, _)| i);
                    if let Some(j) = fullest {
                        out.push(self.open.remove(j).into_record(config)?);
                    }
                }
                let mut row = OpenRow::growing(config);
                row.push(piece)?;
                self.open.push(row);
            }
        }
        Ok(())
    }
}

impl Accumulator for FitAcc {
    fn push(&mut self, record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        let Some(doc) = read_piece(record, &self.config)? else { return Ok(()) };
        let before = out.len();
        for piece in pieces(doc, self.config.seq_len, self.config.longer_than_row)? {
            self.place(piece, out)?;
        }
        let emitted = (out.len() - before) as u64;
        self.emitted = self.emitted.saturating_add(emitted).min(self.bins as u64);
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<Record>) -> Result<(), OpError> {
        let config = &*self.config;
        let open = std::mem::take(&mut self.open);
        match config.end_of_data {
            EndOfData::KeepPieces => {
                for row in open {
                    out.push(row.into_record(config)?);
                }
            }
            EndOfData::FillRows => {
                let mut row = OpenRow::new(config);
                for piece in open.into_iter().map(OpenRow::into_pieces).collect::<Result<Vec<_>, _>>()?.iter().flatten()
                {
                    wrap::lay(&mut row, piece, piece.len(), config, out)?;
                }
                if !row.is_empty() {
                    out.push(row.into_record(config)?);
                }
            }
        }
        Ok(())
    }

    fn export(&self) -> AccumulatorState {
        AccumulatorState {
            values: state::fit_values(&self.open, self.config.warm_up.then_some(self.emitted)),
            buffered: {
                // Sized up front: a lane exports its open rows at every step boundary.
                let mut all = Vec::with_capacity(self.open.iter().map(|r| r.lineages().len()).sum());
                all.extend(self.open.iter().flat_map(OpenRow::lineages));
                all
            },
        }
    }

    fn import(&mut self, saved: AccumulatorState, buffered: Vec<Record>) -> Result<(), OpError> {
        let kind = state::Kind::Fit { bins: self.bins, warm_up: self.config.warm_up };
        let restored = state::restore(&saved, buffered, &self.config, kind)?;
        (self.open, self.emitted) = (restored.rows, restored.emitted);
        Ok(())
    }

    fn rebuild(&self, lineage: &Lineage, input: &mut dyn RebuildInput) -> Result<Record, OpError> {
        row::rebuild(&self.config, lineage, input)
    }
}
