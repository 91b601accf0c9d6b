//! Nothing silent: settings that would change the data are refused or reported, checkpoints
//! travel between mount points, and a dataset that yields nothing stops the run.

use std::fs;
use std::path::Path;

use zephon::lane_core::checkpoint;
use zephon::{Spec, Topology};
use zephon_testkit::SpecText;

use crate::*;

const PACK: &str = "\n[pack]\nalgorithm = \"wrap\"\nseq_len = 256\npad_id = 50256\n";

/// Writes `rows` JSONL lines with the text in `field` into `dir/name.jsonl`.
fn jsonl(dir: &Path, name: &str, field: &str, texts: &[String]) -> std::path::PathBuf {
    let lines: Vec<String> = texts.iter().map(|t| serde_json::json!({ field: t }).to_string()).collect();
    write(dir, &format!("{name}.jsonl"), &(lines.join("\n") + "\n"))
}

fn texts(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix} document number {i} says something about lanes and steps.")).collect()
}

/// A spec over two local JSONL files, the second with text in `content`; `extra` is written
/// out at the end, verbatim.
fn two_fields_spec(dir: &Path, extra: &str) -> String {
    let a = jsonl(dir, "a", "text", &texts("alpha", 300));
    let b = jsonl(dir, "b", "content", &texts("beta", 300));
    let tok = zephon_testkit::testdata().join("tokenizers/gpt2/tokenizer.json");
    SpecText::new(2, 4)
        .seed(1)
        .dataset("a", a)
        .share(0.5)
        .dataset("b", b)
        .share(0.5)
        .dataset_key("text_field", "content")
        .chunk_size(8)
        .tokenizer(tok, "<|endoftext|>")
        .pack("wrap", 256)
        .set("pack", "pad_id", 50256)
        .append(extra)
        .text()
}

#[test]
fn each_dataset_is_tokenized_from_its_own_text_field() {
    let dir = tmp();
    let spec = parse(&two_fields_spec(dir.path(), "[run]\nthreads = 1\n"));
    let mut loader = spec.pipeline().unwrap().build(spec.topology(1, 0).unwrap()).unwrap();
    let mut by_dataset = [0u64; 2];
    for _ in 0..20 {
        let step = loader.next_step().unwrap().unwrap();
        for row in step.rows() {
            for f in row.lineage().fragments() {
                by_dataset[f.sample.dataset as usize] += f.len() as u64;
            }
        }
    }
    assert!(loader.report().is_clean(), "{:?}", loader.report());
    let share = by_dataset[1] as f64 / (by_dataset[0] + by_dataset[1]) as f64;
    assert!((0.4..0.6).contains(&share), "dataset b (text in `content`) gets its share: {by_dataset:?}");
}

#[test]
fn shares_and_names_that_would_change_the_data_are_refused() {
    let dir = tmp();
    let base = two_fields_spec(dir.path(), "");
    let cases = [
        (base.replacen("share = 0.5", "share = -0.3", 1), "share -0.3 must be in [0, 1]"),
        (base.replacen("share = 0.5", "share = 1.3", 1), "share 1.3 must be in [0, 1]"),
        (base.replacen("share = 0.5", "share = nan", 1), "share NaN must be in [0, 1]"),
        (base.replacen("share = 0.5", "share = 0.2", 1), "token shares sum to 0.7, not 1"),
        (
            base.replacen("share = 0.5", "share = 0.0", 1).replacen("share = 0.5", "share = 1.0", 1),
            "share 0 and no later share: it would never be read",
        ),
        (base.replacen("name = \"b\"", "name = \"a\"", 1), "two datasets are called \"a\""),
        (base.replace("pad_id = 50256", "pad_id = 60000"), "pad_id 60000 is not a token of the tokenizer"),
        (
            base.replace("[source]\nchunk_size = 8", "[source]\nchunk_size = 8\norder = \"blocks\"\nblock_size = 0"),
            "block_size must be at least 1",
        ),
    ];
    for (text, want) in cases {
        let e = Spec::parse(&text, "mix.toml", "/".as_ref()).and_then(|s| s.pipeline()?.explain(&s.topology(1, 0)?));
        let e = e.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains(want), "want {want:?}, got {e:?}");
    }
    let zero = base.replace("seq_len = 256", "seq_len = 0");
    let e = Spec::parse(&zero, "mix.toml", "/".as_ref()).unwrap_err().to_string();
    assert!(e.contains("mix.toml") && e.contains("[pack] seq_len must be at least 1"), "{e}");
    let algo = base.replace("algorithm = \"wrap\"", "algorithm = \"tight\"");
    let e = Spec::parse(&algo, "mix.toml", "/".as_ref()).unwrap_err().to_string();
    assert!(e.starts_with("spec mix.toml:"), "errors name the spec file, not the word `spec`: {e}");
}

