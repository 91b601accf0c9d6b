//! The token shares a run delivered, counted from the lineage of its rows: over the whole run
//! against constant targets, and per segment of a share schedule against that segment's.

use zephon::LocalStep;
use zephon::lane_core::ShareSchedule;

/// One dataset's part of the delivered tokens.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ShareReport {
    pub name: String,
    /// Tokens of this dataset in the delivered rows.
    pub tokens: u64,
    /// Their share of all delivered tokens.
    pub share: f64,
    /// The target token share, when the mixture has shares that never change (a schedule's
    /// targets are in [`SegmentReport`]).
    pub target: Option<f64>,
    /// The most this dataset's cumulative tokens exceeded its target share of all tokens
    /// delivered so far, over every step (0 when it never ran ahead).
    pub max_excess_tokens: u64,
    /// The step after which it ran ahead by `max_excess_tokens`.
    pub max_excess_step: u64,
    /// After each step of the run, how many tokens this dataset was ahead of its target share
    /// of all tokens delivered so far (negative: behind). Empty without a target.
    pub ahead_by_step: Vec<i64>,
}

/// The delivered tokens of one segment of the share schedule against its targets.
///
/// After a change of targets, a lane's rows still hold for a while what its pipeline held
/// before the change (the packer's open rows, the shuffle buffer): the *transition*. It is
/// measured, not assumed: the fewest steps from the segment's first after which, counting
/// tokens from there, every dataset stays within `bound_tokens` of its target share at every
/// step to the segment's end.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct SegmentReport {
    /// The segment's first step.
    pub from_step: u64,
    /// The step after its last delivered one.
    pub to_step: u64,
    /// The targets, by dataset.
    pub targets: Vec<f64>,
    /// Tokens delivered in the segment's steps, by dataset.
    pub tokens: Vec<u64>,
    /// Their shares.
    pub shares: Vec<f64>,
    /// What the shares hold to without a schedule, for this rank's lanes (`L × (slack_tokens
    /// + seq_len)`), when the pipeline has `ensure_mixture` and a packer.
    pub bound_tokens: Option<u64>,
    /// The transition, in steps; `None` when the bound does not hold by the segment's end (or
    /// there is no bound).
    pub transition_steps: Option<u64>,
    /// Counting from the end of the transition (the segment's start without a bound), the
    /// most any dataset ran ahead of or behind its target share, in tokens.
    pub max_deviation_tokens: u64,
    /// The shares of the tokens after the transition.
    pub shares_after_transition: Vec<f64>,
}

/// Counts tokens per dataset step by step, from the lineage of the delivered rows.
pub(crate) struct ShareTracker {
    reports: Vec<ShareReport>,
    total: u64,
    schedule: Option<ShareSchedule>,
    bound: Option<u64>,
    /// Per delivered step: the step and its tokens per dataset.
    steps: Vec<(u64, Vec<u64>)>,
}

impl ShareTracker {
    pub fn new(names: Vec<String>, schedule: Option<ShareSchedule>, bound: Option<u64>) -> Self {
        let constant = schedule.as_ref().filter(|w| w.is_constant()).map(|w| w.at(0).to_vec());
        let reports = names
            .into_iter()
            .enumerate()
            .map(|(d, name)| ShareReport {
                name,
                target: constant.as_ref().and_then(|t| t.get(d).copied()),
                ..ShareReport::default()
            })
            .collect();
        ShareTracker { reports, total: 0, schedule, bound, steps: Vec::new() }
    }

    pub fn step(&mut self, step: &LocalStep) {
        let mut tokens = vec![0u64; self.reports.len()];
        for row in step.rows() {
            for f in row.lineage().fragments() {
                if let Some(t) = tokens.get_mut(f.sample.dataset as usize) {
                    *t += u64::from(f.len());
                }
            }
        }
        for (r, t) in self.reports.iter_mut().zip(&tokens) {
            r.tokens += t;
            self.total += t;
        }
        for r in &mut self.reports {
            if let Some(t) = r.target {
                let ahead = (r.tokens as f64 - t * self.total as f64).round() as i64;
                r.ahead_by_step.push(ahead);
                if ahead > 0 && ahead as u64 > r.max_excess_tokens {
                    r.max_excess_tokens = ahead as u64;
                    r.max_excess_step = step.step().0;
                }
            }
        }
        if self.schedule.is_some() {
            self.steps.push((step.step().0, tokens));
        }
    }

    /// One line for the progress bar: each dataset's share so far.
    pub fn line(&self) -> String {
        if self.reports.len() < 2 || self.total == 0 {
            return String::new();
        }
        let parts: Vec<String> = self
            .reports
            .iter()
            .map(|r| format!("{} {:.1} %", r.name, 100.0 * r.tokens as f64 / self.total as f64))
            .collect();
        format!(", {}", parts.join(" "))
    }

