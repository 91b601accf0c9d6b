//! zephon-pack's integration tests, one binary.

mod common;
mod engine;
mod fill;
mod layout;
mod restore;
