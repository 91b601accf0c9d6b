//! TokenEstimation: how many tokens a row of each dataset holds, so that sample quotas can be
//! planned to deliver *tokens* in the declared shares.
//!
//! Mean row length is heavy-tailed (a corpus of long documents can hold one 100× the median),
//! so two samples are taken per dataset:
//! - a large uniform sample of rows whose text lengths are read (cheap: no tokenizing), for
//!   the mean bytes per row;
//! - a small size-proportional sample of bytes (systematic PPS over the cumulative text
//!   bytes of those rows): around each sampled byte a word-aligned window is tokenized, for
//!   tokens per byte. Tokens per byte varies little, so few windows give a tight ratio; a
//!   window around a uniformly chosen byte (not a document's prefix) does not favour the
//!   beginnings of documents, which are often unlike their bodies (titles, headers).
//!
//! The estimates are plain data: store them with the checkpoint so a restore never
//! re-measures (and cannot measure differently).

use zephon_core::Datasets;
pub use zephon_core::{ROW_QUANTILES, TokenEstimate};
use zephon_operator::{OpError, RngKey, SampleId};

use crate::error::{Error, Result};
use crate::order::{DatasetOrder, Order, RowOrder};

/// Text bytes of `lengths` at the midpoints of `ROW_QUANTILES` equal slices.
fn quantiles(mut lengths: Vec<u64>) -> Vec<f64> {
    lengths.sort_unstable();
    let n = lengths.len();
    if n == 0 {
        return Vec::new();
    }
    (0..ROW_QUANTILES).map(|q| lengths[((2 * q + 1) * n / (2 * ROW_QUANTILES)).min(n - 1)] as f64).collect()
}

/// How much to sample.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct EstimateOptions {
    /// Rows per dataset whose text length is read (all rows when fewer).
    pub length_rows: u64,
    /// Windows per dataset tokenized, at bytes chosen uniformly over the sampled text.
    pub token_rows: u64,
    /// Bytes per tokenized window (cut to whitespace so no word is split).
    pub max_token_bytes: usize,
    /// Seed of the row choice.
    pub seed: u64,
    /// Threads that tokenize.
    pub threads: usize,
}

impl Default for EstimateOptions {
    fn default() -> Self {
        EstimateOptions { length_rows: 20_000, token_rows: 1024, max_token_bytes: 2048, seed: 0, threads: 1 }
    }
}

/// A declared tokens-per-byte ratio instead of a measurement. Bytes per row come from the
/// manifest (stored bytes: an approximation for compressed or JSON-wrapped text).
pub fn declared(manifest: &zephon_core::DatasetManifest, tokens_per_byte: f64) -> TokenEstimate {
    TokenEstimate {
        dataset: manifest.name.clone(),
        bytes_per_row: manifest.bytes() as f64 / manifest.rows().max(1) as f64,
        tokens_per_byte,
        rows_measured: 0,
        rows_tokenized: 0,
        added_per_row: 0.0,
        row_bytes_quantiles: Vec::new(),
        max_tokens_per_row: None,
    }
}

/// Measures every dataset of `datasets`, reading dataset i's text from field `text_fields[i]` and counting tokens with
/// `count_tokens`. Rows that are bad records are left out of the sample.
pub fn estimate(
    datasets: &Datasets,
    text_fields: &[&str],
    count_tokens: &(dyn Fn(&str) -> std::result::Result<usize, String> + Sync),
    config: EstimateOptions,
) -> Result<Vec<TokenEstimate>> {
    let manifests = datasets.manifests();
    if text_fields.len() != manifests.len() {
        return Err(Error::Config(format!(
            "token estimation needs one text field per dataset: {} datasets, {} fields",
            manifests.len(),
            text_fields.len()
        )));
    }
    manifests
        .iter()
        .zip(text_fields)
        .enumerate()
        .map(|(d, (manifest, field))| estimate_one(datasets, d as u32, manifest, field, count_tokens, config))
        .collect()
}

fn estimate_one(
    datasets: &Datasets,
    d: u32,
    manifest: &zephon_core::DatasetManifest,
    text_field: &str,
    count_tokens: &(dyn Fn(&str) -> std::result::Result<usize, String> + Sync),
    config: EstimateOptions,
) -> Result<TokenEstimate> {
    let fail = |m: String| Error::Estimate { dataset: manifest.name.clone(), message: m };
    let order = DatasetOrder::new(d, manifest, Order { shuffle_shards: false, rows: RowOrder::Global }, config.seed);
    let n = order.rows().min(config.length_rows);
    let mut ids: Vec<SampleId> = (0..n).map(|i| order.sample(0, i)).collect();
    ids.sort_unstable();
    // Read texts in batches of one shard (Datasets groups consecutive ids of a shard).
    let mut texts: Vec<(SampleId, String)> = Vec::with_capacity(ids.len());
    for batch in ids.chunks(1024) {
        for (id, r) in batch.iter().zip(datasets.read(batch)) {
            match r {
                Ok(rec) => {
                    if let Some(t) = rec.str(text_field) {
                        texts.push((*id, t.to_string()));
                    }
                }
                Err(OpError::Data(_)) => {}
                Err(OpError::Fatal(m)) => return Err(fail(format!("{id}: {m}"))),
            }
        }
    }
    if texts.is_empty() {
        return Err(fail("no readable rows to measure".into()));
    }
    let total: u64 = texts.iter().map(|(_, t)| t.len() as u64).sum();
    let bytes_per_row = total as f64 / texts.len() as f64;
    if total == 0 {
        return Err(fail("every sampled row is empty".into()));
    }
    // Systematic PPS: evenly spaced points over the cumulative bytes, from a seeded start.
    let k = config.token_rows.max(1);
    let step = total as f64 / k as f64;
    let first = RngKey::new(config.seed, "token-estimate").with(d as u64).unit_at(0) * step;
    let mut picks: Vec<&str> = Vec::with_capacity(k as usize);
    let mut cum = 0f64;
    let mut next = first;
    for (_, t) in &texts {
        let start = cum;
        cum += t.len() as f64;
        while next < cum && (picks.len() as u64) < k {
            picks.push(window(t, (next - start) as usize, config.max_token_bytes));
            next += step;
        }
    }
    let ratios = count_in_threads(&picks, count_tokens, config.threads.max(1)).map_err(fail)?;
    let tokens_per_byte = ratios.iter().sum::<f64>() / ratios.len().max(1) as f64;
    Ok(TokenEstimate {
        dataset: manifest.name.clone(),
        bytes_per_row,
        tokens_per_byte,
        rows_measured: texts.len() as u64,
        rows_tokenized: picks.len() as u64,
        added_per_row: 0.0,
        row_bytes_quantiles: quantiles(texts.iter().map(|(_, t)| t.len() as u64).collect()),
        max_tokens_per_row: None,
    })
}

