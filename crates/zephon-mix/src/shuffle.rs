//! A shuffle buffer whose randomness comes from the records themselves.

use std::sync::Arc;

use zephon_operator::rng::mix64;
use zephon_operator::{
    Accumulator, AccumulatorState, Assembly, Holding, LaneContext, Lineage, Offer, OpError, Operator, OperatorKind,
    Record, RngKey, Settings,
};

/// Shuffles a lane's records through a buffer of `size`: once the buffer is full, each new
/// record takes the slot chosen by a hash of its own lineage (and the seed), and the record in
/// that slot goes out.
///
/// Because the slot depends on the record and not on a counter or a clock, the order is the
/// same however records are grouped into work units and wherever a run was restarted. The
/// state is the buffer's lineage, in slot order.
///
/// By default nothing leaves until the buffer is full, so a lane's first output waits for
/// `size` records; with many lanes that is `lanes × size` records before the first step.
/// [`Shuffle::warm_up`] lets the buffer grow as records arrive instead: it holds at most half
/// of the records pushed so far, so every second record swaps one out from the start. The
/// count of records pushed is part of the state; the order still depends only on the lane's
/// own stream.
///
/// [`Shuffle::keep_shares`] makes it keep a mixture's token shares: a buffer of 64 rows of
/// 1024 reorders ~64 k tokens, and at one to four lanes that alone can move a dataset's share
/// past what `ensure_mixture` holds it to before the buffer (up to 2× the bound of
/// L × (slack + row length)). The record in the chosen slot goes out only if every dataset then stays
/// within `limit` tokens of its share of what this lane emitted; otherwise the buffered
/// record that leaves the shares best goes out instead. That is still a function of the
/// lane's own stream.
#[derive(Clone, Debug)]
pub struct Shuffle {
    size: usize,
    warm_up: bool,
    keep: Option<(std::sync::Arc<[f64]>, u64)>,
}

impl Shuffle {
    /// A buffer of `size` records per lane (at least 1).
    pub fn buffer(size: usize) -> Result<Self, crate::Error> {
        if size == 0 {
            return Err(crate::Error::Config("the shuffle buffer needs at least 1 slot".into()));
        }
        Ok(Shuffle { size, warm_up: false, keep: None })
    }

    /// Keeps every dataset within `limit` tokens of its share `shares[d]` of the tokens this
    /// lane emits, where the buffer's contents allow (see the type's docs).
    pub fn keep_shares(mut self, shares: &[f64], limit: u64) -> Result<Self, crate::Error> {
        if shares.is_empty() || shares.iter().any(|s| !(s.is_finite() && *s >= 0.0)) {
            return Err(crate::Error::Config(format!("the shuffle cannot keep shares {shares:?}")));
        }
        self.keep = Some((shares.into(), limit));
        Ok(self)
    }

    /// Starts emitting at once: the buffer grows to `size` as records arrive, holding at most
    /// half of those pushed so far (see the type's docs).
    #[must_use]
    pub fn warm_up(mut self) -> Self {
        self.warm_up = true;
        self
    }
}

impl Operator for Shuffle {
    fn name(&self) -> &str {
        "shuffle"
    }

    /// Keeps the token shares an `ensure_mixture` before it holds: its reordering alone would
    /// move them past the bound at few lanes.
    fn assemble(&self, plan: &Assembly<'_>) -> Result<Option<Arc<dyn Operator>>, OpError> {
        match (self.keep.is_none(), plan.shares, plan.before(|o| o.share_slack)) {
            (true, Some(shares), Some((_, slack))) => {
                let kept = self.clone().keep_shares(shares, slack).map_err(|e| OpError::Fatal(e.to_string()))?;
                Ok(Some(Arc::new(kept)))
            }
            _ => Ok(None),
        }
    }

    fn offer(&self) -> Offer {
        Offer::none().with_holding(Holding::Records(self.size as u64))
    }

    fn fingerprint(&self) -> Settings {
        // The warm-up is named only when on: settings without it mean a plain buffer.
        let mut s = Settings::new("shuffle", 1).set("buffer", self.size);
        if self.warm_up {
            s = s.set("warm_up", "half");
        }
        match &self.keep {
            Some((shares, limit)) => s.set("keep_shares", shares.to_vec()).set("limit", *limit),
            None => s,
        }
    }

