//! A checkpoint split the way a trainer's distributed checkpoint stores state: one run part,
//! the same bytes on every rank, and one part per lane.
//!
//! `torch.distributed.checkpoint` (and similar stores) keep each key of every rank's state
//! dict, write a key held by several ranks once, and on load hand each rank the keys of its own
//! template. With a part per lane, a rank restored at another world size asks for the lanes it
//! now owns; the run part, identical everywhere, says which run and step they belong to. Each
//! lane part names the run part it belongs to by a digest of its fingerprint, so parts of two
//! checkpoints never mix unnoticed (a store that keeps one copy of a replicated key does not
//! compare the copies).

use serde::{Deserialize, Serialize};

use super::{
    Gathered, LaneState, LaneStreams, Loaded, RunFingerprint, RunMetadata, fingerprint::fingerprint_diff, lineage_code,
    seal,
};
use crate::error::{Error, Result};
use zephon_operator::Lane;

const RUN_MAGIC: &str = "ZEPHON-RUN";
const LANE_MAGIC: &str = "ZEPHON-LANE";
/// What errors call the whole.
const WHOLE: &str = "the split checkpoint";

/// A checkpoint as one run part and one part per lane (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitCheckpoint {
    /// The run part: the run's fingerprint and metadata, the step a restore delivers first,
    /// the lane count. The same bytes on every rank of a run at one step.
    pub run: Vec<u8>,
    /// The parts of the lanes this rank holds, in lane order.
    pub lanes: Vec<LanePart>,
}

/// One lane's part of a [`SplitCheckpoint`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LanePart {
    /// The lane.
    pub lane: Lane,
    /// Its state, sealed (a few hundred bytes to a few KiB: counters and lineage).
    pub bytes: Vec<u8>,
}

#[derive(Debug, Serialize, Deserialize)]
struct RunPart {
    fingerprint: RunFingerprint,
    metadata: RunMetadata,
    next_step: u64,
    lanes: u32,
}

#[derive(Debug, Serialize, Deserialize)]
struct LaneBody {
    /// The hex digest of the run part's fingerprint.
    run: String,
    next_step: u64,
    state: LaneState,
}

/// What a split checkpoint's run part says about itself.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSummary {
    /// The first step a restore delivers.
    pub next_step: u64,
    /// The run's lane count.
    pub lanes: u32,
    /// The run metadata (token estimates, shard listings).
    pub metadata: RunMetadata,
}

fn bad(message: String) -> Error {
    Error::CheckpointMismatch { dir: WHOLE.into(), message }
}

fn open_run(run: &[u8]) -> Result<RunPart> {
    let raw = seal::unseal(RUN_MAGIC, "a zephon run part", run).map_err(|m| bad(format!("the run part: {m}")))?;
    serde_json::from_slice(&raw).map_err(|e| bad(format!("the run part does not decode: {e}")))
}

impl SplitCheckpoint {
    /// Seals the states of some lanes of a run with `lanes` lanes, taken before `next_step`.
    /// With `streams`, buffered samples are named by distance back in their lane's input.
    pub fn encode(
        fingerprint: &RunFingerprint,
        metadata: &RunMetadata,
        next_step: u64,
        lanes: u32,
        states: Vec<LaneState>,
        streams: Option<&LaneStreams>,
    ) -> Result<SplitCheckpoint> {
        let cannot = |m: String| bad(format!("cannot encode: {m}"));
        let part = RunPart { fingerprint: fingerprint.clone(), metadata: metadata.clone(), next_step, lanes };
        let run = seal::seal(RUN_MAGIC, &serde_json::to_vec(&part).map_err(|e| cannot(e.to_string()))?);
        let digest = fingerprint.digest().to_hex();
        let mut parts = Vec::with_capacity(states.len());
        for state in states {
            let mut one = [state];
            let lineage = lineage_code::encode(&mut one, streams).map_err(cannot)?;
            let [state] = one;
            let lane = state.lane;
            let body = LaneBody { run: digest.clone(), next_step, state };
            let json = serde_json::to_vec(&body).map_err(|e| cannot(e.to_string()))?;
            parts.push(LanePart { lane, bytes: seal::seal(LANE_MAGIC, &seal::join(&json, &lineage)) });
        }
        Ok(SplitCheckpoint { run, lanes: parts })
    }

    /// The run part's step, lane count and metadata, after checking its envelope.
    pub fn summary(run: &[u8]) -> Result<RunSummary> {
        let p = open_run(run)?;
        Ok(RunSummary { next_step: p.next_step, lanes: p.lanes, metadata: p.metadata })
    }

    /// The states of `wanted` lanes, after checking that the run part belongs to this run
    /// (`fingerprint`, with the run's `metadata` to name a changed shard), that every lane part belongs to
    /// that run part and its step, and that every wanted lane has a part. `key` names a lane's
    /// part in errors as the caller stores it.
    pub fn load(
        run: &[u8],
        lanes: &[LanePart],
        fingerprint: &RunFingerprint,
        metadata: &RunMetadata,
        wanted: &[Lane],
        streams: &LaneStreams,
        key: &dyn Fn(Lane) -> String,
    ) -> Result<Loaded> {
        let saved = open_run(run)?;
        let diffs = fingerprint_diff(&saved.fingerprint, fingerprint, &saved.metadata, metadata);
        if !diffs.is_empty() {
            return Err(bad(format!("it was written by a different run: {}", diffs.join("; "))));
        }
        let digest = saved.fingerprint.digest().to_hex();
        let mut gathered = Gathered::new(WHOLE.into(), "lane part");
        gathered.check_schedules(&saved.fingerprint, fingerprint, saved.next_step)?;
        gathered.add("the run part", saved.next_step, Vec::new())?;
        for part in lanes.iter().filter(|p| wanted.contains(&p.lane)) {
            let name = key(part.lane);
            let raw =
                seal::unseal(LANE_MAGIC, "a zephon lane part", &part.bytes).map_err(|m| bad(format!("{name}: {m}")))?;
            let (json, lineage) = seal::split(&raw).map_err(|m| bad(format!("{name}: {m}")))?;
            let body: LaneBody =
                serde_json::from_slice(json).map_err(|e| bad(format!("{name} does not decode: {e}")))?;
            if body.run != digest {
                return Err(bad(format!(
                    "{name} belongs to another run or checkpoint than the run part (parts of two checkpoints are mixed)"
                )));
            }
            if body.state.lane != part.lane {
                return Err(bad(format!("{name} holds the state of {}", body.state.lane)));
            }
            let mut one = [body.state];
            lineage_code::decode(lineage, &mut one, Some(streams))
                .map_err(|m| bad(format!("{name}: lineage does not decode: {m}")))?;
            let [state] = one;
            gathered.add(&name, body.next_step, vec![state])?;
        }
        gathered.finish(wanted)
    }
}
