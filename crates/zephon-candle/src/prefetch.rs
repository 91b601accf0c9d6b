//! Steps built (and uploaded) on a background thread while the trainer works, with
//! checkpoints that stay at the trainer's step.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

use zephon_operator::Step;

use crate::error::{Error, Result};
use crate::sink::Sink;
use crate::source::{ResumePoint, StepSource};
use crate::step::StepTensors;

/// How far ahead, and how each step is cut.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PrefetchOptions {
    /// Steps held ready ahead of the trainer (at least 1): the worker blocks when this many
    /// wait, one of them in its hands.
    pub depth: usize,
    /// Cut each step into microbatches of this many rows (`None`: one batch per step).
    pub microbatch: Option<usize>,
}

impl Default for PrefetchOptions {
    fn default() -> Self {
        PrefetchOptions { depth: 2, microbatch: None }
    }
}

/// What the worker sends: a step with the checkpoint after it, or the error that stopped it.
enum Message {
    Step { tensors: Option<StepTensors>, after: ResumePoint },
    Failed(Error),
}

/// Runs a [`StepSource`] on its own thread and turns its next steps into tensors ahead of the
/// trainer.
///
/// **Checkpoints stay at the trainer's step.** The worker takes the source's resume point
/// right after each step it pulls and sends it along with the step's tensors. The prefetcher
/// keeps the one of the last step the trainer took, so [`Prefetcher::position`] and
/// [`Prefetcher::checkpoint`] ignore the steps waiting in the queue: a restore from that
/// checkpoint delivers them again, exactly as an uninterrupted run would.
///
/// **Stopping.** Dropping the prefetcher raises a stop flag and drops the queue's receiving
/// end: a worker waiting to hand a step over wakes and exits, and one inside the source's
/// `next_step` exits when that returns (the stop flag is read before every step). The drop
/// then joins the worker, so the source (and its threads) are gone when it returns.
///
/// **Errors** from the source, the conversion, or a panic in either reach the caller at the
/// step where they happened; the worker stops there, and later calls say so.
pub struct Prefetcher {
    rx: Option<Receiver<Message>>,
    stop: Arc<AtomicBool>,
    worker: Option<JoinHandle<()>>,
    current: ResumePoint,
}

impl Prefetcher {
    /// Starts the worker on `source`, building tensors with `sink`.
    pub fn start<S: StepSource>(source: S, sink: Sink, options: PrefetchOptions) -> Result<Self> {
        if options.depth == 0 {
            return Err(Error::Config("prefetch depth must be at least 1".into()));
        }
        let current = source.resume_point();
        // The worker holds one finished step while it waits to hand it over: depth - 1 more
        // wait in the channel.
        let (tx, rx) = sync_channel(options.depth - 1);
        let stop = Arc::new(AtomicBool::new(false));
        let worker_stop = stop.clone();
        let at = current.next_step();
        let worker = std::thread::Builder::new()
            .name("zephon-candle-prefetch".into())
            .spawn(move || work(source, sink, options.microbatch, at, tx, worker_stop))
            .map_err(|e| Error::Worker(format!("cannot start the prefetch thread: {e}")))?;
        Ok(Prefetcher { rx: Some(rx), stop, worker: Some(worker), current })
    }

    /// The next step's tensors, or `None` where the rank's input has ended (counted as a
    /// step, as the engine does). Waits only when the worker is behind.
    pub fn next_step(&mut self) -> Result<Option<StepTensors>> {
        let Some(rx) = &self.rx else {
            return Err(Error::Worker("the worker stopped after an error returned earlier".into()));
        };
        match rx.recv() {
            Ok(Message::Step { tensors, after }) => {
                self.current = after;
                Ok(tensors)
            }
            Ok(Message::Failed(e)) => {
                self.shut_down();
                Err(e)
            }
            Err(_) => {
                self.shut_down();
                Err(Error::Worker("the worker ended without a word".into()))
            }
        }
    }

    /// The next step the trainer will get: one past the last it took, however many steps are
    /// prefetched.
    pub fn position(&self) -> Step {
        self.current.next_step()
    }

    /// The checkpoint after the last step the trainer took, in memory.
    pub fn resume_point(&self) -> &ResumePoint {
        &self.current
    }

    /// Writes this rank's checkpoint after the last step the trainer took into `dir`.
    pub fn checkpoint(&self, dir: &Path) -> Result<PathBuf> {
        self.current.write(dir)
    }

    fn shut_down(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Dropping the receiver wakes a worker blocked handing over a step.
        drop(self.rx.take());
        if let Some(w) = self.worker.take() {
            // A panic was already caught and reported as a step's error.
            let _ = w.join();
        }
    }
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        self.shut_down();
    }
}

impl Iterator for Prefetcher {
    type Item = Result<StepTensors>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_step().transpose()
    }
}

fn work<S: StepSource>(
    mut source: S,
    sink: Sink,
    microbatch: Option<usize>,
    mut at: Step,
    tx: SyncSender<Message>,
    stop: Arc<AtomicBool>,
) {
    while !stop.load(Ordering::Acquire) {
        let made = catch_unwind(AssertUnwindSafe(|| produce(&mut source, &sink, microbatch, at)));
        let message = match made {
            Ok(Ok((tensors, after))) => {
                at = after.next_step();
                Message::Step { tensors, after }
            }
            Ok(Err(e)) => Message::Failed(e),
            Err(panic) => Message::Failed(Error::Worker(format!("panicked at {at}: {}", panic_text(&*panic)))),
        };
        let failed = matches!(message, Message::Failed(_));
        // A send fails only when the prefetcher is gone.
        if tx.send(message).is_err() || failed {
            break;
        }
    }
}

fn produce<S: StepSource>(
    source: &mut S,
    sink: &Sink,
    microbatch: Option<usize>,
    at: Step,
) -> Result<(Option<StepTensors>, ResumePoint)> {
    let step = source.next_step().map_err(|source| Error::Source { step: at, source })?;
    // Before the next `next_step` replaces it: the state a checkpoint after this step holds.
    let after = source.resume_point();
    let tensors = step.map(|s| sink.step(s, microbatch)).transpose()?;
    Ok((tensors, after))
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

impl std::fmt::Debug for Prefetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prefetcher").field("running", &self.worker.is_some()).finish_non_exhaustive()
    }
}
