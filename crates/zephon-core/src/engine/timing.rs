//! Where a run's CPU time goes: reading, each operator's stateless part, each accumulator, and
//! the engine's own per-step work (digests, snapshots). A pipeline is as fast as its slowest
//! part; these totals say which one it is.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::plan::Plan;

/// CPU time spent in one part of the pipeline, summed over threads (this rank).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StageTime {
    /// The operator's name, or the engine's task (`read`, `digest`, `snapshot`).
    pub name: String,
    /// `parallel` (any worker thread), `lane` (the ordered per-lane part) or `engine`.
    pub part: String,
    /// Seconds of thread time, summed over threads. Estimates: reading and the operators are
    /// timed in the run's first 64 units of work, then one in 16 (scaled by 16); accumulators,
    /// `digest` and `snapshot` in each lane's first 4 units or steps, then one in 16.
    pub seconds: f64,
}

/// The run's totals, in nanoseconds, added to by every thread.
pub(crate) struct Timings {
    read: AtomicU64,
    parallel: Box<[AtomicU64]>,
    stages: Box<[AtomicU64]>,
    digest: AtomicU64,
    snapshot: AtomicU64,
}

/// One lane's times since they were last added to the run's totals (kept without atomics on
/// the lane, which one thread drains at a time).
#[derive(Default)]
pub(crate) struct LaneTimes {
    pub stages: Vec<u64>,
    pub digest: u64,
    pub snapshot: u64,
    pub digests_timed: Sampler,
    pub snapshots_timed: Sampler,
    /// Which of the lane's units time their records through the accumulators.
    pub units_timed: Sampler,
}

/// Which calls of a frequent part get timed, and by what the time is scaled: each of the first
/// few calls, then one in 16. Two clock reads cost about as much as the digest or snapshot of a
/// one-row lane step, or an identity operator on one record: timing each of them would take a
/// fifth of the executor's time. Timing never changes data.
pub(crate) struct Sampler {
    calls: u64,
    first: u64,
}

impl Default for Sampler {
    /// A lane's: its first 4 calls, then one in 16 (with as many lanes as rows, a lane makes
    /// few steps in a short run, and timing its first 64 would time a quarter of them).
    fn default() -> Self {
        Sampler::first(4)
    }
}

impl Sampler {
    /// Times the first `first` calls, then one in 16.
    pub fn first(first: u64) -> Self {
        Sampler { calls: 0, first }
    }

    /// The start and weight of this call's timing, if it is timed.
    pub fn start(&mut self) -> Option<(Instant, u64)> {
        let w = self.weight();
        (w > 0).then(|| (Instant::now(), w))
    }

    /// Whether this call is timed: the weight its time is scaled by, or 0.
    pub fn weight(&mut self) -> u64 {
        let n = self.calls;
        self.calls += 1;
        match n {
            _ if n < self.first => 1,
            _ if (n - self.first).is_multiple_of(16) => 16,
            _ => 0,
        }
    }
}

/// Nanoseconds since `t`.
pub(crate) fn since(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

impl Timings {
    pub fn new(plan: &Plan) -> Self {
        let zeros = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect();
        Timings {
            read: AtomicU64::new(0),
            parallel: zeros(plan.parallel.len()),
            stages: zeros(plan.stages.len()),
            digest: AtomicU64::new(0),
            snapshot: AtomicU64::new(0),
        }
    }

    pub fn add_read(&self, nanos: u64) {
        self.read.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Adds one unit's per-operator times of the stateless chain, scaled by `weight`.
    pub fn add_parallel(&self, nanos: &[u64], weight: u64) {
        for (total, n) in self.parallel.iter().zip(nanos) {
            total.fetch_add(n.saturating_mul(weight), Ordering::Relaxed);
        }
    }

    /// Adds a lane's times and clears them.
    pub fn add_lane(&self, t: &mut LaneTimes) {
        for (total, n) in self.stages.iter().zip(&mut t.stages) {
            total.fetch_add(std::mem::take(n), Ordering::Relaxed);
        }
        self.digest.fetch_add(std::mem::take(&mut t.digest), Ordering::Relaxed);
        self.snapshot.fetch_add(std::mem::take(&mut t.snapshot), Ordering::Relaxed);
    }

    /// The totals so far, in pipeline order.
    pub fn report(&self, plan: &Plan) -> Vec<StageTime> {
        let at = |name: &str, part: &str, n: &AtomicU64| StageTime {
            name: name.to_string(),
            part: part.to_string(),
            seconds: n.load(Ordering::Relaxed) as f64 * 1e-9,
        };
        let mut out = vec![at("read", "parallel", &self.read)];
        out.extend(plan.parallel.iter().zip(self.parallel.iter()).map(|(op, n)| at(op.name(), "parallel", n)));
        // Maps between accumulators run inline on the lane and are counted with the
        // accumulator after them.
        out.extend(plan.stages.iter().zip(self.stages.iter()).map(|(s, n)| at(s.op.name(), "lane", n)));
        out.push(at("digest", "engine", &self.digest));
        out.push(at("snapshot", "engine", &self.snapshot));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::Sampler;

    #[test]
    fn sampled_weights_add_up_to_the_calls() {
        for first in [0, 4, 64] {
            let mut s = Sampler::first(first);
            let mut timed = 0;
            let mut weights = 0;
            for n in 1..=first + 16 * 100 {
                if let Some((_, w)) = s.start() {
                    timed += 1;
                    weights += w;
                }
                if n <= first || (n - first) % 16 == 1 {
                    assert!(weights >= n, "after {n} calls: {weights}");
                }
                if n <= first || (n - first) % 16 == 0 {
                    assert!(weights <= n + 15 && weights + 15 >= n, "after {n} calls: {weights}");
                }
            }
            assert_eq!(timed, first + 100, "each of the first {first}, then one in 16");
        }
    }
}
