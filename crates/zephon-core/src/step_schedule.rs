//! Values that change at set steps: the rows per step of a batch-size ramp, a mixture's
//! shares in a curriculum. Each is a pure function of the step, so a step's data never
//! depends on how the run got there.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A value that is constant between set steps: `(first step, value)` segments, the first
/// from step 0, their first steps strictly increasing, each value different from the one
/// before (so a schedule has one way to be written, and its segments are real changes).
///
/// Looking a step up costs O(log segments); nothing walks the steps.
///
/// ```
/// use zephon_core::StepSchedule;
/// let g = StepSchedule::new(vec![(0, 256u32), (1000, 512), (3000, 1024)]).unwrap();
/// assert_eq!((*g.at(999), *g.at(1000), *g.at(1_000_000)), (256, 512, 1024));
/// assert!(StepSchedule::new(vec![(5, 1u32)]).is_err(), "the first segment starts at step 0");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<(u64, T)>", into = "Vec<(u64, T)>")]
#[serde(bound(serialize = "T: Clone + Serialize", deserialize = "T: PartialEq + Deserialize<'de>"))]
pub struct StepSchedule<T> {
    segments: Arc<[(u64, T)]>,
}

impl<T: PartialEq> StepSchedule<T> {
    /// One value for every step.
    pub fn constant(value: T) -> Self {
        StepSchedule { segments: Arc::from(vec![(0, value)]) }
    }

    /// Checks and builds a schedule from `(first step, value)` segments.
    pub fn new(segments: Vec<(u64, T)>) -> Result<Self> {
        let bad = |m: String| Err(Error::Config(format!("schedule: {m}")));
        match segments.first() {
            None => return bad("it needs at least one segment".into()),
            Some((s, _)) if *s != 0 => return bad(format!("the first segment starts at step {s}, not at step 0")),
            Some(_) => {}
        }
        for w in segments.windows(2) {
            if w[1].0 <= w[0].0 {
                return bad(format!("segment steps must increase: step {} follows step {}", w[1].0, w[0].0));
            }
            if w[1].1 == w[0].1 {
                return bad(format!("the segment at step {} repeats the value before it", w[1].0));
            }
        }
        Ok(StepSchedule { segments: Arc::from(segments) })
    }
}

impl<T> StepSchedule<T> {
    /// The segments: `(first step, value)`, in order.
    pub fn segments(&self) -> &[(u64, T)] {
        &self.segments
    }

    /// The index of the segment in force at `step`.
    pub fn segment_of(&self, step: u64) -> usize {
        self.segments.partition_point(|(s, _)| *s <= step) - 1
    }

    /// The value in force at `step`.
    pub fn at(&self, step: u64) -> &T {
        &self.segments[self.segment_of(step)].1
    }

    /// Whether the value ever changes.
    pub fn is_constant(&self) -> bool {
        self.segments.len() == 1
    }
}

impl<T: PartialEq> StepSchedule<T> {
    /// The first step at which the two schedules give different values, if any.
    pub fn first_difference(&self, other: &Self) -> Option<u64> {
        let mut starts: Vec<u64> = self.segments.iter().chain(other.segments.iter()).map(|(s, _)| *s).collect();
        starts.sort_unstable();
        starts.dedup();
        starts.into_iter().find(|&s| self.at(s) != other.at(s))
    }
}

impl<T: PartialEq> TryFrom<Vec<(u64, T)>> for StepSchedule<T> {
    type Error = Error;
    fn try_from(segments: Vec<(u64, T)>) -> Result<Self> {
        StepSchedule::new(segments)
    }
}

impl<T: Clone> From<StepSchedule<T>> for Vec<(u64, T)> {
    fn from(s: StepSchedule<T>) -> Self {
        s.segments.to_vec()
    }
}

/// The most increments a [`RowsPerStep::ramp`] may take: a ramp is a list of segments, and a
/// ramp of billions of 1-row increments would be a list of billions.
pub const MAX_RAMP_INCREMENTS: u64 = 1 << 16;

