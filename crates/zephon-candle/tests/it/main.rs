//! zephon-candle's tests: one binary (every test binary is a link of candle).

mod convert;
mod packed;
mod prefetch;
