//! A lane's state right after one step, as a checkpoint saves it: the value a [`LaneStep`]
//! carries and the engine hands out.
//!
//! It has a module of its own because two others need it and neither owns it: steps carry
//! snapshots, and the engine's lanes take them (`engine/lane/snapshot.rs`, which decides when
//! and from what). Here it is only a value, so steps never depend on the engine.
//!
//! [`LaneStep`]: crate::LaneStep

use std::sync::Arc;

use crate::checkpoint::{Cursor, LaneState, Skips, SteerState, TailDropped};
use zephon_operator::{AccumulatorState, Lane, Lineage};

/// A lane's state right after one step, as a checkpoint saves it.
///
/// Snapshots taken at one input boundary share one core (accumulator states, the lineage of
/// every row not yet delivered) and differ only in where their pending rows start: a document
/// that fills thousands of steps at once costs memory in proportion to its rows, not to their
/// square.
#[derive(Clone, Debug)]
pub(crate) struct Snapshot {
    core: Arc<SnapshotCore>,
    pending_from: usize,
}

/// What the snapshots taken at one input position share.
#[derive(Debug)]
pub(crate) struct SnapshotCore {
    pub(crate) lane: Lane,
    pub(crate) cursor: Cursor,
    pub(crate) input_progress: u64,
    pub(crate) rows_emitted: u64,
    pub(crate) skips: Skips,
    pub(crate) finished: bool,
    pub(crate) tail_dropped: TailDropped,
    pub(crate) steer: Option<SteerState>,
    pub(crate) accumulators: Vec<AccumulatorState>,
    /// The lineage of every row not yet delivered at the earliest step sharing this core.
    pub(crate) pending: Vec<Lineage>,
}

impl Snapshot {
    /// The snapshot whose pending rows are all of `core`'s.
    pub(crate) fn new(core: SnapshotCore) -> Snapshot {
        Snapshot { core: Arc::new(core), pending_from: 0 }
    }

    /// A snapshot sharing this one's core whose pending rows start at `pending_from` (the rows
    /// of the steps between this one's and the new one's are delivered by then).
    pub(crate) fn pending_from(&self, pending_from: usize) -> Snapshot {
        Snapshot { core: self.core.clone(), pending_from }
    }

    /// The state a checkpoint holds.
    pub(crate) fn state(&self) -> LaneState {
        let c = &*self.core;
        LaneState {
            lane: c.lane,
            cursor: c.cursor,
            input_progress: c.input_progress,
            rows_emitted: c.rows_emitted,
            skips: c.skips.clone(),
            finished: c.finished,
            tail_dropped: c.tail_dropped.clone(),
            steer: c.steer.clone(),
            accumulators: c.accumulators.clone(),
            pending: c.pending.get(self.pending_from..).unwrap_or_default().to_vec(),
        }
    }

    /// Records skipped so far under the skip policy, by dataset.
    pub(crate) fn skips(&self) -> &Skips {
        &self.core.skips
    }
}
