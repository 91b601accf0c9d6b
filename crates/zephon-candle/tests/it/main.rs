//! zephon-candle's tests: one binary (every test binary is a link of candle).

mod convert;
#[cfg(feature = "cuda")]
mod cuda;
mod packed;
mod prefetch;
