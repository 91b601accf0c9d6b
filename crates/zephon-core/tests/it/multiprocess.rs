//! Ranks as separate OS processes: each reads its rank and world size from the environment
//! (as under torchrun), logs its lanes' digests per step, and checkpoints its own lanes.
//! Combined, the logs equal the one-process run; restarts at other world sizes continue it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use zephon_core::*;

use crate::common::*;

const LANES: u32 = 8;
const ROWS: u32 = 16;
const STEPS: u64 = 9;

fn the_spec() -> RunSpec {
    spec(corpus(400, 40, 21), pipeline(40, 6), 6, 1000, Tail::Drop)
}

/// Entry point of a rank process. Does nothing unless started by `spawn_ranks`.
#[test]
fn rank_process_entry() {
    let Ok(log) = std::env::var("ZEPHON_TEST_LOG") else { return };
    let env = |k: &str| std::env::var(k).ok();
    let topology = Topology::from_env(LANES, ROWS).unwrap();
    let (from, to): (u64, u64) =
        (env("ZEPHON_TEST_FROM").unwrap().parse().unwrap(), env("ZEPHON_TEST_TO").unwrap().parse().unwrap());
    let o = opts(2, 3, 2);
    let mut engine = match env("ZEPHON_TEST_RESUME") {
        Some(dir) => Engine::restore(the_spec(), topology, o, Path::new(&dir)).unwrap(),
        None => Engine::start(the_spec(), topology, o).unwrap(),
    };
    assert_eq!(engine.position(), Step(from));
    let mut out = String::new();
    while engine.position().0 < to {
        let step = engine.next_step().unwrap().unwrap();
        for (lane, d) in step.lane_digests() {
            out.push_str(&format!("{}\t{}\t{}\n", step.step().0, lane.0, d));
        }
    }
    fs::write(log, out).unwrap();
    if let Some(dir) = env("ZEPHON_TEST_SAVE") {
        engine.checkpoint(Path::new(&dir)).unwrap();
    }
}

/// Runs `w` rank processes for steps `from..to`; returns the combined per-step fingerprints.
fn spawn_ranks(w: u32, from: u64, to: u64, resume: Option<&Path>, save: Option<&Path>, work: &Path) -> Vec<Digest> {
    let exe = std::env::current_exe().unwrap();
    let logs: Vec<PathBuf> = (0..w).map(|r| work.join(format!("w{w}-from{from}-rank{r}.tsv"))).collect();
    let children: Vec<_> = (0..w)
        .map(|r| {
            let mut c = Command::new(&exe);
            c.args(["multiprocess::rank_process_entry", "--exact", "--test-threads", "1", "--quiet"])
                .stdout(std::process::Stdio::null())
                .env("RANK", r.to_string())
                .env("WORLD_SIZE", w.to_string())
                .env("ZEPHON_TEST_LOG", &logs[r as usize])
                .env("ZEPHON_TEST_FROM", from.to_string())
                .env("ZEPHON_TEST_TO", to.to_string());
            if let Some(d) = resume {
                c.env("ZEPHON_TEST_RESUME", d);
            }
            if let Some(d) = save {
                c.env("ZEPHON_TEST_SAVE", d);
            }
            c.spawn().unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a rank process failed");
    }
    // Concatenate the logs; per step, lane digests in lane order give the global fingerprint.
    let mut by_step: BTreeMap<u64, BTreeMap<u32, Digest>> = BTreeMap::new();
    for log in logs {
        for line in fs::read_to_string(log).unwrap().lines() {
            let f: Vec<&str> = line.split('\t').collect();
            let prev = by_step
                .entry(f[0].parse().unwrap())
                .or_default()
                .insert(f[1].parse().unwrap(), Digest::from_hex(f[2]).unwrap());
            assert!(prev.is_none(), "two ranks logged the same lane");
        }
    }
    by_step
        .into_values()
        .map(|lanes| {
            assert_eq!(lanes.len(), LANES as usize, "every lane logged once per step");
            step_fingerprint(lanes.values())
        })
        .collect()
}

#[test]
fn rank_processes_combine_to_the_single_process_run_and_resume_elsewhere() {
    let work = tempfile::tempdir().unwrap();
    let reference = run_ranks(&the_spec(), LANES, ROWS, 1, opts(1, 4, 1), STEPS, None, None);

    for w in [2, 4, 8] {
        assert_eq!(spawn_ranks(w, 0, STEPS, None, None, work.path()), reference, "W = {w}");
    }

    // Stop all ranks after step 3 at W = 2, restart at W = 4, stop again after step 6,
    // restart at W = 1 and at W = 8.
    let ck1 = work.path().join("ckpt-3");
    let ck2 = work.path().join("ckpt-6");
    let mut got = spawn_ranks(2, 0, 3, None, Some(&ck1), work.path());
    got.extend(spawn_ranks(4, 3, 6, Some(&ck1), Some(&ck2), work.path()));
    let tail1 = spawn_ranks(1, 6, STEPS, Some(&ck2), None, work.path());
    let tail8 = spawn_ranks(8, 6, STEPS, Some(&ck2), None, work.path());
    assert_eq!(tail1, tail8);
    got.extend(tail1);
    assert_eq!(got, reference);
    // The checkpoint directories hold one file per rank.
    assert_eq!(fs::read_dir(&ck1).unwrap().count(), 2);
    assert_eq!(fs::read_dir(&ck2).unwrap().count(), 4);
}
