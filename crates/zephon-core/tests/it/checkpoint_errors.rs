//! A checkpoint that does not fit the run fails loudly, naming what is wrong.

use std::fs;
use std::path::Path;

use zephon_core::*;
use zephon_operator::*;

use crate::common::*;

fn run_spec() -> RunSpec {
    spec(corpus(200, 30, 9), operators(32, 4), 4, 100, Tail::Drop)
}

/// Runs 3 steps at W = 2 and checkpoints both ranks into `dir`.
fn checkpoint_two_ranks(spec: &RunSpec, dir: &Path) {
    run_ranks(spec, 4, 8, 2, opts(2, 3, 2), 3, None, Some(dir));
}

fn restore_err(spec: RunSpec, w: u32, rank: u32, dir: &Path) -> String {
    match Engine::restore(
        spec,
        Topology::builder().lanes(4).rows_per_step(8).place(Place { rank, world_size: w }).build().unwrap(),
        opts(1, 3, 1),
        dir,
    ) {
        Ok(_) => panic!("restore should fail"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn missing_lane_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    checkpoint_two_ranks(&run_spec(), tmp.path());
    fs::remove_file(tmp.path().join(checkpoint::file_name(Lane(2), Lane(3)))).unwrap();
    let e = restore_err(run_spec(), 1, 0, tmp.path());
    assert!(e.contains("no file holds lane(s) 2, 3"), "{e}");
    // Rank 0 of 2 only needs lanes 0 and 1, which are there.
    assert!(
        Engine::restore(
            run_spec(),
            Topology::builder().lanes(4).rows_per_step(8).place(Place { rank: 0, world_size: 2 }).build().unwrap(),
            opts(1, 3, 1),
            tmp.path()
        )
        .is_ok()
    );
}

#[test]
fn files_from_different_steps_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    checkpoint_two_ranks(&run_spec(), tmp.path());
    run_ranks(&run_spec(), 4, 8, 2, opts(2, 3, 2), 4, None, Some(other.path()));
    let name = checkpoint::file_name(Lane(2), Lane(3));
    fs::copy(other.path().join(&name), tmp.path().join(&name)).unwrap();
    let e = restore_err(run_spec(), 1, 0, tmp.path());
    assert!(e.contains("is at step 4") && e.contains("at step 3"), "{e}");
}

#[test]
fn a_changed_run_is_refused_with_the_changed_parts() {
    let tmp = tempfile::tempdir().unwrap();
    checkpoint_two_ranks(&run_spec(), tmp.path());
    // Another pipeline (row length), another dataset, another seed.
    let e = restore_err(spec(corpus(200, 30, 9), operators(33, 4), 4, 100, Tail::Drop), 2, 0, tmp.path());
    assert!(e.contains("operator 1 (wrap-pack) was len=32 and is now len=33"), "{e}");
    let e = restore_err(spec(corpus(201, 30, 9), operators(32, 4), 4, 100, Tail::Drop), 2, 0, tmp.path());
    assert!(e.contains("dataset corpus changed: shard 2 was 2 rows=") && e.contains("work source was"), "{e}");
    let mut s = run_spec();
    s.seed += 1;
    let e = restore_err(s, 2, 0, tmp.path());
    assert!(e.contains("seed was 5 and is now 6"), "{e}");
    // Another lane layout.
    let e = match Engine::restore(
        run_spec(),
        Topology::builder().lanes(8).rows_per_step(8).build().unwrap(),
        opts(1, 3, 1),
        tmp.path(),
    ) {
        Ok(_) => panic!("restore should fail"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("lanes was 4 and is now 8"), "{e}");
}

/// A file the previous release wrote (format 5, kept in tests/data) is refused by its version,
/// with what to do, before anything else is read.
#[test]
fn a_checkpoint_of_the_previous_format_is_refused_naming_both_versions() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/format-5");
    let e = restore_err(run_spec(), 1, 0, &dir);
    let want = format!("format version 5, this build reads version {}", checkpoint::FORMAT_VERSION);
    assert!(e.contains(&want) && e.contains("resume with the zephon version that wrote it"), "{e}");
}

#[test]
fn corrupt_and_truncated_files_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    checkpoint_two_ranks(&run_spec(), tmp.path());
    let path = tmp.path().join(checkpoint::file_name(Lane(0), Lane(1)));
    let good = fs::read(&path).unwrap();

    let mut flipped = good.clone();
    let i = flipped.len() - 10;
    flipped[i] ^= 0x20;
    fs::write(&path, &flipped).unwrap();
    let e = restore_err(run_spec(), 2, 0, tmp.path());
    assert!(e.contains("checksum mismatch"), "{e}");

    fs::write(&path, &good[..good.len() / 2]).unwrap();
    let e = restore_err(run_spec(), 2, 0, tmp.path());
    assert!(e.contains("truncated"), "{e}");

    fs::write(&path, &good[..20]).unwrap();
    let e = restore_err(run_spec(), 2, 0, tmp.path());
    assert!(e.contains("truncated") || e.contains("expected"), "{e}");

    fs::write(&path, b"hello\n").unwrap();
    let e = restore_err(run_spec(), 2, 0, tmp.path());
    assert!(e.contains("not a zephon checkpoint"), "{e}");

    let newer =
        String::from_utf8_lossy(&good).replacen(&format!("format {}", checkpoint::FORMAT_VERSION), "format 9", 1);
    fs::write(&path, newer.as_bytes()).unwrap();
    let e = restore_err(run_spec(), 2, 0, tmp.path());
    assert!(e.contains("format version 9"), "{e}");

    let empty = tempfile::tempdir().unwrap();
    let e = restore_err(run_spec(), 2, 0, empty.path());
    assert!(e.contains("no *.zck files"), "{e}");
}

