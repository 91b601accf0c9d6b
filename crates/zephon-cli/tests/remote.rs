//! The `zephon` command on datasets in an S3 server (moto on loopback, its request log read):
//! two rank processes of one node fetch each block once; a killed process leaves no block a
//! later run trusts; an object changed under a checkpoint is refused naming it; no secret is
//! ever written out.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use zephon_testkit::{S3Server, SpecText};

const BLOCK: u64 = 256 << 10;

/// The command with the server's credentials and a cache folder of the test's own (indexes
/// and estimates of earlier runs would otherwise spare it reads).
fn command(server: &S3Server, dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_zephon"));
    c.envs(server.env()).env("ZEPHON_CACHE", dir.join("cache"));
    c
}

fn zephon(server: &S3Server, dir: &Path, args: &[&str]) -> Output {
    command(server, dir).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Corpus A's JSONL shards in bucket `corpora` under `a/`; a spec over them at `dir/spec.toml`
/// with the node's block cache in `dir/blocks`.
fn setup(server: &S3Server, dir: &Path) -> (PathBuf, u64) {
    let data = zephon_testkit::testdata();
    server.create_bucket("corpora");
    server.upload(&data.join("corpora/a/jsonl"), "corpora", "a");
    let blocks: u64 = std::fs::read_dir(data.join("corpora/a/jsonl"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len().div_ceil(BLOCK))
        .sum();
    let spec = SpecText::new(4, 8)
        .seed(3)
        .dataset("a", "s3://corpora/a")
        .weight(1.0)
        .tokenizer(data.join("tokenizers/gpt2/tokenizer.json"), "<|endoftext|>")
        .pack("wrap", 256)
        .threads(1)
        .set("storage", "endpoint", server.endpoint().as_str())
        .set("storage", "allow_http", true)
        .set("storage", "path_style", true)
        .set("storage", "block_bytes", BLOCK)
        .set("storage", "cache_dir", dir.join("blocks"))
        .text();
    let path = dir.join("spec.toml");
    std::fs::write(&path, spec).unwrap();
    (path, blocks)
}

/// Ranged reads the server answered (each a block fetch).
fn block_fetches(server: &S3Server) -> usize {
    server.requests().iter().filter(|r| r.starts_with("GET /corpora/a/") && r.ends_with(" 206 -")).count()
}

#[test]
fn two_rank_processes_of_a_node_fetch_each_block_once() {
    let Some(server) = S3Server::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (spec, blocks) = setup(&server, dir.path());
    let spec = spec.to_str().unwrap();
    let run = |rank: &str| {
        let report = dir.path().join(format!("r{rank}.json"));
        let log = dir.path().join(format!("h{rank}.tsv"));
        let child = command(&server, dir.path())
            .args(["run", "--spec", spec, "--steps", "12", "--quiet", "--world-size", "2", "--rank", rank])
            .args(["--report", report.to_str().unwrap(), "--hash-log", log.to_str().unwrap()])
            .spawn()
            .unwrap();
        (child, report)
    };
    let (mut a, ra) = run("0");
    let (mut b, rb) = run("1");
    assert!(a.wait().unwrap().success() && b.wait().unwrap().success());
    assert_eq!(block_fetches(&server), blocks as usize, "every block of the shards fetched once, by one of the two");
    let misses: u64 = [ra, rb]
        .iter()
        .map(|r| {
            let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(r).unwrap()).unwrap();
            v["data"]["datasets"][0]["cache_misses"].as_u64().unwrap()
        })
        .sum();
    assert_eq!(misses, blocks, "the two reports' misses are the fetches");
}

#[test]
fn a_killed_process_leaves_no_block_that_a_later_run_trusts() {
    let Some(server) = S3Server::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (spec, _) = setup(&server, dir.path());
    let spec = spec.to_str().unwrap();
    let hash_log = |name: &str| {
        let log = dir.path().join(name);
        let o = zephon(
            &server,
            dir.path(),
            &[
                "run",
                "--spec",
                spec,
                "--steps",
                "8",
                "--quiet",
                "--world-size",
                "1",
                "--rank",
                "0",
                "--hash-log",
                log.to_str().unwrap(),
            ],
        );
        assert!(o.status.success(), "{}", text(&o));
        std::fs::read_to_string(log).unwrap()
    };
    let blocks = || -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(dir.path().join("blocks")) else { return Vec::new() };
        entries
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("blk-") && p.extension().is_none())
            .collect()
    };
    // Killed while it fetches: once it has some blocks, before it has all.
    let mut child = command(&server, dir.path())
        .args(["run", "--spec", spec, "--steps", "8", "--quiet", "--world-size", "1", "--rank", "0"])
        .spawn()
        .unwrap();
    for _ in 0..600 {
        if blocks().len() >= 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = Command::new("kill").args(["-9", &child.id().to_string()]).status();
    let _ = child.wait();
    // And a block damaged behind zephon's back.
    let block = blocks().into_iter().next().expect("the killed run had fetched blocks");
    let mut bytes = std::fs::read(&block).unwrap();
    bytes[0] ^= 0xff;
    std::fs::write(&block, bytes).unwrap();
    let after = hash_log("after.tsv");
    std::fs::remove_dir_all(dir.path().join("blocks")).unwrap();
    let clean = hash_log("clean.tsv");
    assert_eq!(after, clean, "the same steps as from an empty cache");
}

