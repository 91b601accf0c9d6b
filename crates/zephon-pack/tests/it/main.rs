//! zephon-pack's integration tests, one binary.

mod attachments;
mod common;
mod engine;
mod fill;
mod layout;
mod restore;
