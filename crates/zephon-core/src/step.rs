//! Steps: the rows each lane gives a step, the local step of a rank, microbatches, and the
//! digests that prove two runs delivered the same bytes.

use crate::batch::Batch;
use crate::error::{Error, Result};
use crate::snapshot::Snapshot;
use crate::topology::Topology;
use zephon_operator::{Digest, Hasher, Lane, Record, Step};

/// SHA-256 over the canonical encodings of `rows`, in order: the lane's digest for a step.
pub fn lane_digest(rows: &[Record]) -> Digest {
    let mut h = Hasher::new();
    for r in rows {
        zephon_operator::encode_record(r, &mut |b| h.update(b));
    }
    h.finish()
}

/// The step fingerprint: SHA-256 over the lane digests (32 raw bytes each) in lane order.
/// Ranks compute their lanes' digests independently; concatenating them in lane order and
/// hashing gives the global fingerprint without any communication.
pub fn step_fingerprint<'a>(lane_digests: impl IntoIterator<Item = &'a Digest>) -> Digest {
    let mut h = Hasher::new();
    for d in lane_digests {
        h.update(&d.0);
    }
    h.finish()
}

/// One lane's rows for one step.
#[derive(Debug)]
pub struct LaneStep {
    pub(crate) lane: Lane,
    pub(crate) step: Step,
    pub(crate) rows: Vec<Record>,
    /// Made by the worker that made the step (`ExecOptions::digests_by_workers`), else by the
    /// first call of [`LaneStep::digest`].
    pub(crate) digest: LaneDigest,
    /// The lane's state right after this step, if a snapshot was taken for it.
    pub(crate) state: Option<Snapshot>,
}

impl LaneStep {
    /// The lane.
    pub fn lane(&self) -> Lane {
        self.lane
    }

    /// The rows, in lane order (R of them, fewer only in a final partial step).
    pub fn rows(&self) -> &[Record] {
        &self.rows
    }

    /// SHA-256 of the rows' canonical encodings: made by the worker that made the step, or
    /// here on first call when workers do not digest (`ExecOptions::digests_by_workers`).
    pub fn digest(&self) -> Digest {
        *self.digest_ref()
    }

    fn digest_ref(&self) -> &Digest {
        match &self.digest.made {
            Some(d) => d,
            None => self.digest.later.get_or_init(|| lane_digest(&self.rows)),
        }
    }
}

/// A lane step's digest: made with the step, or computed where it is first asked for.
///
/// Not a `OnceLock` made with its value: `OnceLock::from` sets it through the lock's `Once`,
/// a cost per lane step that shows when lane steps are one row each.
#[derive(Debug, Default)]
pub(crate) struct LaneDigest {
    made: Option<Digest>,
    later: std::sync::OnceLock<Digest>,
}

impl LaneDigest {
    /// The digest, made with the step.
    pub(crate) fn made(digest: Digest) -> Self {
        LaneDigest { made: Some(digest), later: std::sync::OnceLock::new() }
    }

    /// A digest computed on first ask.
    pub(crate) fn later() -> Self {
        LaneDigest::default()
    }
}

/// A rank's share of a global step: its lanes' rows in lane order.
#[derive(Debug)]
pub struct LocalStep {
    pub(crate) step: Step,
    pub(crate) topology: Topology,
    pub(crate) lanes: Vec<LaneStep>,
}

impl LocalStep {
    /// This rank's part of step `step` with every lane holding `rows_per_lane` copies of
    /// `pad` (a padding row): what a rank delivers for a step its lanes have no data for
    /// while other ranks' lanes still do (a validation pass ending together).
    pub fn padding(step: Step, topology: &Topology, rows_per_lane: usize, pad: &Record) -> LocalStep {
        let lanes = topology
            .owned_lanes()
            .map(|lane| LaneStep {
                lane,
                step,
                rows: vec![pad.clone(); rows_per_lane],
                digest: LaneDigest::later(),
                state: None,
            })
            .collect();
        LocalStep { step, topology: topology.clone(), lanes }
    }

    /// The step with every lane's rows filled up to `rows_per_lane` with copies of `pad`.
    /// The lanes' digests cover the padding: the padded step is what the trainer gets.
    #[must_use]
    pub fn padded(mut self, rows_per_lane: usize, pad: &Record) -> LocalStep {
        for l in &mut self.lanes {
            if l.rows.len() < rows_per_lane {
                l.rows.resize(rows_per_lane, pad.clone());
                l.digest = LaneDigest::later();
            }
        }
        self
    }

    /// Which global step this is.
    pub fn step(&self) -> Step {
        self.step
    }

    /// The topology it was produced under.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// The owned lanes' contributions, in lane order.
    pub fn lanes(&self) -> &[LaneStep] {
        &self.lanes
    }

    /// All rows in lane order.
    pub fn rows(&self) -> impl Iterator<Item = &Record> {
        self.lanes.iter().flat_map(|l| l.rows.iter())
    }

    /// Number of rows (the topology's local rows of this step, fewer only in a final partial
    /// step).
    pub fn len(&self) -> usize {
        self.lanes.iter().map(|l| l.rows.len()).sum()
    }

    /// Whether the step has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether this is a final partial step (some lane gave fewer than G(step)/L rows).
    pub fn is_partial(&self) -> bool {
        let r = self.topology.rows_per_lane_at(self.step.0) as usize;
        self.lanes.iter().any(|l| l.rows.len() != r)
    }

    /// `(lane, digest)` for each owned lane.
    pub fn lane_digests(&self) -> impl Iterator<Item = (Lane, Digest)> + '_ {
        self.lanes.iter().map(|l| (l.lane, l.digest()))
    }

    /// The fingerprint over this rank's lanes only (equals the global fingerprint at W = 1).
    pub fn local_fingerprint(&self) -> Digest {
        step_fingerprint(self.lanes.iter().map(LaneStep::digest_ref))
    }

    /// The rows stacked into one columnar batch.
    pub fn to_batch(&self) -> Result<Batch> {
        Batch::from_rows(self.rows()).map_err(|e| Error::Step { step: self.step, message: e.to_string() })
    }

    /// The local step cut into microbatches of `size` rows, in order. A view: microbatching
    /// never changes which rows a step holds. `size` must divide the local row count.
    pub fn microbatches(&self, size: usize) -> Result<Vec<Microbatch<'_>>> {
        let rows: Vec<&Record> = self.rows().collect();
        if size == 0 || (!rows.len().is_multiple_of(size) && !self.is_partial()) {
            return Err(Error::Step {
                step: self.step,
                message: format!("microbatch size {size} does not divide the local step's {} rows", rows.len()),
            });
        }
        Ok(rows.chunks(size).map(|c| Microbatch { step: self.step, rows: c.to_vec() }).collect())
    }
}

/// A slice of a local step.
#[derive(Debug)]
pub struct Microbatch<'a> {
    step: Step,
    rows: Vec<&'a Record>,
}

impl<'a> Microbatch<'a> {
    /// The rows.
    pub fn rows(&self) -> &[&'a Record] {
        &self.rows
    }

    /// The rows stacked into one columnar batch.
    pub fn to_batch(&self) -> Result<Batch> {
        Batch::from_rows(self.rows.iter().copied()).map_err(|e| Error::Step { step: self.step, message: e.to_string() })
    }
}
