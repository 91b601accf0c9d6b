//! ensure_mixture: keeps the token shares of the rows a lane's packer makes on target.

use std::sync::Arc;

use zephon_operator::Tally;
use zephon_operator::{
    Accumulator, AccumulatorState, Assembly, Holding, LaneContext, Offer, OpError, Operator, OperatorKind, Record,
    Settings, Value,
};

use crate::ensure_report::{EnsureCounts, EnsureDataset, held};
use crate::held::Held;

/// A token-share scheduler. It sits after tokenization, before packing, and lets a document
/// (or a piece of one, split by tokenize) through only while its dataset stays within
/// `slack_tokens` of its target share, measured on the rows the packer has made. A piece that
/// would overshoot is held; held pieces go out, oldest first, as soon as the other datasets
/// catch up. It drops nothing: each lane's work source supplies what it needs, by a closed loop
/// on the tokens the lane delivered ([`crate::SteeredSource`]), so what it holds stays within
/// about a chunk and a document. An explicit [`EnsureMixture::hold`] caps it instead, dropping
/// (and counting) the oldest held piece past the cap.
///
/// Measured at its own output, the shares would lag behind the packer: bins keep short
/// documents while full rows of long-document pieces leave at once (at 64 bins of 1024, one
/// dataset would run ~15 k tokens a lane ahead). So it watches what the packer emits
/// ([`Accumulator::next_stage_out`]) and counts what the packer holds only beyond its standing
/// stock ([`EnsureMixture::standing_stock`], the open rows). Everything it counts is a pure
/// function of the lane's stream, and is in its checkpoint.
///
/// A shuffle buffer after the packer is left out on purpose: steering by the shuffled rows
/// goes round the buffer's delay and makes the shares swing. The buffer's random order moves
/// a lane's shares by a few rows' worth of tokens around the packer's.
///
/// When a steered lane runs out of a dataset ([`Accumulator::dataset_ended`]), the others share
/// the targets in proportion to their shares, as the work source does. When the mixture's share
/// schedule starts a new segment ([`Accumulator::targets_changed`]) it takes the new targets
/// and measures what the next stage emits from there on.
///
/// Long documents make shares lumpy: split them (`LongDocuments::Split`) to at most about
/// `slack_tokens`. The packer must pass on every token it gets (truncation is allowed for
/// with [`EnsureMixture::truncated_to`]).
#[derive(Clone, Debug)]
pub struct EnsureMixture {
    shares: Vec<f64>,
    slack_tokens: u64,
    hold: Option<usize>,
    /// The most tokens it holds in one lane: past it, the oldest held piece goes out.
    max_held: Option<u64>,
    /// Tokens by which the stages after this one may hold more of a dataset than its share
    /// for good (packing bins); see [`EnsureMixture::standing_stock`].
    stock_tokens: u64,
    /// The most tokens of one document the stages after this one pass on (a truncating packer).
    kept_tokens: u64,
    field: String,
    /// Made by [`EnsureMixture::slack_tokens`]: shares, standing stock and truncation come from
    /// the pipeline when it is assembled.
    planned: bool,
}

impl EnsureMixture {
    /// Target token shares by dataset index (any positive scale) and a slack in tokens.
    pub fn new(shares: &[f64], slack_tokens: u64) -> Result<Self, crate::Error> {
        let sum: f64 = shares.iter().sum();
        if shares.is_empty() || !sum.is_finite() || sum <= 0.0 || shares.iter().any(|s| !s.is_finite() || *s < 0.0) {
            return Err(crate::Error::Config(format!(
                "ensure_mixture: shares {shares:?} must be non-negative with a positive sum"
            )));
        }
        Ok(EnsureMixture {
            shares: shares.iter().map(|s| s / sum).collect(),
            slack_tokens,
            hold: None,
            max_held: None,
            stock_tokens: u64::MAX,
            kept_tokens: u64::MAX,
            field: "tokens".into(),
            planned: false,
        })
    }