#[test]
fn an_object_changed_under_a_checkpoint_is_refused_naming_it() {
    let Some(server) = S3Server::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (spec, _) = setup(&server, dir.path());
    let spec = spec.to_str().unwrap();
    let ckpt = dir.path().join("ckpt");
    let o = zephon(
        &server,
        dir.path(),
        &[
            "run",
            "--spec",
            spec,
            "--steps",
            "3",
            "--quiet",
            "--world-size",
            "1",
            "--rank",
            "0",
            "--checkpoint-at",
            "3",
            "--checkpoint-dir",
            ckpt.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    server.put("corpora", "a/part-00001.jsonl", b"{\"text\": \"another version\"}\n");
    let o = zephon(
        &server,
        dir.path(),
        &[
            "run",
            "--spec",
            spec,
            "--steps",
            "5",
            "--quiet",
            "--world-size",
            "1",
            "--rank",
            "0",
            "--resume-from",
            ckpt.to_str().unwrap(),
        ],
    );
    assert!(!o.status.success());
    assert!(text(&o).contains("part-00001.jsonl"), "{}", text(&o));
}

#[test]
fn no_secret_is_ever_written_out() {
    let Some(server) = S3Server::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (spec, _) = setup(&server, dir.path());
    let spec = spec.to_str().unwrap();
    let report = dir.path().join("report.json");
    let ckpt = dir.path().join("ckpt");
    let mut said = String::new();
    for args in [
        vec!["explain", "--spec", spec, "--world-size", "1", "--rank", "0"],
        vec![
            "run",
            "--spec",
            spec,
            "--steps",
            "3",
            "--world-size",
            "1",
            "--rank",
            "0",
            "--report",
            report.to_str().unwrap(),
            "--checkpoint-at",
            "3",
            "--checkpoint-dir",
            ckpt.to_str().unwrap(),
        ],
        vec!["inspect", "--spec", spec, "--step", "3", "--resume-from", ckpt.to_str().unwrap()],
    ] {
        said.push_str(&text(&zephon(&server, dir.path(), &args)));
    }
    // An error about the store too.
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, std::fs::read_to_string(spec).unwrap().replace("s3://corpora/a", "s3://no-such-bucket/a"))
        .unwrap();
    said.push_str(&text(&zephon(
        &server,
        dir.path(),
        &["run", "--spec", bad.to_str().unwrap(), "--steps", "1", "--world-size", "1", "--rank", "0"],
    )));
    let mut written = vec![std::fs::read(&report).unwrap()];
    for e in walk(&ckpt) {
        written.push(std::fs::read(e).unwrap());
    }
    for (k, secret) in server.env() {
        if k == "AWS_REGION" {
            continue;
        }
        assert!(!said.contains(&secret), "{k} in the output");
        for w in &written {
            assert!(!String::from_utf8_lossy(w).contains(&secret), "{k} in a file written");
        }
    }
    assert!(said.contains("no-such-bucket"), "the error names the location: {said}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() { out.extend(walk(&p)) } else { out.push(p) }
    }
    out
}
