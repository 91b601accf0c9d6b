//! The in-process rank runner: every rank of a world size side by side in one process, each
//! rank's local step collected and combined, in rank order, into the global step. This is how
//! determinism is checked without launching processes: a global step's fingerprint at W = 4
//! must equal the one at W = 1. It is the one copy of that loop; the tests of every crate, the
//! facade's loaders and `zephon demo` drive it.

use std::fmt;
use std::path::Path;

use crate::engine::{Engine, ExecOptions, RunSpec};
use crate::error::{Error, Result};
use crate::step::{LocalStep, lane_digest, step_fingerprint};
use crate::step_schedule::RowsPerStep;
use crate::topology::{Place, Topology};
use zephon_operator::{Digest, Record, Step};

/// One rank of a run as [`Ranks`] drives it: an [`Engine`], or a type that wraps one (the
/// facade's `Loader`), so that one loop serves both.
pub trait Rank {
    /// What its calls fail with.
    type Error;

    /// This rank's part of the next global step; `None` once finite data has ended.
    fn next_step(&mut self) -> std::result::Result<Option<LocalStep>, Self::Error>;

    /// The next step it delivers.
    fn position(&self) -> Step;

    /// Writes its lanes after the last delivered step into `dir`.
    fn checkpoint(&self, dir: &Path) -> std::result::Result<(), Self::Error>;
}

impl Rank for Engine {
    type Error = Error;

    fn next_step(&mut self) -> Result<Option<LocalStep>> {
        Engine::next_step(self)
    }

    fn position(&self) -> Step {
        Engine::position(self)
    }

    fn checkpoint(&self, dir: &Path) -> Result<()> {
        Engine::checkpoint(self, dir).map(|_| ())
    }
}

/// Why [`Ranks`] stopped.
#[derive(Debug)]
pub enum RanksError<E> {
    /// A rank failed to start or to deliver a step, or to checkpoint.
    Rank {
        /// Which rank.
        rank: u32,
        /// Its error (boxed: a rank's error can be large, and a result carrying it is returned
        /// by every step).
        error: Box<E>,
    },
    /// Some ranks delivered their part of global step `step` and others had ended: their
    /// lanes disagree about where the data ends, which no correct run does.
    Disagree {
        /// The global step.
        step: Step,
        /// The ranks that had ended.
        ended: Vec<u32>,
    },
    /// The data ended (on every rank together) after `delivered` of the `wanted` steps that
    /// [`Ranks::steps_exactly`] was asked for.
    Ended {
        /// Steps delivered.
        delivered: u64,
        /// Steps asked for.
        wanted: u64,
    },
}

impl<E: fmt::Display> fmt::Display for RanksError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RanksError::Rank { rank, error } => write!(f, "rank {rank}: {error}"),
            RanksError::Disagree { step, ended } => {
                write!(
                    f,
                    "ranks disagree on whether the run ended: rank(s) {ended:?} ended before {step}, the others did not"
                )
            }
            RanksError::Ended { delivered, wanted } => {
                write!(f, "the data ended after {delivered} of the {wanted} steps asked for")
            }
        }
    }
}

/// Rank `rank`'s error, as [`RanksError::Rank`].
fn failed<E>(rank: u32) -> impl FnOnce(E) -> RanksError<E> {
    move |error| RanksError::Rank { rank, error: Box::new(error) }
}

impl<E: std::error::Error + 'static> std::error::Error for RanksError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RanksError::Rank { error, .. } => Some(error.as_ref()),
            _ => None,
        }
    }
}

/// Every rank of a world size, side by side in this process, in rank order: rank r of W owns
/// the r-th block of lanes, so their local steps concatenated in rank order are the global step
/// in lane order.
///
/// ```
/// use std::sync::Arc;
/// use zephon_core::testing::{Ranks, fingerprint};
/// use zephon_core::*;
/// use zephon_operator::*;
///
/// let texts: Vec<String> = (0..40).map(|i| format!("document {i}")).collect();
/// let datasets = Datasets::new(vec![Arc::new(MemoryDataset::from_texts("d", "text", vec![texts]))]);
/// let spec = RunSpec {
///     operators: Operators::new(),
///     source: Arc::new(SequentialSource::new(&datasets.manifests(), 2, 1, 7)),
///     datasets,
///     seed: 7,
///     bad_records: BadRecords::Fail,
///     tail: Tail::Drop,
///     token_estimates: Vec::new(),
/// };
/// let one = Ranks::engines(&spec, 4, 8, 1, ExecOptions::default(), None)?.fingerprints(3)?;
/// let four = Ranks::engines(&spec, 4, 8, 4, ExecOptions::default(), None)?.steps(3, fingerprint)?;
/// assert_eq!(one.len(), 3);
/// assert_eq!(one, four);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Ranks<R> {
    ranks: Vec<R>,
}

impl<R: Rank> Ranks<R> {
    /// Ranks `0..w`, each made by `start(rank)` (started fresh, or restored).
    pub fn start(
        w: u32,
        mut start: impl FnMut(u32) -> std::result::Result<R, R::Error>,
    ) -> std::result::Result<Self, RanksError<R::Error>> {
        let ranks = (0..w).map(|rank| start(rank).map_err(failed(rank)));
        Ok(Ranks { ranks: ranks.collect::<std::result::Result<_, _>>()? })
    }

    /// The next global step the ranks deliver (rank 0's position; every rank's while they
    /// agree).
    pub fn position(&self) -> Step {
        self.ranks.first().map_or(Step(0), R::position)
    }

