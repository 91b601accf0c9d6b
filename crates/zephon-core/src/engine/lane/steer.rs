//! A steered lane's closed loop: it chooses its next chunk by what it delivered of each dataset.

use std::sync::Arc;

use crate::checkpoint::{Cursor, SteerState};
use crate::error::Error;
use crate::source::{Chunk, WorkSource};

use super::LaneRun;

/// A steered lane's closed loop: what it delivered of each dataset, and the chunks it chose
/// to read next, waiting for the scheduler.
pub(super) struct LaneSteer {
    pub(super) source: Arc<dyn WorkSource>,
    pub(super) lanes: u32,
    pub(super) state: SteerState,
    pub(super) chosen: Vec<SteeredChunk>,
}

/// A chunk a steered lane chose to read (from `start` on), or the end of its input.
pub(crate) enum SteeredChunk {
    Chunk { chunk: Arc<Chunk>, k: u64, start: u64 },
    End,
}

impl LaneRun {
    /// Whether the lane reads its datasets by a closed loop ([`crate::Steering`]).
    pub fn is_steered(&self) -> bool {
        self.steer.is_some()
    }

    /// The chunks a steered lane chose since the last call, for the scheduler.
    pub fn take_chosen(&mut self) -> Vec<SteeredChunk> {
        self.steer.as_mut().map_or_else(Vec::new, |s| std::mem::take(&mut s.chosen))
    }

    /// A steered lane's next chunk: of the dataset the closed loop names, skipping datasets
    /// the lane has no more of and empty chunks; the end of the input when it names none.
    pub(super) fn choose_next(&mut self) {
        let lane = self.lane;
        let Some(s) = self.steer.as_mut() else { return };
        let Some(steering) = s.source.steering() else {
            self.error = Some(Error::Source { lane, message: "a steered lane's work source does not steer".into() });
            return;
        };
        let st = &mut s.state;
        // The shares in force at the step this lane is making rows for; a new segment counts
        // what the lane delivers afresh and retargets the accumulators.
        let schedule = steering.shares();
        let segment = schedule.segment_start(self.next_step);
        let shares = schedule.at(self.next_step);
        if segment != st.segment {
            st.segment = segment;
            st.segment_base = st.delivered.clone();
            for a in &mut self.accs {
                a.targets_changed(shares);
            }
        }
        loop {
            let since = st.delivered_in_segment();
            let Some(d) = steering.next_dataset(shares, &since, &st.exhausted) else {
                st.current = None;
                s.chosen.push(SteeredChunk::End);
                return;
            };
            let Some(k) = st.chunks.get(d as usize).copied() else {
                self.error = Some(Error::Source {
                    lane,
                    message: format!("the closed loop chose dataset #{d}, which it does not have"),
                });
                return;
            };
            match steering.dataset_chunk(lane, s.lanes, d, k) {
                Ok(Some(c)) if c.samples.is_empty() => st.chunks[d as usize] += 1,
                Ok(Some(c)) => {
                    st.current = Some(d);
                    self.cursor = Cursor { chunk: k, offset: 0 };
                    s.chosen.push(SteeredChunk::Chunk { chunk: Arc::new(c), k, start: 0 });
                    return;
                }
                Ok(None) => {
                    st.exhausted[d as usize] = true;
                    for a in &mut self.accs {
                        a.dataset_ended(d);
                    }
                }
                Err(e) => {
                    self.error = Some(e);
                    return;
                }
            }
        }
    }

    /// A steered lane's chunk at its restored cursor, for the scheduler.
    pub(super) fn rechoose_current(&mut self) {
        let (lane, cursor) = (self.lane, self.cursor);
        let Some(s) = self.steer.as_mut() else { return };
        let Some(d) = s.state.current else {
            s.chosen.push(SteeredChunk::End);
            return;
        };
        let found = s.source.steering().map(|st| st.dataset_chunk(lane, s.lanes, d, cursor.chunk));
        match found {
            Some(Ok(Some(c))) => {
                s.chosen.push(SteeredChunk::Chunk { chunk: Arc::new(c), k: cursor.chunk, start: cursor.offset })
            }
            Some(Ok(None)) => {
                self.error = Some(Error::Source {
                    lane,
                    message: format!("the checkpoint's chunk {} of dataset #{d} does not exist", cursor.chunk),
                })
            }
            Some(Err(e)) => self.error = Some(e),
            None => self.error = Some(Error::Source { lane, message: "the work source does not steer".into() }),
        }
    }
}