    pub fn finish(mut self) -> (Vec<ShareReport>, Vec<SegmentReport>) {
        for r in &mut self.reports {
            r.share = if self.total > 0 { r.tokens as f64 / self.total as f64 } else { 0.0 };
        }
        let segments = match &self.schedule {
            Some(w) => w
                .segments()
                .iter()
                .enumerate()
                .filter_map(|(i, (from, targets))| {
                    let to = w.segments().get(i + 1).map_or(u64::MAX, |s| s.0);
                    let steps: Vec<&Vec<u64>> =
                        self.steps.iter().filter(|(s, _)| (*from..to).contains(s)).map(|(_, t)| t).collect();
                    let last = self.steps.iter().filter(|(s, _)| (*from..to).contains(s)).map(|(s, _)| s + 1).max()?;
                    Some(segment(*from, last, targets, &steps, self.bound))
                })
                .collect(),
            None => Vec::new(),
        };
        (self.reports, segments)
    }
}

/// The report of one segment from its steps' tokens per dataset (see [`SegmentReport`]).
fn segment(from: u64, to: u64, targets: &[f64], steps: &[&Vec<u64>], bound: Option<u64>) -> SegmentReport {
    let k = targets.len();
    let n = steps.len();
    // f[d][t]: after t of the segment's steps, how far dataset d is ahead of its target share
    // of the tokens so far. Counting from step t0, the deviation at t is f[t] - f[t0].
    let mut f = vec![vec![0.0f64; n + 1]; k];
    let mut cum = vec![0u64; k];
    for (t, tokens) in steps.iter().enumerate() {
        for (c, x) in cum.iter_mut().zip(tokens.iter()) {
            *c += x;
        }
        let total: u64 = cum.iter().sum();
        for d in 0..k {
            f[d][t + 1] = cum[d] as f64 - targets[d] * total as f64;
        }
    }
    // The largest deviation counting from each start, from suffix maxima and minima.
    let mut worst_from = vec![0.0f64; n + 1];
    for fd in &f {
        let (mut hi, mut lo) = (f64::MIN, f64::MAX);
        for t0 in (0..=n).rev() {
            hi = hi.max(fd[t0]);
            lo = lo.min(fd[t0]);
            worst_from[t0] = worst_from[t0].max((hi - fd[t0]).max(fd[t0] - lo));
        }
    }
    let transition = bound.and_then(|b| (0..n).find(|&t0| worst_from[t0] <= b as f64));
    let start = transition.unwrap_or(0);
    let tokens: Vec<u64> = (0..k).map(|d| steps.iter().map(|s| s[d]).sum()).collect();
    let after: Vec<u64> = (0..k).map(|d| steps[start..].iter().map(|s| s[d]).sum()).collect();
    let shares = |t: &[u64]| {
        let total: u64 = t.iter().sum();
        t.iter().map(|&x| if total > 0 { x as f64 / total as f64 } else { 0.0 }).collect()
    };
    SegmentReport {
        from_step: from,
        to_step: to,
        targets: targets.to_vec(),
        shares: shares(&tokens),
        tokens,
        bound_tokens: bound,
        transition_steps: transition.map(|t| t as u64),
        max_deviation_tokens: worst_from[start].round() as u64,
        shares_after_transition: shares(&after),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transition_is_the_fewest_steps_after_which_the_bound_holds() {
        // 50 / 50 targets: two steps all of dataset 0 (the old mixture), then even steps.
        let steps: Vec<Vec<u64>> =
            [vec![100, 0], vec![100, 0]].into_iter().chain(std::iter::repeat_n(vec![50, 50], 10)).collect();
        let refs: Vec<&Vec<u64>> = steps.iter().collect();
        let r = segment(10, 22, &[0.5, 0.5], &refs, Some(20));
        assert_eq!(r.transition_steps, Some(2));
        assert_eq!(r.max_deviation_tokens, 0);
        assert_eq!(r.shares_after_transition, vec![0.5, 0.5]);
        assert_eq!(r.tokens, vec![700, 500]);
        // With a bound of 60 tokens, counting from the first step is already within it? No:
        // after two steps dataset 0 is 100 ahead of its half of 200.
        let r = segment(10, 22, &[0.5, 0.5], &refs, Some(60));
        assert_eq!(r.transition_steps, Some(1));
        let r = segment(10, 22, &[0.5, 0.5], &refs, None);
        assert_eq!((r.transition_steps, r.max_deviation_tokens), (None, 100));
    }
}
