//! The hash log: what each rank delivered, one line per owned lane per step, so that the logs
//! of separate rank processes combine into global step fingerprints by concatenation.
//!
//! A line is `step<TAB>lane<TAB>digest`: the step and lane as decimal numbers, the lane's
//! digest for that step (see [`crate::lane_digest`]) as 64 lowercase hex characters.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::step::step_fingerprint;
use zephon_operator::{Digest, Lane, Step};

/// One line of a hash log.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct HashLogLine {
    /// The global step.
    pub step: Step,
    /// The lane.
    pub lane: Lane,
    /// The lane's digest for the step.
    pub digest: Digest,
}

impl fmt::Display for HashLogLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}\t{}\t{}", self.step.0, self.lane.0, self.digest)
    }
}

impl FromStr for HashLogLine {
    type Err = Error;

    fn from_str(line: &str) -> Result<Self> {
        let mut parts = line.split('\t');
        let bad = || Error::HashLog(format!("not a hash-log line (step<TAB>lane<TAB>sha256): {line:?}"));
        let step = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
        let lane = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
        let digest = parts.next().and_then(Digest::from_hex).ok_or_else(bad)?;
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(HashLogLine { step: Step(step), lane: Lane(lane), digest })
    }
}

/// Lane digests gathered from any number of logs, combined into global step fingerprints.
#[derive(Clone, Debug, Default)]
pub struct HashLog {
    steps: BTreeMap<u64, BTreeMap<u32, Digest>>,
}

impl HashLog {
    /// An empty log.
    pub fn new() -> Self {
        HashLog::default()
    }

    /// Adds one line; a lane logged twice for one step is an error.
    pub fn add(&mut self, line: HashLogLine) -> Result<()> {
        if self.steps.entry(line.step.0).or_default().insert(line.lane.0, line.digest).is_some() {
            return Err(Error::HashLog(format!("{} of {} is logged twice", line.lane, line.step)));
        }
        Ok(())
    }

    /// Adds every line of a log's text.
    pub fn add_text(&mut self, text: &str) -> Result<()> {
        text.lines().try_for_each(|l| self.add(l.parse()?))
    }

    /// The global fingerprint of every logged step, by step. Each step must have all `lanes`
    /// lanes, else the error names the step.
    pub fn fingerprints(&self, lanes: u32) -> Result<BTreeMap<u64, Digest>> {
        self.steps
            .iter()
            .map(|(&step, by_lane)| {
                if by_lane.len() != lanes as usize || by_lane.keys().any(|&l| l >= lanes) {
                    return Err(Error::HashLog(format!("step {step} has {} of {lanes} lanes", by_lane.len())));
                }
                Ok((step, step_fingerprint(by_lane.values())))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_logs_combine() {
        let d = Digest::of(b"x");
        let line = HashLogLine { step: Step(3), lane: Lane(1), digest: d };
        assert_eq!(line.to_string().parse::<HashLogLine>().unwrap(), line);
        assert!("3\t1".parse::<HashLogLine>().is_err());
        assert!(format!("3\t1\t{d}\textra").parse::<HashLogLine>().is_err());
        let mut log = HashLog::new();
        log.add_text(&format!("0\t1\t{d}\n")).unwrap();
        assert!(log.fingerprints(2).unwrap_err().to_string().contains("step 0 has 1 of 2 lanes"));
        log.add_text(&format!("0\t0\t{d}\n")).unwrap();
        assert_eq!(log.fingerprints(2).unwrap()[&0], step_fingerprint([&d, &d]));
        assert!(log.add(line).is_ok() && log.add(line).is_err());
    }
}
