//! `zephon run`: one rank of a spec, with checkpoints, a hash log and a progress bar.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use zephon::lane_core::{HashLogLine, RankEnv, checkpoint, lane_digest};
use zephon::operator::columns;
use zephon::operator::{Digest, Lane};
use zephon::{LocalStep, Spec, Topology, Value};

use crate::CliError;
use crate::shares::ShareTracker;
pub use crate::shares::{SegmentReport, ShareReport};

/// What `run` was asked to do.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct RunArgs {
    #[arg(long)]
    pub spec: PathBuf,
    /// Stop when the next step reaches this index (absolute, also after a resume).
    #[arg(long)]
    pub steps: Option<u64>,
    #[arg(long)]
    pub world_size: Option<u32>,
    #[arg(long)]
    pub rank: Option<u32>,
    /// A checkpoint folder (or a --checkpoint-dir root: its newest complete step).
    #[arg(long)]
    pub resume_from: Option<PathBuf>,
    /// Checkpoint after every K-th step into --checkpoint-dir/step-NNNNNNNN.
    #[arg(long)]
    pub checkpoint_every: Option<u64>,
    /// Checkpoint once, after step K.
    #[arg(long)]
    pub checkpoint_at: Option<u64>,
    #[arg(long)]
    pub checkpoint_dir: Option<PathBuf>,
    /// TSV, one line per owned lane per step: step, lane, sha256 of the lane's rows.
    #[arg(long)]
    pub hash_log: Option<PathBuf>,
    #[arg(long)]
    pub threads: Option<usize>,
    /// Hand rows out in microbatches of this size (hashes are computed from them).
    #[arg(long)]
    pub microbatch: Option<usize>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Write timings as JSON here.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

/// Timings and counts of a run.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct RunReport {
    pub first_step: u64,
    pub steps: u64,
    pub tokens: u64,
    pub ttfb_s: f64,
    pub elapsed_s: f64,
    pub tokens_per_s: f64,
    pub tokens_per_s_overall: f64,
    pub peak_rss_bytes: u64,
    pub checkpoint_bytes: u64,
    pub skipped_records: u64,
    /// Token positions of the delivered rows (rows × their length, pad included).
    pub positions: u64,
    /// `tokens / positions`: how full the packed rows are (1.0 = no padding).
    pub fill: f64,
    /// Tokens delivered per dataset (from the rows' lineage), their shares, and how far each
    /// dataset ran ahead of its target share at worst, over every step (this rank's lanes).
    pub shares: Vec<ShareReport>,
    /// The same per segment of the share schedule, against the segment's targets: the
    /// transition after each change and the largest deviation after it.
    pub segments: Vec<SegmentReport>,
    /// Thread time per part of the pipeline (reading, each operator, digests, snapshots).
    pub time_by_stage: Vec<zephon::StageTime>,
    /// Images (attachments of kind `image`) in the delivered rows.
    pub images: u64,
    /// What was left out, per dataset and why.
    pub data: zephon::DataReport,
    /// What the run did with its settings as given that a user should know (token shares used
    /// relative to their sum, a schedule changed after the checkpoint's step).
    #[serde(default)]
    pub notices: Vec<String>,
    /// The most one lane holds, as `explain` states it.
    #[serde(default)]
    pub memory: Option<zephon::MemoryBound>,
    /// Worker threads of this rank.
    #[serde(default)]
    pub threads: usize,
}

/// The bound the shares hold to at every step without a schedule, for this rank's lanes:
/// each lane within `slack_tokens + seq_len` tokens of its share (see the mixing guide).
fn share_bound(spec: &Spec, topology: &Topology) -> Option<u64> {
    let slack = spec.ensure_mixture.as_ref()?.slack_tokens.unwrap_or(4096);
    let seq_len = spec.pack.as_ref()?.seq_len as u64;
    Some(u64::from(topology.lanes() / topology.world_size()) * (slack + seq_len))
}

/// Says the spec's warnings (settings that combine to drop data) on stderr.
pub fn warn(spec: &Spec) {
    for w in spec.warnings() {
        eprintln!("zephon: warning: {w}");
    }
}

/// The topology from flags, else from the launcher's environment (saying on stderr when no
/// launcher variable is set and the process runs as rank 0 of 1).
pub fn topology(spec: &Spec, world_size: Option<u32>, rank: Option<u32>) -> Result<Topology, CliError> {
    let (w, r) = match (world_size, rank) {
        (Some(w), Some(r)) => (w, r),
        (None, None) => {
            let env = RankEnv::detect(|k| std::env::var(k).ok()).map_err(zephon::Error::from)?;
            if env.launcher.is_none() {
                eprintln!("zephon: {}", RankEnv::NONE_SET);
            }
            (env.world_size, env.rank)
        }
        _ => {
            return Err(CliError::Usage(
                "give --world-size and --rank together (or neither, to read RANK/WORLD_SIZE)".into(),
            ));
        }
    };
    Ok(spec.topology(w, r)?)
}

