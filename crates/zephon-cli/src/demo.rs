//! `zephon demo`: the determinism experiment on an embedded default (or real files): two text
//! datasets mixed 50/50 by tokens, tokenized, packed to fixed rows, shuffled; every step's
//! fingerprint at world sizes 1, 2, 4 and 8, and across a resume at another world size.

use std::path::{Path, PathBuf};
use std::time::Instant;

use zephon::testing::{self, RanksError};
use zephon::{Digest, Spec};

use crate::CliError;

/// What `demo` was asked to do.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// Two dataset paths, A,B (instead of the generated corpus).
    #[arg(long, value_delimiter = ',', num_args = 2)]
    pub data: Option<Vec<PathBuf>>,
    /// A tokenizer.json (with --data).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Steps to run.
    #[arg(long, default_value_t = 8)]
    pub steps: u64,
    /// Steps of the separate throughput run at W = 1.
    #[arg(long, default_value_t = 1000)]
    pub throughput_steps: u64,
    /// Worker threads.
    #[arg(long, default_value_t = std::thread::available_parallelism().map_or(1, |n| n.get()))]
    pub threads: usize,
    /// Tokens per row.
    #[arg(long, default_value_t = 512)]
    pub seq_len: usize,
}

fn spec_text(a: &Path, b: &Path, tokenizer: &Path, seq_len: usize, threads: usize) -> String {
    format!(
        r#"seed = 1234
lanes = 8
rows_per_step = 16

[[dataset]]
name = "a"
path = "{}"
share = 0.5

[[dataset]]
name = "b"
path = "{}"
share = 0.5

[source]
chunk_size = 32
exhaustion = "repeat"

[tokenize]
tokenizer = "{}"
eos = "<|endoftext|>"

[ensure_mixture]
slack_tokens = {}

[pack]
algorithm = "best_fit"
bins = 16
seq_len = {seq_len}

[shuffle]
buffer = 4

[run]
threads = {threads}
"#,
        a.display(),
        b.display(),
        tokenizer.display(),
        2 * seq_len
    )
}

/// Global fingerprints of steps `from..to` at world size `w`, every rank in this process,
/// optionally resuming from `resume` and checkpointing into `save`.
fn ranks(
    spec: &Spec,
    w: u32,
    threads: usize,
    to: u64,
    resume: Option<&Path>,
    save: Option<&Path>,
) -> Result<Vec<Digest>, CliError> {
    let mut ranks = testing::loaders(spec, w, threads, resume).map_err(cli_error)?;
    let fps = ranks.steps_exactly(to.saturating_sub(ranks.position().0), testing::fingerprint).map_err(cli_error)?;
    if let Some(dir) = save {
        ranks.checkpoint(dir).map_err(cli_error)?;
    }
    Ok(fps)
}

/// A rank's own error as it is; the data ending before the demo's steps is a usage error
/// (too little data given), ranks disagreeing a failed check.
fn cli_error(e: RanksError<zephon::Error>) -> CliError {
    match e {
        RanksError::Rank { error, .. } => (*error).into(),
        RanksError::Ended { .. } => CliError::Usage("the data ended early".into()),
        e @ RanksError::Disagree { .. } => CliError::Verify(e.to_string()),
    }
}

/// One rank at W = 1 for `steps` steps: (time to the first batch, tokens after it, seconds
/// after it).
fn throughput(spec: &Spec, threads: usize, steps: u64) -> Result<(f64, u64, f64), CliError> {
    let mut exec = spec.exec();
    exec.threads = threads;
    let t0 = Instant::now();
    let mut loader = spec.pipeline()?.exec(exec).build(spec.topology(1, 0)?)?;
    let ended = || CliError::Usage("the data ended early".into());
    loader.next_step()?.ok_or_else(ended)?;
    let ttfb = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut tokens = 0;
    for _ in 1..steps.max(2) {
        tokens += crate::run::step_tokens(&loader.next_step()?.ok_or_else(ended)?);
    }
    Ok((ttfb, tokens, t1.elapsed().as_secs_f64()))
}

/// The vision-language demo's spec over the generated captions.
fn vlm_spec_text(captions: &Path, tokenizer: &Path, threads: usize) -> String {
    format!(
        r#"seed = 1234
lanes = 8
rows_per_step = 16

[[dataset]]
name = "captions"
path = "{}"
weight = 1.0
images = "image"

[source]
chunk_size = 8
exhaustion = "repeat"

[images]
preset = "llava"
size = 112
fit = "center_crop"
layout = "vit"
patch = 14

[tokenize]
tokenizer = "{}"
eos = "<|endoftext|>"
image_token = "<image>"

[pack]
algorithm = "best_fit"
bins = 8
seq_len = 256

[shuffle]
buffer = 4

[run]
threads = {threads}
"#,
        captions.display(),
        tokenizer.display()
    )
}

