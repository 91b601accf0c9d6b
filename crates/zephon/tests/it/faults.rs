//! Remote reads through the faults object stores have: with the project's fault proxy between
//! the loader and moto, retries never change a byte (W = 1, 2 and a resume give the run from
//! disk), a stall is cut by the stall timeout, an object replaced mid-run is refused naming
//! it, and a cache capped at a quarter of the data still gives the same steps.

use std::path::Path;

use zephon_testkit::{Fault, FaultProxy, Faults, SpecText};

use crate::remote::{server_with_corpora, spec_at};
use crate::*;

const STEPS: u64 = 8;

/// Small blocks, so that a run makes hundreds of requests for the faults to land on; a short
/// stall timeout and quick retries.
fn patient(t: SpecText) -> SpecText {
    t.set("storage", "block_bytes", 64u64 << 10).set("storage", "stall_timeout_s", 0.5).set("storage", "retries", 12u64)
}

fn remote(proxy: &FaultProxy, cache: &Path, more: impl FnOnce(SpecText) -> SpecText) -> zephon::Spec {
    spec_at("s3://corpora/a/jsonl", "s3://corpora/b/parquet", cache, &proxy.endpoint(), |t| more(patient(t)))
}

fn from_disk() -> Vec<zephon::Digest> {
    let data = zephon_testkit::testdata();
    let dir = tmp();
    let local = spec_at(
        &data.join("corpora/a/jsonl").to_string_lossy(),
        &data.join("corpora/b/parquet").to_string_lossy(),
        &dir.path().join("blocks"),
        "http://127.0.0.1:9",
        |t| t,
    );
    loaders(&local, 1, 2, None).steps_exactly(STEPS, zephon::testing::fingerprint).unwrap()
}

fn report_sum(spec: &zephon::Spec, f: impl Fn(&zephon::DatasetReport) -> u64) -> u64 {
    let mut loader = spec.pipeline().unwrap().build(spec.topology(1, 0).unwrap()).unwrap();
    loader.next_step().unwrap();
    loader.report().datasets.iter().map(f).sum()
}

#[test]
fn faults_at_a_set_rate_change_no_byte_at_any_world_size_or_across_a_resume() {
    let Some(server) = server_with_corpora() else { return };
    let reference = from_disk();
    let proxy = FaultProxy::start(
        &server.endpoint(),
        Faults { stall: std::time::Duration::from_secs(3), ..Faults::at_rate(5, 0.08) },
    )
    .unwrap();
    let dir = tmp();
    // A cache of its own for each run: every run meets the store, and its faults.
    for w in [1, 2] {
        let spec = remote(&proxy, &dir.path().join(format!("blocks-w{w}")), |t| t);
        let got = loaders(&spec, w, 1, None).steps_exactly(STEPS, zephon::testing::fingerprint).unwrap();
        assert_eq!(got, reference, "W = {w} through faults");
    }
    let spec = remote(&proxy, &dir.path().join("blocks-resume"), |t| t);
    let ckpt = dir.path().join("ckpt");
    let mut first = loaders(&spec, 2, 1, None);
    let head = first.steps_exactly(3, zephon::testing::fingerprint).unwrap();
    first.checkpoint(&ckpt).unwrap();
    drop(first);
    let spec = remote(&proxy, &dir.path().join("blocks-resumed"), |t| t);
    let tail = loaders(&spec, 1, 1, Some(&ckpt)).steps_exactly(STEPS - 3, zephon::testing::fingerprint).unwrap();
    assert_eq!([head, tail].concat(), reference, "a resume 2 → 1 through faults");
    let c = proxy.counts();
    for kind in Fault::ALL {
        assert!(c.of(kind) > 0, "{kind:?} was injected: {c:?}");
    }
    let fresh = remote(&proxy, &dir.path().join("blocks-report"), |t| t);
    assert!(report_sum(&fresh, |d| d.retries) > 0, "the report counts retries");
}