/// About `size` bytes of `t` around byte `at`, cut at whitespace so no word is split (the
/// whole text when it is short).
fn window(t: &str, at: usize, size: usize) -> &str {
    if t.len() <= size {
        return t;
    }
    let mut start = at.saturating_sub(size / 2).min(t.len() - size);
    let mut end = start + size;
    while start > 0 && !t.is_char_boundary(start) {
        start -= 1;
    }
    while end < t.len() && !t.is_char_boundary(end) {
        end += 1;
    }
    let slice = &t[start..end];
    let first_space = if start == 0 { Some(0) } else { slice.find(char::is_whitespace) };
    let last_space = if end == t.len() { Some(slice.len()) } else { slice.rfind(char::is_whitespace) };
    match (first_space, last_space) {
        (Some(a), Some(b)) if a < b => &slice[a..b],
        _ => slice,
    }
}

/// Tokens per byte of each text, counted on `threads` threads.
fn count_in_threads(
    texts: &[&str],
    count: &(dyn Fn(&str) -> std::result::Result<usize, String> + Sync),
    threads: usize,
) -> std::result::Result<Vec<f64>, String> {
    let per = texts.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = texts
            .chunks(per)
            .map(|part| {
                s.spawn(move || {
                    part.iter()
                        .filter(|t| !t.is_empty())
                        .map(|t| count(t).map(|n| n as f64 / t.len() as f64))
                        .collect::<std::result::Result<Vec<f64>, String>>()
                })
            })
            .collect();
        let mut out = Vec::new();
        for h in handles {
            out.extend(h.join().map_err(|_| "a token-counting thread panicked".to_string())??);
        }
        Ok(out)
    })
}

/// Sample weights that deliver tokens in `token_shares` (any positive scale): a dataset's
/// weight is its token share divided by its tokens per row.
pub fn weights_for_token_shares(estimates: &[TokenEstimate], token_shares: &[f64]) -> Result<Vec<f64>> {
    if estimates.len() != token_shares.len() {
        return Err(Error::Config(format!("{} estimates but {} token shares", estimates.len(), token_shares.len())));
    }
    estimates
        .iter()
        .zip(token_shares)
        .map(|(e, &s)| {
            let per_row = e.tokens_per_row();
            if s > 0.0 && !(per_row.is_finite() && per_row > 0.0) {
                return Err(Error::Config(format!("dataset {}: estimated {per_row} tokens per row", e.dataset)));
            }
            Ok(if s > 0.0 { s / per_row } else { 0.0 })
        })
        .collect()
}

#[cfg(test)]
mod truncation_tests {
    use super::*;

    fn estimate(lengths: Vec<u64>, max: Option<f64>) -> TokenEstimate {
        TokenEstimate {
            dataset: "d".into(),
            bytes_per_row: lengths.iter().sum::<u64>() as f64 / lengths.len() as f64,
            tokens_per_byte: 0.25,
            rows_measured: lengths.len() as u64,
            rows_tokenized: 0,
            added_per_row: 1.0,
            row_bytes_quantiles: quantiles(lengths),
            max_tokens_per_row: max,
        }
    }

    #[test]
    fn truncation_keeps_the_mean_of_what_each_row_keeps() {
        // Half the rows 400 bytes (101 tokens), half 40,000 (10,001): cut to 1,024 tokens a
        // row keeps on average (101 + 1,024) / 2, not min(mean, 1,024).
        let lengths: Vec<u64> = (0..1000).map(|i| if i % 2 == 0 { 400 } else { 40_000 }).collect();
        let e = estimate(lengths.clone(), Some(1024.0));
        assert!((e.tokens_per_row() - 562.5).abs() < 1.0, "{}", e.tokens_per_row());
        let whole = estimate(lengths, None);
        assert!((whole.tokens_per_row() - 5051.0).abs() < 1e-9, "{}", whole.tokens_per_row());
        // Without quantiles (a declared ratio) the mean row is cut.
        let unquantiled = TokenEstimate { row_bytes_quantiles: Vec::new(), ..e };
        assert_eq!(unquantiled.tokens_per_row(), 1024.0);
        assert_eq!(quantiles(Vec::new()), Vec::<f64>::new());
        assert_eq!(quantiles(vec![7]), vec![7.0; ROW_QUANTILES]);
    }
}