    /// Every rank's part of the next global step, in rank order; `None` once the data has
    /// ended on every rank. Every rank is asked, so that a rank that ended early is named.
    pub fn next_step(&mut self) -> std::result::Result<Option<Vec<LocalStep>>, RanksError<R::Error>> {
        let step = self.position();
        let mut parts = Vec::with_capacity(self.ranks.len());
        let mut ended = Vec::new();
        for (rank, r) in (0u32..).zip(self.ranks.iter_mut()) {
            match r.next_step().map_err(failed(rank))? {
                Some(part) => parts.push(part),
                None => ended.push(rank),
            }
        }
        match (parts.is_empty(), ended.is_empty()) {
            (true, _) => Ok(None),
            (false, true) => Ok(Some(parts)),
            (false, false) => Err(RanksError::Disagree { step, ended }),
        }
    }

    /// `each` of the next `n` global steps (its ranks' parts, in rank order), or of fewer
    /// where the data ends first: a test of finite data sees where it ended.
    pub fn steps<T>(
        &mut self,
        n: u64,
        mut each: impl FnMut(&[LocalStep]) -> T,
    ) -> std::result::Result<Vec<T>, RanksError<R::Error>> {
        let mut out = Vec::new();
        while (out.len() as u64) < n {
            match self.next_step()? {
                Some(parts) => out.push(each(&parts)),
                None => break,
            }
        }
        Ok(out)
    }

    /// As [`Ranks::steps`], but the data ending before the `n`-th step is an error: for runs
    /// over repeating data, where an early end is a bug, not a result.
    pub fn steps_exactly<T>(
        &mut self,
        n: u64,
        each: impl FnMut(&[LocalStep]) -> T,
    ) -> std::result::Result<Vec<T>, RanksError<R::Error>> {
        let out = self.steps(n, each)?;
        match out.len() as u64 {
            delivered if delivered < n => Err(RanksError::Ended { delivered, wanted: n }),
            _ => Ok(out),
        }
    }

    /// The global fingerprints of the next `n` steps, or of fewer where the data ends first.
    pub fn fingerprints(&mut self, n: u64) -> std::result::Result<Vec<Digest>, RanksError<R::Error>> {
        self.steps(n, fingerprint)
    }

    /// Every rank writes its lanes after the last delivered step into `dir` (its own file: a
    /// checkpoint of the whole world size, restorable at any other).
    pub fn checkpoint(&self, dir: &Path) -> std::result::Result<(), RanksError<R::Error>> {
        for (rank, r) in (0u32..).zip(&self.ranks) {
            r.checkpoint(dir).map_err(failed(rank))?;
        }
        Ok(())
    }

    /// The ranks, in rank order, for what a caller does with them after the run (split
    /// checkpoints, reports).
    pub fn into_ranks(self) -> Vec<R> {
        self.ranks
    }
}

/// The ranks themselves, for what a test asks of one of them (its reports, its estimates, a
/// step of rank 0 alone).
impl<R> std::ops::Deref for Ranks<R> {
    type Target = [R];

    fn deref(&self) -> &[R] {
        &self.ranks
    }
}

impl<R> std::ops::DerefMut for Ranks<R> {
    fn deref_mut(&mut self) -> &mut [R] {
        &mut self.ranks
    }
}

impl Ranks<Engine> {
    /// Engines for ranks `0..w` of a topology of `lanes` lanes and `rows` rows a step, each
    /// made by `make` from its rank's topology: started, restored, or restored from the parts
    /// of a split checkpoint that rank owns.
    pub fn engines_with(
        lanes: u32,
        rows: impl Into<RowsPerStep>,
        w: u32,
        mut make: impl FnMut(Topology) -> Result<Engine>,
    ) -> std::result::Result<Self, RanksError<Error>> {
        let rows = rows.into();
        Ranks::start(w, |rank| {
            make(
                Topology::builder()
                    .lanes(lanes)
                    .rows_per_step(rows.clone())
                    .place(Place { rank, world_size: w })
                    .build()?,
            )
        })
    }

    /// Engines of `spec` for ranks `0..w` (see [`Ranks::engines_with`]), started, or restored
    /// from the checkpoint in `resume`.
    pub fn engines(
        spec: &RunSpec,
        lanes: u32,
        rows: impl Into<RowsPerStep>,
        w: u32,
        opts: ExecOptions,
        resume: Option<&Path>,
    ) -> std::result::Result<Self, RanksError<Error>> {
        Ranks::engines_with(lanes, rows, w, |t| match resume {
            Some(dir) => Engine::restore(spec.clone(), t, opts, dir),
            None => Engine::start(spec.clone(), t, opts),
        })
    }
}

/// The global fingerprint of a step from its ranks' parts in rank order: the step fingerprint
/// over their lane digests, which is lane order.
pub fn fingerprint(parts: &[LocalStep]) -> Digest {
    let digests: Vec<Digest> = parts.iter().flat_map(|p| p.lane_digests().map(|(_, d)| d)).collect();
    step_fingerprint(&digests)
}

/// As [`fingerprint`], with each lane's digest made from its rows taken back out of
/// microbatches of `size` (as a trainer consumes them): microbatching must not change a row
/// or its order. `size` must divide each rank's rows.
pub fn fingerprint_through_microbatches(parts: &[LocalStep], size: usize) -> Result<Digest> {
    let mut digests = Vec::new();
    for part in parts {
        let rows: Vec<Record> =
            part.microbatches(size)?.iter().flat_map(|m| m.rows().iter().map(|r| (*r).clone())).collect();
        let mut at = 0;
        for lane in part.lanes() {
            let n = lane.rows().len();
            let of_lane = rows.get(at..at + n).ok_or_else(|| Error::Step {
                step: part.step(),
                message: format!("microbatches of {size} hold {} rows, fewer than the lanes", rows.len()),
            })?;
            digests.push(lane_digest(of_lane));
            at += n;
        }
    }
    Ok(step_fingerprint(&digests))
}
