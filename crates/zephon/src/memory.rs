//! What a run's lanes may hold, from what its operators offer ([`zephon_operator::Holding`]):
//! stated by `explain` before anything runs, and checked by the tests against what the lanes
//! hold.

use zephon_core::{ExecOptions, Operators, Topology};
use zephon_operator::Holding;

/// The most one lane of a run holds, part by part. Positions are sequence positions (tokens);
/// each is a few arrays' elements in a row (ids, labels, positions, segment ids, mask).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemoryBound {
    /// Positions in rows made ahead of the trainer: the step it takes, the prefetch and the
    /// step being filled, at the most rows a lane gives a step.
    pub rows_ahead: u64,
    /// Positions each accumulator holds at most, by operator.
    pub buffers: Vec<(String, u64)>,
    /// Records (documents or pieces) accumulators before the packer hold at most.
    pub buffered_records: u64,
    /// Accumulators that do not say what they hold.
    pub unstated: Vec<String>,
    /// Documents a lane reads ahead of its closed loop (token shares), not counting one a
    /// dataset it waits for; 0 for a mixture by weights, whose lanes read their units in turn.
    pub documents_read_ahead: u64,
    /// The lanes of this rank.
    pub lanes: u32,
}

impl MemoryBound {
    /// From the operators' offers, the topology and the execution settings; `steered` when
    /// the lanes read by a closed loop.
    pub(crate) fn of(operators: &Operators, topology: &Topology, exec: &ExecOptions, steered: bool) -> Self {
        let ops = operators.operators();
        let packer = ops.iter().rposition(|op| op.offer().row_length.is_some());
        let row_length = packer.and_then(|i| ops[i].offer().row_length).unwrap_or(0) as u64;
        let rows_per_lane = topology
            .rows_per_step()
            .segments()
            .iter()
            .map(|&(_, g)| u64::from(g / topology.lanes()))
            .max()
            .unwrap_or(0);
        let owned = topology.owned_range().len();
        let mut bound = MemoryBound {
            rows_ahead: (exec.prefetch_steps + 2) * rows_per_lane * row_length,
            buffers: Vec::new(),
            buffered_records: 0,
            unstated: Vec::new(),
            documents_read_ahead: if steered { exec.read_ahead(owned) as u64 } else { 0 },
            lanes: owned as u32,
        };
        for (i, op) in ops.iter().enumerate().filter(|(_, op)| op.kind().accumulates()) {
            match op.offer().holds {
                Some(Holding::Positions(n)) => bound.buffers.push((op.name().to_string(), n)),
                Some(Holding::Records(n)) if packer.is_some_and(|p| p < i) => {
                    bound.buffers.push((op.name().to_string(), n.saturating_mul(row_length)));
                }
                Some(Holding::Records(n)) => bound.buffered_records += n,
                Some(Holding::Nothing) => {}
                None => bound.unstated.push(op.name().to_string()),
            }
        }
        bound
    }

    /// Positions one lane's accumulators hold at most.
    pub fn buffered_positions(&self) -> u64 {
        self.buffers.iter().map(|(_, n)| n).sum()
    }

    /// Positions one lane holds at most: its accumulators and its rows made ahead.
    pub fn positions_per_lane(&self) -> u64 {
        self.buffered_positions() + self.rows_ahead
    }

    /// In words, for `explain`.
    pub fn describe(&self) -> String {
        let mut parts = vec![format!("rows made ahead {}", self.rows_ahead)];
        parts.extend(self.buffers.iter().map(|(name, n)| format!("{name} {n}")));
        let mut out = format!(
            "per lane at most {} positions ({}); this rank's {} lanes {} positions (about {} MiB at 24 bytes a \
             position)",
            self.positions_per_lane(),
            parts.join(", "),
            self.lanes,
            self.positions_per_lane() * u64::from(self.lanes),
            (self.positions_per_lane() * u64::from(self.lanes) * 24) >> 20
        );
        if self.buffered_records > 0 {
            out.push_str(&format!("; plus {} records per lane held before the packer", self.buffered_records));
        }
        if self.documents_read_ahead > 0 {
            out.push_str(&format!(
                "; plus the documents read ahead: at most {} per lane, and one per dataset the lane waits for",
                self.documents_read_ahead
            ));
        }
        if !self.unstated.is_empty() {
            out.push_str(&format!("; plus what {} hold (they do not say)", self.unstated.join(", ")));
        }
        out
    }
}
