//! zephon-io integration tests, on the real corpora fetched by `scripts/fetch-testdata.sh`.

mod bad_input;
mod cache;
mod data;
mod formats;
mod images;
mod invariants;
mod parquet_columns;
#[cfg(feature = "remote")]
mod remote;
mod seam;
