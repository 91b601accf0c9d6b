//! ensure_mixture: keeps the realized token shares of a lane on target after tokenization.

use std::collections::VecDeque;

use zephon_core::{Accumulator, AccumulatorState, LaneContext, OpError, Operator, OperatorKind, Record, Value};

/// A token-deficit scheduler. It sits after tokenization (before packing) and lets a
/// document through only while its dataset stays within `slack_tokens` of its target share of
/// the tokens emitted so far. A document that would overshoot is held; held documents go out,
/// oldest first, as soon as the other datasets catch up.
///
/// The work source already plans sample quotas from token estimates, so supply is close to
/// the target, and this corrects what estimates cannot know: which documents (short or
/// long) actually came. If supply is persistently off, the hold queue fills and its oldest
/// document is dropped: it is counted, and the choice is a pure function of the lane's
/// stream, so it is the same on every topology. Use it with repeating or large datasets;
/// with `passes`-limited data it trades exactly-once delivery for exact shares.
///
/// Long documents make shares lumpy: split them (`LongDocuments::Split`) to at most about
/// `slack_tokens`.
#[derive(Clone, Debug)]
pub struct EnsureMixture {
    shares: Vec<f64>,
    slack_tokens: u64,
    hold: usize,
    field: String,
}

impl EnsureMixture {
    /// Target token shares by dataset index (any positive scale), a slack in tokens, and the
    /// most documents held per lane.
    pub fn new(shares: &[f64], slack_tokens: u64, hold: usize) -> Result<Self, crate::Error> {
        let sum: f64 = shares.iter().sum();
        if shares.is_empty() || !sum.is_finite() || sum <= 0.0 || shares.iter().any(|s| !s.is_finite() || *s < 0.0) {
            return Err(crate::Error::Config(format!(
                "ensure_mixture: shares {shares:?} must be non-negative with a positive sum"
            )));
        }
        if hold == 0 {
            return Err(crate::Error::Config("ensure_mixture: hold must be at least 1 document".into()));
        }
        Ok(EnsureMixture {
            shares: shares.iter().map(|s| s / sum).collect(),
            slack_tokens,
            hold,
            field: "tokens".into(),
        })
    }
}

impl Operator for EnsureMixture {
    fn name(&self) -> &str {
        "ensure_mixture"
    }

    fn fingerprint(&self) -> String {
        format!("shares={:?} slack_tokens={} hold={} field={}", self.shares, self.slack_tokens, self.hold, self.field)
    }

    fn describe(&self) -> String {
        let shares: Vec<String> = self.shares.iter().map(|s| format!("{:.1}%", 100.0 * s)).collect();
        format!(
            "token shares [{}], slack {} tokens, holds up to {} documents per lane",
            shares.join(", "),
            self.slack_tokens,
            self.hold
        )
    }

    fn kind(&self) -> OperatorKind {
        OperatorKind::Accumulate
    }

    fn accumulator(&self, _: LaneContext) -> Option<Box<dyn Accumulator>> {
        Some(Box::new(Deficit {
            cfg: self.clone(),
            emitted: vec![0; self.shares.len()],
            held: VecDeque::new(),
            dropped_docs: vec![0; self.shares.len()],
            dropped_tokens: vec![0; self.shares.len()],
        }))
    }
}

struct Deficit {
    cfg: EnsureMixture,
    /// Tokens emitted per dataset.
    emitted: Vec<u64>,
    held: VecDeque<(usize, u64, Record)>,
    /// Per dataset: documents and tokens dropped because the hold queue overflowed.
    dropped_docs: Vec<u64>,
    dropped_tokens: Vec<u64>,
}

impl Deficit {
    fn measure(&self, r: &Record) -> Result<(usize, u64), OpError> {
        let d =
            r.lineage().first_sample().map(|s| s.dataset as usize).ok_or_else(|| OpError::Data("no lineage".into()))?;
        if d >= self.cfg.shares.len() {
            return Err(OpError::Fatal(format!(
                "dataset #{d} has no share in ensure_mixture ({} shares)",
                self.cfg.shares.len()
            )));
        }
        let n = match r.get(&self.cfg.field) {
            Some(Value::Seq(a)) | Some(Value::Array(a)) => a.len() as u64,
            _ => {
                return Err(OpError::Data(format!(
                    "no {:?} field: ensure_mixture goes after tokenize",
                    self.cfg.field
                )));
            }
        };
        Ok((d, n))
    }

    /// Whether emitting `n` tokens of dataset `d` keeps it within the slack of its share.
    fn admissible(&self, d: usize, n: u64) -> bool {
        let total: u64 = self.emitted.iter().sum::<u64>() + n;
        (self.emitted[d] + n) as f64 <= self.cfg.shares[d] * total as f64 + self.cfg.slack_tokens as f64
    }

    fn emit(&mut self, d: usize, n: u64, r: Record, out: &mut Vec<Record>) {
        self.emitted[d] += n;
        out.push(r);
    }

    /// Releases held documents, oldest admissible first, until none is admissible.
    fn release(&mut self, out: &mut Vec<Record>) {
        while let Some(i) = self.held.iter().position(|(d, n, _)| self.admissible(*d, *n)) {
            if let Some((d, n, r)) = self.held.remove(i) {
                self.emit(d, n, r, out);
            }
        }
    }
}

impl Accumulator for Deficit {
    fn push(&mut self, record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        let (d, n) = self.measure(&record)?;
        if self.admissible(d, n) {
            self.emit(d, n, record, out);
            self.release(out);
        } else {
            self.held.push_back((d, n, record));
            if self.held.len() > self.cfg.hold
                && let Some((d, n, _)) = self.held.pop_front()
            {
                self.dropped_docs[d] += 1;
                self.dropped_tokens[d] += n;
            }
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<Record>) -> Result<(), OpError> {
        self.release(out);
        while let Some((d, n, r)) = self.held.pop_front() {
            self.emit(d, n, r, out);
        }
        Ok(())
    }

    /// `values` is the tokens emitted, the documents dropped and the tokens dropped, each one
    /// number per dataset.
    fn export(&self) -> AccumulatorState {
        let values = [&self.emitted, &self.dropped_docs, &self.dropped_tokens].into_iter().flatten().copied().collect();
        AccumulatorState { values, buffered: self.held.iter().map(|(_, _, r)| r.lineage().clone()).collect() }
    }

    fn import(&mut self, state: AccumulatorState, buffered: Vec<Record>) -> Result<(), OpError> {
        let k = self.cfg.shares.len();
        if state.values.len() != 3 * k {
            return Err(OpError::Fatal(format!(
                "ensure_mixture state has {} numbers, expected {}",
                state.values.len(),
                3 * k
            )));
        }
        self.emitted = state.values[..k].to_vec();
        self.dropped_docs = state.values[k..2 * k].to_vec();
        self.dropped_tokens = state.values[2 * k..].to_vec();
        self.held.clear();
        for r in buffered {
            let (d, n) = self.measure(&r)?;
            self.held.push_back((d, n, r));
        }
        Ok(())
    }
}

/// What ensure_mixture has emitted and dropped on one lane, per dataset, read from its exported
/// state (for reports): `(tokens emitted, documents dropped, tokens dropped)` per dataset.
pub fn dropped(state: &AccumulatorState) -> Option<Vec<(u64, u64, u64)>> {
    let v = &state.values;
    if v.is_empty() || !v.len().is_multiple_of(3) {
        return None;
    }
    let k = v.len() / 3;
    Some((0..k).map(|d| (v[d], v[k + d], v[2 * k + d])).collect())
}