/// The checkpoint directory to resume from (see `checkpoint::resolve`); passed-over newer
/// folders are said on stderr.
pub fn resolve_checkpoint(dir: &Path, lanes: u32) -> Result<PathBuf, CliError> {
    let found = checkpoint::resolve(dir, lanes).map_err(zephon::Error::from)?;
    for note in &found.passed_over {
        eprintln!("zephon: resuming from {}: {note}", found.dir.display());
    }
    Ok(found.dir)
}

/// Non-pad tokens of a step (rows made by the packer carry `num_tokens`).
pub fn step_tokens(step: &LocalStep) -> u64 {
    step.rows()
        .map(|r| match r.get("num_tokens") {
            Some(Value::Int(n)) => *n as u64,
            _ => 0,
        })
        .sum()
}

/// Token positions of a step's rows (the length of their `input_ids`, pad included).
pub fn step_positions(step: &LocalStep) -> u64 {
    step.rows().filter_map(|r| r.get("input_ids").and_then(Value::as_array)).map(|a| a.len() as u64).sum()
}

/// Lane digests of a step computed from the rows as microbatches hand them out: if
/// microbatching changed which rows a step holds, these would differ from the lanes'.
fn digests_through_microbatches(step: &LocalStep, size: usize) -> Result<Vec<(Lane, Digest)>, CliError> {
    // Rows share their buffers: collecting them back out of the microbatches copies no payload.
    let rows: Vec<_> = step
        .microbatches(size)
        .map_err(zephon::Error::from)?
        .iter()
        .flat_map(|m| m.rows().to_vec())
        .map(|r| (*r).clone())
        .collect();
    let mut out = Vec::new();
    let mut at = 0;
    for lane in step.lanes() {
        let n = lane.rows().len();
        out.push((lane.lane(), lane_digest(&rows[at..at + n])));
        at += n;
    }
    Ok(out)
}

