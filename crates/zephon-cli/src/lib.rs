//! The `zephon` command: demo, run, verify, explain, inspect, bench, as a library whose
//! [`main_with`] a binary calls with the spec sections it registers.
//!
//! Every command reads the same TOML spec (`zephon::Spec`). Errors go to stderr with a
//! non-zero exit code (1 for a failed run or check, 2 for bad usage); files are written
//! atomically or not at all.
//!
//! The one design decision: a build of the command is its set of sections. The `zephon`
//! binary registers none beyond the built-in tables; a crate with its own operators builds
//! its own command in a few lines, and every subcommand (including the rank processes that
//! `verify` and `bench` start, which are the same binary) reads specs that use them:
//!
//! ```no_run
//! // src/main.rs of a binary that depends on zephon-cli, zephon and an operator crate.
//! # struct MySection;
//! # impl zephon::operator::Section for MySection {
//! #     fn name(&self) -> &str { "mine" }
//! #     fn stage(&self) -> zephon::operator::Stage { zephon::operator::Stage::Records }
//! #     fn build(&self, _: &zephon::operator::SectionTable, _: &zephon::operator::SectionContext)
//! #         -> Result<std::sync::Arc<dyn zephon::operator::Operator>, String> { unimplemented!() }
//! # }
//! fn main() -> std::process::ExitCode {
//!     match zephon::Sections::new().with(MySection) {
//!         Ok(sections) => zephon_cli::main_with(sections),
//!         Err(e) => zephon_cli::fail(e),
//!     }
//! }
//! ```
//!
//! What it is not: a library of loading functions (that is the `zephon` crate); its only
//! entry point is the whole command.

mod bench;
mod check_tokenizer;
mod corpus;
mod demo;
mod demo_images;
mod inspect;
mod progress;
mod run;
mod shares;
mod validate;
mod verify;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::OnceLock;

use clap::{Parser, Subcommand};

// The `tokenizers` crate allocates and frees many small objects per text, and batches are freed
// on another thread than the one that built them: with glibc's malloc, a worker on the
// Llama-2 `tokenizers` path spends ~15 % of its time in malloc/free (~5 % when the same
// tokenizer runs alone). mimalloc makes the pipeline 1.3-1.4x as fast on that path and
// 1.2-1.3x on the GPT-2 fast path, for 60-100 MiB more peak RSS (README, "Allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The sections this process's command was built with (set once, by [`main_with`]).
static SECTIONS: OnceLock<zephon::Sections> = OnceLock::new();

/// Reads a spec file with the command's sections.
pub(crate) fn read_spec(path: &Path) -> Result<zephon::Spec, zephon::Error> {
    zephon::Spec::from_file_with(path, SECTIONS.get_or_init(zephon::Sections::new))
}

/// Writes `bytes` to `path` atomically (a temporary beside it, then a rename): a file the
/// command writes is whole or absent, never half-written.
pub(crate) fn write_file(path: &Path, bytes: impl AsRef<[u8]>) -> Result<(), CliError> {
    use std::io::Write as _;
    zephon::lane_core::disk::write_atomic(path, |f| f.write_all(bytes.as_ref()))
        .map_err(|e| CliError::Io(path.to_path_buf(), e))
}

/// What can go wrong in a command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// From the pipeline.
    #[error("{0}")]
    Zephon(#[from] zephon::Error),
    /// Bad flags.
    #[error("{0}")]
    Usage(String),
    /// A file the command writes or reads.
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    /// A check that failed (verify, demo).
    #[error("{0}")]
    Verify(String),
    /// The demo's generated data (corpora, tokenizer, pictures) could not be made.
    #[error("demo data {path}: {message}")]
    DemoData {
        /// What was being made.
        path: PathBuf,
        /// Why it failed.
        message: String,
    },
}

impl From<zephon::lane_core::Error> for CliError {
    fn from(e: zephon::lane_core::Error) -> Self {
        CliError::Zephon(e.into())
    }
}

#[derive(Parser)]
#[command(
    name = "zephon",
    version,
    about = "Elastically deterministic data loading: the same global batches at any GPU count"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the determinism experiment on an embedded default (no download): fingerprints at W = 1,
    /// 2, 4, 8 and across a resume, then throughput.
    Demo(demo::DemoArgs),
    /// Run one rank of a spec (rank and world size from flags or RANK/WORLD_SIZE).
    Run(run::RunArgs),
    /// Run one rank of the spec's validation pass ([validation]): every held-out record once,
    /// the same steps at every world size; say what it read.
    Validate(validate::ValidateArgs),
    /// Run the spec as separate rank processes at several world sizes (and resumes) and
    /// compare every global step.
    Verify {
        #[arg(long)]
        spec: PathBuf,
        #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
        world_sizes: Vec<u32>,
        #[arg(long)]
        steps: u64,
        #[arg(long, value_delimiter = ',', default_value = "1")]
        threads: Vec<usize>,
        #[arg(long, value_delimiter = ',')]
        microbatch: Option<Vec<usize>>,
        /// Checkpoint at this step (at the second world size), then resume elsewhere.
        #[arg(long)]
        resume_at: Option<u64>,
        #[arg(long, value_delimiter = ',')]
        resume_world_sizes: Option<Vec<u32>>,
        /// Checkpoint again at this step after each resume, and resume once more.
        #[arg(long)]
        second_resume_at: Option<u64>,
        /// Keep hash logs and checkpoints here.
        #[arg(long)]
        work_dir: Option<PathBuf>,
    },
    /// Print the plan: datasets, work source, operators, buffers.
    Explain {
        #[arg(long)]
        spec: PathBuf,
        #[arg(long, default_value_t = 1)]
        world_size: u32,
        #[arg(long, default_value_t = 0)]
        rank: u32,
    },
    /// Which documents (dataset, shard, row, token range) made each row of a step.
    Inspect {
        #[arg(long)]
        spec: PathBuf,
        #[arg(long)]
        step: u64,
        #[arg(long)]
        resume_from: Option<PathBuf>,
        #[arg(long)]
        threads: Option<usize>,
    },
    /// Compare the tokenizer engine (fast path or tokenizers) with the tokenizers crate on the
    /// spec's own documents.
    CheckTokenizer(check_tokenizer::CheckTokenizerArgs),
    /// Tokens/s, time to first batch fresh and after a restore, checkpoint size, peak RSS.
    Bench {
        #[arg(long)]
        spec: PathBuf,
        #[arg(long)]
        steps: u64,
        #[arg(long)]
        checkpoint_at: u64,
        #[arg(long)]
        json_out: Option<PathBuf>,
        #[arg(long)]
        threads: Option<usize>,
        /// Fresh runs and raw tokenizer measurements, taken in turn; rates and efficiencies
        /// are their medians (on a noisy machine one of each moves by tens of percent).
        #[arg(long, default_value_t = 1)]
        rounds: u32,
    },
}