    /// The mixture's own token shares, with a slack in tokens: when its pipeline is assembled
    /// it takes the datasets' shares, and the standing stock and truncation of the packer after
    /// it ([`Operator::assemble`]). Until then it has no shares and refuses every record.
    pub fn slack_tokens(slack_tokens: u64) -> Self {
        EnsureMixture {
            shares: Vec::new(),
            slack_tokens,
            hold: None,
            max_held: None,
            stock_tokens: 0,
            kept_tokens: u64::MAX,
            field: "tokens".into(),
            planned: true,
        }
    }

    /// Holds at most `documents` a lane (pieces of split documents count one each): past it,
    /// the oldest held one is dropped and counted. Without it nothing is dropped.
    pub fn hold(mut self, documents: usize) -> Result<Self, crate::Error> {
        if documents == 0 {
            return Err(crate::Error::Config("ensure_mixture: hold must be at least 1 document".into()));
        }
        self.hold = Some(documents);
        Ok(self)
    }

    /// Holds at most `tokens` a lane: past it, the oldest held piece goes out before its
    /// dataset's turn (counted per dataset, `released_tokens` in reports); nothing is dropped, the shares run
    /// further from their targets for a while. Without it, a pipeline sets
    /// [`EnsureMixture::default_max_held`] when it is assembled; built with
    /// [`EnsureMixture::new`], it holds without a cap.
    pub fn max_held_tokens(mut self, tokens: u64) -> Result<Self, crate::Error> {
        if tokens == 0 {
            return Err(crate::Error::Config("ensure_mixture: max_held_tokens must be at least 1".into()));
        }
        self.max_held = Some(tokens);
        Ok(self)
    }

    /// The cap a pipeline gives what it holds per lane when none is set: 16 × the slack plus
    /// 4 rows of `row_length`. A lane's closed loop supplies each dataset within one record of
    /// its share, so what it holds stays far below (reported as `held_tokens_peak`); the cap
    /// is what keeps memory bounded whatever the data.
    pub fn default_max_held(slack_tokens: u64, row_length: u64) -> u64 {
        16u64.saturating_mul(slack_tokens).saturating_add(4u64.saturating_mul(row_length)).max(1)
    }

    /// How many tokens more than its share of a dataset the next stage (the packer) may hold
    /// for good: about its open rows times the sequence length. Beyond it, what the packer
    /// holds counts against its dataset as if it had come out. Without it (the default) only
    /// what the packer emitted counts. The pipeline builder sets it from the packer.
    pub fn standing_stock(mut self, tokens: u64) -> Self {
        self.stock_tokens = tokens;
        self
    }

    /// The packer keeps only the first `tokens` of each document (it truncates long ones):
    /// count no more of one, or the cut tokens would look held by the packer for ever.
    pub fn truncated_to(mut self, tokens: u64) -> Self {
        self.kept_tokens = tokens;
        self
    }
}

impl Operator for EnsureMixture {
    fn name(&self) -> &str {
        "ensure_mixture"
    }

    fn fingerprint(&self) -> Settings {
        Settings::new("ensure_mixture", 1)
            .set("shares", self.shares.clone())
            .set("slack_tokens", self.slack_tokens)
            .set("hold", self.hold)
            .set("max_held_tokens", self.max_held)
            .set("stock_tokens", self.stock_tokens)
            .set("kept_tokens", self.kept_tokens)
            .set("field", self.field.as_str())
            .set("measured_at", "next_stage")
    }

    fn describe(&self) -> String {
        let shares: Vec<String> = self.shares.iter().map(|s| format!("{:.1}%", 100.0 * s)).collect();
        let stock = match self.stock_tokens {
            u64::MAX => String::new(),
            t => format!(" beyond a standing stock of {t} tokens"),
        };
        let hold = match self.hold {
            None => "drops nothing".to_string(),
            Some(h) => format!("holds up to {h} documents per lane, then drops the oldest"),
        };
        let hold = match self.max_held {
            None => hold,
            Some(t) => format!("{hold}, holds at most {t} tokens per lane (then lets the oldest through)"),
        };
        format!(
            "token shares [{}] of what the next stage emits (what it holds counts{stock}), slack {} tokens, {hold}",
            shares.join(", "),
            self.slack_tokens
        )
    }

    fn kind(&self) -> OperatorKind {
        OperatorKind::Accumulate
    }

