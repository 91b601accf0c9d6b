//! The spec sections this wheel registers beyond the built-in tables.
//!
//! A wheel with your own operators: add your operator crate to this crate's `Cargo.toml`,
//! register its section below (`Sections::new().with(your_crate::YourSection)?`), and build the
//! wheel as usual (`maturin build --release -m crates/zephon-py/Cargo.toml`). Every spec the
//! wheel reads (a file, a TOML string or a dict) may then use its table.

use zephon::Sections;

/// The sections specs read by this wheel may use.
pub(crate) fn sections() -> zephon::Result<Sections> {
    Ok(Sections::new())
}