/// Runs the command line of this process with `sections` registered: what a `zephon` binary's
/// `main` does.
pub fn main_with(sections: zephon::Sections) -> ExitCode {
    let _ = SECTIONS.set(sections);
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo::demo(&args),
        Command::CheckTokenizer(args) => check_tokenizer::check_tokenizer(&args),
        Command::Validate(args) => validate::validate(&args).map(|r| {
            let per: Vec<String> = r
                .records
                .iter()
                .map(|(name, n)| format!("{name} {n} records, {} tokens", r.tokens.get(name).copied().unwrap_or(0)))
                .collect();
            println!(
                "validation: {} steps, {} rows of records and {} padding rows on this rank; {}",
                r.steps,
                r.rows,
                r.padding_rows,
                per.join("; ")
            );
        }),
        Command::Run(args) => run::run(&args).map(|r| {
            if !args.quiet {
                eprintln!(
                    "done: steps {}..{}, {:.2} M tokens, {:.0} tokens/s, fill {:.4}, first batch after {:.2} s",
                    r.first_step,
                    r.first_step + r.steps,
                    r.tokens as f64 / 1e6,
                    r.tokens_per_s_overall,
                    r.fill,
                    r.ttfb_s
                );
                let busy: Vec<String> = r
                    .time_by_stage
                    .iter()
                    .filter(|t| t.seconds >= 0.005)
                    .map(|t| format!("{} {:.2} s", t.name, t.seconds))
                    .collect();
                eprintln!("thread time by part: {}", busy.join(", "));
                if r.shares.len() > 1 {
                    let parts: Vec<String> = r
                        .shares
                        .iter()
                        .map(|d| match d.target {
                            Some(t) => format!(
                                "{} {:.2} % (target {:.2} %, at most {} tokens ahead, after step {})",
                                d.name,
                                100.0 * d.share,
                                100.0 * t,
                                d.max_excess_tokens,
                                d.max_excess_step
                            ),
                            None => format!("{} {:.2} %", d.name, 100.0 * d.share),
                        })
                        .collect();
                    eprintln!("token shares: {}", parts.join(", "));
                }
                for g in &r.segments {
                    let pct = |v: &[f64]| v.iter().map(|x| format!("{:.1}", 100.0 * x)).collect::<Vec<_>>().join(" / ");
                    let transition = match g.transition_steps {
                        Some(t) => format!("within {} tokens after a transition of {t} steps", g.bound_tokens.unwrap_or(0)),
                        None => "the bound never held".to_string(),
                    };
                    eprintln!(
                        "shares of steps {}..{}: {} % (target {} %); after the transition {} %, {transition}, at most {} tokens off",
                        g.from_step,
                        g.to_step,
                        pct(&g.shares),
                        pct(&g.targets),
                        pct(&g.shares_after_transition),
                        g.max_deviation_tokens
                    );
                }
            }
        }),
        Command::Verify {
            spec,
            world_sizes,
            steps,
            threads,
            microbatch,
            resume_at,
            resume_world_sizes,
            second_resume_at,
            work_dir,
        } => verify::verify(&verify::VerifyArgs {
            spec,
            world_sizes,
            threads,
            microbatches: microbatch.unwrap_or_default(),
            steps,
            resume_at,
            resume_world_sizes: resume_world_sizes.unwrap_or_default(),
            second_resume_at,
            work_dir,
        }),
        Command::Explain { spec, world_size, rank } => (|| {
            let s = read_spec(&spec)?;
            run::warn(&s);
            let text = s.pipeline()?.explain(&s.topology(world_size, rank)?)?;
            print!("{text}");
            Ok(())
        })(),
        Command::Inspect { spec, step, resume_from, threads } => {
            inspect::inspect(&inspect::InspectArgs { spec, step, resume_from, threads })
        }
        Command::Bench { spec, steps, checkpoint_at, json_out, threads, rounds } => {
            bench::bench(&bench::BenchArgs { spec, steps, checkpoint_at, json_out, threads, rounds })
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// Prints `error` as the command prints its errors and gives its exit code (2 for bad usage,
/// else 1): for a binary whose setup fails before [`main_with`].
pub fn fail(error: impl Into<CliError>) -> ExitCode {
    let e = error.into();
    eprintln!("error: {e}");
    ExitCode::from(if matches!(e, CliError::Usage(_)) { 2 } else { 1 })
}
