//! The `zephon` command end to end, on the real corpora and the real GPT-2 tokenizer: verify
//! across rank processes, world sizes, threads, microbatches and resumes; explain; inspect;
//! and bad input (a clear error, a non-zero exit, nothing half-written).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use zephon_testkit::SpecText;

fn zephon(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zephon")).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Corpora A (or `a`) and B, 50 / 50, held by ensure_mixture, best-fit packed into rows of
/// `seq_len`, shuffled: written to `dir/spec-{lanes}.toml`.
fn spec(dir: &Path, lanes: u32, rows: u32, seq_len: usize, a: Option<&Path>) -> PathBuf {
    let data = zephon_testkit::testdata();
    let a = a.map(Path::to_path_buf).unwrap_or_else(|| data.join("corpora/a/jsonl"));
    let text = SpecText::new(lanes, rows)
        .seed(7)
        .dataset("a", a)
        .share(0.5)
        .dataset("b", data.join("corpora/b/parquet"))
        .share(0.5)
        .chunk_size(8)
        .tokenizer(data.join("tokenizers/gpt2/tokenizer.json"), "<|endoftext|>")
        .set("ensure_mixture", "slack_tokens", 1024)
        .pack("best_fit", seq_len as u64)
        .set("pack", "bins", 2)
        .set("pack", "pad_id", 50256)
        .shuffle(2)
        .threads(1);
    let p = dir.join(format!("spec-{lanes}.toml"));
    std::fs::write(&p, text.text()).unwrap();
    p
}

fn verify(spec: &Path, steps: &str, microbatches: &str) {
    let o = zephon(&[
        "verify",
        "--spec",
        spec.to_str().unwrap(),
        "--world-sizes",
        "1,2,4,8",
        "--threads",
        "1,2",
        "--microbatch",
        microbatches,
        "--steps",
        steps,
        "--resume-at",
        "2",
        "--resume-world-sizes",
        "1,4,8",
        "--second-resume-at",
        "3",
    ]);
    let out = text(&o);
    println!("{out}");
    assert!(o.status.success(), "{out}");
    assert!(out.contains("every global step is identical"), "{out}");
    // 16 configurations (4 world sizes × 2 thread counts × 2 microbatch sizes) of every step,
    // the run to the checkpoint at 2, and each resume's steps.
    let steps: u64 = steps.parse().unwrap();
    let delivered = |line: &str| line.split_whitespace().rev().nth(2).and_then(|n| n.parse::<u64>().ok());
    let counts: Vec<u64> = out.lines().filter(|l| l.ends_with("steps equal")).filter_map(delivered).collect();
    let mut want = vec![steps; 16];
    want.push(2);
    want.extend([1, steps - 3].repeat(3));
    assert_eq!(counts, want, "{out}");
}

#[test]
fn verify_with_8_lanes_across_processes_world_sizes_threads_microbatches_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    verify(&spec(dir.path(), 8, 16, 512, None), "5", "1,2");
}

#[test]
fn verify_with_64_lanes() {
    let dir = tempfile::tempdir().unwrap();
    verify(&spec(dir.path(), 64, 64, 128, None), "4", "1,8");
}

