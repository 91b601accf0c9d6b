//! A third-party operator from a TOML spec, through a `zephon` command built with its section:
//! `verify` runs rank processes of this binary at W = 1, 2, 4 and across resumes on the real
//! corpus A, and every global step is the same; a table that names no section is refused,
//! naming the registered ones.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn zephon_sentences(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zephon-sentences")).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Corpus A's documents cut into sentences and joined into rows of at least `min_bytes`.
fn spec(dir: &Path, table: &str) -> PathBuf {
    let corpus = zephon_testkit::testdata().join("corpora/a/jsonl");
    let text = format!(
        "seed = 3\nlanes = 8\nrows_per_step = 16\n\n[[dataset]]\nname = \"a\"\npath = \"{}\"\nweight = 1.0\n\n\
         [source]\nchunk_size = 4\n\n{table}\n\n[run]\nthreads = 1\n",
        corpus.display()
    );
    let p = dir.join("sentences.toml");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn a_spec_with_sentences_gives_the_same_steps_at_every_world_size_and_across_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let s = spec(dir.path(), "[sentences]\nmin_bytes = 400");
    let o = zephon_sentences(&[
        "verify",
        "--spec",
        s.to_str().unwrap(),
        "--world-sizes",
        "1,2,4",
        "--threads",
        "1,2",
        "--steps",
        "5",
        "--resume-at",
        "2",
        "--resume-world-sizes",
        "1,4",
    ]);
    let out = text(&o);
    println!("{out}");
    assert!(o.status.success(), "{out}");
    assert!(out.contains("every global step is identical"), "{out}");
    // The operator is in the plan, with its settings.
    let o = zephon_sentences(&["explain", "--spec", s.to_str().unwrap()]);
    let plan = text(&o);
    assert!(o.status.success() && plan.contains("sentences"), "{plan}");
}

#[test]
fn unknown_tables_and_bad_settings_are_refused_naming_what_is_known() {
    let dir = tempfile::tempdir().unwrap();
    for (table, want) in [
        ("[sentence]\nmin_bytes = 400", "[sentences]"),
        ("[sentences]\nmin_byte = 400", "min_byte"),
        ("[sentences]\nmin_bytes = 0", "[sentences] min_bytes must be at least 1"),
    ] {
        let s = spec(dir.path(), table);
        let o = zephon_sentences(&["explain", "--spec", s.to_str().unwrap()]);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(1), "{table}: {out}");
        assert!(out.contains(want), "{table}: want {want:?} in {out}");
    }
}
