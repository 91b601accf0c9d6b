//! Taking a lane's snapshots: its state after a step, as a checkpoint saves it, taken at input
//! boundaries (or where a lane pauses inside an input) and shared between the steps finalized
//! there. The value itself is [`crate::snapshot::Snapshot`].

use crate::checkpoint::Cursor;
use crate::snapshot::{Snapshot, SnapshotCore};
use crate::step::LaneStep;

use super::LaneRun;

impl LaneRun {
    /// The state now, as a checkpoint would hold it: every row not yet handed to the consumer
    /// is pending (used for the start-of-run snapshot and for ended lanes).
    pub fn snapshot_now(&self) -> Snapshot {
        // A lane restored inside an input has not pushed anything past that input's first
        // `skip_outputs` records yet: that is still its position.
        self.snapshot_core(0, self.cursor, self.skip_outputs)
    }

    /// A snapshot at the current input position whose pending rows are those of the queued
    /// steps from `first` on plus the step being filled.
    pub(super) fn snapshot_core(&self, first: usize, cursor: Cursor, input_progress: u64) -> Snapshot {
        let pending = (self.steps.iter().skip(first).flat_map(|s| &s.rows))
            .chain(&self.current)
            .map(|r| r.lineage().clone())
            .collect();
        Snapshot::new(SnapshotCore {
            lane: self.lane,
            cursor,
            input_progress,
            rows_emitted: self.rows_emitted,
            skips: self.skips.clone(),
            finished: self.finished,
            tail_dropped: self.tail_dropped.clone(),
            steer: self.steer.as_ref().map(|s| s.state.clone()),
            accumulators: self.accs.iter().map(|a| a.export()).collect(),
            pending,
        })
    }

    /// An input boundary: the state is consistent, so steps finalized since the last boundary
    /// get their snapshots now.
    pub(super) fn boundary(&mut self) {
        self.snapshot_unsnapped(self.cursor, 0);
    }

    /// Snapshots the steps finalized since the last snapshot, as at input `cursor` with
    /// `input_progress` of its records already pushed (0 at an input boundary).
    pub(super) fn snapshot_unsnapped(&mut self, cursor: Cursor, input_progress: u64) {
        if self.unsnapped == 0 {
            return;
        }
        let timed = self.times.snapshots_timed.start();
        self.snapshot_steps(cursor, input_progress);
        if let Some((t, weight)) = timed {
            self.times.snapshot += weight * crate::engine::timing::since(t);
        }
    }

    pub(super) fn snapshot_steps(&mut self, cursor: Cursor, input_progress: u64) {
        let first = self.steps.len() - self.unsnapped;
        self.unsnapped = 0;
        let (every, at) = (self.snapshot_every, self.snapshot_at);
        let wanted = |s: &LaneStep| (s.step.0 + 1).is_multiple_of(every) || at == Some(s.step.0 + 1);
        let Some(lowest) = (first..self.steps.len()).find(|&i| wanted(&self.steps[i])) else { return };
        // One core for all of them, pending from the first step after the lowest: the rows
        // pending after step i are those of the steps after it, so each snapshot starts its
        // pending rows where step i's successors begin. With one row a step (as many lanes
        // as rows), no step's own rows are ever copied.
        let base = self.snapshot_core(lowest + 1, cursor, input_progress);
        let mut pending_from = 0;
        for i in lowest..self.steps.len() {
            if i > lowest {
                pending_from += self.steps[i].rows.len();
            }
            if wanted(&self.steps[i]) {
                self.steps[i].state = Some(base.pending_from(pending_from));
            }
        }
    }
}