    fn describe(&self) -> String {
        format!(
            "buffer of {} records per lane, slots keyed by record lineage{}",
            self.size,
            if self.warm_up { ", growing from empty (at most half the records pushed)" } else { "" }
        ) + &self
            .keep
            .as_ref()
            .map_or(String::new(), |(_, limit)| format!(", keeping each dataset within {limit} tokens of its share"))
    }

    fn kind(&self) -> OperatorKind {
        OperatorKind::Accumulate
    }

    fn accumulator(&self, ctx: LaneContext) -> Option<Box<dyn Accumulator>> {
        Some(Box::new(ShuffleBuffer {
            size: self.size,
            warm_up: self.warm_up,
            pushed: 0,
            key: RngKey::new(ctx.seed, "shuffle-buffer"),
            // A warming-up buffer grows as records arrive: reserving the whole buffer for each
            // of 1,024 lanes would touch memory most lanes never use.
            buf: if self.warm_up { Vec::new() } else { Vec::with_capacity(self.size) },
            keep: self.keep.as_ref().map(|(shares, limit)| Keep {
                configured: shares.to_vec(),
                shares: shares.to_vec(),
                ended: vec![false; shares.len()],
                limit: *limit as f64,
                emitted: vec![0; shares.len()],
            }),
        }))
    }
}

struct ShuffleBuffer {
    size: usize,
    warm_up: bool,
    /// Records pushed so far (the warm-up's clock; kept in the state).
    pushed: u64,
    key: RngKey,
    buf: Vec<Record>,
    keep: Option<Keep>,
}

/// A lane's emitted tokens per dataset, and the shares they should keep.
struct Keep {
    /// The shares of the mixture's schedule segment in force ([`Accumulator::targets_changed`]).
    configured: Vec<f64>,
    /// The targets in force: the configured shares over the datasets the lane still reads,
    /// summing as they do.
    shares: Vec<f64>,
    ended: Vec<bool>,
    limit: f64,
    /// Tokens emitted per dataset since the targets in force took effect.
    emitted: Vec<u64>,
}

impl Keep {
    /// Tokens of each dataset in `r` (its lineage's fragments).
    fn tokens(&self, r: &Record) -> Vec<u64> {
        let mut t = vec![0u64; self.shares.len()];
        for f in r.lineage().fragments() {
            if let Some(n) = t.get_mut(f.sample.dataset as usize) {
                *n += u64::from(f.len());
            }
        }
        t
    }

    /// How far the dataset furthest ahead of its share would be after `r` goes out.
    fn worst_after(&self, r: &Record) -> f64 {
        let add = self.tokens(r);
        let total: u64 = self.emitted.iter().chain(&add).sum();
        self.emitted
            .iter()
            .zip(&add)
            .zip(self.shares.iter())
            .map(|((e, a), s)| (e + a) as f64 - s * total as f64)
            .fold(f64::MIN, f64::max)
    }

    /// The configured shares over the datasets not ended (all of them if every one ended).
    fn retarget(&mut self) {
        let sum: f64 = self.configured.iter().sum();
        let live: f64 = self.configured.iter().zip(&self.ended).filter(|(_, e)| !**e).map(|(s, _)| s).sum();
        self.shares = if live > 0.0 {
            self.configured.iter().zip(&self.ended).map(|(s, e)| if *e { 0.0 } else { s / live * sum }).collect()
        } else {
            self.configured.clone()
        };
    }

    fn emit(&mut self, r: &Record) {
        let add = self.tokens(r);
        for (e, a) in self.emitted.iter_mut().zip(add) {
            *e += a;
        }
    }
}

impl ShuffleBuffer {
    /// How many records the buffer holds after `pushed` records arrived.
    fn capacity(&self, pushed: u64) -> usize {
        if self.warm_up { usize::try_from(pushed.div_ceil(2)).unwrap_or(usize::MAX).min(self.size) } else { self.size }
    }
}

/// A 64-bit hash of a lineage: its fragments' samples and ranges.
pub(crate) fn lineage_hash(l: &Lineage) -> u64 {
    l.fragments().iter().fold(0x6c69_6e65_6167_6521, |h, f| {
        let s = mix64(h ^ f.sample.dataset as u64) ^ (f.sample.shard as u64).rotate_left(32);
        let extent = f.positions().map_or(u64::MAX, |p| u64::from(p.start()) << 32 | u64::from(p.end()));
        mix64(mix64(s ^ f.sample.row) ^ extent)
    })
}

