//! A shuffle buffer whose randomness comes from the records themselves.

use zephon_core::rng::mix64;
use zephon_core::{
    Accumulator, AccumulatorState, LaneContext, Lineage, OpError, Operator, OperatorKind, Record, RngKey,
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
#[derive(Clone, Debug)]
pub struct Shuffle {
    size: usize,
    warm_up: bool,
}

impl Shuffle {
    /// A buffer of `size` records per lane (at least 1).
    pub fn new(size: usize) -> Result<Self, crate::Error> {
        if size == 0 {
            return Err(crate::Error::Config("the shuffle buffer needs at least 1 slot".into()));
        }
        Ok(Shuffle { size, warm_up: false })
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

    fn fingerprint(&self) -> String {
        // Without warm-up the fingerprint is what it always was: old checkpoints still match.
        if self.warm_up { format!("buffer={} warm_up=half", self.size) } else { format!("buffer={}", self.size) }
    }

    fn describe(&self) -> String {
        format!(
            "buffer of {} records per lane, slots keyed by record lineage{}",
            self.size,
            if self.warm_up { ", growing from empty (at most half the records pushed)" } else { "" }
        )
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
            buf: Vec::with_capacity(self.size),
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
        let slot = self.key.below_at(lineage_hash(record.lineage()), self.buf.len() as u64) as usize;
        out.push(std::mem::replace(&mut self.buf[slot], record));
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<Record>) -> Result<(), OpError> {
        self.pushed = 0;
        let mut rest = std::mem::take(&mut self.buf);
        rest.sort_by_key(|r| self.key.at(lineage_hash(r.lineage())));
        out.extend(rest);
        Ok(())
    }

    fn export(&self) -> AccumulatorState {
        // Without warm-up the state is what it always was (no values): old checkpoints load.
        let values = if self.warm_up { vec![self.pushed] } else { Vec::new() };
        AccumulatorState { values, buffered: self.buf.iter().map(|r| r.lineage().clone()).collect() }
    }

    fn import(&mut self, state: AccumulatorState, buffered: Vec<Record>) -> Result<(), OpError> {
        if buffered.len() > self.size {
            return Err(OpError::Fatal(format!("{} buffered records for a buffer of {}", buffered.len(), self.size)));
        }
        if self.warm_up {
            let pushed = match state.values[..] {
                [n] => n,
                _ => return Err(OpError::Fatal(format!("a warming-up shuffle state holds {:?}", state.values))),
            };
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
