//! Checking a spec's determinism in one process: every rank of a world size as a [`Loader`],
//! driven by the core's rank runner ([`Ranks`]), whose global steps must be the same at every
//! world size, thread count and resume. `zephon demo` and the facade's tests use it.

use std::path::Path;

pub use zephon_core::testing::{Rank, Ranks, RanksError, fingerprint, fingerprint_through_microbatches};

use crate::{Error, Loader, Spec};

/// A loader is a rank as an engine is: the runner drives both with one loop.
impl Rank for Loader {
    type Error = Error;

    fn next_step(&mut self) -> Result<Option<zephon_core::LocalStep>, Error> {
        Loader::next_step(self)
    }

    fn position(&self) -> zephon_operator::Step {
        Loader::position(self)
    }

    fn checkpoint(&self, dir: &Path) -> Result<(), Error> {
        Loader::checkpoint(self, dir).map(|_| ())
    }
}

/// Loaders of `spec` for ranks `0..w`, each with `threads` worker threads (instead of the
/// spec's: threads never change the data), started, or restored from the checkpoint in
/// `resume`.
pub fn loaders(spec: &Spec, w: u32, threads: usize, resume: Option<&Path>) -> Result<Ranks<Loader>, RanksError<Error>> {
    Ranks::start(w, |rank| {
        let mut exec = spec.exec();
        exec.threads = threads;
        let pipeline = spec.pipeline()?.exec(exec);
        let topology = spec.topology(w, rank)?;
        match resume {
            Some(dir) => pipeline.restore(topology, dir),
            None => pipeline.build(topology),
        }
    })
}
