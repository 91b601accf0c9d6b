//! Token shares where the model sees them: `ensure_mixture` measures them past the packer's
//! bins, so a dataset never runs ahead of its share by more than L × (slack + seq_len) tokens
//! at any step, whichever packer and tokenizer path. Long documents (corpus B, ~3,500 tokens)
//! against one-line ones (~15 tokens), 30 / 70. And the plan's token estimates count what
//! tokenize adds to every document, and what truncation keeps of it.

use std::path::Path;

use zephon::testing::{self, Ranks};
use zephon::{Loader, LocalStep, Spec};
use zephon_testkit::SpecText;

use crate::*;

const SLACK: u64 = 4096;
const SEQ_LEN: u64 = 1024;

/// A tokenizer file with its end-of-text token and a pad id in its vocabulary.
struct Tok {
    file: &'static str,
    eos: &'static str,
    pad: u32,
}

/// The fast path (byte-level BPE of GPT-2) and the `tokenizers` crate (Llama-2's
/// SentencePiece-style file).
const TOKENIZERS: [Tok; 2] =
    [Tok { file: "gpt2", eos: "<|endoftext|>", pad: 50256 }, Tok { file: "llama2", eos: "</s>", pad: 0 }];

fn mix_spec(short: &Path, tok: &Tok, lanes: u32, algorithm: &str, shuffle: Option<u32>) -> Spec {
    parse(&mix_spec_text(short, tok, lanes, algorithm, shuffle).text())
}

/// Long documents (corpus B) against the one-line ones in `short`, 30 / 70, held by
/// `ensure_mixture`, packed by `algorithm`, then shuffled in a buffer of `shuffle` rows if any.
fn mix_spec_text(short: &Path, tok: &Tok, lanes: u32, algorithm: &str, shuffle: Option<u32>) -> SpecText {
    let data = zephon_testkit::testdata();
    let text = SpecText::new(lanes, 16)
        .seed(5)
        .dataset("long", data.join("corpora/b/jsonl"))
        .share(0.3)
        .dataset("short", short)
        .share(0.7)
        .chunk_size(64)
        .tokenizer(data.join(format!("tokenizers/{}/tokenizer.json", tok.file)), tok.eos)
        .set("ensure_mixture", "slack_tokens", SLACK)
        .pack(algorithm, SEQ_LEN)
        .set("pack", "pad_id", tok.pad);
    let text = match shuffle {
        Some(b) => text.shuffle(u64::from(b)),
        None => text,
    };
    text.threads(2)
}

/// After each of `steps` steps of all ranks, how far each dataset is ahead of its share of all
/// tokens delivered so far; and the global step fingerprints.
fn ahead_by_step(ranks: &mut Ranks<Loader>, steps: u64, shares: [f64; 2]) -> (Vec<[f64; 2]>, Vec<zephon::Digest>) {
    let mut tokens = [0u64; 2];
    let mut ahead = Vec::new();
    let each = |parts: &[LocalStep]| {
        for row in parts.iter().flat_map(LocalStep::rows) {
            for f in row.lineage().fragments() {
                tokens[f.sample.dataset as usize] += u64::from(f.len());
            }
        }
        let total = (tokens[0] + tokens[1]) as f64;
        ahead.push([0, 1].map(|d| tokens[d] as f64 - shares[d] * total));
        testing::fingerprint(parts)
    };
    let prints = ranks.steps_exactly(steps, each).unwrap();
    (ahead, prints)
}

fn worst(ahead: &[[f64; 2]]) -> f64 {
    ahead.iter().flatten().fold(0.0f64, |m, &a| m.max(a))
}

/// Without a shuffle after the packer, the packer's rows are the pipeline's output: the bound
/// holds at every step on every packer, on both tokenizer paths, at 1 and 4 lanes.
#[test]
fn no_dataset_runs_ahead_of_its_share_by_more_than_the_bound_at_any_step() {
    let dir = tmp();
    let short = one_line_documents(dir.path(), 20..200, 200_000);
    let mut seen = Vec::new();
    for tok in &TOKENIZERS {
        for algorithm in ["wrap", "first_fit", "best_fit"] {
            for lanes in [1, 4] {
                let spec = mix_spec(&short, tok, lanes, algorithm, None);
                let (ahead, _) = ahead_by_step(&mut loaders(&spec, 1, 2, None), 120, [0.3, 0.7]);
                let bound = f64::from(lanes) * (SLACK + SEQ_LEN) as f64;
                let at = ahead.iter().position(|a| a.iter().any(|&x| x > bound));
                seen.push(format!("{} {algorithm} L={lanes}: {:.0} of {bound}", tok.file, worst(&ahead)));
                assert!(at.is_none(), "{}: ahead {:?} at step {at:?}", seen.last().unwrap(), at.map(|i| ahead[i]));
            }
        }
    }
    println!("most tokens a dataset ran ahead of its share, at any step:\n{}", seen.join("\n"));
}