/// G(step): the rows of each global step, as a schedule (a batch-size ramp).
///
/// A step's rows are, lane by lane, the next `G(step) / L` rows of each lane: every lane's rows
/// are one stream, whatever the schedule, and the schedule only says where each step's rows
/// end. So lane l's rows before step s are `Σ_{t<s} G(t) / L`, computed per segment.
///
/// ```
/// use zephon_core::RowsPerStep;
/// // 64 rows a step, 128 from step 100, 256 from step 300.
/// let g = RowsPerStep::new(vec![(0, 64), (100, 128), (300, 256)]).unwrap();
/// assert_eq!(g.rows_before(300), 100 * 64 + 200 * 128);
/// // A linear ramp from 64 to 256 rows in steps of 64 rows over 300 steps.
/// let ramp = RowsPerStep::ramp(64, 256, 64, 300).unwrap();
/// assert_eq!(ramp.segments(), &[(0, 64), (100, 128), (200, 192), (300, 256)]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<(u64, u32)>", into = "Vec<(u64, u32)>")]
pub struct RowsPerStep(StepSchedule<u32>);

impl RowsPerStep {
    /// The same rows at every step.
    pub fn constant(rows: u32) -> Self {
        RowsPerStep(StepSchedule::constant(rows))
    }

    /// A schedule of `(first step, rows per step)` segments; every value must be positive.
    pub fn new(segments: Vec<(u64, u32)>) -> Result<Self> {
        if let Some((s, _)) = segments.iter().find(|(_, g)| *g == 0) {
            return Err(Error::Config(format!("schedule: rows per step at step {s} must be positive")));
        }
        Ok(RowsPerStep(StepSchedule::new(segments)?))
    }

    /// A linear ramp: `from` rows per step at step 0, `by` more at evenly spaced steps, `to`
    /// from step `steps` on (as Megatron-LM's batch-size ramp-up, counted in steps). `to - from`
    /// must be a positive multiple of `by`, and `steps` at least the number of increments.
    pub fn ramp(from: u32, to: u32, by: u32, steps: u64) -> Result<Self> {
        let bad = |m: String| Err(Error::Config(format!("schedule: ramp from {from} to {to} by {by}: {m}")));
        if from == 0 || to <= from || by == 0 || !(to - from).is_multiple_of(by) {
            return bad("it needs 0 < from < to and to − from a multiple of by".into());
        }
        let n = u64::from((to - from) / by);
        if steps < n {
            return bad(format!("{n} increments do not fit in {steps} steps"));
        }
        if n > MAX_RAMP_INCREMENTS {
            return bad(format!("{n} increments; a ramp has at most {MAX_RAMP_INCREMENTS}"));
        }
        // In u128: `i × steps` may pass u64 for a ramp over very many steps.
        let at = |i: u64| (u128::from(i) * u128::from(steps) / u128::from(n)) as u64;
        let segments = (0..=n).map(|i| (at(i), from + (i as u32) * by)).collect();
        RowsPerStep::new(segments)
    }

    /// The schedule of values.
    pub fn schedule(&self) -> &StepSchedule<u32> {
        &self.0
    }

    /// Whether G is the same at every step.
    pub fn is_constant(&self) -> bool {
        self.0.is_constant()
    }

    /// The segments: `(first step, rows per step)`.
    pub fn segments(&self) -> &[(u64, u32)] {
        self.0.segments()
    }

    /// G at `step`.
    pub fn at(&self, step: u64) -> u32 {
        *self.0.at(step)
    }

    /// The rows of all steps before `step`: O(segments).
    pub fn rows_before(&self, step: u64) -> u64 {
        let segs = self.segments();
        segs.iter()
            .enumerate()
            .take_while(|(_, (s, _))| *s < step)
            .map(|(i, (s, g))| {
                let end = segs.get(i + 1).map_or(step, |(n, _)| (*n).min(step));
                (end - s).saturating_mul(u64::from(*g))
            })
            .fold(0u64, u64::saturating_add)
    }

    /// The first step at which the two schedules differ, if any.
    pub fn first_difference(&self, other: &Self) -> Option<u64> {
        self.0.first_difference(&other.0)
    }

