//! The prefetcher changes neither the data nor the checkpoint position; errors reach the
//! caller; dropping it mid-run returns.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use zephon_candle::{BoxError, EngineSource, Error, PrefetchOptions, Prefetcher, ResumePoint, Sink, StepSource};
use zephon_core::{Engine, ExecOptions, LocalStep, Place, RunSpec, Tail, Topology};
use zephon_operator::{Lineage, Step};
use zephon_testkit as kit;

const LANES: u32 = 4;
const ROWS: u32 = 8;

/// A run whose rows depend on history (wrap packing, a shuffle buffer), `epochs` passes.
fn spec(epochs: u64) -> RunSpec {
    kit::spec(kit::corpus(300, 40, 9), kit::operators(24, 5), 7, epochs, Tail::Drop)
}

fn opts() -> ExecOptions {
    kit::opts(2, 4, 2)
}

fn topology(w: u32, r: u32) -> Topology {
    Topology::builder().lanes(LANES).rows_per_step(ROWS).place(Place { rank: r, world_size: w }).build().unwrap()
}

/// Counts the steps the worker pulled, so a test knows how many wait in the queue.
struct Counting<S> {
    inner: S,
    pulled: Arc<AtomicU64>,
}

impl<S: StepSource> StepSource for Counting<S> {
    fn next_step(&mut self) -> Result<Option<LocalStep>, BoxError> {
        let s = self.inner.next_step();
        self.pulled.fetch_add(1, Ordering::SeqCst);
        s
    }
    fn resume_point(&self) -> ResumePoint {
        self.inner.resume_point()
    }
}