impl Accumulator for ShuffleBuffer {
    fn push(&mut self, record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        self.pushed += 1;
        if self.buf.len() < self.capacity(self.pushed) {
            self.buf.push(record);
            return Ok(());
        }
        let mut slot = self.key.below_at(lineage_hash(record.lineage()), self.buf.len() as u64) as usize;
        if let Some(keep) = &self.keep
            && keep.worst_after(&self.buf[slot]) > keep.limit
        {
            // The first from the chosen slot on of those that leave the shares best.
            let n = self.buf.len();
            let mut best = (keep.worst_after(&self.buf[slot]), slot);
            for i in 1..n {
                let at = (slot + i) % n;
                let w = keep.worst_after(&self.buf[at]);
                if w < best.0 {
                    best = (w, at);
                }
            }
            slot = best.1;
        }
        let gone = std::mem::replace(&mut self.buf[slot], record);
        if let Some(keep) = &mut self.keep {
            keep.emit(&gone);
        }
        out.push(gone);
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<Record>) -> Result<(), OpError> {
        self.pushed = 0;
        let mut rest = std::mem::take(&mut self.buf);
        rest.sort_by_key(|r| self.key.at(lineage_hash(r.lineage())));
        if let Some(keep) = &mut self.keep {
            rest.iter().for_each(|r| keep.emit(r));
        }
        out.extend(rest);
        Ok(())
    }

    fn export(&self) -> AccumulatorState {
        // The warm-up's clock (records pushed) is kept only with warm-up on: a full buffer's
        // contents alone say where it is.
        let mut values = if self.warm_up { vec![self.pushed] } else { Vec::new() };
        if let Some(keep) = &self.keep {
            values.extend(&keep.emitted);
            values.extend(keep.ended.iter().map(|&e| u64::from(e)));
            values.extend(keep.configured.iter().map(|s| s.to_bits()));
        }
        AccumulatorState { values, buffered: self.buf.iter().map(|r| r.lineage().clone()).collect() }
    }

    fn dataset_ended(&mut self, dataset: u32) {
        if let Some(keep) = &mut self.keep
            && let Some(e) = keep.ended.get_mut(dataset as usize)
        {
            *e = true;
            keep.retarget();
        }
    }

    fn targets_changed(&mut self, shares: &[f64]) {
        if let Some(keep) = &mut self.keep
            && shares.len() == keep.configured.len()
        {
            keep.configured = shares.to_vec();
            keep.emitted.iter_mut().for_each(|e| *e = 0);
            keep.retarget();
        }
    }

    fn import(&mut self, state: AccumulatorState, buffered: Vec<Record>) -> Result<(), OpError> {
        if buffered.len() > self.size {
            return Err(OpError::Fatal(format!("{} buffered records for a buffer of {}", buffered.len(), self.size)));
        }
        let kept = self.keep.as_ref().map_or(0, |k| 3 * k.emitted.len());
        let want = usize::from(self.warm_up) + kept;
        if state.values.len() != want {
            return Err(OpError::Fatal(format!("a shuffle state holds {:?}, not {want} values", state.values)));
        }
        if let Some(keep) = &mut self.keep {
            let k = kept / 3;
            let values = &state.values[state.values.len() - kept..];
            keep.emitted.copy_from_slice(&values[..k]);
            keep.ended = values[k..2 * k].iter().map(|&e| e != 0).collect();
            keep.configured = values[2 * k..].iter().map(|&b| f64::from_bits(b)).collect();
            if keep.configured.iter().any(|s| !(s.is_finite() && *s >= 0.0)) {
                return Err(OpError::Fatal(format!("a shuffle state holds shares {:?}", keep.configured)));
            }
            keep.retarget();
        }
        if self.warm_up {
            let pushed = state.values[0];
            // Every push inserts while the buffer is below its capacity, so it always holds
            // exactly that many (a flushed buffer restarts its count).
            let want = self.capacity(pushed);
            if buffered.len() != want {
                return Err(OpError::Fatal(format!(
                    "{} buffered records after {pushed} pushed: a warming-up buffer holds {want}",
                    buffered.len()
                )));
            }
            self.pushed = pushed;
        }
        self.buf = buffered;
        Ok(())
    }
}
