//! Integration tests of the lane core. One binary (every test binary is a link on 2 cores).

mod checkpoint_errors;
mod common;
mod huge;
mod invariants;
mod liveness;
mod multiprocess;
mod records;
mod schedule;
mod split;