/// Waits (with a generous hang guard) until `pulled` reaches `n`.
fn wait_for(pulled: &AtomicU64, n: u64) {
    for _ in 0..12_000 {
        if pulled.load(Ordering::SeqCst) >= n {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the worker did not pull {n} steps in 120 s");
}

fn read(dir: &Path) -> Vec<u8> {
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert_eq!(files.len(), 1, "one rank, one file");
    std::fs::read(&files[0]).unwrap()
}

#[test]
fn prefetch_changes_neither_data_nor_checkpoints() {
    let tmp = tempfile::tempdir().unwrap();
    let mut engine = Engine::start(spec(2), topology(1, 0), opts()).unwrap();
    let source = EngineSource::start(spec(2), topology(1, 0), opts()).unwrap();
    let sink = Sink::cpu();
    let mut pre = Prefetcher::start(source, sink.clone(), PrefetchOptions { depth: 4, microbatch: Some(4) }).unwrap();
    assert_eq!(pre.position(), Step(0));
    let mut steps = 0;
    loop {
        let (direct, ahead) = (engine.next_step().unwrap(), pre.next_step().unwrap());
        assert_eq!(pre.position(), engine.position(), "position is the trainer's");
        let (Some(direct), Some(ahead)) = (direct, ahead) else {
            assert!(steps > 10, "the run lasts a while");
            break;
        };
        assert_eq!(ahead.step(), direct.step());
        assert_eq!(ahead.local_fingerprint(), direct.local_fingerprint());
        let lineage: Vec<Lineage> = direct.rows().map(|r| r.lineage().clone()).collect();
        assert_eq!(ahead.lineage(), &lineage[..]);
        // The tensors are the direct step's tensors, microbatch by microbatch.
        let want = sink.step(direct, Some(4)).unwrap();
        assert_eq!(ahead.microbatches().len(), 2);
        for (a, b) in ahead.microbatches().iter().zip(want.microbatches()) {
            let (a, b) = (a.require("input_ids").unwrap(), b.require("input_ids").unwrap());
            assert_eq!(a.dims(), b.dims());
            let flat = |t: &candle_core::Tensor| t.flatten_all().unwrap().to_vec1::<u32>().unwrap();
            assert_eq!(flat(a), flat(b));
        }
        if steps % 5 == 2 {
            // The checkpoint file is the engine's own, byte for byte.
            let (a, b) = (tmp.path().join(format!("a{steps}")), tmp.path().join(format!("b{steps}")));
            engine.checkpoint(&a).unwrap();
            pre.checkpoint(&b).unwrap();
            assert_eq!(read(&a), read(&b), "after step {steps}");
        }
        steps += 1;
    }
}

#[test]
fn checkpoint_while_prefetched_resumes_after_the_trainers_step() {
    let tmp = tempfile::tempdir().unwrap();
    let reference = kit::run_ranks(&spec(3), LANES, ROWS, 1, opts(), 14, None, None);
    let taken = 5u64;
    let depth = 4u64;
    let pulled = Arc::new(AtomicU64::new(0));
    let source =
        Counting { inner: EngineSource::start(spec(3), topology(1, 0), opts()).unwrap(), pulled: pulled.clone() };
    let mut pre =
        Prefetcher::start(source, Sink::cpu(), PrefetchOptions { depth: depth as usize, microbatch: None }).unwrap();
    for s in 0..taken {
        let step = pre.next_step().unwrap().unwrap();
        assert_eq!(step.local_fingerprint(), reference[s as usize]);
    }
    // The worker runs `depth` steps ahead of the trainer before it blocks.
    wait_for(&pulled, taken + depth);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(pulled.load(Ordering::SeqCst), taken + depth, "bounded: no more than depth ahead");
    assert_eq!(pre.position(), Step(taken));
    pre.checkpoint(tmp.path()).unwrap();
    drop(pre);

    // Resumed at world size 2 (and at 1), the run continues with step `taken`.
    let resumed = kit::run_ranks(&spec(3), LANES, ROWS, 2, opts(), 14 - taken, Some(tmp.path()), None);
    assert_eq!(resumed, reference[taken as usize..]);
    let source = EngineSource::restore(spec(3), topology(1, 0), opts(), tmp.path()).unwrap();
    let mut pre = Prefetcher::start(source, Sink::cpu(), PrefetchOptions::default()).unwrap();
    assert_eq!(pre.position(), Step(taken));
    for s in taken..14 {
        let step = pre.next_step().unwrap().unwrap();
        assert_eq!((step.step(), step.local_fingerprint()), (Step(s), reference[s as usize]));
    }
}

#[test]
fn steps_without_a_snapshot_refuse_a_checkpoint_as_the_engine_does() {
    let tmp = tempfile::tempdir().unwrap();
    let o = ExecOptions { snapshot_every: 3, ..opts() };
    let mut engine = Engine::start(spec(1), topology(1, 0), o).unwrap();
    let mut pre =
        Prefetcher::start(EngineSource::start(spec(1), topology(1, 0), o).unwrap(), Sink::cpu(), Default::default())
            .unwrap();
    let mut refused = 0;
    for s in 0..7 {
        engine.next_step().unwrap();
        pre.next_step().unwrap();
        let (a, b) =
            (engine.checkpoint(&tmp.path().join(format!("a{s}"))), pre.checkpoint(&tmp.path().join(format!("b{s}"))));
        assert_eq!(a.is_ok(), b.is_ok(), "after step {s}");
        if let Err(e) = b {
            assert!(matches!(e, Error::NoSnapshot { .. }), "{e}");
            refused += 1;
        }
    }
    assert!(refused > 0);
}

/// A source that fails (or panics) at step `at`, after `at` good steps of a real engine.
struct Failing {
    inner: EngineSource,
    at: u64,
    panic: bool,
}

impl StepSource for Failing {
    fn next_step(&mut self) -> Result<Option<LocalStep>, BoxError> {
        if self.inner.engine().position() == Step(self.at) {
            if self.panic {
                panic!("injected panic");
            }
            return Err("injected failure".into());
        }
        self.inner.next_step()
    }
    fn resume_point(&self) -> ResumePoint {
        self.inner.resume_point()
    }
}

#[test]
fn errors_and_panics_reach_the_caller_at_their_step() {
    for panic in [false, true] {
        let inner = EngineSource::start(spec(3), topology(1, 0), opts()).unwrap();
        let mut pre = Prefetcher::start(Failing { inner, at: 3, panic }, Sink::cpu(), Default::default()).unwrap();
        for _ in 0..3 {
            pre.next_step().unwrap().unwrap();
        }
        let e = pre.next_step().unwrap_err();
        let text = e.to_string();
        if panic {
            assert!(
                matches!(e, Error::Worker(_)) && text.contains("injected panic") && text.contains("step 3"),
                "{text}"
            );
        } else {
            assert!(matches!(e, Error::Source { step: Step(3), .. }) && text.contains("injected failure"), "{text}");
        }
        assert!(matches!(pre.next_step(), Err(Error::Worker(_))), "the worker is gone");
        assert_eq!(pre.position(), Step(3), "the checkpoint stays after the last good step");
    }
}

/// Runs `f` on a thread and fails the test if it has not returned within a generous guard.
fn returns_within_guard(what: &str, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(120)).unwrap_or_else(|_| panic!("{what} hung"));
}

/// An endless source whose every step takes a while (a loader that blocks in `next_step`).
struct Slow(EngineSource);

impl StepSource for Slow {
    fn next_step(&mut self) -> Result<Option<LocalStep>, BoxError> {
        std::thread::sleep(Duration::from_millis(300));
        self.0.next_step()
    }
    fn resume_point(&self) -> ResumePoint {
        self.0.resume_point()
    }
}

#[test]
fn dropping_mid_run_returns() {
    // An endless run: the worker is waiting to hand over a step when the prefetcher goes.
    returns_within_guard("drop with a full queue", || {
        let source = EngineSource::start(spec(1_000_000), topology(1, 0), opts()).unwrap();
        let mut pre = Prefetcher::start(source, Sink::cpu(), PrefetchOptions { depth: 2, microbatch: None }).unwrap();
        pre.next_step().unwrap().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        drop(pre);
    });
    // The worker is inside the source's `next_step` when the prefetcher goes.
    returns_within_guard("drop inside next_step", || {
        let source = Slow(EngineSource::start(spec(1_000_000), topology(1, 0), opts()).unwrap());
        let mut pre = Prefetcher::start(source, Sink::cpu(), PrefetchOptions { depth: 3, microbatch: None }).unwrap();
        pre.next_step().unwrap().unwrap();
        drop(pre);
    });
}

#[test]
fn the_end_of_data_counts_as_a_step() {
    let mut engine = Engine::start(spec(1), topology(1, 0), opts()).unwrap();
    let mut pre = Prefetcher::start(
        EngineSource::start(spec(1), topology(1, 0), opts()).unwrap(),
        Sink::cpu(),
        Default::default(),
    )
    .unwrap();
    while engine.next_step().unwrap().is_some() {
        assert!(pre.next_step().unwrap().is_some());
    }
    assert!(pre.next_step().unwrap().is_none());
    assert_eq!(pre.position(), engine.position());
    assert!(engine.next_step().unwrap().is_none());
    assert!(pre.next_step().unwrap().is_none());
    assert_eq!(pre.position(), engine.position());
}

#[test]
fn a_depth_of_zero_is_refused() {
    let source = EngineSource::start(spec(1), topology(1, 0), opts()).unwrap();
    let e = Prefetcher::start(source, Sink::cpu(), PrefetchOptions { depth: 0, microbatch: None }).err().unwrap();
    assert!(matches!(e, Error::Config(_)), "{e}");
}
