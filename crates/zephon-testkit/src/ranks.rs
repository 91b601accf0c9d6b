//! Ranks as separate OS processes: the test binary re-runs itself, once per rank, with
//! `RANK`/`WORLD_SIZE` set (as torchrun does); each rank logs its lanes' digests as TSV.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use zephon_core::*;
use zephon_operator::*;

/// The body of a rank process: returns `false` (doing nothing) unless started by
/// [`spawn_ranks`], which runs it as an ignored test by name; otherwise runs steps `from..to` of `spec` at the environment's rank,
/// resuming and checkpointing as asked, and writes the hash log.
pub fn rank_process(spec: impl Fn() -> RunSpec, lanes: u32, rows: u32, opts: ExecOptions) -> bool {
    let Ok(log) = std::env::var("ZEPHON_TEST_LOG") else { return false };
    let env = |k: &str| std::env::var(k).ok();
    let num = |k: &str| env(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or_else(|| panic!("{k} not set"));
    let topology = Topology::builder().lanes(lanes).rows_per_step(rows).from_env().unwrap();
    let (from, to) = (num("ZEPHON_TEST_FROM"), num("ZEPHON_TEST_TO"));
    let mut engine = match env("ZEPHON_TEST_RESUME") {
        Some(dir) => Engine::restore(spec(), topology, opts, Path::new(&dir)).unwrap(),
        None => Engine::start(spec(), topology, opts).unwrap(),
    };
    assert_eq!(engine.position(), Step(from));
    let mut out = String::new();
    while engine.position().0 < to {
        let step = engine.next_step().unwrap().expect("the data lasts for the test's steps");
        for (lane, digest) in step.lane_digests() {
            out.push_str(&format!("{}\n", HashLogLine { step: step.step(), lane, digest }));
        }
    }
    fs::write(log, out).unwrap();
    if let Some(dir) = env("ZEPHON_TEST_SAVE") {
        engine.checkpoint(Path::new(&dir)).unwrap();
    }
    true
}

/// Runs `w` rank processes of this test binary's test `entry` (which calls [`rank_process`])
/// for steps `from..to`; returns the per-step fingerprints from their concatenated logs.
#[allow(clippy::too_many_arguments)]
pub fn spawn_ranks(
    entry: &str,
    lanes: u32,
    w: u32,
    from: u64,
    to: u64,
    resume: Option<&Path>,
    save: Option<&Path>,
    work: &Path,
) -> Vec<Digest> {
    let exe = std::env::current_exe().unwrap();
    let logs: Vec<PathBuf> = (0..w).map(|r| work.join(format!("w{w}-from{from}-rank{r}.tsv"))).collect();
    let ranks = (0..w)
        .map(|r| {
            let mut c = Command::new(&exe);
            c.args([entry, "--exact", "--ignored", "--test-threads", "1", "--quiet"])
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
            zephon_core::launch::RankProcess { command: c, log: logs[r as usize].clone() }
        })
        .collect();
    let log = zephon_core::launch::run_ranks(ranks).unwrap();
    log.fingerprints(lanes).unwrap().into_values().collect()
}
