//! `zephon bench`: throughput, time to first batch fresh and after a restore, checkpoint size
//! and peak memory, each phase in a fresh process (as a user would see it).
//!
//! With `--rounds N`, N fresh runs alternate with N measurements of the bare tokenizers and
//! the rates are medians; the first round's run (the one that checkpoints) gives the time per
//! stage, fill, shares, time to first batch and checkpoint size. A spec without `[tokenize]`
//! (conversations, pre-tokenized ids) has no bare tokenizer to compare with: those figures are
//! null.

use std::path::PathBuf;
use std::process::Command;

use crate::CliError;
use crate::run::RunReport;

pub struct BenchArgs {
    pub spec: PathBuf,
    pub steps: u64,
    pub checkpoint_at: u64,
    pub json_out: Option<PathBuf>,
    pub threads: Option<usize>,
    /// Fresh runs and raw measurements, alternated; the report gives their medians.
    pub rounds: u32,
}

#[derive(serde::Serialize)]
struct BenchReport {
    /// Single-thread tokens/s of the `tokenizers` crate (`encode_fast`) on the spec's text,
    /// each dataset weighted by the tokens the run delivered from it (null without
    /// `[tokenize]`, as are the other raw rates and efficiencies).
    raw_tokenizers_crate_tokens_per_s: Option<f64>,
    /// Single-thread tokens/s of the engine the pipeline uses (zephon-text's fast path for
    /// byte-level BPE files, else the `tokenizers` crate) on the same text, weighted alike.
    raw_engine_tokens_per_s: Option<f64>,
    /// The same rates per dataset.
    raw_by_dataset: Vec<RawRates>,
    /// Worker threads the pipeline ran with.
    threads: usize,
    /// tokens_per_s / (threads × raw_tokenizers_crate_tokens_per_s).
    efficiency_vs_tokenizers_crate: Option<f64>,
    /// tokens_per_s / (threads × raw_engine_tokens_per_s).
    efficiency_vs_engine: Option<f64>,
    tokens_per_s: f64,
    tokens_per_s_overall: f64,
    /// Each round's fresh run and raw measurement (`--rounds`): the rates and efficiencies
    /// above are medians over these (the efficiencies are ratios of the medians).
    rounds: Vec<RoundReport>,
    /// Non-pad tokens / token positions of the delivered rows (1.0 = rows without padding).
    fill: f64,
    /// Tokens per dataset in the fresh run, their shares, the targets and how far each ran
    /// ahead of its share at worst (the step-by-step series is in `run --report`).
    shares: Vec<crate::run::ShareReport>,
    /// Thread time per part of the pipeline in the fresh run (reading, each operator, digests,
    /// snapshots), summed over threads, and its share of threads × wall time.
    time_by_stage: Vec<StageShare>,
    ttfb_s: f64,
    resume_ttfb_s: f64,
    checkpoint_bytes: u64,
    peak_rss_bytes: u64,
    steps: u64,
    tokens: u64,
    checkpoint_at: u64,
}

/// One round: a fresh run, then the bare tokenizers.
#[derive(serde::Serialize)]
struct RoundReport {
    tokens_per_s: f64,
    raw_tokenizers_crate_tokens_per_s: Option<f64>,
    raw_engine_tokens_per_s: Option<f64>,
    efficiency_vs_engine: Option<f64>,
}

/// The median (the mean of the middle two for an even count; 0 for none).
fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => 0.0,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    }
}

#[derive(serde::Serialize)]
struct StageShare {
    name: String,
    part: String,
    seconds: f64,
    /// seconds / (threads × the run's wall time).
    of_threads_wall: f64,
}

fn child(args: &[String]) -> Result<RunReport, CliError> {
    let exe = std::env::current_exe().map_err(|e| CliError::Io(PathBuf::from("zephon"), e))?;
    let status = Command::new(&exe).args(args).status().map_err(|e| CliError::Io(exe.clone(), e))?;
    if !status.success() {
        return Err(CliError::Verify(format!("zephon {} failed", args.join(" "))));
    }
    let report_path = args.iter().skip_while(|a| *a != "--report").nth(1).cloned().unwrap_or_default();
    let text = std::fs::read_to_string(&report_path).map_err(|e| CliError::Io(report_path.clone().into(), e))?;
    serde_json::from_str(&text).map_err(|e| CliError::Verify(format!("{report_path}: not a run report: {e}")))
}

/// Single-thread tokens/s of the `tokenizers` crate and of the pipeline's engine on one
/// dataset's text.
#[derive(serde::Serialize)]
struct RawRates {
    dataset: String,
    tokenizers_crate_tokens_per_s: f64,
    engine_tokens_per_s: f64,
}