    /// The schedule in words: `256` or `256 from step 0, 512 from step 1000`.
    pub fn describe(&self) -> String {
        if self.0.is_constant() {
            return self.at(0).to_string();
        }
        let parts: Vec<String> = self.segments().iter().map(|(s, g)| format!("{g} from step {s}")).collect();
        parts.join(", ")
    }
}

impl TryFrom<Vec<(u64, u32)>> for RowsPerStep {
    type Error = Error;
    fn try_from(segments: Vec<(u64, u32)>) -> Result<Self> {
        RowsPerStep::new(segments)
    }
}

impl From<RowsPerStep> for Vec<(u64, u32)> {
    fn from(g: RowsPerStep) -> Self {
        g.0.into()
    }
}

impl From<u32> for RowsPerStep {
    fn from(rows: u32) -> Self {
        RowsPerStep::constant(rows)
    }
}

/// w(step): the target token shares of a mixture's datasets, by dataset index, as a schedule
/// (a curriculum, or annealing on some datasets at the end). Each segment's shares are
/// non-negative with a positive sum and are kept normalised to sum to 1.
///
/// A steered lane reads by the shares in force at the step its rows are being made for, and
/// counts what it delivered afresh from the first step of each segment: a segment's shares
/// hold within that segment, after a transition the length of what the lane's pipeline holds
/// (see the mixing guide).
///
/// ```
/// use zephon_core::ShareSchedule;
/// let w = ShareSchedule::new(vec![(0, vec![7.0, 3.0]), (5000, vec![0.3, 0.7])]).unwrap();
/// assert_eq!(w.at(4999), &[0.7, 0.3]);
/// assert_eq!(w.segment_start(6000), 5000);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Vec<(u64, Vec<f64>)>", into = "Vec<(u64, Vec<f64>)>")]
pub struct ShareSchedule(StepSchedule<Vec<f64>>);

impl ShareSchedule {
    /// The same shares at every step.
    pub fn constant(shares: &[f64]) -> Result<Self> {
        ShareSchedule::new(vec![(0, shares.to_vec())])
    }

    /// A schedule of `(first step, shares)` segments, every segment over the same datasets.
    pub fn new(segments: Vec<(u64, Vec<f64>)>) -> Result<Self> {
        ShareSchedule::checked(segments, true)
    }

    /// `normalise`: divide each segment by its sum; without it (a schedule read back from a
    /// checkpoint) the shares are taken as they are, so that they compare bit for bit.
    fn checked(segments: Vec<(u64, Vec<f64>)>, normalise: bool) -> Result<Self> {
        let k = segments.first().map_or(0, |(_, w)| w.len());
        let mut normalised = Vec::with_capacity(segments.len());
        for (step, w) in segments {
            let sum: f64 = w.iter().sum();
            if w.len() != k
                || k == 0
                || !(sum.is_finite() && sum > 0.0)
                || w.iter().any(|x| !(x.is_finite() && *x >= 0.0))
            {
                return Err(Error::Config(format!(
                    "schedule: the shares at step {step} ({w:?}) must be {k} non-negative numbers with a positive sum"
                )));
            }
            normalised.push((step, if normalise { w.iter().map(|x| x / sum).collect() } else { w }));
        }
        Ok(ShareSchedule(StepSchedule::new(normalised)?))
    }

    /// The segments: `(first step, shares)`, each summing to 1.
    pub fn segments(&self) -> &[(u64, Vec<f64>)] {
        self.0.segments()
    }

    /// The shares in force at `step`.
    pub fn at(&self, step: u64) -> &[f64] {
        self.0.at(step)
    }

    /// The first step of the segment in force at `step`.
    pub fn segment_start(&self, step: u64) -> u64 {
        self.segments()[self.0.segment_of(step)].0
    }

    /// Whether the shares ever change.
    pub fn is_constant(&self) -> bool {
        self.0.is_constant()
    }

    /// The first step at which the two schedules differ, if any.
    pub fn first_difference(&self, other: &Self) -> Option<u64> {
        self.0.first_difference(&other.0)
    }
}

