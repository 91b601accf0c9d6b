//! The `zephon` command end to end, on the real corpora and the real GPT-2 tokenizer: verify
//! across rank processes, world sizes, threads, microbatches and resumes; explain; inspect;
//! and bad input (a clear error, a non-zero exit, nothing half-written).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn zephon(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zephon")).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn spec(dir: &Path, lanes: u32, rows: u32, seq_len: usize, a: Option<&Path>) -> PathBuf {
    let data = zephon_testkit::testdata();
    let a = a.map(Path::to_path_buf).unwrap_or_else(|| data.join("corpora/a/jsonl"));
    let text = format!(
        r#"seed = 7
lanes = {lanes}
rows_per_step = {rows}

[[dataset]]
name = "a"
path = "{}"
share = 0.5

[[dataset]]
name = "b"
path = "{}"
share = 0.5

[source]
chunk_size = 8

[tokenize]
tokenizer = "{}"
eos = "<|endoftext|>"

[ensure_mixture]
slack_tokens = 1024

[pack]
algorithm = "best_fit"
bins = 2
seq_len = {seq_len}
pad_id = 50256

[shuffle]
buffer = 2

[run]
threads = 1
"#,
        a.display(),
        data.join("corpora/b/parquet").display(),
        data.join("tokenizers/gpt2/tokenizer.json").display()
    );
    let p = dir.join(format!("spec-{lanes}.toml"));
    std::fs::write(&p, text).unwrap();
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
    // 16 configurations (4 world sizes × 2 thread counts × 2 microbatch sizes) + the resumes.
    assert_eq!(out.matches("steps equal").count(), 16 + 1 + 3 + 3, "{out}");
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
            zephon::core::checkpoint::inspect(&f.path(), &bytes).unwrap();
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
    assert!(
        !o.status.success() && text(&o).contains("was written by a different run") && text(&o).contains("pipeline was"),
        "{}",
        text(&o)
    );
    no_files_left();
}