/// Single-thread tokens/s of the `tokenizers` crate and of the pipeline's engine on about
/// `budget` bytes of each dataset's text, taken as every k-th row of every shard, one text at
/// a time (as the tokenize operator calls it).
fn raw_tokenizer_rates(
    spec: &zephon::Spec,
    t: &zephon::spec::TokenizeSpec,
    budget: usize,
) -> Result<Vec<RawRates>, CliError> {
    let tokenizer_path = spec.resolve(&t.tokenizer);
    let mut rates = Vec::new();
    for d in &spec.datasets {
        let ds =
            zephon::io::open_layout(&d.name, &spec.layout(d)?, &Default::default()).map_err(zephon::Error::from)?;
        let datasets = zephon::lane_core::Datasets::new(vec![ds]);
        let m = &datasets.manifests()[0];
        let (rows, bytes) = (m.rows().max(1), m.bytes().max(1));
        // Rows per sample so that about `budget` bytes are read, spread over all shards.
        let every = (rows * budget as u64 / bytes).max(1);
        let step = (rows / every).max(1);
        let mut texts = Vec::new();
        for (s, sh) in m.shards.iter().enumerate() {
            for r in (0..sh.rows).step_by(step as usize) {
                let rec = datasets.read(&[zephon::SampleId::new(0, s as u32, r)]).remove(0);
                if let Some(text) =
                    rec.ok().and_then(|r| r.str(d.text_field.as_deref().unwrap_or("text")).map(String::from))
                {
                    texts.push(text);
                }
            }
        }
        // The best of three passes, each with the tokenizer loaded afresh (so that neither
        // engine's cache of words remembers an earlier pass) and on a fresh thread (the fast
        // path's piece cache is per thread): on a noisy machine one pass of a few megabytes
        // moves by tens of percent.
        let time = |f: &(dyn Fn(&zephon::Tokenizer, &str) -> Result<usize, zephon::text::Error> + Sync)| -> Result<f64, CliError> {
            let pass = || -> Result<f64, CliError> {
                let tokenizer = zephon::Tokenizer::from_file(&tokenizer_path).map_err(zephon::Error::from)?;
                let start = std::time::Instant::now();
                let mut tokens = 0;
                for text in &texts {
                    tokens += f(&tokenizer, text).map_err(|e| CliError::Verify(e.to_string()))?;
                }
                Ok(tokens as f64 / start.elapsed().as_secs_f64())
            };
            let mut best = 0f64;
            for _ in 0..3 {
                let rate = std::thread::scope(|s| s.spawn(pass).join())
                    .map_err(|_| CliError::Verify("the tokenizer panicked".into()))??;
                best = best.max(rate);
            }
            Ok(best)
        };
        rates.push(RawRates {
            dataset: d.name.clone(),
            tokenizers_crate_tokens_per_s: time(&|t, s| t.encode_reference(s).map(|v| v.len()))?,
            engine_tokens_per_s: time(&|t, s| t.count(s))?,
        });
    }
    Ok(rates)
}

/// The single-thread rate on the run's mix of text: each dataset's rate weighted by the tokens
/// the run delivered from it (time per token adds up; a plain mean of rates would not).
fn mixed_rate(rates: &[RawRates], shares: &[crate::run::ShareReport], rate: fn(&RawRates) -> f64) -> f64 {
    let total: u64 = shares.iter().map(|s| s.tokens).sum();
    let mut seconds_per_token = 0.0;
    for r in rates {
        let tokens = shares.iter().find(|s| s.name == r.dataset).map_or(0, |s| s.tokens);
        let weight = if total == 0 { 1.0 / rates.len() as f64 } else { tokens as f64 / total as f64 };
        seconds_per_token += weight / rate(r).max(1e-9);
    }
    1.0 / seconds_per_token.max(1e-12)
}

