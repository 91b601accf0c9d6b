//! Token estimates: how many tokens a row of each dataset holds, as a run planned with them.
//!
//! Plain data, so that a checkpoint can carry the estimates a run planned with and a restore
//! plans with the same numbers instead of measuring again (`zephon-mix` measures them).

use serde::{Deserialize, Serialize};

/// Tokens per row of one dataset, as measured or declared.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenEstimate {
    /// The dataset.
    pub dataset: String,
    /// Mean text bytes per row.
    pub bytes_per_row: f64,
    /// Tokens per text byte.
    pub tokens_per_byte: f64,
    /// Rows whose length was read (0 for a declared ratio).
    pub rows_measured: u64,
    /// Rows tokenized (0 for a declared ratio).
    pub rows_tokenized: u64,
    /// Tokens the tokenizer adds to every row and that are not in its text (BOS, EOS). One
    /// EOS is 7 % of a 15-token document: left out, a short-document dataset would get that
    /// much more than its share of the plan.
    pub added_per_row: f64,
    /// Text bytes per row at evenly spaced quantiles of the measured rows (the midpoints of
    /// [`ROW_QUANTILES`] equal slices): enough of the distribution to tell what truncation keeps.
    /// Empty for a declared ratio (no rows measured), and then left out of the saved estimate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub row_bytes_quantiles: Vec<f64>,
    /// The most tokens a row keeps (a tokenizer that truncates long documents), added tokens
    /// included. Set by the pipeline, like `added_per_row`; left out of the saved estimate
    /// when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens_per_row: Option<f64>,
}

/// How many quantiles of row length an estimate keeps.
pub const ROW_QUANTILES: usize = 64;

impl TokenEstimate {
    /// Expected tokens in one row. With truncation, the mean of what each quantile of row
    /// length keeps: a dataset of 3,500-token documents cut to 1,024 delivers 1,024 a row,
    /// and planning it by its whole documents would give it a third of its share. Without
    /// quantiles (a declared ratio), the mean row is cut.
    pub fn tokens_per_row(&self) -> f64 {
        if self.row_bytes_quantiles.is_empty() || self.max_tokens_per_row.is_none() {
            return self.tokens_in(self.bytes_per_row);
        }
        let kept: f64 = self.row_bytes_quantiles.iter().map(|&b| self.tokens_in(b)).sum();
        kept / self.row_bytes_quantiles.len() as f64
    }

    /// Expected tokens of one row of `bytes` text bytes: what tokenize delivers of it (added
    /// tokens included, cut where it truncates).
    pub fn tokens_in(&self, bytes: f64) -> f64 {
        self.tokens_kept(bytes * self.tokens_per_byte)
    }

    /// What tokenize delivers of a row whose text is `tokens` tokens: the added tokens with
    /// it, cut where it truncates.
    pub fn tokens_kept(&self, tokens: f64) -> f64 {
        let whole = tokens + self.added_per_row;
        self.max_tokens_per_row.map_or(whole, |max| whole.min(max))
    }
}
