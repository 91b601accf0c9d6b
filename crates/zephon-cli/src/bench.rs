//! `zephon bench`: throughput, time to first batch fresh and after a restore, checkpoint size
//! and peak memory, each phase in a fresh process (as a user would see it).

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
}

#[derive(serde::Serialize)]
struct BenchReport {
    tokens_per_s: f64,
    tokens_per_s_overall: f64,
    ttfb_s: f64,
    resume_ttfb_s: f64,
    checkpoint_bytes: u64,
    peak_rss_bytes: u64,
    steps: u64,
    tokens: u64,
    checkpoint_at: u64,
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

pub fn bench(args: &BenchArgs) -> Result<(), CliError> {
    if args.checkpoint_at == 0 || args.checkpoint_at >= args.steps {
        return Err(CliError::Usage("--checkpoint-at must be between 1 and --steps - 1".into()));
    }
    let work = std::env::temp_dir().join(format!("zephon-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(|e| CliError::Io(work.clone(), e))?;
    let spec = args.spec.display().to_string();
    let threads: Vec<String> = args.threads.map(|t| vec!["--threads".into(), t.to_string()]).unwrap_or_default();
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
    fresh.extend(threads.clone());
    eprintln!("bench: fresh run of {} steps (checkpoint at {})", args.steps, args.checkpoint_at);
    let a = child(&fresh)?;
    let mut resume =
        vec![s("run"), s("--spec"), spec, s("--steps"), (args.checkpoint_at + 1).to_string(), s("--quiet")];
    resume.extend([
        s("--resume-from"),
        ck.display().to_string(),
        s("--report"),
        work.join("resume.json").display().to_string(),
    ]);
    resume.extend(threads);
    eprintln!("bench: restore from step {} in a fresh process", args.checkpoint_at);
    let b = child(&resume)?;
    let out = BenchReport {
        tokens_per_s: a.tokens_per_s,
        tokens_per_s_overall: a.tokens_per_s_overall,
        ttfb_s: a.ttfb_s,
        resume_ttfb_s: b.ttfb_s,
        checkpoint_bytes: a.checkpoint_bytes,
        peak_rss_bytes: a.peak_rss_bytes.max(b.peak_rss_bytes),
        steps: a.steps,
        tokens: a.tokens,
        checkpoint_at: args.checkpoint_at,
    };
    let json = serde_json::to_string_pretty(&out).unwrap_or_default();
    println!("{json}");
    if let Some(p) = &args.json_out {
        std::fs::write(p, &json).map_err(|e| CliError::Io(p.clone(), e))?;
    }
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}
