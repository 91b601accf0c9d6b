//! Ranks as separate OS processes, started together: the one launcher that `zephon verify`
//! and the tests' multi-process runs share. Each rank process writes a hash log of its lanes'
//! digests; the launcher gathers them into one [`HashLog`], whose steps combine the lanes of
//! every rank.

use std::path::PathBuf;
use std::process::Command;

use crate::HashLog;
use crate::error::{Error, Result};

/// One rank process: its command (program, arguments and environment, as the caller sets
/// them) and the hash log it writes.
#[derive(Debug)]
pub struct RankProcess {
    /// What to run.
    pub command: Command,
    /// The hash log the process writes.
    pub log: PathBuf,
}

/// Starts every rank process at once (they run side by side, as ranks do), waits for all and
/// gathers their hash logs. A process that fails, or a log that is missing or unreadable, is
/// an error naming the rank (a failed process's own error went to its stderr).
pub fn run_ranks(ranks: Vec<RankProcess>) -> Result<HashLog> {
    let launch = Error::Launch;
    let mut children = Vec::with_capacity(ranks.len());
    for (r, mut p) in ranks.into_iter().enumerate() {
        let child = p.command.spawn().map_err(|e| {
            launch(format!("rank {r}: cannot start {}: {e}", p.command.get_program().to_string_lossy()))
        })?;
        children.push((r, p.log, child));
    }
    // Every child is waited for, even after one failed, so that none is left running.
    let mut failed = Vec::new();
    let mut logs = Vec::new();
    for (r, log, mut child) in children {
        match child.wait() {
            Ok(status) if status.success() => logs.push((r, log)),
            _ => failed.push(r),
        }
    }
    if !failed.is_empty() {
        return Err(launch(format!("rank process(es) {failed:?} failed (their errors are above)")));
    }
    let mut out = HashLog::new();
    for (r, path) in logs {
        let text = std::fs::read_to_string(&path).map_err(|e| launch(format!("rank {r}: {}: {e}", path.display())))?;
        out.add_text(&text).map_err(|e| launch(format!("rank {r}: {}: {e}", path.display())))?;
    }
    Ok(out)
}
