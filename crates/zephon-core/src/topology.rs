//! How lanes, rows and ranks fit together.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::step_schedule::RowsPerStep;
use zephon_operator::Lane;

/// The shape of a run: L lanes, G(step) rows per global step, and this process's place (rank
/// r of W).
///
/// A `Topology` can only be built valid: `L ≥ 1`, `L` divides `G(step)` at every step of the
/// schedule, `W` divides `L` (so `W` divides every `G(step)` too), `r < W`. Rank r owns the
/// contiguous lanes `[r·L/W, (r+1)·L/W)`; each lane gives `G(step)/L` rows to step `step`. L
/// and the schedule of G are properties of the run (they shape the data); W and r are
/// properties of where it happens to execute and may change at every restart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    lanes: u32,
    rows_per_step: RowsPerStep,
    world_size: u32,
    rank: u32,
}

/// Where a process runs: rank `rank` of `world_size`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Place {
    /// r, this process's rank.
    pub rank: u32,
    /// W, the number of ranks.
    pub world_size: u32,
}

impl Place {
    /// Rank 0 of 1: one process runs every lane.
    pub const SINGLE: Place = Place { rank: 0, world_size: 1 };
}

/// Names a topology's settings one by one ([`Topology::builder`]); [`TopologyBuilder::build`]
/// checks them together.
///
/// ```
/// use zephon_core::{Place, Topology};
/// let t = Topology::builder().lanes(8).rows_per_step(32).place(Place { rank: 3, world_size: 4 }).build()?;
/// assert_eq!((t.rows_per_lane_at(0), t.owned_range()), (4, 6..8));
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct TopologyBuilder {
    lanes: u32,
    rows_per_step: Option<RowsPerStep>,
    place: Place,
}

impl TopologyBuilder {
    /// L, the number of lanes (no default: it shapes the data).
    pub fn lanes(mut self, lanes: u32) -> Self {
        self.lanes = lanes;
        self
    }

    /// G, the rows of a global step: a number, the same at every step, or a [`RowsPerStep`]
    /// schedule (a batch-size ramp). No default: it shapes the data.
    pub fn rows_per_step(mut self, rows: impl Into<RowsPerStep>) -> Self {
        self.rows_per_step = Some(rows.into());
        self
    }

    /// This process's place; [`Place::SINGLE`] when not given.
    pub fn place(mut self, place: Place) -> Self {
        self.place = place;
        self
    }

    /// Checks the settings and builds the topology.
    pub fn build(self) -> Result<Topology> {
        let rows = self.rows_per_step.ok_or_else(|| Error::Topology("the rows per step are not set".into()))?;
        Topology::checked(self.lanes, rows, self.place)
    }

    /// Builds the topology with this process's place from the launcher's environment
    /// (see [`RankEnv::detect`]). When no launcher variable is set the process runs as rank 0
    /// of 1, owning every lane, and says so on stderr: under a launcher this library does not
    /// know, every process would otherwise train on the same batches without a word.
    pub fn from_env(self) -> Result<Topology> {
        let env = RankEnv::detect(|k| std::env::var(k).ok())?;
        if env.launcher.is_none() {
            eprintln!("zephon: {}", RankEnv::NONE_SET);
        }
        self.place(Place { rank: env.rank, world_size: env.world_size }).build()
    }
}

impl Topology {
    /// A topology named setting by setting: `lanes` and `rows_per_step` are required, the
    /// place defaults to rank 0 of 1.
    pub fn builder() -> TopologyBuilder {
        TopologyBuilder { lanes: 0, rows_per_step: None, place: Place::SINGLE }
    }

    fn checked(lanes: u32, rows_per_step: RowsPerStep, place: Place) -> Result<Self> {
        let Place { rank, world_size } = place;
        let bad = |m: String| Err(Error::Topology(m));
        if lanes == 0 {
            return bad("the lane count must be at least 1".into());
        }
        // Every lane gives each step the same number of rows: a G the lanes do not divide
        // would need a rule for which lanes give one more, and that rule would move with L.
        for &(step, g) in rows_per_step.segments() {
            if g == 0 || !g.is_multiple_of(lanes) {
                let at = if rows_per_step.is_constant() { String::new() } else { format!(" from step {step}") };
                return bad(format!(
                    "rows per global step{at} ({g}) must be a positive multiple of the lane count ({lanes}): \
                     every lane gives each step the same number of rows"
                ));
            }
        }
        if world_size == 0 || !lanes.is_multiple_of(world_size) {
            return bad(format!("the world size ({world_size}) must divide the lane count ({lanes})"));
        }
        if rank >= world_size {
            return bad(format!("rank {rank} is not below the world size {world_size}"));
        }
        Ok(Topology { lanes, rows_per_step, world_size, rank })
    }