fn parse_named(text: &str, name: &str) -> Spec {
    Spec::parse(text, name, "/".as_ref()).unwrap()
}

#[test]
fn a_checkpoint_restores_from_another_mount_point_and_a_changed_shard_is_named() {
    let dir = tmp();
    let (here, there) = (dir.path().join("here"), dir.path().join("there"));
    fs::create_dir_all(&here).unwrap();
    let text = two_fields_spec(&here, "");
    let spec = parse_named(&text, "here/mix.toml");
    let mut loader = spec.pipeline().unwrap().build(spec.topology(1, 0).unwrap()).unwrap();
    for _ in 0..3 {
        loader.next_step().unwrap();
    }
    let ckpt = dir.path().join("ckpt");
    loader.checkpoint(&ckpt).unwrap();
    let after: Vec<_> = (0..2).map(|_| loader.next_step().unwrap().unwrap().local_fingerprint()).collect();
    // The same files, mounted elsewhere, written as `./sub/x.toml` would be.
    fs::rename(&here, &there).unwrap();
    let moved = parse_named(&text.replace(&here.display().to_string(), &format!("{}/./", there.display())), "x.toml");
    let mut restored = moved.pipeline().unwrap().restore(moved.topology(2, 0).unwrap(), &ckpt).unwrap();
    let mut other = moved.pipeline().unwrap().restore(moved.topology(2, 1).unwrap(), &ckpt).unwrap();
    for want in after {
        let a = restored.next_step().unwrap().unwrap();
        let b = other.next_step().unwrap().unwrap();
        let lanes: Vec<_> = a.lane_digests().chain(b.lane_digests()).map(|(_, d)| d).collect();
        assert_eq!(zephon::step_fingerprint(&lanes), want);
    }
    // Change one byte of dataset b, keeping its size: the shard is named.
    let b = there.join("b.jsonl");
    let mut bytes = fs::read(&b).unwrap();
    let i = bytes.len() / 2;
    bytes[i] = if bytes[i] == b'x' { b'y' } else { b'x' };
    fs::write(&b, bytes).unwrap();
    let e = moved.pipeline().unwrap().restore(moved.topology(1, 0).unwrap(), &ckpt).err().unwrap().to_string();
    assert!(e.contains("dataset b changed: shard 0 was b.jsonl"), "{e}");
}

#[test]
fn resume_from_a_root_passes_over_an_incomplete_step_and_refuses_a_corrupt_one() {
    let dir = tmp();
    let spec = parse(&two_fields_spec(dir.path(), ""));
    let root = dir.path().join("ckpt");
    let mut ranks: Vec<_> =
        (0..2).map(|r| spec.pipeline().unwrap().build(spec.topology(2, r).unwrap()).unwrap()).collect();
    for step in 1..=3u64 {
        for (r, l) in ranks.iter_mut().enumerate() {
            l.next_step().unwrap();
            // Rank 1 "crashed" before writing step 3.
            if step < 3 || r == 0 {
                l.checkpoint(&root.join(format!("step-{step:08}"))).unwrap();
            }
        }
    }
    let found = checkpoint::resolve(&root, spec.lanes).unwrap();
    assert!(found.dir.ends_with("step-00000002"));
    assert!(
        found.passed_over[0].contains("step-00000003 is incomplete (no file holds lane(s) 1)"),
        "{:?}",
        found.passed_over
    );
    // A complete newer step with a corrupt file is never passed over silently.
    let two = root.join("step-00000002");
    let file = fs::read_dir(&two).unwrap().flatten().next().unwrap().path();
    let mut bytes = fs::read(&file).unwrap();
    let n = bytes.len();
    bytes[n - 5] ^= 1;
    fs::write(&file, bytes).unwrap();
    let e = checkpoint::resolve(&root, spec.lanes).unwrap_err().to_string();
    assert!(e.contains("checksum mismatch") && e.contains("refusing to fall back"), "{e}");
}