#[test]
fn a_stall_is_cut_by_the_stall_timeout_while_the_server_still_holds_the_connection() {
    let Some(server) = server_with_corpora() else { return };
    let reference = from_disk();
    // A stalled response holds its connection for a minute; the stall timeout is half a
    // second and no whole-request timeout is set.
    let faults =
        Faults { kinds: vec![Fault::Stall], stall: std::time::Duration::from_secs(60), ..Faults::at_rate(9, 0.05) };
    let proxy = FaultProxy::start(&server.endpoint(), faults).unwrap();
    let dir = tmp();
    let spec = remote(&proxy, &dir.path().join("blocks"), |t| t);
    let mut loader = spec.pipeline().unwrap().build(spec.topology(1, 0).unwrap()).unwrap();
    let mut got = Vec::new();
    for _ in 0..STEPS {
        let step = loader.next_step().unwrap().expect("a step");
        got.push(zephon::testing::fingerprint(std::slice::from_ref(&step)));
    }
    assert_eq!(got, reference);
    let stalls: u64 = loader.report().datasets.iter().map(|d| d.stalls).sum();
    let c = proxy.counts();
    assert!(c.of(Fault::Stall) > 0 && stalls > 0, "stalls injected {c:?}, counted {stalls}");
    // The loader gave up on every stalled response it counted while the proxy still held it
    // (the proxy holds one for 60 s and notes when its client leaves first).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while c.stalls_abandoned.load(std::sync::atomic::Ordering::Relaxed) < stalls && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(c.stalls_abandoned.load(std::sync::atomic::Ordering::Relaxed) >= stalls, "{c:?}, counted {stalls}");
}

#[test]
fn an_object_replaced_mid_run_is_refused_naming_it() {
    let Some(server) = server_with_corpora() else { return };
    let proxy = FaultProxy::start(&server.endpoint(), Faults::none()).unwrap();
    let dir = tmp();
    let spec = remote(&proxy, &dir.path().join("blocks"), |t| t);
    let mut loader = spec.pipeline().unwrap().build(spec.topology(1, 0).unwrap()).unwrap();
    loader.next_step().unwrap().unwrap();
    proxy.replace_objects();
    let err =
        (0..200).find_map(|_| loader.next_step().err()).expect("a read of a replaced object fails before 200 steps");
    let msg = err.to_string();
    assert!(msg.contains("changed since it was opened") && msg.contains("s3://corpora/"), "{msg}");
}

#[test]
fn a_cache_of_a_quarter_of_the_data_gives_the_same_steps() {
    let Some(server) = server_with_corpora() else { return };
    let reference = from_disk();
    let proxy = FaultProxy::start(&server.endpoint(), Faults::none()).unwrap();
    let data = zephon_testkit::testdata();
    let bytes: u64 = ["corpora/a/jsonl", "corpora/b/parquet"]
        .iter()
        .flat_map(|d| std::fs::read_dir(data.join(d)).unwrap())
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    let dir = tmp();
    let cache = dir.path().join("blocks");
    let spec = remote(&proxy, &cache, |t| t.set("storage", "cache_bytes", bytes / 4));
    let got = loaders(&spec, 2, 1, None).steps_exactly(STEPS, zephon::testing::fingerprint).unwrap();
    assert_eq!(got, reference, "a quarter of the data in the cache");
    let held: u64 = std::fs::read_dir(&cache).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
    assert!(held <= bytes / 4 + (64 << 10) + 4096, "the cache holds {held} of a cap of {}", bytes / 4);
}

#[test]
fn prefetch_by_the_schedule_fetches_ahead_and_changes_no_byte() {
    let Some(server) = server_with_corpora() else { return };
    let reference = from_disk();
    // A latency on every request, as an object store has.
    let faults = Faults { latency: std::time::Duration::from_millis(5), ..Faults::none() };
    let proxy = FaultProxy::start(&server.endpoint(), faults).unwrap();
    let dir = tmp();
    let prefetched = |spec: &zephon::Spec| -> (Vec<zephon::Digest>, u64) {
        let mut loader = spec.pipeline().unwrap().build(spec.topology(1, 0).unwrap()).unwrap();
        let mut got = Vec::new();
        for _ in 0..STEPS {
            let step = loader.next_step().unwrap().expect("a step");
            got.push(zephon::testing::fingerprint(std::slice::from_ref(&step)));
        }
        (got, loader.report().datasets.iter().map(|d| d.prefetched).sum())
    };
    let off = remote(&proxy, &dir.path().join("blocks-off"), |t| t.set("storage", "prefetch_requests", 0u64));
    let (got, n) = prefetched(&off);
    assert_eq!((got, n), (reference.clone(), 0), "no prefetch when it is off");
    let on = remote(&proxy, &dir.path().join("blocks-on"), |t| t);
    let (got, n) = prefetched(&on);
    assert_eq!(got, reference, "prefetch changes no byte");
    assert!(n > 0, "blocks were fetched ahead of their reads");
}