    fn offer(&self) -> Offer {
        let offer = Offer::none().with_share_slack(self.slack_tokens);
        match self.max_held {
            Some(t) => offer.with_holding(Holding::Positions(t)),
            None => offer,
        }
    }

    /// A planned one takes the datasets' shares, and measures past the packer after it: what
    /// the packer holds for good and where it truncates.
    fn assemble(&self, plan: &Assembly<'_>) -> Result<Option<Arc<dyn Operator>>, OpError> {
        if !self.planned {
            if self.shares.len() != plan.datasets.len() {
                return Err(OpError::Fatal(format!(
                    "ensure_mixture has {} shares for {} datasets",
                    self.shares.len(),
                    plan.datasets.len()
                )));
            }
            return Ok(None);
        }
        let shares = plan.shares.ok_or_else(|| {
            OpError::Fatal("ensure_mixture needs token shares on the datasets (Dataset::share)".into())
        })?;
        let mut ensure = EnsureMixture::new(shares, self.slack_tokens).map_err(|e| OpError::Fatal(e.to_string()))?;
        ensure.hold = self.hold;
        ensure.field = self.field.clone();
        let row_length = plan.after(|o| o.row_length).map_or(0, |(_, n)| n as u64);
        ensure.max_held = Some(self.max_held.unwrap_or_else(|| Self::default_max_held(self.slack_tokens, row_length)));
        ensure.stock_tokens = plan.after(|o| o.held_positions).map_or(0, |(_, n)| n);
        if let Some((_, n)) = plan.after(|o| o.truncates_to) {
            ensure.kept_tokens = n;
        }
        Ok(Some(Arc::new(ensure)))
    }

    fn accumulator(&self, _: LaneContext) -> Option<Box<dyn Accumulator>> {
        let k = self.shares.len();
        Some(Box::new(Deficit {
            shares: self.shares.clone(),
            targets: self.shares.clone(),
            ended: vec![false; k],
            cfg: self.clone(),
            emitted: vec![0; k],
            next_out: vec![0; k],
            base_out: vec![0; k],
            this_push: vec![0; k],
            ahead: vec![0.0; k],
            held: Held::new(k),
            peak: 0,
            released: vec![0; k],
            dropped_docs: vec![0; k],
            dropped_tokens: vec![0; k],
        }))
    }

    /// Tokens let through, documents dropped past a cap and their tokens, tokens let through
    /// early, what it holds, per dataset; and the most tokens it held at once.
    fn report(&self, state: &AccumulatorState, datasets: usize) -> Vec<Tally> {
        let counts = EnsureCounts::of(state).unwrap_or_default();
        let per = |name, f: fn(&EnsureDataset) -> u64| Tally::PerDataset {
            name,
            values: (0..datasets).map(|d| counts.datasets.get(d).map_or(0, f)).collect(),
        };
        let held = held(state, datasets);
        vec![
            per("mixed_tokens", |c| c.mixed_tokens),
            per("dropped_documents", |c| c.dropped_documents),
            per("dropped_tokens", |c| c.dropped_tokens),
            per("released_tokens", |c| c.released_tokens),
            Tally::PerDataset { name: "held_pieces", values: held.iter().map(|h| h.0).collect() },
            Tally::PerDataset { name: "held_tokens", values: held.iter().map(|h| h.1).collect() },
            Tally::Peak { name: "held_tokens_peak", value: counts.peak_held_tokens },
        ]
    }
}

/// Counters per dataset in the exported state (see `Deficit::export`).
pub(crate) const STATE_COUNTERS: usize = 8;

struct Deficit {
    cfg: EnsureMixture,
    /// The targets in force: `targets` over the datasets the lane still reads.
    shares: Vec<f64>,
    /// The shares of the mixture's schedule segment in force ([`Accumulator::targets_changed`]).
    targets: Vec<f64>,
    /// Per dataset, whether the lane reads no more of it.
    ended: Vec<bool>,
    /// Tokens emitted per dataset.
    emitted: Vec<u64>,
    /// Tokens per dataset the next stage (the packer) emitted.
    next_out: Vec<u64>,
    /// `next_out` when the targets in force took effect: shares are measured from there.
    base_out: Vec<u64>,
    /// Tokens per dataset emitted by the push under way: none of them can have come out yet.
    this_push: Vec<u64>,
    /// Per dataset, how far it runs ahead of its share ([`Deficit::measure_ahead`]).
    ahead: Vec<f64>,
    held: Held,
    /// The most tokens held at once.
    peak: u64,
    /// Per dataset: tokens let through before their turn because what it held reached its
    /// cap ([`EnsureMixture::max_held_tokens`]).
    released: Vec<u64>,
    /// Per dataset: documents and tokens dropped because the hold queue overflowed.
    dropped_docs: Vec<u64>,
    dropped_tokens: Vec<u64>,
}