/// With a shuffle buffer of 64 rows after the packer (the usual pipeline), its random order
/// alone would move each lane's shares by a few rows' worth of tokens around the packer's (up
/// to 2× the bound at one lane). The buffer keeps the shares too (a row that would put a
/// dataset more than the slack ahead waits), so the bound holds at every step at 1, 4 and 16
/// lanes, on both tokenizer paths. Its state (what it emitted) is in the checkpoint with
/// ensure_mixture's: a run resumed on another world size delivers the same steps.
#[test]
fn after_a_shuffle_buffer_the_bound_holds_at_any_lane_count_and_across_a_resume() {
    let dir = tmp();
    let short = one_line_documents(dir.path(), 20..200, 200_000);
    let mut seen = Vec::new();
    for tok in &TOKENIZERS {
        for algorithm in ["wrap", "first_fit", "best_fit"] {
            for lanes in [1, 4, 16] {
                if tok.file != TOKENIZERS[0].file && (algorithm != "best_fit" || lanes == 16) {
                    continue;
                }
                let spec = mix_spec(&short, tok, lanes, algorithm, Some(64));
                let (ahead, prints) = ahead_by_step(&mut loaders(&spec, 1, 2, None), 120, [0.3, 0.7]);
                let bound = f64::from(lanes) * (SLACK + SEQ_LEN) as f64;
                seen.push(format!("{} {algorithm} L={lanes}: {:.0} of {bound}", tok.file, worst(&ahead)));
                assert!(worst(&ahead) <= bound, "{}", seen.last().unwrap());
                if algorithm == "best_fit" && lanes == 16 {
                    let ckpt = tmp();
                    let mut two = loaders(&spec, 2, 1, None);
                    let (_, head) = ahead_by_step(&mut two, 50, [0.3, 0.7]);
                    two.checkpoint(ckpt.path()).unwrap();
                    let (_, tail) = ahead_by_step(&mut loaders(&spec, 4, 2, Some(ckpt.path())), 70, [0.3, 0.7]);
                    assert_eq!([head, tail].concat(), prints, "W=2 to step 50, resumed on W=4");
                }
            }
        }
    }
    println!("with a 64-row shuffle, the most tokens a dataset ran ahead of its share:\n{}", seen.join("\n"));
}

/// The plan counts the EOS that tokenize appends to every document: on one-line documents
/// (~15 tokens) it is 7 % of the tokens, which the text alone does not show.
#[test]
fn token_estimates_count_the_tokens_tokenize_adds_to_every_document() {
    let dir = tmp();
    let short = one_line_documents(dir.path(), 20..200, 200_000);
    let spec = mix_spec(&short, &TOKENIZERS[0], 1, "wrap", None);
    let loader = loaders(&spec, 1, 1, None).into_ranks().remove(0);
    let estimate = loader.token_estimates().unwrap()[1].clone();
    assert_eq!(estimate.added_per_row, 1.0, "{estimate:?}");
    let tokenizer =
        zephon::Tokenizer::from_file(&zephon_testkit::testdata().join("tokenizers/gpt2/tokenizer.json")).unwrap();
    let text = std::fs::read_to_string(&short).unwrap();
    let docs: Vec<&str> = text.lines().step_by(20).collect();
    let tokens: usize = docs
        .iter()
        .map(|l| {
            let doc = serde_json::from_str::<serde_json::Value>(l).unwrap();
            tokenizer.encode(doc["text"].as_str().unwrap()).unwrap().len() + 1
        })
        .sum();
    let actual = tokens as f64 / docs.len() as f64;
    let off = estimate.tokens_per_row() / actual - 1.0;
    println!("one-line documents: estimated {:.2} tokens per row, measured {actual:.2}", estimate.tokens_per_row());
    assert!(off.abs() < 0.03, "estimated {:.2} tokens per row, measured {actual:.2}", estimate.tokens_per_row());
}

/// A packer that truncates (and so tokenize, by default) keeps 1,024 tokens of a ~3,500-token
/// document. The plan counts what truncation keeps, so the delivered shares match the targets
/// without ensure_mixture; planned by whole documents, the long dataset would get about a
/// third of its share. Over 200 steps.
#[test]
fn a_truncating_pipeline_plans_the_tokens_truncation_keeps() {
    let dir = tmp();
    let short = one_line_documents(dir.path(), 20..200, 200_000);
    for tok in &TOKENIZERS {
        // Wrap holds one partial row a lane, so the output shows the plan (best-fit's open rows
        // would hold short documents back for a while).
        let text = mix_spec_text(&short, tok, 4, "wrap", None).without("ensure_mixture").set(
            "pack",
            "long_documents",
            "truncate",
        );
        let spec = parse(&text.text());
        let plan = spec.pipeline().unwrap().explain(&spec.topology(1, 0).unwrap()).unwrap();
        assert!(plan.contains("each row cut to at most 1024"), "{plan}");
        let mut loaders = loaders(&spec, 1, 2, None);
        let long = loaders[0].token_estimates().unwrap()[0].clone();
        assert!(long.tokens_per_row() <= SEQ_LEN as f64, "{long:?}");
        let (ahead, _) = ahead_by_step(&mut loaders, 200, [0.3, 0.7]);
        let total = (200 * 16 * SEQ_LEN) as f64;
        let off = ahead.last().unwrap()[0] / total;
        println!(
            "{}: {:.1} tokens per long row planned; long share off by {:+.3}",
            tok.file,
            long.tokens_per_row(),
            off
        );
        assert!(off.abs() < 0.03, "{}: the long dataset's share is off by {off:+.3} after 200 steps", tok.file);
    }
}