fn peak_rss() -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn dir_bytes(dir: &Path) -> u64 {
    fs::read_dir(dir).into_iter().flatten().flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum()
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

pub fn run(args: &RunArgs) -> Result<RunReport, CliError> {
    let start = Instant::now();
    let spec = crate::read_spec(&args.spec)?;
    warn(&spec);
    let topology = topology(&spec, args.world_size, args.rank)?;
    // A microbatch size that cannot cut some step of the schedule is refused now, naming the
    // step, not when the run gets there.
    if let Some(m) = args.microbatch {
        topology.check_microbatch(u32::try_from(m).unwrap_or(u32::MAX)).map_err(zephon::Error::from)?;
    }
    let mut exec = spec.exec();
    if let Some(t) = args.threads {
        exec.threads = t;
    }
    if args.checkpoint_every == Some(0) {
        return Err(CliError::Usage("--checkpoint-every must be at least 1".into()));
    }
    // Lanes snapshot their state only after steps this run can checkpoint at: a snapshot
    // copies every held row's lineage, at every step when taken every step.
    let at = args.checkpoint_at.filter(|&k| k > 0);
    exec.snapshot_every = match (args.checkpoint_every, at) {
        (Some(k), Some(at)) => gcd(k, at),
        (Some(k), None) | (None, Some(k)) => k,
        (None, None) => u64::MAX,
    };
    // And after the last step, so that the report's counts of what was left out (documents
    // ensure_mixture dropped) are those of the whole run, not of the last checkpoint.
    exec.snapshot_at = args.steps;
    // Lane digests only where they are written: without a hash log nothing reads them.
    exec.digests_by_workers = args.hash_log.is_some();
    if (args.checkpoint_every.is_some() || args.checkpoint_at.is_some()) && args.checkpoint_dir.is_none() {
        return Err(CliError::Usage("--checkpoint-every/--checkpoint-at need --checkpoint-dir".into()));
    }
    // Checked before anything starts: a run that cannot write its log must not run first.
    if let Some(log) = &args.hash_log {
        let folder = log.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if !folder.is_dir() {
            return Err(CliError::Usage(format!(
                "--hash-log {}: the folder {} does not exist",
                log.display(),
                folder.display()
            )));
        }
    }
    let pipeline = spec.pipeline()?.exec(exec);
    let bound = share_bound(&spec, &topology);
    let mut loader = match &args.resume_from {
        Some(dir) => pipeline.restore(topology, &resolve_checkpoint(dir, spec.lanes)?)?,
        None => pipeline.build(topology)?,
    };
    let first_step = loader.position().0;
    let target = args.steps;
    if let Some(t) = target
        && t < first_step
    {
        return Err(CliError::Usage(format!("--steps {t} is before the checkpoint's step {first_step}")));
    }

    let partial = args.hash_log.as_ref().map(|p| p.with_extension("partial"));
    let mut log = match &partial {
        Some(p) => Some(std::io::BufWriter::new(fs::File::create(p).map_err(|e| CliError::Io(p.clone(), e))?)),
        None => None,
    };
    let progress = crate::progress::Progress::new(!args.quiet, target.map(|t| t - first_step));
    let mut report = RunReport {
        first_step,
        notices: loader.notices().to_vec(),
        memory: Some(loader.memory_bound()),
        threads: loader.threads(),
        ..RunReport::default()
    };
    let mut shares = ShareTracker::new(loader.dataset_names(), loader.share_schedule().cloned(), bound);
    let mut first_batch: Option<(Instant, u64)> = None;
    let result = (|| -> Result<(), CliError> {
        while target.is_none_or(|t| loader.position().0 < t) {
            let Some(step) = loader.next_step()? else { break };
            let tokens = step_tokens(&step);
            if first_batch.is_none() {
                report.ttfb_s = start.elapsed().as_secs_f64();
                first_batch = Some((Instant::now(), report.tokens + tokens));
            }
            report.tokens += tokens;
            report.positions += step_positions(&step);
            shares.step(&step);
            report.images += step
                .rows()
                .map(|r| r.attachments().iter().filter(|a| a.kind().as_str() == columns::IMAGE).count() as u64)
                .sum::<u64>();
            report.steps += 1;
            if let Some(log) = &mut log {
                let digests = match args.microbatch {
                    Some(m) => digests_through_microbatches(&step, m)?,
                    None => step.lane_digests().collect(),
                };
                for (lane, digest) in digests {
                    writeln!(log, "{}", HashLogLine { step: step.step(), lane, digest })
                        .map_err(|e| CliError::Io(args.hash_log.clone().unwrap_or_default(), e))?;
                }
            }
            let next = loader.position().0;
            let due = args.checkpoint_every.is_some_and(|k| next % k == 0) || args.checkpoint_at == Some(next);
            if let (true, Some(dir)) = (due, &args.checkpoint_dir) {
                let d = dir.join(format!("step-{next:08}"));
                loader.checkpoint(&d)?;
                report.checkpoint_bytes = dir_bytes(&d);
            }
            progress.step(next, report.tokens, loader.skipped(), || shares.line(), start.elapsed().as_secs_f64());
        }
        Ok(())
    })();
    progress.finish();
    let result = result.and_then(|()| {
        if report.steps == 0 && loader.skipped() > 0 {
            return Err(CliError::Usage(format!(
                "no step was delivered: every record read was bad and skipped ({})",
                loader.report().lines().join("; ")
            )));
        }
        Ok(())
    });
    if let Err(e) = result {
        if let Some(p) = &partial {
            drop(log);
            let _ = fs::remove_file(p);
        }
        return Err(e);
    }
    if let (Some(mut log), Some(p), Some(done)) = (log, &partial, &args.hash_log) {
        log.flush().map_err(|e| CliError::Io(p.clone(), e))?;
        drop(log);
        fs::rename(p, done).map_err(|e| CliError::Io(done.clone(), e))?;
    }
    report.elapsed_s = start.elapsed().as_secs_f64();
    report.tokens_per_s_overall = report.tokens as f64 / report.elapsed_s.max(1e-9);
    if let Some((t, tok)) = first_batch {
        let secs = t.elapsed().as_secs_f64();
        if report.steps > 1 && secs > 0.0 {
            report.tokens_per_s = (report.tokens - tok) as f64 / secs;
        }
    }
    (report.shares, report.segments) = shares.finish();
    report.time_by_stage = loader.timings();
    if report.positions > 0 {
        report.fill = report.tokens as f64 / report.positions as f64;
    }
    report.peak_rss_bytes = peak_rss();
    report.skipped_records = loader.skipped();
    report.data = loader.report();
    // Said whatever the verbosity: data left out of training is never silent.
    for line in report.data.lines() {
        eprintln!("zephon: {line}");
    }
    if let Some(path) = &args.report {
        let json = serde_json::to_string_pretty(&report).unwrap_or_default();
        crate::write_file(path, json)?;
    }
    Ok(report)
}
