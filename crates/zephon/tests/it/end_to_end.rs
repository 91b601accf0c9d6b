//! The text pipeline end to end on the real corpora with the real GPT-2 tokenizer.

use std::collections::BTreeMap;

use zephon::operator::Record;
use zephon::testing::{self, Ranks};
use zephon::{Digest, Loader, LocalStep, Value};

use crate::*;

fn pack(algorithm: &str, seq_len: usize, bins: usize) -> String {
    format!("\n[pack]\nalgorithm = \"{algorithm}\"\nseq_len = {seq_len}\nbins = {bins}\npad_id = 50256\n")
}

/// Global fingerprints of the next `n` steps of all ranks, plus the rows seen.
fn run(ranks: &mut Ranks<Loader>, n: u64, rows: &mut Vec<Record>) -> Vec<Digest> {
    let each = |parts: &[LocalStep]| {
        rows.extend(parts.iter().flat_map(|p| p.rows().cloned()));
        testing::fingerprint(parts)
    };
    ranks.steps_exactly(n, each).unwrap()
}

fn u32s<'a>(r: &'a Record, f: &str) -> &'a [u32] {
    match r.get(f) {
        Some(Value::Array(a)) if a.as_u32().is_some() => a.as_u32().unwrap_or_default(),
        other => panic!("{f}: {other:?}"),
    }
}

fn i32s<'a>(r: &'a Record, f: &str) -> &'a [i32] {
    match r.get(f) {
        Some(Value::Array(a)) if a.as_i32().is_some() => a.as_i32().unwrap_or_default(),
        other => panic!("{f}: {other:?}"),
    }
}

fn int(r: &Record, f: &str) -> i64 {
    match r.get(f) {
        Some(Value::Int(v)) => *v,
        other => panic!("{f}: {other:?}"),
    }
}

/// Also with chunks by estimated tokens instead of by samples.
#[test]
fn steps_are_identical_at_every_world_size_and_thread_count() {
    for chunks in ["chunk_size = 16", "chunk_tokens = 8192"] {
        let extra =
            format!("{}\n[ensure_mixture]\nslack_tokens = 1024\n\n[shuffle]\nbuffer = 2\n", pack("best_fit", 512, 4));
        let spec = parse(&spec_text("jsonl", 8, 8, "", &extra).replace("chunk_size = 16", chunks));
        let mut rows = Vec::new();
        let reference = run(&mut loaders(&spec, 1, 2, None), 4, &mut rows);
        for (w, t) in [(2, 1), (4, 2), (8, 1)] {
            assert_eq!(
                run(&mut loaders(&spec, w, t, None), 4, &mut Vec::new()),
                reference,
                "{chunks} W={w} threads={t}"
            );
        }
        // A checkpoint at step 2 on W = 2, resumed on W = 8 and W = 1.
        let dir = tmp();
        let mut two = loaders(&spec, 2, 1, None);
        let head = run(&mut two, 2, &mut Vec::new());
        two.checkpoint(dir.path()).unwrap();
        for w in [8, 1] {
            let mut tail = head.clone();
            tail.extend(run(&mut loaders(&spec, w, 2, Some(dir.path())), 2, &mut Vec::new()));
            assert_eq!(tail, reference, "{chunks} resumed at W={w}");
        }
    }
}

