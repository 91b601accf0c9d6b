//! `zephon verify`: runs the spec as separate rank processes at several world sizes, thread
//! counts and microbatch sizes (and across resumes), and compares every global step.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use zephon::lane_core::launch::{RankProcess, run_ranks};
use zephon::operator::Digest;

use crate::CliError;

#[derive(Clone, Debug)]
pub struct VerifyArgs {
    pub spec: PathBuf,
    pub world_sizes: Vec<u32>,
    pub threads: Vec<usize>,
    pub microbatches: Vec<usize>,
    pub steps: u64,
    pub resume_at: Option<u64>,
    pub resume_world_sizes: Vec<u32>,
    pub second_resume_at: Option<u64>,
    pub work_dir: Option<PathBuf>,
}

/// One configuration's global step fingerprints, by step.
type Steps = BTreeMap<u64, Digest>;

/// One multi-process run: `w` ranks with `threads` each, to step `to`.
struct Ranks<'a> {
    label: &'a str,
    w: u32,
    threads: usize,
    microbatch: Option<usize>,
    to: u64,
    resume: Option<&'a Path>,
    save_at: Option<(u64, &'a Path)>,
}

struct Launch<'a> {
    spec: &'a Path,
    work: &'a Path,
    lanes: u32,
}

impl Launch<'_> {
    /// Runs `w` rank processes of `zephon run` to step `to`; returns the global fingerprints of
    /// the steps they delivered, combined from their hash logs by concatenation.
    fn ranks(&self, run: Ranks<'_>) -> Result<Steps, CliError> {
        let Ranks { label, w, threads, microbatch, to, resume, save_at } = run;
        let exe = std::env::current_exe().map_err(|e| CliError::Io(PathBuf::from("zephon"), e))?;
        let dir = self.work.join(label);
        fs::create_dir_all(&dir).map_err(|e| CliError::Io(dir.clone(), e))?;
        let mut ranks = Vec::with_capacity(w as usize);
        for r in 0..w {
            let log = dir.join(format!("rank-{r}.tsv"));
            let mut c = Command::new(&exe);
            c.arg("run").arg("--spec").arg(self.spec).args(["--steps", &to.to_string(), "--quiet"]);
            c.args(["--world-size", &w.to_string(), "--rank", &r.to_string(), "--threads", &threads.to_string()]);
            c.arg("--hash-log").arg(&log);
            if let Some(m) = microbatch {
                c.args(["--microbatch", &m.to_string()]);
            }
            if let Some(d) = resume {
                c.arg("--resume-from").arg(d);
            }
            if let Some((k, d)) = save_at {
                c.args(["--checkpoint-at", &k.to_string()]).arg("--checkpoint-dir").arg(d);
            }
            c.env_remove("RANK").env_remove("WORLD_SIZE");
            ranks.push(RankProcess { command: c, log });
        }
        let log = run_ranks(ranks).map_err(|e| CliError::Verify(format!("{label}: {e}")))?;
        let steps = log.fingerprints(self.lanes).map_err(|e| CliError::Verify(format!("{label}: {e}")))?;
        Ok(steps)
    }
}

/// Compares `got` with the reference; `got` must hold exactly the steps `want`. Returns the
/// first difference.
fn compare(reference: &Steps, got: &Steps, want: std::ops::Range<u64>) -> Option<String> {
    if !got.keys().copied().eq(want.clone()) {
        let (first, last) = (got.keys().next(), got.keys().next_back());
        return Some(match (first, last) {
            (Some(a), Some(b)) => format!("delivered {} steps ({a}..={b}), expected steps {want:?}", got.len()),
            _ => format!("delivered no steps, expected steps {want:?}"),
        });
    }
    for (s, d) in got {
        match reference.get(s) {
            None => return Some(format!("step {s} is not in the reference run")),
            Some(r) if r != d => {
                return Some(format!("step {s} differs: {} vs reference {}", &d.to_hex()[..16], &r.to_hex()[..16]));
            }
            _ => {}
        }
    }
    None
}