pub fn bench(args: &BenchArgs) -> Result<(), CliError> {
    if args.checkpoint_at == 0 || args.checkpoint_at >= args.steps {
        return Err(CliError::Usage("--checkpoint-at must be between 1 and --steps - 1".into()));
    }
    if args.rounds == 0 {
        return Err(CliError::Usage("--rounds must be at least 1".into()));
    }
    let work = std::env::temp_dir().join(format!("zephon-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(|e| CliError::Io(work.clone(), e))?;
    let spec = args.spec.display().to_string();
    let thread_args: Vec<String> = args.threads.map(|t| vec!["--threads".into(), t.to_string()]).unwrap_or_default();
    let s = |x: &str| x.to_string();
    let ck = work.join("ckpt");
    let mut fresh = vec![s("run"), s("--spec"), spec.clone(), s("--steps"), args.steps.to_string(), s("--quiet")];
    fresh.extend([
        s("--checkpoint-at"),
        args.checkpoint_at.to_string(),
        s("--checkpoint-dir"),
        ck.display().to_string(),
    ]);
    fresh.extend([s("--report"), work.join("fresh.json").display().to_string()]);
    fresh.extend(thread_args.clone());
    eprintln!("bench: fresh run of {} steps (checkpoint at {})", args.steps, args.checkpoint_at);
    let a = child(&fresh)?;
    let mut resume =
        vec![s("run"), s("--spec"), spec.clone(), s("--steps"), (args.checkpoint_at + 1).to_string(), s("--quiet")];
    resume.extend([
        s("--resume-from"),
        ck.display().to_string(),
        s("--report"),
        work.join("resume.json").display().to_string(),
    ]);
    resume.extend(thread_args.clone());
    eprintln!("bench: restore from step {} in a fresh process", args.checkpoint_at);
    let b = child(&resume)?;
    let spec_parsed = crate::read_spec(&args.spec)?;
    crate::run::warn(&spec_parsed);
    let threads = args.threads.unwrap_or_else(|| spec_parsed.exec().threads);
    let n_threads = threads as f64;
    // Rounds alternate a fresh run with the bare tokenizers (where there is a [tokenize] to
    // compare with), so that both see the same spells of a noisy machine.
    let mut runs = vec![];
    let mut raws = vec![];
    for round in 1..=args.rounds {
        if round > 1 {
            eprintln!("bench: round {round} of {}: fresh run of {} steps", args.rounds, args.steps);
            let report = work.join(format!("fresh-{round}.json")).display().to_string();
            let mut again =
                vec![s("run"), s("--spec"), spec.clone(), s("--steps"), args.steps.to_string(), s("--quiet")];
            again.extend([s("--report"), report]);
            again.extend(thread_args.clone());
            runs.push(child(&again)?);
        }
        if let Some(t) = &spec_parsed.tokenize {
            eprintln!("bench: the bare tokenizers on one thread (round {round} of {})", args.rounds);
            raws.push(raw_tokenizer_rates(&spec_parsed, t, 4 << 20)?);
        }
    }
    let rounds: Vec<RoundReport> = std::iter::once(&a)
        .chain(&runs)
        .enumerate()
        .map(|(i, run)| {
            let rate = |of: fn(&RawRates) -> f64| raws.get(i).map(|raw| mixed_rate(raw, &run.shares, of));
            let engine = rate(|r| r.engine_tokens_per_s);
            RoundReport {
                tokens_per_s: run.tokens_per_s,
                raw_tokenizers_crate_tokens_per_s: rate(|r| r.tokenizers_crate_tokens_per_s),
                raw_engine_tokens_per_s: engine,
                efficiency_vs_engine: engine.map(|e| run.tokens_per_s / (n_threads * e)),
            }
        })
        .collect();
    let tokens_per_s = median(rounds.iter().map(|r| r.tokens_per_s).collect());
    let measured = !raws.is_empty();
    let raw_median =
        |of: fn(&RoundReport) -> Option<f64>| measured.then(|| median(rounds.iter().filter_map(of).collect()));
    let reference = raw_median(|r| r.raw_tokenizers_crate_tokens_per_s);
    let engine = raw_median(|r| r.raw_engine_tokens_per_s);
    let raw_by_dataset = (raws.first().into_iter().flatten().enumerate())
        .map(|(d, first)| RawRates {
            dataset: first.dataset.clone(),
            tokenizers_crate_tokens_per_s: median(raws.iter().map(|r| r[d].tokenizers_crate_tokens_per_s).collect()),
            engine_tokens_per_s: median(raws.iter().map(|r| r[d].engine_tokens_per_s).collect()),
        })
        .collect();
    let peak_rss_bytes = runs.iter().map(|r| r.peak_rss_bytes).fold(a.peak_rss_bytes.max(b.peak_rss_bytes), u64::max);
    let out = BenchReport {
        raw_tokenizers_crate_tokens_per_s: reference,
        raw_engine_tokens_per_s: engine,
        raw_by_dataset,
        threads,
        efficiency_vs_tokenizers_crate: reference.map(|r| tokens_per_s / (n_threads * r)),
        efficiency_vs_engine: engine.map(|e| tokens_per_s / (n_threads * e)),
        tokens_per_s,
        tokens_per_s_overall: median(std::iter::once(&a).chain(&runs).map(|r| r.tokens_per_s_overall).collect()),
        rounds,
        fill: a.fill,
        shares: a.shares.iter().map(|d| crate::run::ShareReport { ahead_by_step: Vec::new(), ..d.clone() }).collect(),
        time_by_stage: a
            .time_by_stage
            .iter()
            .map(|t| StageShare {
                name: t.name.clone(),
                part: t.part.clone(),
                seconds: t.seconds,
                of_threads_wall: t.seconds / (threads as f64 * a.elapsed_s).max(1e-9),
            })
            .collect(),
        ttfb_s: a.ttfb_s,
        resume_ttfb_s: b.ttfb_s,
        checkpoint_bytes: a.checkpoint_bytes,
        peak_rss_bytes,
        steps: a.steps,
        tokens: a.tokens,
        checkpoint_at: args.checkpoint_at,
    };
    let json = serde_json::to_string_pretty(&out).unwrap_or_default();
    println!("{json}");
    if let Some(p) = &args.json_out {
        crate::write_file(p, &json)?;
    }
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![]), 0.0);
        assert_eq!(median(vec![3.0]), 3.0);
        assert_eq!(median(vec![5.0, 1.0, 3.0]), 3.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
