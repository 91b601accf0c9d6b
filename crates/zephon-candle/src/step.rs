//! A local step's tensors ([`Sink::step`]), with what identifies the step.

use zephon_core::{Batch, LocalStep};
use zephon_operator::{Digest, Lane, Lineage, Step};

use crate::error::Result;
use crate::sink::Sink;
use crate::tensors::Tensors;

/// The tensors of one local step (or of each of its microbatches), with the step's number,
/// fingerprint and rows' lineage.
#[derive(Clone, Debug)]
pub struct StepTensors {
    step: Step,
    fingerprint: Digest,
    lane_digests: Vec<(Lane, Digest)>,
    partial: bool,
    lineage: Vec<Lineage>,
    microbatches: Vec<Tensors>,
}

impl StepTensors {
    /// Which global step this is.
    pub fn step(&self) -> Step {
        self.step
    }

    /// The fingerprint over this rank's lanes ([`LocalStep::local_fingerprint`]).
    pub fn local_fingerprint(&self) -> Digest {
        self.fingerprint
    }

    /// `(lane, digest)` for each owned lane, in lane order: concatenated over ranks in lane
    /// order, they give the global fingerprint (`zephon_core::step_fingerprint`).
    pub fn lane_digests(&self) -> &[(Lane, Digest)] {
        &self.lane_digests
    }

    /// Whether this is a final partial step.
    pub fn is_partial(&self) -> bool {
        self.partial
    }

    /// Each row's lineage, in row order: which samples and token ranges made it.
    pub fn lineage(&self) -> &[Lineage] {
        &self.lineage
    }

    /// The tensors of each microbatch, in order (one entry when the step was not cut).
    pub fn microbatches(&self) -> &[Tensors] {
        &self.microbatches
    }

    /// The tensors of each microbatch, moved out.
    pub fn into_microbatches(self) -> Vec<Tensors> {
        self.microbatches
    }

    /// The tensors of the whole step, when it was not cut into microbatches.
    pub fn tensors(&self) -> Option<&Tensors> {
        match self.microbatches.as_slice() {
            [only] => Some(only),
            _ => None,
        }
    }
}

impl Sink {
    /// A local step's tensors: the whole step as one batch (`microbatch` = `None`), or its
    /// microbatches of `microbatch` rows in order. The step is consumed and dropped before
    /// the conversion, so rows that end up alone in a batch hand their buffers over.
    pub fn step(&self, step: LocalStep, microbatch: Option<usize>) -> Result<StepTensors> {
        let batches: Vec<Batch> = match microbatch {
            None => vec![step.to_batch()?],
            Some(n) => step.microbatches(n)?.iter().map(|m| m.to_batch()).collect::<zephon_core::Result<_>>()?,
        };
        let number = step.step();
        let fingerprint = step.local_fingerprint();
        let lane_digests = step.lane_digests().collect();
        let partial = step.is_partial();
        // The rows go before the conversion: a batch of one row shares that row's buffers, and
        // only once the row is gone does the batch own them alone and hand them over uncopied.
        drop(step);
        let mut lineage = Vec::new();
        let mut microbatches = Vec::with_capacity(batches.len());
        for b in batches {
            lineage.extend_from_slice(b.lineages());
            microbatches.push(self.convert(b)?);
        }
        Ok(StepTensors { step: number, fingerprint, lane_digests, partial, lineage, microbatches })
    }
}
