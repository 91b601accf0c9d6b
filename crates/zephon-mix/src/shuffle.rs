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
#[derive(Clone, Debug)]
pub struct Shuffle {
    size: usize,
}

impl Shuffle {
    /// A buffer of `size` records per lane (at least 1).
    pub fn new(size: usize) -> Result<Self, crate::Error> {
        if size == 0 {
            return Err(crate::Error::Config("the shuffle buffer needs at least 1 slot".into()));
        }
        Ok(Shuffle { size })
    }
}

impl Operator for Shuffle {
    fn name(&self) -> &str {
        "shuffle"
    }

    fn fingerprint(&self) -> String {
        format!("buffer={}", self.size)
    }

    fn describe(&self) -> String {
        format!("buffer of {} records per lane, slots keyed by record lineage", self.size)
    }

    fn kind(&self) -> OperatorKind {
        OperatorKind::Accumulate
    }

    fn accumulator(&self, ctx: LaneContext) -> Option<Box<dyn Accumulator>> {
        Some(Box::new(ShuffleBuffer {
            size: self.size,
            key: RngKey::new(ctx.seed, "shuffle-buffer"),
            buf: Vec::with_capacity(self.size),
        }))
    }
}

struct ShuffleBuffer {
    size: usize,
    key: RngKey,
    buf: Vec<Record>,
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
        if self.buf.len() < self.size {
            self.buf.push(record);
            return Ok(());
        }
        let slot = self.key.below_at(lineage_hash(record.lineage()), self.size as u64) as usize;
        out.push(std::mem::replace(&mut self.buf[slot], record));
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<Record>) -> Result<(), OpError> {
        let mut rest = std::mem::take(&mut self.buf);
        rest.sort_by_key(|r| self.key.at(lineage_hash(r.lineage())));
        out.extend(rest);
        Ok(())
    }

    fn export(&self) -> AccumulatorState {
        AccumulatorState { values: Vec::new(), buffered: self.buf.iter().map(|r| r.lineage().clone()).collect() }
    }

    fn import(&mut self, _: AccumulatorState, buffered: Vec<Record>) -> Result<(), OpError> {
        if buffered.len() > self.size {
            return Err(OpError::Fatal(format!("{} buffered records for a buffer of {}", buffered.len(), self.size)));
        }
        self.buf = buffered;
        Ok(())
    }
}