#[test]
fn checkpoints_hold_lineage_not_payloads() {
    let tmp = tempfile::tempdir().unwrap();
    checkpoint_two_ranks(&run_spec(), tmp.path());
    let file = fs::read(tmp.path().join(checkpoint::file_name(Lane(0), Lane(1)))).unwrap();
    let header_end = file.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(3).unwrap().0 + 1;
    let body = miniz_oxide::inflate::decompress_to_vec(&file[header_end..]).unwrap();
    let text = String::from_utf8_lossy(&body);
    // The compact JSON has no spaces, so space-joined corpus words would be payload text.
    for w in ["lane", "token", "shard", "epoch"] {
        assert!(!text.contains(&format!("{w} ")) && !text.contains(&format!(" {w}")), "payload text in checkpoint");
    }
    assert!(file.len() < 4 * 1024, "checkpoint of 2 lanes is {} bytes", file.len());
}

#[test]
fn restoring_before_the_first_step_equals_a_fresh_start() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = run_spec();
    run_ranks(&spec, 4, 8, 4, opts(1, 3, 1), 0, None, Some(tmp.path()));
    let fresh = run_ranks(&spec, 4, 8, 1, opts(1, 3, 1), 4, None, None);
    let resumed = run_ranks(&spec, 4, 8, 2, opts(2, 3, 1), 4, Some(tmp.path()), None);
    assert_eq!(fresh, resumed);
}

mod never_panics {
    use proptest::prelude::*;
    use zephon_core::checkpoint;

    fn sample_file() -> Vec<u8> {
        static FILE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        FILE.get_or_init(|| {
            let tmp = tempfile::tempdir().unwrap();
            super::checkpoint_two_ranks(&super::run_spec(), tmp.path());
            std::fs::read(tmp.path().join(checkpoint::file_name(zephon_operator::Lane(0), zephon_operator::Lane(1))))
                .unwrap()
        })
        .clone()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
        /// Any mutation of a real checkpoint file is an error or a valid file, never a panic.
        #[test]
        fn mutated_checkpoints_error_cleanly(cut in 0usize..4096, flips in prop::collection::vec((0usize..4096, any::<u8>()), 0..4)) {
            let mut bytes = sample_file();
            for (i, b) in flips {
                if !bytes.is_empty() {
                    let i = i % bytes.len();
                    bytes[i] ^= b;
                }
            }
            bytes.truncate(cut.min(bytes.len()));
            let _ = checkpoint::inspect(std::path::Path::new("fuzz"), &bytes);
        }
    }
}

/// Lanes snapshot only after every `snapshot_every`-th step: a checkpoint after another step
/// is refused, naming the setting (also when it is "never"), and one after a snapshot works.
#[test]
fn a_checkpoint_after_a_step_without_snapshots_is_refused_naming_the_setting() {
    let tmp = tempfile::tempdir().unwrap();
    let never = ExecOptions { snapshot_every: u64::MAX, ..opts(2, 3, 2) };
    let mut e =
        Engine::start(run_spec(), Topology::builder().lanes(4).rows_per_step(8).build().unwrap(), never).unwrap();
    e.next_step().unwrap();
    let err = e.checkpoint(tmp.path()).unwrap_err().to_string();
    assert!(err.contains("after step 0") && err.contains("never") && err.contains("snapshot_every"), "{err}");

    let every_3 = ExecOptions { snapshot_every: 3, ..opts(2, 3, 2) };
    let mut e =
        Engine::start(run_spec(), Topology::builder().lanes(4).rows_per_step(8).build().unwrap(), every_3).unwrap();
    for step in 0..3 {
        e.next_step().unwrap();
        let got = e.checkpoint(&tmp.path().join(format!("s{step}")));
        if step < 2 {
            let err = got.unwrap_err().to_string();
            assert!(err.contains(&format!("after step {step}")) && err.contains("every 3 steps"), "{err}");
        } else {
            got.unwrap();
        }
    }
}
