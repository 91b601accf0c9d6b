//! zephon-vision against real files and an independent oracle (Pillow in the test-data venv).
//!
//! Needs `scripts/fetch-testdata.sh`; without the data these tests skip unless
//! `ZEPHON_REQUIRE_TESTDATA` is set (as `scripts/test.sh` sets it), in which case they fail.

mod data;
mod edge;
mod pillow;
mod qwen;
mod robustness;
#[cfg(feature = "turbojpeg")]
mod turbo;