pub fn verify(args: &VerifyArgs) -> Result<(), CliError> {
    let spec = crate::read_spec(&args.spec)?;
    for &w in args.world_sizes.iter().chain(&args.resume_world_sizes) {
        spec.topology(w, 0)?;
    }
    let tmp = match &args.work_dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("zephon-verify-{}", std::process::id())),
    };
    let launch = Launch { spec: &args.spec, work: &tmp, lanes: spec.lanes };
    let threads = if args.threads.is_empty() { vec![1] } else { args.threads.clone() };
    let microbatches: Vec<Option<usize>> =
        if args.microbatches.is_empty() { vec![None] } else { args.microbatches.iter().map(|&m| Some(m)).collect() };

    let w0 = *args.world_sizes.first().ok_or_else(|| CliError::Usage("--world-sizes needs at least one".into()))?;
    println!("reference: W={w0} threads={} , steps 0..{}", threads[0], args.steps);
    let reference = launch.ranks(Ranks {
        label: "reference",
        w: w0,
        threads: threads[0],
        microbatch: microbatches[0],
        to: args.steps,
        resume: None,
        save_at: None,
    })?;
    if reference.len() as u64 != args.steps {
        return Err(CliError::Verify(format!(
            "the reference run delivered {} of {} steps (data ended?)",
            reference.len(),
            args.steps
        )));
    }
    let mut failures = Vec::new();
    let mut report = |label: String, got: &Steps, want: std::ops::Range<u64>| match compare(&reference, got, want) {
        None => println!("  {label:<44} {} steps equal", got.len()),
        Some(diff) => {
            println!("  {label:<44} FIRST DIFFERENCE: {diff}");
            failures.push(label);
        }
    };
    for &w in &args.world_sizes {
        for &t in &threads {
            for &m in &microbatches {
                let label = format!("W={w} threads={t}{}", m.map_or(String::new(), |m| format!(" microbatch={m}")));
                let got = launch.ranks(Ranks {
                    label: &label.replace([' ', '='], "_"),
                    w,
                    threads: t,
                    microbatch: m,
                    to: args.steps,
                    resume: None,
                    save_at: None,
                })?;
                report(label, &got, 0..args.steps);
            }
        }
    }
    if let Some(k) = args.resume_at {
        let saver = args.world_sizes.get(1).copied().unwrap_or(w0);
        let ck = tmp.join("checkpoints-first");
        let head = launch.ranks(Ranks {
            label: "checkpoint",
            w: saver,
            threads: threads[0],
            microbatch: None,
            to: k,
            resume: None,
            save_at: Some((k, &ck)),
        })?;
        report(format!("W={saver} steps 0..{k}, checkpoint at {k}"), &head, 0..k);
        let sizes =
            if args.resume_world_sizes.is_empty() { args.world_sizes.clone() } else { args.resume_world_sizes.clone() };
        for (i, &r) in sizes.iter().enumerate() {
            let t = threads[i % threads.len()];
            match args.second_resume_at {
                Some(k2) if k2 > k && k2 < args.steps => {
                    let ck2 = tmp.join(format!("checkpoints-second-{r}"));
                    let mid = launch.ranks(Ranks {
                        label: &format!("resume-{r}"),
                        w: r,
                        threads: t,
                        microbatch: None,
                        to: k2,
                        resume: Some(&ck.join(format!("step-{k:08}"))),
                        save_at: Some((k2, &ck2)),
                    })?;
                    report(format!("resumed W={saver}→{r} at {k}, steps {k}..{k2}"), &mid, k..k2);
                    let r2 = sizes[(i + 1) % sizes.len()];
                    let tail = launch.ranks(Ranks {
                        label: &format!("resume-{r}-{r2}"),
                        w: r2,
                        threads: t,
                        microbatch: None,
                        to: args.steps,
                        resume: Some(&ck2),
                        save_at: None,
                    })?;
                    report(format!("  then W={r}→{r2} at {k2}, steps {k2}..{}", args.steps), &tail, k2..args.steps);
                }
                _ => {
                    let tail = launch.ranks(Ranks {
                        label: &format!("resume-{r}"),
                        w: r,
                        threads: t,
                        microbatch: None,
                        to: args.steps,
                        resume: Some(&ck.join(format!("step-{k:08}"))),
                        save_at: None,
                    })?;
                    report(format!("resumed W={saver}→{r} at {k}, steps {k}..{}", args.steps), &tail, k..args.steps);
                }
            }
        }
    }
    if args.work_dir.is_none() {
        let _ = fs::remove_dir_all(&tmp);
    }
    if failures.is_empty() {
        println!("verify: every global step is identical in every configuration");
        Ok(())
    } else {
        Err(CliError::Verify(format!("{} configuration(s) differ: {}", failures.len(), failures.join("; "))))
    }
}