#[test]
fn rows_are_well_formed_and_match_their_provenance() {
    let spec = parse(&spec_text("parquet", 4, 8, "", &pack("first_fit", 1024, 8)));
    let mut rows = Vec::new();
    run(&mut loaders(&spec, 1, 2, None), 3, &mut rows);
    let tokenizer =
        zephon::Tokenizer::from_file(&zephon_testkit::testdata().join("tokenizers/gpt2/tokenizer.json")).unwrap();
    let datasets = zephon::lane_core::Datasets::new(vec![
        zephon::io::open("a", &zephon_testkit::testdata().join("corpora/a/parquet"), &Default::default()).unwrap(),
        zephon::io::open("b", &zephon_testkit::testdata().join("corpora/b/parquet"), &Default::default()).unwrap(),
    ]);
    for r in &rows {
        let (ids, labels, pos, seg) =
            (u32s(r, "input_ids"), i32s(r, "labels"), i32s(r, "positions"), i32s(r, "segment_ids"));
        assert!([ids.len(), labels.len(), pos.len(), seg.len()].iter().all(|&n| n == 1024));
        let cu = i32s(r, "cu_seqlens");
        // Segments from segment_ids agree with cu_seqlens, positions and labels.
        let mut at = 0usize;
        let mut expect_cu = vec![0i32];
        for f in r.lineage().fragments() {
            let n = f.len() as usize;
            assert!(seg[at..at + n].iter().all(|&s| s == seg[at] && s > 0));
            assert_eq!(pos[at..at + n], (0..n as i32).collect::<Vec<_>>()[..]);
            for i in at..at + n - 1 {
                assert_eq!(labels[i], ids[i + 1] as i32, "label crosses nothing inside a segment");
            }
            assert_eq!(labels[at + n - 1], -100, "no label across a document boundary");
            // The tokens are those of the named sample's token range.
            let text = datasets.read(&[f.sample]).remove(0).unwrap().str("text").unwrap().to_string();
            let mut doc = tokenizer.encode(&text).unwrap();
            doc.push(50256);
            let p = f.positions().expect("rows hold token ranges");
            assert_eq!(&ids[at..at + n], &doc[p.start() as usize..p.end() as usize], "{f}");
            at += n;
            expect_cu.push(at as i32);
        }
        assert_eq!(int(r, "num_tokens") as usize, at);
        assert!(seg[at..].iter().all(|&s| s == 0) && labels[at..].iter().all(|&l| l == -100));
        assert!(ids[at..].iter().all(|&t| t == 50256));
        assert_eq!(&cu[..expect_cu.len()], &expect_cu[..]);
        assert_eq!(*cu.last().unwrap(), 1024);
    }
}

/// Realized token shares after packing, from row provenance.
fn shares(rows: &[Record]) -> (f64, u64) {
    let mut t = [0u64; 2];
    for r in rows {
        for f in r.lineage().fragments() {
            t[f.sample.dataset as usize] += f.len() as u64;
        }
    }
    (t[0] as f64 / (t[0] + t[1]) as f64, t[0] + t[1])
}

#[test]
fn ensure_mixture_keeps_realized_token_shares_within_1_percent_after_packing() {
    // Open bins hold tokens that have not reached a row yet (at most bins × seq_len per lane,
    // mostly short documents, which fill gaps): a bias that fades as the run grows. Two lanes
    // of 4 bins over 2.6 M tokens keep it small.
    let extra = format!(
        "{}\n[ensure_mixture]\nslack_tokens = 512\nhold = 512\n\n[shuffle]\nbuffer = 2\n",
        pack("best_fit", 2048, 4)
    );
    let spec = parse(&spec_text("jsonl", 2, 4, "", &extra));
    let mut rows = Vec::new();
    run(&mut loaders(&spec, 1, 2, None), 320, &mut rows);
    let (a, total) = shares(&rows);
    println!("with ensure_mixture: a {:.3} % of {:.2} M tokens after packing", 100.0 * a, total as f64 / 1e6);
    assert!((a - 0.5).abs() <= 0.005, "share of a {a}");
}

#[test]
fn fill_of_wrap_first_fit_and_best_fit_at_2048() {
    let mut report = BTreeMap::new();
    for (algo, bins) in [("wrap", 1), ("first_fit", 64), ("best_fit", 64)] {
        let spec = parse(&spec_text("jsonl", 1, 4, "", &pack(algo, 2048, bins)));
        let mut rows = Vec::new();
        run(&mut loaders(&spec, 1, 2, None), 150, &mut rows);
        let tokens: i64 = rows.iter().map(|r| int(r, "num_tokens")).sum();
        report.insert(algo, tokens as f64 / (rows.len() * 2048) as f64);
    }
    println!("fill at 2048 over 600 rows of A+B (50/50 tokens): {report:?}");
    assert!(report["wrap"] > 0.999);
    assert!(report["best_fit"] >= 0.99, "best-fit fill {}", report["best_fit"]);
}