impl Deficit {
    fn measure(&self, r: &Record) -> Result<(usize, u64), OpError> {
        let d =
            r.lineage().first_sample().map(|s| s.dataset as usize).ok_or_else(|| OpError::Data("no lineage".into()))?;
        if self.cfg.shares.is_empty() {
            return Err(OpError::Fatal(
                "ensure_mixture has no shares: build it with EnsureMixture::new, or slack_tokens in a pipeline".into(),
            ));
        }
        if d >= self.cfg.shares.len() {
            return Err(OpError::Fatal(format!(
                "dataset #{d} has no share in ensure_mixture ({} shares)",
                self.cfg.shares.len()
            )));
        }
        let n = match r.get(&self.cfg.field) {
            Some(Value::Seq(a)) | Some(Value::Array(a)) => (a.len() as u64).min(self.cfg.kept_tokens),
            _ => {
                return Err(OpError::Data(format!(
                    "no {:?} field: ensure_mixture goes after tokenize",
                    self.cfg.field
                )));
            }
        };
        Ok((d, n))
    }

    /// Whether emitting `n` tokens of dataset `d` keeps it within the slack of its share, as
    /// measured on what the next stage emitted, given `self.ahead` ([`Deficit::measure_ahead`]).
    ///
    /// Tokens emitted by this push count as come out: nothing can move the next stage's
    /// output before the push returns, and they must hold back the rest of this push. Tokens
    /// the next stage holds count only beyond the standing stock: packing bins keep short
    /// documents for good while pieces of long ones leave at once, and that stock must not
    /// hold the short dataset back; more than that must. The held part is centred so that the
    /// datasets' measures sum to zero: one of them is always admissible, so the scheduler
    /// cannot stall with every dataset held.
    /// It grows no easier as `n` grows (the held queue relies on that).
    fn admissible(ahead: &[f64], shares: &[f64], slack: u64, d: usize, n: u64) -> bool {
        ahead[d] + n as f64 * (1.0 - shares[d]) <= slack as f64
    }

    /// Sets `self.ahead`: per dataset, how far it runs ahead of its share (see
    /// [`Deficit::admissible`]). The values sum to zero.
    fn measure_ahead(&mut self) {
        let k = self.next_out.len();
        // What this push emitted counts as out: it can only come out later. What came out
        // before the targets took effect is not measured against them.
        let out = |e: usize| (self.next_out[e] + self.this_push[e]).saturating_sub(self.base_out[e]);
        let held = |e: usize| self.emitted[e].saturating_sub(self.next_out[e] + self.this_push[e]) as f64;
        let out_total: f64 = (0..k).map(|e| out(e) as f64).sum();
        let held_total: f64 = (0..k).map(held).sum();
        let stock = self.cfg.stock_tokens as f64;
        let raw = |e: usize| {
            let s = self.shares[e];
            let held_over = held(e) - s * held_total;
            out(e) as f64 - s * out_total + held_over.signum() * (held_over.abs() - stock).max(0.0)
        };
        let raw_total: f64 = (0..k).map(raw).sum();
        let mut ahead = std::mem::take(&mut self.ahead);
        ahead.clear();
        ahead.extend((0..k).map(|e| raw(e) - self.shares[e] * raw_total));
        self.ahead = ahead;
    }

    /// The targets over the datasets not ended, summing to 1 (all of them if every dataset
    /// ended: the lane is at its end then).
    fn retarget(&mut self) {
        let live = |d: usize| !self.ended[d];
        let sum: f64 = (0..self.targets.len()).filter(|&d| live(d)).map(|d| self.targets[d]).sum();
        self.shares = if sum > 0.0 {
            (0..self.targets.len()).map(|d| if live(d) { self.targets[d] / sum } else { 0.0 }).collect()
        } else {
            self.targets.clone()
        };
    }