impl TryFrom<Vec<(u64, Vec<f64>)>> for ShareSchedule {
    type Error = Error;
    fn try_from(segments: Vec<(u64, Vec<f64>)>) -> Result<Self> {
        ShareSchedule::checked(segments, false)
    }
}

impl From<ShareSchedule> for Vec<(u64, Vec<f64>)> {
    fn from(w: ShareSchedule) -> Self {
        w.0.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_sums_and_differences_are_per_segment() {
        let g = RowsPerStep::new(vec![(0, 4), (3, 8), (5, 2)]).unwrap();
        let walked = |s: u64| (0..s).map(|t| u64::from(g.at(t))).sum::<u64>();
        for s in 0..12 {
            assert_eq!(g.rows_before(s), walked(s), "step {s}");
        }
        assert_eq!(g.first_difference(&g), None);
        let later = RowsPerStep::new(vec![(0, 4), (3, 8), (7, 2)]).unwrap();
        assert_eq!(g.first_difference(&later), Some(5));
        assert_eq!(g.first_difference(&RowsPerStep::constant(4)), Some(3));
        assert_eq!(RowsPerStep::constant(4).first_difference(&RowsPerStep::constant(4)), None);
        assert_eq!(g.describe(), "4 from step 0, 8 from step 3, 2 from step 5");
    }

    #[test]
    fn bad_schedules_are_refused_with_the_step() {
        for (segments, want) in [
            (vec![], "at least one"),
            (vec![(1, 4)], "starts at step 1"),
            (vec![(0, 4), (3, 8), (3, 2)], "step 3 follows step 3"),
            (vec![(0, 4), (3, 4)], "step 3 repeats"),
            (vec![(0, 4), (3, 0)], "at step 3 must be positive"),
        ] {
            let e = RowsPerStep::new(segments).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        assert!(RowsPerStep::ramp(64, 256, 60, 300).is_err());
        assert!(RowsPerStep::ramp(64, 256, 64, 2).is_err());
        assert_eq!(RowsPerStep::ramp(8, 16, 8, 1).unwrap().segments(), &[(0, 8), (1, 16)]);
        assert!(RowsPerStep::ramp(1, u32::MAX, 1, u64::MAX).unwrap_err().to_string().contains("at most 65536"));
        let far = RowsPerStep::ramp(8, 16, 8, u64::MAX).unwrap();
        assert_eq!(far.segments()[1].0, u64::MAX, "no overflow of i × steps");
        assert_eq!(far.rows_before(u64::MAX), u64::MAX, "sums saturate");
    }

    #[test]
    fn shares_are_normalised_and_checked_per_segment() {
        let w = ShareSchedule::new(vec![(0, vec![1.0, 3.0]), (10, vec![2.0, 2.0])]).unwrap();
        assert_eq!((w.at(9), w.at(10)), (&[0.25, 0.75][..], &[0.5, 0.5][..]));
        assert_eq!((w.segment_start(3), w.segment_start(99)), (0, 10));
        for (segments, want) in [
            (vec![(0, vec![1.0, 1.0]), (4, vec![1.0])], "at step 4"),
            (vec![(0, vec![0.0, 0.0])], "positive sum"),
            (vec![(0, vec![1.0, -1.0])], "non-negative"),
            (vec![(0, vec![1.0, 1.0]), (4, vec![2.0, 2.0])], "step 4 repeats"),
        ] {
            let e = ShareSchedule::new(segments).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        let other = ShareSchedule::new(vec![(0, vec![1.0, 3.0]), (12, vec![2.0, 2.0])]).unwrap();
        assert_eq!(w.first_difference(&other), Some(10));
    }

    #[test]
    fn serde_checks_what_it_reads() {
        let g = RowsPerStep::new(vec![(0, 4), (3, 8)]).unwrap();
        let json = serde_json::to_string(&g).unwrap();
        assert_eq!(json, "[[0,4],[3,8]]");
        assert_eq!(serde_json::from_str::<RowsPerStep>(&json).unwrap(), g);
        assert!(serde_json::from_str::<RowsPerStep>("[[2,4]]").is_err());
        assert!(serde_json::from_str::<RowsPerStep>("[[0,0]]").is_err());
    }
}