#[test]
fn a_dataset_of_only_bad_records_stops_the_run_instead_of_spinning() {
    let dir = tmp();
    let bad: Vec<String> = (0..50).map(|i| format!("{{\"text\": {i}}}")).collect();
    let path = write(dir.path(), "bad.jsonl", &(bad.join("\n") + "\n"));
    let tok = zephon_testkit::testdata().join("tokenizers/gpt2/tokenizer.json");
    let spec = |exhaustion: &str| {
        parse(&format!(
            "lanes = 2\nrows_per_step = 2\n[[dataset]]\nname = \"numbers\"\npath = \"{}\"\nweight = 1.0\n\
             [source]\nexhaustion = \"{exhaustion}\"\n[tokenize]\ntokenizer = \"{}\"\n{PACK}[run]\nbad_records = \"skip\"\n",
            path.display(),
            tok.display()
        ))
    };
    let s = spec("repeat");
    let mut loader =
        s.pipeline().unwrap().build(Topology::builder().lanes(2).rows_per_step(2).build().unwrap()).unwrap();
    let e = loader.next_step().expect_err("every row is bad: an error, not a hang").to_string();
    assert!(e.contains("dataset numbers") && e.contains("bad records of it in a row"), "{e}");
    assert!(e.contains("row 0") || e.contains("row "), "the first bad row is named: {e}");
    let s = spec("stop");
    let mut loader =
        s.pipeline().unwrap().build(Topology::builder().lanes(2).rows_per_step(2).build().unwrap()).unwrap();
    assert!(loader.next_step().unwrap().is_none());
    let report = loader.report();
    assert_eq!(report.datasets[0].skipped, 50);
    assert!(report.lines()[0].contains("dataset numbers: 50 bad records skipped"), "{:?}", report.lines());
}

#[test]
fn what_the_end_of_finite_data_leaves_out_is_reported() {
    let dir = tmp();
    let text = two_fields_spec(dir.path(), "")
        .replace("[source]\nchunk_size = 8", "[source]\nchunk_size = 8\nexhaustion = \"stop\"");
    let run = |tail: &str| {
        let s = parse_named(&format!("{text}[run]\ntail = \"{tail}\"\n"), "finite.toml");
        let mut loader = s.pipeline().unwrap().build(s.topology(1, 0).unwrap()).unwrap();
        let mut rows = 0;
        while let Some(step) = loader.next_step().unwrap() {
            rows += step.len();
        }
        (rows, loader.report())
    };
    let (kept, partial) = run("partial");
    assert_eq!(partial.tail_dropped_rows, 0);
    let (dropped_run, report) = run("drop");
    assert!(report.tail_dropped_rows > 0 && dropped_run + report.tail_dropped_rows as usize == kept, "{report:?}");
    let named: usize = report.datasets.iter().map(|d| d.tail_dropped_documents.len()).sum();
    assert!(named > 0 && partial.datasets.iter().all(|d| d.tail_dropped_documents.is_empty()), "{report:?}");
    let line = report.lines().join("\n");
    assert!(line.contains("the end of the data left out") && line.contains("tokens"), "{line}");
}

/// Rows of a spec over `datasets` (TOML `[[dataset]]` tables) with `[source]` settings
/// `source` and `tail`, run to the end of the data; and the run's report.
fn run_to_end(datasets: &str, source: &str, tail: &str) -> (usize, zephon::DataReport) {
    let tok = zephon_testkit::testdata().join("tokenizers/gpt2/tokenizer.json");
    let s = parse_named(
        &format!(
            "lanes = 2\nrows_per_step = 2\n{datasets}[source]\n{source}\norder = \"sequential\"\n\
             [tokenize]\ntokenizer = \"{}\"\neos = \"<|endoftext|>\"\n{PACK}[run]\ntail = \"{tail}\"\n",
            tok.display()
        ),
        "uneven.toml",
    );
    let mut loader = s.pipeline().unwrap().build(s.topology(1, 0).unwrap()).unwrap();
    let mut rows = 0;
    while let Some(step) = loader.next_step().unwrap() {
        rows += step.len();
    }
    (rows, loader.report())
}

fn dataset(name: &str, path: &Path) -> String {
    format!("[[dataset]]\nname = \"{name}\"\npath = \"{}\"\nweight = 1.0\n", path.display())
}