/// Very short documents (one line of corpus A each, ~5–20 tokens): the default cap on
/// documents per row (seq_len / 4) leaves best-fit rows full, where a fixed cap of 64 would
/// stop rows of 1024 at 64 documents, about 8 % empty.
#[test]
fn best_fit_fills_rows_of_very_short_documents() {
    let dir = tmp();
    let data = one_line_documents(dir.path(), 20..80, 20_000);
    let tok = zephon_testkit::testdata().join("tokenizers/gpt2/tokenizer.json");
    let spec = parse(&format!(
        "lanes = 2\nrows_per_step = 4\n[[dataset]]\nname = \"short\"\npath = \"{}\"\nweight = 1.0\n\
         [tokenize]\ntokenizer = \"{}\"\neos = \"<|endoftext|>\"\n{}[run]\nthreads = 2\n",
        data.display(),
        tok.display(),
        pack("best_fit", 1024, 64)
    ));
    let mut rows = Vec::new();
    run(&mut loaders(&spec, 1, 2, None), 50, &mut rows);
    let tokens: i64 = rows.iter().map(|r| int(r, "num_tokens")).sum();
    let fill = tokens as f64 / (rows.len() * 1024) as f64;
    let most_docs = rows.iter().map(|r| r.lineage().fragments().len()).max().unwrap_or(0);
    println!("best-fit fill of 200 rows of 1024 over short documents: {fill:.5}, at most {most_docs} documents a row");
    assert!(most_docs > 64, "rows hold more than 64 documents: {most_docs}");
    assert!(fill >= 0.99, "fill {fill}");
}

#[test]
fn a_restore_reuses_the_checkpointed_token_estimates() {
    let extra = pack("wrap", 512, 1);
    let spec = parse(&spec_text("jsonl", 2, 2, "", &extra));
    let dir = tmp();
    let mut first = loaders(&spec, 1, 2, None);
    let mut fps = run(&mut first, 2, &mut Vec::new());
    first[0].checkpoint(dir.path()).unwrap();
    fps.extend(run(&mut first, 2, &mut Vec::new()));
    // Other estimation settings would measure other estimates (and weights). The restore
    // uses the checkpoint's, so it continues the same run.
    let other = parse(&spec_text("jsonl", 2, 2, "[estimate]\ntoken_windows = 7\nwindow_bytes = 100\n", &extra));
    let mut resumed = loaders(&other, 2, 1, Some(dir.path()));
    assert_eq!(run(&mut resumed, 2, &mut Vec::new()), fps[2..]);
    assert_eq!(resumed[0].token_estimates(), first[0].token_estimates());
    // A fresh start under those settings plans another mixture: the checkpoint refuses it.
    let fresh_plan = other.pipeline().unwrap().build(other.topology(1, 0).unwrap()).unwrap();
    assert_ne!(fresh_plan.token_estimates(), first[0].token_estimates());
}

#[test]
fn a_checkpoint_from_another_spec_is_refused() {
    let spec = parse(&spec_text("jsonl", 2, 2, "", &pack("wrap", 512, 1)));
    let dir = tmp();
    let mut l = loaders(&spec, 1, 1, None);
    run(&mut l, 1, &mut Vec::new());
    l[0].checkpoint(dir.path()).unwrap();
    let other = parse(&spec_text("jsonl", 2, 2, "", &pack("wrap", 1024, 1)));
    let e = other.pipeline().unwrap().restore(other.topology(1, 0).unwrap(), dir.path()).err().unwrap().to_string();
    assert!(e.contains("(pack) was seq_len=512 and is now seq_len=1024"), "{e}");
}

#[test]
fn a_corrupt_line_mid_shard_names_dataset_shard_and_row() {
    let dir = tmp();
    let src = zephon_testkit::testdata().join("corpora/a-exact/jsonl/part-00000.jsonl");
    let mut lines: Vec<String> = std::fs::read_to_string(src).unwrap().lines().take(400).map(String::from).collect();
    lines[157] = lines[157][..lines[157].len() / 2].to_string();
    let shard = write(dir.path(), "part-00000.jsonl", &(lines.join("\n") + "\n"));
    let text = spec_text("jsonl", 2, 2, "", &pack("wrap", 256, 1)).replace(
        &zephon_testkit::testdata().join("corpora/a/jsonl").display().to_string(),
        &shard.display().to_string(),
    );
    let spec = parse(&text);
    let mut l = loaders(&spec, 1, 2, None);
    let err = loop {
        match l[0].next_step() {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the run should fail"),
            Err(e) => break e.to_string(),
        }
    };
    assert!(err.contains("a shard 0 row 157") && err.contains("invalid JSON"), "{err}");
}