    /// The same run at another place.
    pub fn placed(&self, place: Place) -> Result<Self> {
        Topology::checked(self.lanes, self.rows_per_step.clone(), place)
    }

    /// This process's place.
    pub fn place(&self) -> Place {
        Place { rank: self.rank, world_size: self.world_size }
    }

    /// L, the number of lanes.
    pub fn lanes(&self) -> u32 {
        self.lanes
    }

    /// G, the rows of each global step: a schedule, constant unless the run ramps its batch.
    pub fn rows_per_step(&self) -> &RowsPerStep {
        &self.rows_per_step
    }

    /// G(step), the rows of global step `step`.
    pub fn rows_at(&self, step: u64) -> u32 {
        self.rows_per_step.at(step)
    }

    /// G(step)/L, the rows each lane gives step `step`.
    pub fn rows_per_lane_at(&self, step: u64) -> u32 {
        self.rows_at(step) / self.lanes
    }

    /// W, the number of ranks.
    pub fn world_size(&self) -> u32 {
        self.world_size
    }

    /// r, this process's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Rows of this rank's part of step `step`: G(step)/L times its lane count.
    pub fn local_rows_at(&self, step: u64) -> u32 {
        self.rows_at(step) / self.world_size
    }

    /// Checks that microbatches of `rows` rows cut this rank's part of every step of the
    /// schedule evenly, naming the first step they do not: a run that cannot serve a step is
    /// refused before it starts, not when it gets there.
    pub fn check_microbatch(&self, rows: u32) -> Result<()> {
        for &(step, _) in self.rows_per_step.segments() {
            let local = self.local_rows_at(step);
            if rows == 0 || !local.is_multiple_of(rows) {
                return Err(Error::Topology(format!(
                    "microbatches of {rows} rows do not divide the {local} local rows of step {step} \
                     (world size {}, {} rows per global step)",
                    self.world_size,
                    self.rows_at(step)
                )));
            }
        }
        Ok(())
    }

    /// The lanes this rank owns, in order.
    pub fn owned_lanes(&self) -> impl ExactSizeIterator<Item = Lane> + use<> {
        self.owned_range().map(Lane)
    }

    /// The owned lanes as an index range.
    pub fn owned_range(&self) -> Range<u32> {
        let per = self.lanes / self.world_size;
        self.rank * per..(self.rank + 1) * per
    }

    /// The rank that owns `lane`.
    pub fn owner_of(&self, lane: Lane) -> u32 {
        lane.0 / (self.lanes / self.world_size)
    }
}

/// Rank and world size as a launcher states them.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RankEnv {
    /// This process's rank.
    pub rank: u32,
    /// The number of processes.
    pub world_size: u32,
    /// The variable that gave the rank (`RANK`, `SLURM_PROCID`, ...), or `None` when no
    /// launcher variable was set and the process defaulted to rank 0 of 1.
    pub launcher: Option<&'static str>,
}