/// Without row sizes, chunks are dealt by rows: a lane that draws long documents holds far more
/// data than one that draws short ones. Under `tail = "drop"` the run ends when the first lane
/// runs out, and the report names the lanes whose data was not delivered. With row sizes (the
/// default) the same data ends on both lanes together.
#[test]
fn lanes_cut_off_by_the_end_of_the_data_are_reported() {
    let dir = tmp();
    let long = "lanes and steps ".repeat(400);
    let texts: Vec<String> =
        (0..64).map(|i| if (i / 8) % 2 == 0 { format!("{long}{i}") } else { format!("short {i}") }).collect();
    let data = dataset("uneven", &jsonl(dir.path(), "uneven", "text", &texts));
    let balanced = "chunk_size = 8\nexhaustion = \"stop\"";
    let (kept, report) = run_to_end(&data, balanced, "drop");
    let (all, _) = run_to_end(&data, balanced, "partial");
    assert!(report.lanes_cut_off.is_empty() && all - kept <= 2, "{all} rows, drop kept {kept}: {report:?}");
    let source = "chunk_size = 8\nexhaustion = \"stop\"\nbalance = \"estimates\"";
    let (dropped_run, report) = run_to_end(&data, source, "drop");
    assert_eq!(report.lanes_cut_off.len(), 1, "{report:?}");
    let lines = report.lines().join("\n");
    assert!(lines.contains(&format!("lanes {} still had data", report.lanes_cut_off[0])), "{lines}");
    // At least the step that was not delivered: one row of 256 tokens.
    let held = &report.datasets[0];
    assert!(held.cut_off_pieces > 0 && held.cut_off_tokens >= 256, "{report:?}");
    let documents = held.cut_off_documents.len();
    assert!(documents > 0 && documents as u64 <= held.cut_off_pieces, "{report:?}");
    assert!(held.cut_off_documents.iter().all(|&(shard, row)| shard == 0 && row < 64), "{report:?}");
    assert!(
        lines.contains(&format!(
            "uneven {} pieces of {documents} documents, {} tokens",
            held.cut_off_pieces, held.cut_off_tokens
        )),
        "{lines}"
    );
    let (full_run, partial) = run_to_end(&data, source, "partial");
    assert!(partial.lanes_cut_off.is_empty() && full_run > dropped_run + 10, "{full_run} vs {dropped_run}");
}

/// A long-document dataset (~1,200 tokens each) and a short one (~4), one pass each: once the
/// short one is used up, chunks of 8 samples are 8 long documents. Dealt whole, the one chunk
/// of the last, incomplete block would make its lane run ~35 rows past the other, which `drop`
/// would lose; so the last block is cut into one piece per lane of equal estimated tokens.
/// Chunks of ~2048 estimated tokens keep the lanes within a chunk or two. What remains is not bounded
/// by one step: each chunk boundary falls between whole documents (a chunk holds one or two
/// of these ~1,200-token ones), and estimates miss the spread of document lengths; those add
/// up per lane.
#[test]
fn chunks_by_estimated_tokens_keep_lanes_together_at_the_end_of_the_data() {
    let dir = tmp();
    let long: Vec<String> = (0..72).map(|i| format!("{}{i}", "lanes and steps ".repeat(400))).collect();
    let short: Vec<String> = (0..32).map(|i| format!("short {i}")).collect();
    let data = dataset("long", &jsonl(dir.path(), "long", "text", &long))
        + &dataset("short", &jsonl(dir.path(), "short", "text", &short));
    let lost = |chunks: &str| {
        let source = format!("{chunks}\nexhaustion = \"redistribute\"");
        let (all, _) = run_to_end(&data, &source, "partial");
        let (kept, report) = run_to_end(&data, &source, "drop");
        (all, all - kept, report)
    };
    let (all_rows, by_rows, _) = lost("chunk_size = 8\nbalance = \"estimates\"");
    let (all_tokens, by_tokens, report) = lost("chunk_tokens = 2048\nbalance = \"estimates\"");
    assert!(all_rows.abs_diff(all_tokens) <= 2, "the same data, cut differently: {all_rows} against {all_tokens} rows");
    println!("drop left out {by_rows} of {all_rows} rows (chunks of 8), {by_tokens} of {all_tokens} (of 2048 tokens)");
    for (lost, all, how) in [(by_rows, all_rows, "8 samples"), (by_tokens, all_tokens, "2048 tokens")] {
        assert!(lost <= (2 * 2048 + 1700) / 256 + 2, "chunks of {how}: drop left out {lost} of {all} rows");
    }
    assert!(report.lines().join("\n").contains("tokens"), "{report:?}");
    // By each row's tokens (the default), the lanes end within one step (2 rows) under either chunking.
    for chunks in ["chunk_size = 8", "chunk_tokens = 2048"] {
        let (all, lost, report) = lost(chunks);
        println!("by row tokens, {chunks}: drop left out {lost} of {all} rows");
        assert!(lost <= 2 && report.lanes_cut_off.is_empty(), "{chunks}: drop left out {lost} of {all}: {report:?}");
    }
}
