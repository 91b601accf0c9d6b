//! Finite data to its end with the fit packers: lanes that took equal tokens end within a step
//! of each other only if their last rows are full too. Long documents of corpus B against
//! one-line documents, one pass, the end shared out by each row's tokens (the default),
//! best-fit over 64 open rows of 256 tokens.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use zephon::Value;
use zephon_testkit::SpecText;

use crate::*;

const SEQ_LEN: u64 = 256;
const ROWS_PER_LANE: u32 = 4;

/// `n` long documents: corpus B's documents cut into pieces of at most 3,000 bytes (~700
/// tokens), so that a global step holds more than one and the end can be shared out evenly.
fn long_documents(dir: &Path, n: usize) -> PathBuf {
    let src = zephon_testkit::testdata().join("corpora/b/jsonl/part-00000.jsonl");
    let text = std::fs::read_to_string(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    let mut docs = Vec::new();
    for line in text.lines() {
        let doc = serde_json::from_str::<serde_json::Value>(line).unwrap()["text"].as_str().unwrap().to_string();
        let mut rest = doc.as_str();
        while !rest.is_empty() && docs.len() < n {
            let mut cut = rest.len().min(3000);
            while !rest.is_char_boundary(cut) {
                cut -= 1;
            }
            docs.push(serde_json::json!({ "text": &rest[..cut] }).to_string());
            rest = &rest[cut..];
        }
    }
    assert_eq!(docs.len(), n, "{} has fewer than {n} pieces of 3,000 bytes", src.display());
    let out = dir.join("long");
    std::fs::create_dir_all(&out).unwrap();
    write(&out, "part-0.jsonl", &(docs.join("\n") + "\n"));
    out
}

fn spec(long: &Path, short: &Path, lanes: u32, chunks: &str, tail: &str, end: &str) -> zephon::Spec {
    parse(&finite_spec(long, short, lanes, ROWS_PER_LANE * lanes, chunks, tail).lines("pack", end).text())
}

/// Long against short documents, 30 / 70, in shuffled chunks (`chunks` says how they are cut)
/// to the end of one pass; best-fit packing into rows of `SEQ_LEN`, a shuffle, `tail`.
fn finite_spec(long: &Path, short: &Path, lanes: u32, rows: u32, chunks: &str, tail: &str) -> SpecText {
    SpecText::new(lanes, rows)
        .seed(3)
        .dataset("long", long)
        .share(0.3)
        .dataset("short", short)
        .share(0.7)
        .lines("source", chunks)
        .set("source", "order", "shuffled")
        .set("source", "exhaustion", "redistribute")
        .tokenizer(zephon_testkit::testdata().join("tokenizers/gpt2/tokenizer.json"), "<|endoftext|>")
        .pack("best_fit", SEQ_LEN)
        .set("pack", "pad_id", 50256)
        .shuffle(8)
        .threads(2)
        .tail(tail)
}

/// Every token position delivered, per document, as (start, end) pieces; and the tokens.
fn run_to_end(spec: &zephon::Spec) -> (BTreeMap<zephon::SampleId, Vec<(u32, u32)>>, u64) {
    let mut loader = spec.pipeline().unwrap().build(spec.topology(1, 0).unwrap()).unwrap();
    let mut pieces: BTreeMap<zephon::SampleId, Vec<(u32, u32)>> = BTreeMap::new();
    let mut tokens = 0;
    while let Some(step) = loader.next_step().unwrap() {
        for row in step.rows() {
            let Some(Value::Int(n)) = row.get("num_tokens") else { panic!("a packed row has num_tokens") };
            tokens += *n as u64;
            for f in row.lineage().fragments() {
                let span = f.positions().expect("packed pieces are token spans");
                pieces.entry(f.sample).or_default().push((span.start(), span.end()));
            }
        }
    }
    (pieces, tokens)
}

/// Under `drop`, laying the open rows out into full rows at the end (the default there)
/// leaves out less than one global step at L = 1, 3 and 8 and with either kind of chunk, and
/// less than keeping them as they are (`benches/mixture_edges.sh` compares the two on the full
/// corpora). Under `partial`, the end laid out either way delivers every token of every
/// document exactly once, without holes.
#[test]
fn best_fit_rows_filled_at_the_end_lose_less_than_a_step_under_drop() {
    let dir = tmp();
    let long = long_documents(dir.path(), 400);
    let short = one_line_documents(dir.path(), 20..200, 3000);
    let (mut lost_filled, mut lost_whole) = (0, 0);
    for lanes in [1u32, 3, 8] {
        for chunks in ["chunk_size = 16", "chunk_tokens = 4096"] {
            let (reference, all) = run_to_end(&spec(&long, &short, lanes, chunks, "partial", ""));
            let (filled, filled_tokens) =
                run_to_end(&spec(&long, &short, lanes, chunks, "partial", "end_of_data = \"fill_rows\""));
            assert_eq!(filled_tokens, all, "L={lanes}, {chunks}: the same tokens, laid out differently");
            for (doc, mut spans) in filled {
                spans.sort();
                let mut want = reference[&doc].clone();
                want.sort();
                let covered = |s: &[(u32, u32)]| {
                    let mut at = s.first().map_or(0, |p| p.0);
                    for &(a, b) in s {
                        assert_eq!(a, at, "L={lanes}, {chunks}: {doc} has a hole or an overlap at {a}: {s:?}");
                        at = b;
                    }
                    (s.first().map_or(0, |p| p.0), at)
                };
                assert_eq!(covered(&spans), covered(&want), "L={lanes}, {chunks}: {doc} delivered whole, once");
            }
            let step = u64::from(ROWS_PER_LANE * lanes) * SEQ_LEN;
            let (_, kept) = run_to_end(&spec(&long, &short, lanes, chunks, "drop", ""));
            let (_, kept_whole) =
                run_to_end(&spec(&long, &short, lanes, chunks, "drop", "end_of_data = \"keep_pieces\""));
            println!(
                "L={lanes}, {chunks}: drop left out {} of {all} tokens with the end filled, {} kept whole (a step is {step})",
                all - kept,
                all - kept_whole
            );
            assert!(all - kept < step, "L={lanes}, {chunks}: drop left out {} of {all}, a step is {step}", all - kept);
            lost_filled += all - kept;
            lost_whole += all - kept_whole;
        }
    }
    // Row for row the two differ by chance (whether a lane's rows come out even); over the
    // six runs, full last rows leave out less.
    assert!(lost_filled < lost_whole, "filled {lost_filled} against kept whole {lost_whole}");
}

/// When the end of the stream holds only long documents (whole documents of corpus B, ~7 k
/// tokens, against a lane's share of a step of 512), largest-first alone leaves the lanes
/// thousands of tokens apart and `drop` loses steps; moving and swapping documents between
/// lanes brings them within a few hundred tokens and the loss under a step.
#[test]
fn whole_long_documents_at_the_end_are_evened_out_between_lanes() {
    let dir = tmp();
    let src = zephon_testkit::testdata().join("corpora/b/jsonl/part-00000.jsonl");
    let text = std::fs::read_to_string(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    let docs: Vec<&str> = text.lines().take(60).collect();
    let long = dir.path().join("long");
    std::fs::create_dir_all(&long).unwrap();
    write(&long, "part-0.jsonl", &(docs.join("\n") + "\n"));
    let short = one_line_documents(dir.path(), 20..200, 3000);
    let at = |tail: &str| {
        let text = finite_spec(&long, &short, 8, 16, "chunk_tokens = 4096", tail).text();
        run_to_end(&parse(&text)).1
    };
    let (all, kept) = (at("partial"), at("drop"));
    let step = 16 * SEQ_LEN;
    assert!(all - kept < step, "drop left out {} of {all} tokens, a step is {step}", all - kept);
}