impl RankEnv {
    /// The pairs of variables read, in order: torchrun, Slurm, Open MPI, MPICH/Intel MPI
    /// (PMI), PMIx.
    pub const VARIABLES: [(&'static str, &'static str); 5] = [
        ("RANK", "WORLD_SIZE"),
        ("SLURM_PROCID", "SLURM_NTASKS"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("PMI_RANK", "PMI_SIZE"),
        ("PMIX_RANK", "PMIX_SIZE"),
    ];

    /// What is said when no launcher variable is set.
    pub const NONE_SET: &'static str = "no rank variables (RANK/WORLD_SIZE, SLURM_PROCID/SLURM_NTASKS, \
        OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/PMI_SIZE, PMIX_RANK/PMIX_SIZE) are set: running as rank 0 of 1, \
        which owns every lane. Under a launcher, set them (or pass the world size and rank explicitly), else \
        every process trains on the same batches.";

    /// Reads the first pair of [`RankEnv::VARIABLES`] that is set, else rank 0 of 1 with
    /// `launcher: None`. A pair given by half, or a value that is not a number, is an error
    /// rather than a silent single-process run.
    pub fn detect(var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        for (rank_key, world_key) in Self::VARIABLES {
            match (var(rank_key), var(world_key)) {
                (None, None) => continue,
                (Some(r), Some(w)) => {
                    let parse = |key: &str, v: &str| {
                        v.trim().parse::<u32>().map_err(|_| {
                            Error::Topology(format!("environment variable {key}={v:?} is not a non-negative integer"))
                        })
                    };
                    return Ok(RankEnv {
                        rank: parse(rank_key, &r)?,
                        world_size: parse(world_key, &w)?,
                        launcher: Some(rank_key),
                    });
                }
                (Some(_), None) | (None, Some(_)) => {
                    return Err(Error::Topology(format!(
                        "{rank_key} and {world_key} must be set together (only one is set)"
                    )));
                }
            }
        }
        Ok(RankEnv { rank: 0, world_size: 1, launcher: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_invalid_combinations() {
        assert!(Topology::builder().lanes(0).rows_per_step(8).build().is_err());
        assert!(Topology::builder().lanes(8).rows_per_step(12).build().is_err(), "L must divide G");
        assert!(
            Topology::builder().lanes(8).rows_per_step(16).place(Place { rank: 0, world_size: 3 }).build().is_err(),
            "W must divide L"
        );
        assert!(
            Topology::builder().lanes(8).rows_per_step(16).place(Place { rank: 4, world_size: 4 }).build().is_err(),
            "r < W"
        );
        assert!(Topology::builder().lanes(8).rows_per_step(0).build().is_err());
        let t = Topology::builder().lanes(8).rows_per_step(32).place(Place { rank: 3, world_size: 4 }).build().unwrap();
        assert_eq!(t.rows_per_lane_at(0), 4);
        assert_eq!(t.owned_range(), 6..8);
        assert_eq!(t.local_rows_at(9), 8);
        assert_eq!(t.owner_of(Lane(5)), 2);
        let e = Topology::builder().lanes(8).build().unwrap_err().to_string();
        assert!(e.contains("rows per step are not set"), "{e}");
    }

    #[test]
    fn every_step_of_a_schedule_must_fit_the_lanes_and_microbatches() {
        let g = RowsPerStep::new(vec![(0, 8), (10, 16), (20, 32)]).unwrap();
        let t = Topology::builder()
            .lanes(8)
            .rows_per_step(g.clone())
            .place(Place { rank: 1, world_size: 2 })
            .build()
            .unwrap();
        assert_eq!((t.rows_per_lane_at(9), t.rows_per_lane_at(10), t.local_rows_at(25)), (1, 2, 16));
        assert!(t.check_microbatch(4).is_ok());
        let e = t.check_microbatch(8).unwrap_err().to_string();
        assert!(e.contains("the 4 local rows of step 0"), "{e}");
        let e = Topology::builder().lanes(16).rows_per_step(g).build().unwrap_err().to_string();
        assert!(e.contains("from step 0 (8)"), "{e}");
        let g = RowsPerStep::new(vec![(0, 8), (5, 10)]).unwrap();
        let e = Topology::builder().lanes(4).rows_per_step(g).build().unwrap_err().to_string();
        assert!(e.contains("from step 5 (10)"), "{e}");
    }

    #[test]
    fn reads_torchrun_then_slurm() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        assert_eq!(RankEnv::detect(env(&[])).unwrap(), RankEnv { rank: 0, world_size: 1, launcher: None });
        assert_eq!(
            RankEnv::detect(env(&[("RANK", "2"), ("WORLD_SIZE", "4"), ("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1")]))
                .unwrap(),
            RankEnv { rank: 2, world_size: 4, launcher: Some("RANK") }
        );
        assert_eq!(
            RankEnv::detect(env(&[("SLURM_PROCID", "1"), ("SLURM_NTASKS", "2")])).unwrap(),
            RankEnv { rank: 1, world_size: 2, launcher: Some("SLURM_PROCID") }
        );
        assert_eq!(
            RankEnv::detect(env(&[("OMPI_COMM_WORLD_RANK", "3"), ("OMPI_COMM_WORLD_SIZE", "8")])).unwrap(),
            RankEnv { rank: 3, world_size: 8, launcher: Some("OMPI_COMM_WORLD_RANK") }
        );
        assert_eq!(
            RankEnv::detect(env(&[("PMI_RANK", "0"), ("PMI_SIZE", "2")])).unwrap(),
            RankEnv { rank: 0, world_size: 2, launcher: Some("PMI_RANK") }
        );
        assert!(RankEnv::detect(env(&[("PMI_RANK", "1")])).is_err());
        assert!(RankEnv::detect(env(&[("RANK", "1")])).is_err());
        assert!(RankEnv::detect(env(&[("RANK", "x"), ("WORLD_SIZE", "2")])).is_err());
    }
}