/// Prints every step's fingerprint at W = 1 and whether W = 2, 4, 8 and a resume from W = 2
/// to W = 4 give the same; returns whether they all do.
fn every_world_size(spec: &Spec, threads: usize, steps: u64) -> Result<bool, CliError> {
    let reference = ranks(spec, 1, threads, steps, None, None)?;
    let mut columns = vec![("W=1", reference.clone())];
    for (label, w) in [("W=2", 2), ("W=4", 4), ("W=8", 8)] {
        columns.push((label, ranks(spec, w, (threads / w as usize).max(1), steps, None, None)?));
    }
    let cut = steps / 2;
    let tmp = std::env::temp_dir().join(format!("zephon-demo-{}-{}", std::process::id(), steps));
    let _ = std::fs::remove_dir_all(&tmp);
    let mut resumed = ranks(spec, 2, threads.div_ceil(2), cut, None, Some(&tmp))?;
    resumed.extend(ranks(spec, 4, (threads / 4).max(1), steps, Some(&tmp), None)?);
    let _ = std::fs::remove_dir_all(&tmp);
    columns.push(("W=2→4", resumed));
    println!();
    println!(
        "step  {:<18} {}",
        "fingerprint (W=1)",
        columns[1..].iter().map(|(l, _)| format!("{l:<7}")).collect::<Vec<_>>().join("")
    );
    for (s, fp) in reference.iter().enumerate() {
        let marks: String = columns[1..]
            .iter()
            .map(|(_, c)| format!("{:<7}", if c.get(s) == Some(fp) { "same" } else { "DIFF" }))
            .collect();
        println!("{s:>4}  {}…  {marks}", &fp.to_hex()[..16]);
    }
    println!("resume: W=2 ran steps 0..{cut}, checkpointed, and W=4 continued from it.");
    Ok(columns.iter().all(|(_, c)| c == &reference))
}

pub fn demo(args: &DemoArgs) -> Result<(), CliError> {
    let t0 = Instant::now();
    let (a, b, tokenizer) = match (args.data.as_deref(), &args.tokenizer) {
        (Some([a, b]), Some(t)) => (a.clone(), b.clone(), t.clone()),
        (None, None) => {
            eprintln!("demo: generating the embedded corpus and training a tokenizer (first run only)...");
            let dir = crate::corpus::ensure_demo_data()?;
            (dir.join("a"), dir.join("b"), dir.join("tokenizer.json"))
        }
        _ => return Err(CliError::Usage("give --data A,B and --tokenizer together".into())),
    };
    let text = spec_text(&a, &b, &tokenizer, args.seq_len, args.threads);
    let spec = Spec::parse(&text, "demo", Path::new("."))?;
    println!("zephon demo: datasets a = {}, b = {}", a.display(), b.display());
    println!(
        "  tokenizer {}; 50/50 token shares; best-fit packing to {} tokens; shuffle; 8 lanes, 16 rows per step",
        tokenizer.display(),
        args.seq_len
    );
    let steps = args.steps.max(2);
    let setup = t0.elapsed().as_secs_f64();
    let mut all_equal = every_world_size(&spec, args.threads, steps)?;
    let (ttfb, tokens, secs) = throughput(&spec, args.threads, args.throughput_steps)?;
    println!(
        "throughput (W=1, {} threads, {} steps): {:.2} M tokens/s after the first batch ({:.1} M tokens in {:.1} s); \
         first batch after {:.2} s; data and tokenizer setup {:.1} s",
        args.threads,
        args.throughput_steps,
        tokens as f64 / secs / 1e6,
        tokens as f64 / 1e6,
        secs,
        ttfb,
        setup
    );
    if args.data.is_none() {
        let dir = crate::corpus::ensure_demo_data()?;
        let text = vlm_spec_text(&dir.join("vlm/captions.jsonl"), &tokenizer, args.threads);
        let vlm = Spec::parse(&text, "demo (vision)", Path::new("."))?;
        println!();
        println!(
            "zephon demo, vision-language: {} (generated JPEGs with captions, some interleaved with two images)",
            dir.join("vlm").display()
        );
        println!(
            "  decode → resize to 112×112 (centre crop) → CLIP normalise → ViT patches of 14 (64 tokens an image) →"
        );
        println!("  captions tokenized around the image placeholders → best-fit packing to 256 tokens → shuffle");
        all_equal &= every_world_size(&vlm, args.threads, steps)?;
    }
    if all_equal {
        println!("OK: every global step is identical at W = 1, 2, 4, 8 and across the resume.");
        Ok(())
    } else {
        Err(CliError::Verify("fingerprints differ between world sizes".into()))
    }
}
