//! Prefetch by the schedule: the engine knows which samples each lane reads next and says so
//! ([`zephon_core::Dataset::prefetch`]); the readers turn samples into byte ranges, and this
//! module fetches the blocks those ranges lie in, ahead of the reads, in the order they were
//! hinted.
//!
//! - Bounded: `prefetch_requests` threads, each holding at most one block in memory, so at
//!   most that many requests are in flight; a bounded queue of hints, and a hint that finds
//!   it full is dropped (the read fetches the block itself, as without prefetch).
//! - Never a second fetch: a block being prefetched is locked in the cache, so a read that
//!   wants it waits for it; one already in the cache is not fetched again.
//! - Never a different byte: a prefetched block is the block a read would have fetched (same
//!   version, same range, the same checks).

use std::collections::HashSet;
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::RemoteObject;

/// One block of one object to bring into the cache.
struct Job {
    object: Arc<RemoteObject>,
    index: u64,
}

/// Blocks queued or being fetched, by object version and index: a hint for one is dropped.
type Pending = Arc<Mutex<HashSet<(String, u64)>>>;

/// The process's prefetch threads and their queue.
pub(crate) struct Prefetcher {
    queue: SyncSender<Job>,
    pending: Pending,
}

impl Prefetcher {
    /// The process's prefetcher, started with `threads` threads on first use; `None` when
    /// prefetch is off (0 threads) or its threads cannot start.
    pub(crate) fn get(threads: usize) -> Option<&'static Prefetcher> {
        static PREFETCHER: OnceLock<Option<Prefetcher>> = OnceLock::new();
        PREFETCHER.get_or_init(|| Prefetcher::start(threads)).as_ref()
    }

    fn start(threads: usize) -> Option<Prefetcher> {
        if threads == 0 {
            return None;
        }
        let (queue, jobs) = sync_channel::<Job>(threads * 32);
        let jobs = Arc::new(Mutex::new(jobs));
        let pending = Pending::default();
        for k in 0..threads {
            let (jobs, pending) = (jobs.clone(), pending.clone());
            std::thread::Builder::new()
                .name(format!("zephon-prefetch-{k}"))
                .spawn(move || {
                    loop {
                        let job = jobs.lock().unwrap_or_else(PoisonError::into_inner).recv();
                        let Ok(Job { object, index }) = job else { return };
                        // A failure is left to the read, which tries again and reports it.
                        let _ = object.ensure_block(index);
                        // Fetched (or failed): a later hint may queue it again.
                        lock(&pending).remove(&(object.version.clone(), index));
                    }
                })
                .ok()?;
        }
        Some(Prefetcher { queue, pending })
    }

    /// Queues the blocks `first..=last` of `object` that are neither cached nor queued, while
    /// fewer than `most` are pending: what was fetched ahead and not read yet stays a bounded
    /// part of the cache, so that it never evicts itself.
    pub(crate) fn hint(&self, object: &Arc<RemoteObject>, blocks: std::ops::RangeInclusive<u64>, most: usize) {
        for index in blocks {
            if object.block_known(index) {
                continue;
            }
            let key = (object.version.clone(), index);
            {
                let mut pending = lock(&self.pending);
                if pending.len() >= most {
                    return;
                }
                if !pending.insert(key.clone()) {
                    continue;
                }
            }
            match self.queue.try_send(Job { object: object.clone(), index }) {
                Ok(()) => {}
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                    lock(&self.pending).remove(&key);
                    return;
                }
            }
        }
    }
}

fn lock(p: &Pending) -> std::sync::MutexGuard<'_, HashSet<(String, u64)>> {
    p.lock().unwrap_or_else(PoisonError::into_inner)
}