#[test]
fn sixty_four_rank_processes_equal_one() {
    let dir = tempfile::tempdir().unwrap();
    let s = spec(dir.path(), 64, 64, 128, None);
    let o =
        zephon(&["verify", "--spec", s.to_str().unwrap(), "--world-sizes", "1,64", "--threads", "1", "--steps", "2"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("W=64 threads=1") && out.contains("every global step is identical"), "{out}");
}

/// The first `n` documents of a corpus's JSONL shards, as one JSONL file in `dir/name`.
fn subset(dir: &Path, corpus: &str, name: &str, n: usize) -> PathBuf {
    let mut shards: Vec<PathBuf> =
        std::fs::read_dir(zephon_testkit::testdata().join("corpora").join(corpus).join("jsonl"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .collect();
    shards.sort();
    let lines: Vec<String> = shards
        .iter()
        .flat_map(|p| std::fs::read_to_string(p).unwrap().lines().map(str::to_string).collect::<Vec<_>>())
        .take(n)
        .collect();
    let out = dir.join(name);
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("part-0.jsonl"), lines.join("\n") + "\n").unwrap();
    out
}

/// Finite data to its end under `tail = "drop"`, its end shared out by each row's tokens: rank
/// processes at W = 1, 2, 4, 8 (and a resume from W = 2 on W = 8) each plan the end on their
/// own and deliver the same steps to the last, no lane is cut off, and the final partial step
/// is all that is left out.
#[test]
fn finite_data_ends_on_every_lane_together_in_every_rank_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let (short, long) = (subset(dir.path(), "a", "short", 300), subset(dir.path(), "b", "long", 40));
    let s = dir.path().join("finite.toml");
    let finite = SpecText::new(8, 16)
        .seed(7)
        .dataset("short", short)
        .weight(1.0)
        .dataset("long", long)
        .weight(1.0)
        .chunk_size(2)
        .set("source", "exhaustion", "redistribute")
        .tokenizer(zephon_testkit::testdata().join("tokenizers/gpt2/tokenizer.json"), "<|endoftext|>")
        .pack("best_fit", 256)
        .set("pack", "pad_id", 50256)
        .shuffle(4)
        .threads(1)
        .tail("drop");
    std::fs::write(&s, finite.text()).unwrap();
    let report = dir.path().join("report.json");
    let o = zephon(&["run", "--spec", s.to_str().unwrap(), "--quiet", "--report", report.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let steps = r["steps"].as_u64().unwrap();
    assert!(steps > 20, "{r}");
    assert_eq!(r["data"]["lanes_cut_off"].as_array().map(Vec::len), Some(0), "{r}");
    assert!(r["data"]["tail_dropped_rows"].as_u64().unwrap() < 16, "less than one step left out: {r}");
    let steps = steps.to_string();
    let o = zephon(&[
        "verify",
        "--spec",
        s.to_str().unwrap(),
        "--world-sizes",
        "1,2,4,8",
        "--threads",
        "1,2",
        "--steps",
        &steps,
        "--resume-at",
        "20",
        "--resume-world-sizes",
        "2,8",
    ]);
    let out = text(&o);
    assert!(o.status.success() && out.contains("every global step is identical"), "{out}");
    let explain = text(&zephon(&["explain", "--spec", s.to_str().unwrap()]));
    assert!(explain.contains("the end is shared out by each row's tokens"), "{explain}");
}

#[test]
fn explain_and_inspect_describe_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let s = spec(dir.path(), 8, 16, 512, None);
    let o = zephon(&["explain", "--spec", s.to_str().unwrap(), "--world-size", "4", "--rank", "1"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    for want in ["tokens/row", "ensure_mixture", "best-fit", "shuffle", "lanes 2..4", "parallel"] {
        assert!(out.contains(want), "{want}: {out}");
    }
    let o = zephon(&["inspect", "--spec", s.to_str().unwrap(), "--step", "1"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("step 1 (16 rows"), "{out}");
    assert!(out.matches("  lane ").count() == 16, "{out}");
    assert!(out.contains("a shard") && out.contains("b shard") && out.contains("tokens ["), "{out}");

    // The run report counts tokens and positions, and says how full the rows are.
    let report = dir.path().join("report.json");
    let o = zephon(&[
        "run",
        "--spec",
        s.to_str().unwrap(),
        "--steps",
        "4",
        "--quiet",
        "--report",
        report.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let (tokens, positions, fill) =
        (r["tokens"].as_u64().unwrap(), r["positions"].as_u64().unwrap(), r["fill"].as_f64().unwrap());
    assert_eq!(positions, 4 * 16 * 512, "{r}");
    assert!(tokens > 0 && tokens <= positions && (fill - tokens as f64 / positions as f64).abs() < 1e-12, "{r}");
    let shares = r["shares"].as_array().unwrap();
    assert_eq!(shares.len(), 2, "{r}");
    let by_dataset: u64 = shares.iter().map(|d| d["tokens"].as_u64().unwrap()).sum();
    assert_eq!(by_dataset, tokens, "every delivered token is counted once, by its dataset: {r}");
    assert!(shares.iter().all(|d| d["target"].as_f64() == Some(0.5)), "{r}");
    // After every step, how far each dataset was ahead; the two mirror each other (50 / 50),
    // and the worst is the largest of them.
    for d in shares {
        let ahead: Vec<i64> = d["ahead_by_step"].as_array().unwrap().iter().map(|a| a.as_i64().unwrap()).collect();
        assert_eq!(ahead.len(), 4, "{r}");
        assert_eq!(d["max_excess_tokens"].as_i64().unwrap(), ahead.iter().copied().max().unwrap().max(0), "{r}");
    }
    let (a, b) = (&shares[0]["ahead_by_step"], &shares[1]["ahead_by_step"]);
    let mirrored = (0..4).all(|i| (a[i].as_i64().unwrap() + b[i].as_i64().unwrap()).abs() <= 1);
    assert!(mirrored, "{r}");
    let parts: Vec<&str> = r["time_by_stage"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(parts, ["read", "tokenize", "ensure_mixture", "pack", "shuffle", "digest", "snapshot"], "{r}");
}

#[test]
fn bad_input_gives_a_clear_error_a_non_zero_exit_and_no_half_written_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = spec(d, 8, 16, 512, None);
    let log = d.join("hashes.tsv");
    let run = |spec: &Path, extra: &[&str]| {
        let mut args = vec!["run", "--spec", spec.to_str().unwrap(), "--quiet", "--hash-log", log.to_str().unwrap()];
        if !extra.contains(&"--steps") {
            args.extend(["--steps", "3"]);
        }
        args.extend_from_slice(extra);
        zephon(&args)
    };
    let no_files_left = || {
        assert!(!log.exists() && !log.with_extension("partial").exists(), "a hash log was left behind");
    };

    // A spec with an unknown key.
    let typo = d.join("typo.toml");
    std::fs::write(&typo, std::fs::read_to_string(&good).unwrap().replace("[shuffle]\n", "[shuffle]\nbufer = 3\n"))
        .unwrap();
    let o = run(&typo, &[]);
    assert!(!o.status.success() && text(&o).contains("unknown field `bufer`"), "{}", text(&o));
    no_files_left();

    // W not dividing L.
    let o = run(&good, &["--world-size", "3", "--rank", "0"]);
    assert!(!o.status.success() && text(&o).contains("must divide the lane count"), "{}", text(&o));
    no_files_left();

    // A tokenizer file that does not parse.
    let bad_tok = d.join("tokenizer.json");
    std::fs::write(&bad_tok, "{ not json").unwrap();
    let tok_spec = d.join("tok.toml");
    let tok_path = zephon_testkit::testdata().join("tokenizers/gpt2/tokenizer.json").display().to_string();
    std::fs::write(&tok_spec, std::fs::read_to_string(&good).unwrap().replace(&tok_path, bad_tok.to_str().unwrap()))
        .unwrap();
    let o = run(&tok_spec, &[]);
    assert!(!o.status.success() && text(&o).contains("not a valid tokenizer.json"), "{}", text(&o));
    no_files_left();

    // A corrupt line in the middle of a shard: the run fails at it, naming it, and the hash
    // log of the steps before is not left half-written.
    let shard_dir = d.join("a");
    std::fs::create_dir_all(&shard_dir).unwrap();
    let src = zephon_testkit::testdata().join("corpora/a/jsonl/part-00000.jsonl");
    let mut lines: Vec<String> = std::fs::read_to_string(src).unwrap().lines().take(3000).map(String::from).collect();
    lines[1234] = "{\"id\": 1234, \"text\": ".into();
    std::fs::write(shard_dir.join("part-00000.jsonl"), lines.join("\n") + "\n").unwrap();
    std::fs::create_dir_all(d.join("c")).unwrap();
    let corrupt = spec(&d.join("c"), 8, 16, 512, Some(&shard_dir));
    let o = run(
        &corrupt,
        &["--steps", "200", "--checkpoint-every", "1", "--checkpoint-dir", d.join("ck").to_str().unwrap()],
    );
    let out = text(&o);
    assert!(!o.status.success() && out.contains("a shard 0 row 1234") && out.contains("invalid JSON"), "{out}");
    no_files_left();
    // Every checkpoint file that exists is whole.
    for step in std::fs::read_dir(d.join("ck")).into_iter().flatten().flatten() {
        for f in std::fs::read_dir(step.path()).unwrap().flatten() {
            let bytes = std::fs::read(f.path()).unwrap();
            zephon::lane_core::checkpoint::inspect(&f.path(), &bytes).unwrap();
        }
    }

    // A checkpoint from another spec.
    let ck = d.join("ck2");
    let o = run(&good, &["--checkpoint-at", "2", "--checkpoint-dir", ck.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(log.exists());
    std::fs::remove_file(&log).unwrap();
    let other = d.join("other.toml");
    std::fs::write(&other, std::fs::read_to_string(&good).unwrap().replace("seq_len = 512", "seq_len = 256")).unwrap();
    let o = run(&other, &["--resume-from", ck.to_str().unwrap()]);
    let out = text(&o);
    assert!(!o.status.success() && out.contains("was written by a different run"), "{out}");
    assert!(out.contains("operator 2 (pack) was seq_len=512 and is now seq_len=256"), "names the setting: {out}");
    no_files_left();

    // A hash log into a folder that does not exist: refused before the pipeline starts.
    let nowhere = d.join("no/such/folder/h.tsv");
    let o = zephon(&[
        "run",
        "--spec",
        good.to_str().unwrap(),
        "--quiet",
        "--steps",
        "1",
        "--hash-log",
        nowhere.to_str().unwrap(),
    ]);
    let out = text(&o);
    assert!(!o.status.success() && out.contains("the folder") && out.contains("does not exist"), "{out}");
    assert!(!out.contains(".partial"), "{out}");
}

/// Hash-log lines by step.
fn log_steps(path: &Path) -> std::collections::BTreeMap<u64, Vec<String>> {
    let mut out: std::collections::BTreeMap<u64, Vec<String>> = Default::default();
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let step = line.split('\t').next().unwrap().parse().unwrap();
        out.entry(step).or_default().push(line.to_string());
    }
    out
}

#[test]
fn kill_9_at_any_moment_resumes_to_the_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = spec(d, 8, 16, 512, None);
    let steps = "120";
    let reference = d.join("reference.tsv");
    let o = zephon(&[
        "run",
        "--spec",
        s.to_str().unwrap(),
        "--quiet",
        "--steps",
        steps,
        "--hash-log",
        reference.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let want = log_steps(&reference);
    let ck = d.join("ck");
    // Kills spread over the start-up and the run, timed by progress (the number of checkpoint
    // folders) plus a few milliseconds, so that they land at different moments on any machine:
    // before the first checkpoint, inside checkpoint writes (rename, fsync), between steps.
    let folders = |ck: &Path| std::fs::read_dir(ck).map_or(0, |d| d.count());
    // Whether `ck` holds a complete checkpoint; a kill before the first one finished leaves
    // none (its temporary is hidden), never a corrupt one.
    let complete = |ck: &Path| match zephon::lane_core::checkpoint::resolve(ck, 8) {
        Ok(_) => true,
        Err(e) if e.to_string().contains("no step-* folder holds all") => false,
        Err(e) => panic!("a kill left a checkpoint that does not resolve: {e}"),
    };
    for (i, (after, delay_ms)) in [(0usize, 300u64), (5, 3), (20, 11), (45, 0)].into_iter().enumerate() {
        if ck.exists() && !complete(&ck) {
            std::fs::remove_dir_all(&ck).unwrap();
        }
        let mut child = Command::new(env!("CARGO_BIN_EXE_zephon"))
            .args(["run", "--spec", s.to_str().unwrap(), "--quiet", "--steps", steps, "--checkpoint-every", "1"])
            .arg("--checkpoint-dir")
            .arg(&ck)
            .args(if ck.exists() { vec!["--resume-from".to_string(), ck.display().to_string()] } else { vec![] })
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let t0 = std::time::Instant::now();
        while folders(&ck) < after && t0.elapsed().as_secs() < 120 && child.try_wait().unwrap().is_none() {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        // SIGKILL: no destructor, no cleanup.
        let _ = Command::new("kill").args(["-9", &child.id().to_string()]).status();
        let _ = child.wait();
        // Whatever is on disk resumes to exactly the reference's next steps.
        if !ck.exists() || !complete(&ck) {
            continue;
        }
        let resumed = d.join(format!("resumed-{i}.tsv"));
        let o = zephon(&[
            "run",
            "--spec",
            s.to_str().unwrap(),
            "--quiet",
            "--steps",
            steps,
            "--resume-from",
            ck.to_str().unwrap(),
            "--hash-log",
            resumed.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "resume after kill {i}: {}", text(&o));
        let got = log_steps(&resumed);
        assert!(got.is_empty() || got.keys().next_back() == Some(&119), "resumed to the end");
        for (step, lines) in &got {
            assert_eq!(
                Some(lines),
                want.get(step),
                "kill {i} (after {after} checkpoints + {delay_ms} ms): step {step} differs"
            );
        }
    }
    // Temporaries of killed writers were cleaned by the next writer of their folder or are hidden.
    for step in std::fs::read_dir(&ck).unwrap().flatten() {
        for f in std::fs::read_dir(step.path()).unwrap().flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            assert!(name.starts_with('.') || name.ends_with(".zck"), "{name}");
        }
    }
}

/// Lanes snapshot only after the steps a run checkpoints at; with `--checkpoint-every` and
/// `--checkpoint-at` together, after both kinds, and each resumes to the uninterrupted run.
#[test]
fn checkpoints_every_k_steps_and_at_a_named_step_both_resume_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = spec(d, 4, 8, 256, None);
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--spec", s.to_str().unwrap(), "--quiet", "--steps", "10"];
        args.extend_from_slice(extra);
        let o = zephon(&args);
        assert!(o.status.success(), "{}", text(&o));
    };
    let reference = d.join("reference.tsv");
    run(&["--hash-log", reference.to_str().unwrap()]);
    let ck = d.join("ck");
    run(&["--checkpoint-every", "4", "--checkpoint-at", "6", "--checkpoint-dir", ck.to_str().unwrap()]);
    let mut folders: Vec<String> =
        std::fs::read_dir(&ck).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    folders.sort();
    assert_eq!(folders, ["step-00000004", "step-00000006", "step-00000008"]);
    let want = log_steps(&reference);
    for folder in folders {
        let resumed = d.join(format!("{folder}.tsv"));
        run(&["--resume-from", ck.join(&folder).to_str().unwrap(), "--hash-log", resumed.to_str().unwrap()]);
        let got = log_steps(&resumed);
        let first: u64 = folder.trim_start_matches("step-").parse().unwrap();
        assert_eq!(got.keys().copied().collect::<Vec<_>>(), (first..10).collect::<Vec<_>>(), "{folder}");
        for (step, lines) in &got {
            assert_eq!(Some(lines), want.get(step), "resumed from {folder}: step {step} differs");
        }
    }
}

/// Documents ensure_mixture drops are reported by a run that takes no checkpoint as by one
/// that does: the lanes snapshot after the last step, whatever the checkpoint flags, so the
/// report's counts are those of the whole run, not of the last checkpoint.
#[test]
fn a_run_reports_what_ensure_mixture_dropped_with_or_without_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = spec(d, 4, 8, 256, None);
    // A hold of 2 documents: the long documents' dataset runs ahead and its pieces overflow.
    let toml = std::fs::read_to_string(&s).unwrap().replace("slack_tokens = 1024", "slack_tokens = 64\nhold = 2");
    std::fs::write(&s, toml).unwrap();
    let dropped = |extra: &[&str]| -> (u64, String) {
        let report = d.join("report.json");
        let mut args = vec!["run", "--spec", s.to_str().unwrap(), "--steps", "9", "--report", report.to_str().unwrap()];
        args.extend_from_slice(extra);
        let o = zephon(&args);
        assert!(o.status.success(), "{}", text(&o));
        let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
        let docs =
            r["data"]["datasets"].as_array().unwrap().iter().map(|d| d["dropped_documents"].as_u64().unwrap()).sum();
        (docs, text(&o))
    };
    let (none, said) = dropped(&[]);
    assert!(none > 0, "the hold of 2 drops documents: {said}");
    assert!(said.contains("ensure_mixture dropped"), "said on stderr: {said}");
    let ck = d.join("ck");
    let (with, _) = dropped(&["--checkpoint-at", "4", "--checkpoint-dir", ck.to_str().unwrap()]);
    assert_eq!(none, with, "the same run drops the same documents, checkpoint or not");
}

#[test]
fn check_tokenizer_compares_the_engine_with_tokenizers_on_the_specs_documents() {
    let dir = tempfile::tempdir().unwrap();
    let s = spec(dir.path(), 8, 16, 512, None);
    let o = zephon(&["check-tokenizer", "--spec", s.to_str().unwrap(), "--docs", "40"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("exact fast path") && out.contains("dataset a:") && out.contains("dataset b:"), "{out}");
    assert!(out.contains("40 texts") && out.contains("all equal"), "{out}");
}

#[test]
fn inspect_names_every_image_of_a_vision_language_step() {
    let dir = tempfile::tempdir().unwrap();
    let data = zephon_testkit::testdata();
    let mut tok: serde_json::Value =
        serde_json::from_slice(&std::fs::read(data.join("tokenizers/gpt2/tokenizer.json")).unwrap()).unwrap();
    tok["added_tokens"].as_array_mut().unwrap().push(serde_json::json!({
        "id": 50257, "content": "<image>", "single_word": false, "lstrip": false, "rstrip": false,
        "normalized": false, "special": true
    }));
    let tok_path = dir.path().join("tokenizer.json");
    std::fs::write(&tok_path, serde_json::to_vec(&tok).unwrap()).unwrap();
    // The small photos only (the wallpapers take seconds each to decode in a test build).
    let small: Vec<String> = std::fs::read_to_string(data.join("images/captioned/captions.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"caer-"))
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            let path = data.join("images/captioned").join(v["file"].as_str().unwrap());
            v["file"] = serde_json::json!(path.display().to_string());
            v.to_string()
        })
        .collect();
    let captions = dir.path().join("small.jsonl");
    std::fs::write(&captions, small.join("\n") + "\n").unwrap();
    let spec = dir.path().join("vlm.toml");
    std::fs::write(
        &spec,
        format!(
            "lanes = 2\nrows_per_step = 2\n[[dataset]]\nname = \"captions\"\npath = \"{}\"\nweight = 1.0\n\
             text_field = \"caption\"\nimages = \"file\"\n[images]\nsize = 56\n[tokenize]\ntokenizer = \"{}\"\n\
             image_token = \"<image>\"\n[pack]\nalgorithm = \"best_fit\"\nseq_len = 128\n[run]\nthreads = 1\n",
            captions.display(),
            tok_path.display()
        ),
    )
    .unwrap();
    let o = zephon(&["inspect", "--spec", spec.to_str().unwrap(), "--step", "0"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("image #0 of captions shard 0 row") && out.contains("caer-") && out.contains(".jpg, tokens ["),
        "{out}"
    );
    let o = zephon(&["explain", "--spec", spec.to_str().unwrap()]);
    let out = text(&o);
    assert!(o.status.success() && out.contains("images") && out.contains("decode (zune"), "{out}");
}

/// `spec`'s file with a batch-size ramp 64 → 128 → 256 (at steps 2 and 4) and a two-segment
/// curriculum (a 70 / 30 from step 0, 30 / 70 from step 3) in a `[schedule]` table.
fn scheduled_spec(dir: &Path) -> PathBuf {
    let s = spec(dir, 8, 64, 128, None);
    let text = std::fs::read_to_string(&s).unwrap();
    assert_eq!(text.matches("share = 0.5\n").count(), 2, "the template's shares moved: update this test");
    let text = text.replace("rows_per_step = 64\n", "").replace("share = 0.5\n", "")
        + "\n[schedule]\nrows_per_step = [[0, 64], [2, 128], [4, 256]]\n\
           shares = [[0, { a = 0.7, b = 0.3 }], [3, { a = 0.3, b = 0.7 }]]\n";
    let p = dir.join("scheduled.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// A batch-size ramp and a curriculum on the real corpora: rank processes at W = 1, 2, 4, 8,
/// with 1 and 2 threads and microbatches of 1 and 8 rows, and resumes at the ramp's
/// boundaries at other world sizes, all deliver the same global steps; `explain` shows both
/// schedules, and a microbatch size that cannot cut a step of the ramp is refused before the
/// run, naming the step.
#[test]
fn a_batch_size_ramp_and_a_curriculum_verify_across_processes_world_sizes_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let s = scheduled_spec(dir.path());
    let spec = s.to_str().unwrap();
    let o = zephon(&[
        "verify",
        "--spec",
        spec,
        "--world-sizes",
        "1,2,4,8",
        "--threads",
        "1,2",
        "--microbatch",
        "1,8",
        "--steps",
        "6",
        "--resume-at",
        "2",
        "--resume-world-sizes",
        "1,4,8",
        "--second-resume-at",
        "4",
    ]);
    let out = text(&o);
    assert!(o.status.success() && out.contains("every global step is identical"), "{out}");
    let o = zephon(&["explain", "--spec", spec]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    for want in [
        "64 (8 per lane) from step 0, 128 (16 per lane) from step 2, 256 (32 per lane) from step 4",
        "30.0% / 70.0% from step 3",
    ] {
        assert!(out.contains(want), "explain lacks {want:?}:\n{out}");
    }
    let o = zephon(&["run", "--spec", spec, "--steps", "1", "--world-size", "2", "--rank", "0", "--microbatch", "64"]);
    let out = text(&o);
    assert!(!o.status.success() && out.contains("do not divide the 32 local rows of step 0"), "{out}");
}

/// `zephon validate`: rank processes at W = 1 and W = 2 deliver the same validation steps
/// (their hash logs combine to the same fingerprints), read every held-out record once between
/// them, and end after the same step.
#[test]
fn validate_reads_every_record_once_in_the_same_steps_at_every_world_size() {
    let dir = tempfile::tempdir().unwrap();
    let held_out = subset(dir.path(), "a", "held-out", 101);
    let s = spec(dir.path(), 8, 16, 128, None);
    let body = std::fs::read_to_string(&s).unwrap()
        + &format!("\n[validation]\n[[validation.dataset]]\nname = \"held-out\"\npath = \"{}\"\n", held_out.display());
    std::fs::write(&s, body).unwrap();
    let run = |w: u32| {
        let mut log = zephon::lane_core::HashLog::new();
        let mut records = 0u64;
        for r in 0..w {
            let (hashes, report) =
                (dir.path().join(format!("v-{w}-{r}.tsv")), dir.path().join(format!("v-{w}-{r}.json")));
            let o = zephon(&[
                "validate",
                "--spec",
                s.to_str().unwrap(),
                "--world-size",
                &w.to_string(),
                "--rank",
                &r.to_string(),
                "--hash-log",
                hashes.to_str().unwrap(),
                "--report",
                report.to_str().unwrap(),
            ]);
            assert!(o.status.success(), "{}", text(&o));
            log.add_text(&std::fs::read_to_string(&hashes).unwrap()).unwrap();
            let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
            assert_eq!(json["steps"], 7, "101 records, 8 lanes, 2 rows a lane a step");
            records += json["records"]["held-out"].as_u64().unwrap_or(0);
        }
        (log.fingerprints(8).unwrap(), records)
    };
    let (one, n) = run(1);
    assert_eq!((one.len(), n), (7, 101));
    assert_eq!(run(2), (one, 101));
}

/// `bench` on a chat spec (no `[tokenize]`, so no bare tokenizer to compare with): the run's
/// figures are measured and the raw rates are null, not a made-up number.
#[test]
fn bench_measures_a_chat_spec_and_leaves_the_raw_rates_null() {
    let dir = tempfile::tempdir().unwrap();
    let data = zephon_testkit::testdata();
    let spec = dir.path().join("chat.toml");
    let body = format!(
        "lanes = 2\nrows_per_step = 2\n[[dataset]]\nname = \"docs\"\npath = \"{}\"\nweight = 1.0\n[chat]\n\
         tokenizer = \"{}\"\ntemplate = \"{}\"\n[pack]\nalgorithm = \"best_fit\"\nseq_len = 256\npad_id = 151643\n",
        data.join("chat/conversations.jsonl").display(),
        data.join("tokenizers/qwen2_5/tokenizer.json").display(),
        data.join("chat/templates/qwen2_5_training.jinja").display(),
    );
    std::fs::write(&spec, body).unwrap();
    let out = dir.path().join("bench.json");
    let o = zephon(&[
        "bench",
        "--spec",
        spec.to_str().unwrap(),
        "--steps",
        "6",
        "--checkpoint-at",
        "2",
        "--json-out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let tokens = json["tokens"].as_u64().unwrap();
    assert!(tokens > 0 && tokens <= 6 * 2 * 256, "{json}");
    assert!(json["tokens_per_s"].as_f64().unwrap() > 0.0);
    assert!(json["raw_engine_tokens_per_s"].is_null() && json["efficiency_vs_engine"].is_null(), "{json}");
    assert!(json["time_by_stage"].as_array().unwrap().iter().any(|s| s["name"] == "chat"));
}

/// A hundred sources at chunks of 128 estimated tokens (once: no first step, memory growing
/// without bound): the run delivers its steps within the memory it states, and says that the
/// shares, written with six decimals, are used relative to their sum.
#[test]
fn a_hundred_sources_run_within_the_memory_they_state() {
    let dir = tempfile::tempdir().unwrap();
    let many = zephon_testkit::many_sources(dir.path(), 100, 1);
    let spec = dir.path().join("spec.toml");
    std::fs::write(&spec, many.spec(16, 32).set("source", "chunk_tokens", 128u64).text()).unwrap();
    let report = dir.path().join("report.json");
    let o = zephon(&[
        "run",
        "--spec",
        spec.to_str().unwrap(),
        "--steps",
        "100",
        "--quiet",
        "--world-size",
        "1",
        "--rank",
        "0",
        "--report",
        report.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(r["steps"], 100);
    let memory = &r["memory"];
    let positions = memory["rows_ahead"].as_u64().unwrap()
        + memory["buffers"].as_array().unwrap().iter().map(|b| b[1].as_u64().unwrap()).sum::<u64>();
    // The process itself (code, tokenizer, indexes) and the bound at 24 bytes a position.
    let allowed = (256 << 20) + positions * memory["lanes"].as_u64().unwrap() * 24;
    let rss = r["peak_rss_bytes"].as_u64().unwrap();
    assert!(rss <= allowed, "peak RSS {rss} bytes, the bound {allowed}");
    assert!(
        r["notices"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("divided by that sum")),
        "{r}"
    );
    let explain = zephon(&["explain", "--spec", spec.to_str().unwrap(), "--world-size", "1", "--rank", "0"]);
    assert!(text(&explain).contains(&format!("per lane at most {positions} positions")), "{}", text(&explain));
}