    fn emit(&mut self, d: usize, n: u64, r: Record, out: &mut Vec<Record>) {
        self.emitted[d] += n;
        self.this_push[d] += n;
        out.push(r);
    }

    /// Releases held documents, oldest admissible first, until none is admissible. The
    /// dataset furthest behind is always admissible, however large its piece: a piece larger
    /// than the slack (a document longer than tokenize's split, or a slack below a row) would
    /// otherwise wait for ever while every other dataset waits for it, and nothing would come
    /// out. It puts that dataset ahead by at most the piece.
    fn release(&mut self, out: &mut Vec<Record>) {
        loop {
            self.measure_ahead();
            let (ahead, shares, slack) = (&self.ahead, &self.shares, self.cfg.slack_tokens);
            let least = (0..ahead.len())
                .filter(|&d| shares[d] > 0.0)
                .min_by(|&a, &b| ahead[a].total_cmp(&ahead[b]).then(a.cmp(&b)));
            let admissible = |d: usize, n: u64| Some(d) == least || Self::admissible(ahead, shares, slack, d, n);
            let Some((d, n, r)) = self.held.take_oldest_admissible(admissible) else {
                return;
            };
            self.emit(d, n, r, out);
        }
    }
}

impl Accumulator for Deficit {
    fn push(&mut self, record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        self.this_push.iter_mut().for_each(|t| *t = 0);
        let (d, n) = self.measure(&record)?;
        // Queued behind the held ones: what came out of the packer since the last push may
        // have made older documents admissible, and they go first.
        self.held.push(d, n, record);
        self.release(out);
        while self.cfg.max_held.is_some_and(|cap| self.held.tokens() > cap)
            && let Some((d, n, r)) = self.held.take_oldest()
        {
            self.released[d] += n;
            self.emit(d, n, r, out);
        }
        self.peak = self.peak.max(self.held.tokens());
        if self.cfg.hold.is_some_and(|h| self.held.len() > h)
            && let Some((d, n, _)) = self.held.take_oldest()
        {
            self.dropped_docs[d] += 1;
            self.dropped_tokens[d] += n;
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<Record>) -> Result<(), OpError> {
        self.release(out);
        while let Some((d, n, r)) = self.held.take_oldest() {
            self.emit(d, n, r, out);
        }
        Ok(())
    }

    fn watches_next_stage(&self) -> bool {
        true
    }

    fn next_stage_out(&mut self, record: &Record) {
        for f in record.lineage().fragments() {
            if let Some(t) = self.next_out.get_mut(f.sample.dataset as usize) {
                *t += u64::from(f.len());
            }
        }
    }

    fn dataset_ended(&mut self, dataset: u32) {
        if let Some(e) = self.ended.get_mut(dataset as usize) {
            *e = true;
        }
        self.retarget();
    }

    fn targets_changed(&mut self, shares: &[f64]) {
        if shares.len() == self.targets.len() {
            self.targets = shares.to_vec();
            self.base_out = self.next_out.clone();
            self.retarget();
        }
    }

    /// `values` is the tokens emitted, the documents dropped, the tokens dropped, the tokens
    /// the next stage emitted, whether the lane reads no more of it, the tokens the next
    /// stage had emitted when the targets took effect, the target (its `f64` bits) and the
    /// tokens let through past the cap, each one number per dataset; then the most tokens
    /// held at once.
    fn export(&self) -> AccumulatorState {
        let ended: Vec<u64> = self.ended.iter().map(|&e| u64::from(e)).collect();
        let targets: Vec<u64> = self.targets.iter().map(|t| t.to_bits()).collect();
        let per_dataset = [
            &self.emitted,
            &self.dropped_docs,
            &self.dropped_tokens,
            &self.next_out,
            &ended,
            &self.base_out,
            &targets,
            &self.released,
        ];
        let values = per_dataset.into_iter().flatten().copied().chain([self.peak]).collect();
        AccumulatorState {
            values,
            buffered: self.held.in_order().into_iter().map(|(_, _, r)| r.lineage().clone()).collect(),
        }
    }

    fn import(&mut self, state: AccumulatorState, buffered: Vec<Record>) -> Result<(), OpError> {
        let k = self.cfg.shares.len();
        if state.values.len() != STATE_COUNTERS * k + 1 {
            return Err(OpError::Fatal(format!(
                "ensure_mixture state has {} numbers, expected {}",
                state.values.len(),
                STATE_COUNTERS * k + 1
            )));
        }
        self.emitted = state.values[..k].to_vec();
        self.dropped_docs = state.values[k..2 * k].to_vec();
        self.dropped_tokens = state.values[2 * k..3 * k].to_vec();
        self.next_out = state.values[3 * k..4 * k].to_vec();
        self.ended = state.values[4 * k..5 * k].iter().map(|&e| e != 0).collect();
        self.base_out = state.values[5 * k..6 * k].to_vec();
        self.targets = state.values[6 * k..7 * k].iter().map(|&b| f64::from_bits(b)).collect();
        self.released = state.values[7 * k..8 * k].to_vec();
        self.peak = state.values[8 * k];
        if self.targets.iter().any(|t| !(t.is_finite() && *t >= 0.0)) {
            return Err(OpError::Fatal(format!("ensure_mixture state holds targets {:?}", self.targets)));
        }
        self.retarget();
        self.held.clear();
        for r in buffered {
            let (d, n) = self.measure(&r)?;
            self.held.push(d, n, r);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;
    use zephon_operator::{Fragment, Lineage, SampleId, Span};

    fn doc(dataset: u32, row: u64, n: u32) -> Record {
        Record::new(Lineage::single(Fragment::span(SampleId::new(dataset, 0, row), Span::prefix(n))))
            .with(&"tokens".into(), Value::seq(vec![1u32; n as usize]))
    }

    proptest! {
        /// Whatever the next stage holds back, the datasets' measures sum to zero, and a
        /// document of the one furthest behind is never left held, however large: held
        /// documents cannot all wait for each other.
        #[test]
        fn some_dataset_is_always_admissible(
            shares in prop::collection::vec(0.05f64..1.0, 2..4),
            events in prop::collection::vec((0u32..4, 1u32..300, 0usize..4), 1..300),
            stock in prop_oneof![Just(0u64), Just(512), Just(u64::MAX)],
        ) {
            let op = EnsureMixture::new(&shares, 256).unwrap().hold(8).unwrap().standing_stock(stock);
            let k = shares.len();
            let mut acc = Deficit { shares: op.shares.clone(), targets: op.shares.clone(), ended: vec![false; k], cfg: op.clone(),
                emitted: vec![0; shares.len()], next_out: vec![0; shares.len()], base_out: vec![0; shares.len()],
                this_push: vec![0; shares.len()], ahead: vec![0.0; shares.len()], held: Held::new(shares.len()), peak: 0, released: vec![0; shares.len()],
                dropped_docs: vec![0; shares.len()], dropped_tokens: vec![0; shares.len()] };
            // The next stage: a queue that lets out `out` of its oldest records per event.
            let mut next: VecDeque<Record> = VecDeque::new();
            for (row, (d, n, out)) in events.into_iter().enumerate() {
                let d = d % shares.len() as u32;
                for r in next.drain(..out.min(next.len())) {
                    acc.next_stage_out(&r);
                }
                let mut emitted = Vec::new();
                acc.push(doc(d, row as u64, n), &mut emitted).unwrap();
                next.extend(emitted);
                acc.measure_ahead();
                let sum: f64 = acc.ahead.iter().sum();
                let scale: f64 = acc.emitted.iter().sum::<u64>() as f64 + 1.0;
                prop_assert!(sum.abs() <= 1e-9 * scale, "measures sum to {sum}");
                let least = (0..shares.len()).min_by(|&a, &b| acc.ahead[a].total_cmp(&acc.ahead[b]).then(a.cmp(&b))).unwrap();
                prop_assert!(
                    !acc.held.in_order().iter().any(|(e, _, _)| *e == least),
                    "a document of the least-ahead dataset was left held"
                );
            }
        }
    }
}
