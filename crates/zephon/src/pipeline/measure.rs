//! What a pipeline measures of its data before a run: tokens per row (estimates), each row's
//! tokens for a balanced end of finite data; measured once per host and cached
//! (`crate::measured`).

use super::*;

impl Pipeline {
    /// The text field of each dataset, in order (`text` for a dataset without one).
    pub(super) fn text_fields(&self) -> Vec<String> {
        self.mixture.datasets.iter().map(|d| d.options.fields.text.clone().unwrap_or_else(|| "text".into())).collect()
    }

    /// Measures tokens per row with the pipeline's tokenizer (or, without a tokenize step, with
    /// the first operator that counts tokens: chat), or reuses the estimate cached for exactly
    /// these datasets, tokenizer and sampling settings (every rank of a launch would otherwise
    /// measure the same thing; measuring is deterministic, so the cache is too).
    pub(super) fn estimate(&self, datasets: &Datasets, operators: &Operators) -> Result<Vec<TokenEstimate>> {
        let cfg = EstimateOptions { seed: self.seed, threads: self.exec.threads.max(1), ..self.mixture.estimate };
        #[cfg(feature = "text")]
        {
            if let Some(t) = &self.tokenize {
                // As the run will have it: its long documents settled by the packer after it.
                let packer = self
                    .stages
                    .iter()
                    .map(|op| op.offer())
                    .find_map(|o| Some((o.row_length?, o.truncates_to.is_some())));
                let t = t.settled(packer).map_err(|e| Error::Build(e.to_string()))?;
                let tokenizer = t.tokenizer().clone();
                let by = ("tokenizer", tokenizer.sha256().to_string());
                let count = move |s: &str| tokenizer.count(s).map_err(|e| e.to_string());
                let mut estimates = measure(datasets, by, self.text_fields(), cfg, &count)?;
                let kept = t.truncates_to().map(|m| m as f64);
                for e in &mut estimates {
                    (e.added_per_row, e.max_tokens_per_row) = (t.tokens_added() as f64, kept);
                }
                return Ok(estimates);
            }
        }
        let Some(counter) = operators.operators().iter().find_map(|op| op.offer().counts_tokens) else {
            return Err(Error::Build(
                "token shares and chunk_tokens need a tokenize step, or an operator that counts tokens (chat without \
                 images), to estimate tokens per row (or use sample weights and chunk_size)"
                    .into(),
            ));
        };
        let fields = vec![counter.field().to_string(); datasets.len()];
        let by = ("counter", counter.settings().to_hex());
        // A conversation is counted whole: a window of its JSON text is not a conversation.
        let cfg = EstimateOptions { max_token_bytes: usize::MAX, ..cfg };
        measure(datasets, by, fields, cfg, &move |s: &str| Ok(counter.count(s)))
    }
}

/// The estimates of `datasets` (dataset i's text in `fields[i]`) counted by `count`, measured
/// once per host and cached under everything they depend on: the data, what counts (`by`:
/// the tokenizer's SHA-256, or the counting operator's settings), the fields and the sampling.
fn measure(
    datasets: &Datasets,
    by: (&str, String),
    fields: Vec<String>,
    cfg: EstimateOptions,
    count: &(dyn Fn(&str) -> std::result::Result<usize, String> + Sync),
) -> Result<Vec<TokenEstimate>> {
    let key = zephon_operator::Settings::new("token-estimates", 1)
        .set("datasets", datasets.fingerprint())
        .set(by.0, by.1)
        .set("fields", fields.clone())
        .set("length_rows", cfg.length_rows)
        .set("token_rows", cfg.token_rows)
        .set("max_token_bytes", cfg.max_token_bytes)
        .set("seed", cfg.seed)
        .set("quantiles", zephon_mix::ROW_QUANTILES)
        .digest()
        .to_hex()[..32]
        .to_string();
    let field_refs: Vec<&str> = fields.iter().map(String::as_str).collect();
    crate::measured::once(
        &format!("{key}.json"),
        |b| serde_json::from_slice(b).ok(),
        |e| serde_json::to_vec(e).unwrap_or_default(),
        || Ok(zephon_mix::estimate(datasets, &field_refs, count, cfg)?),
    )
}

impl Pipeline {
    /// How the end of the data is shared among lanes: as asked, or by counted row tokens
    /// where they can be measured (a text pipeline) and cost little (small data).
    pub(super) fn balance(&self, datasets: &Datasets) -> Result<Balance> {
        let m = &self.mixture;
        // Row measures are of the text: they need a tokenize step, and images would not count.
        let measurable = self.tokenizes() && !self.has_images();
        let stored: u64 = datasets.manifests().iter().map(|d| d.bytes()).sum();
        Ok(match m.balance {
            _ if m.config.exhaustion == Exhaustion::Repeat => Balance::Estimates,
            None if measurable && stored <= ROW_TOKENS_BY_DEFAULT => Balance::RowTokens,
            None | Some(Balance::Estimates) => Balance::Estimates,
            Some(b) if measurable => b,
            Some(b) => {
                return Err(Error::Build(format!(
                    "balance {b:?} measures each row's text: it needs a tokenize step and no images (use Estimates)"
                )));
            }
        })
    }

    /// Each row's tokens, counted (`RowTokens`) or from its text's bytes (`RowSizes`), as the
    /// estimates `e` say a row keeps them, for sharing out the end of finite data.
    pub(super) fn row_tokens(
        &self,
        datasets: &Datasets,
        e: &[TokenEstimate],
        balance: Balance,
    ) -> Result<Vec<Vec<u32>>> {
        let counted = balance == Balance::RowTokens;
        let sizes = self.row_sizes(datasets, counted)?;
        Ok(sizes
            .iter()
            .zip(e)
            .map(|(rows, e)| {
                let kept = |n: u32| if counted { e.tokens_kept(f64::from(n)) } else { e.tokens_in(f64::from(n)) };
                rows.iter().map(|&n| kept(n).round() as u32).collect()
            })
            .collect())
    }

    /// Whether the pipeline has a tokenize step.
    pub(super) fn tokenizes(&self) -> bool {
        #[cfg(feature = "text")]
        return self.tokenize.is_some();
        #[cfg(not(feature = "text"))]
        false
    }

    /// Whether an operator of the pipeline decodes attachments (images).
    pub(super) fn has_images(&self) -> bool {
        self.stages.iter().any(|op| op.offer().decodes.is_some())
    }

    /// The text bytes of every row (`tokens`: the tokens of its text), or the ones cached for
    /// exactly these datasets, fields (and tokenizer): measuring costs a pass over the data's
    /// text (and a pass of tokenizing), and every rank would repeat it.
    pub(super) fn row_sizes(&self, datasets: &Datasets, tokens: bool) -> Result<Vec<Vec<u32>>> {
        #[cfg(feature = "text")]
        {
            let tokenizer = self.tokenize.as_ref().map(|t| t.tokenizer().clone());
            let fields = self.text_fields();
            let measure = match (&tokenizer, tokens) {
                (Some(t), true) => zephon_operator::Settings::new("row-tokens", 1).set("tokenizer", t.sha256()),
                _ => zephon_operator::Settings::new("row-bytes", 1),
            };
            let key = measure.set("datasets", datasets.fingerprint()).set("fields", fields.clone()).digest();
            let rows: Vec<u64> = datasets.manifests().iter().map(|m| m.rows()).collect();
            let refs: Vec<&str> = fields.iter().map(String::as_str).collect();
            let clamp = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
            let threads = self.exec.threads.max(1);
            crate::measured::once(
                &format!("{}.rows", &key.to_hex()[..32]),
                |b| decode_row_sizes(b, &rows),
                |sizes| encode_row_sizes(sizes),
                || {
                    Ok(match (&tokenizer, tokens) {
                        (Some(t), true) => zephon_mix::row_sizes(
                            datasets,
                            &refs,
                            &|s| t.count(s).map(clamp).map_err(|e| e.to_string()),
                            threads,
                        )?,
                        _ => zephon_mix::row_sizes(datasets, &refs, &|s| Ok(clamp(s.len())), threads)?,
                    })
                },
            )
        }
        #[cfg(not(feature = "text"))]
        {
            let _ = (datasets, tokens);
            Err(Error::Build("row sizes need a tokenize step".into()))
        }
    }
}

/// Row sizes as saved: little-endian u32s, then their SHA-256. Ranks that read different sizes
/// would share out the end differently, so a file whose checksum does not match is measured
/// again.
#[cfg(feature = "text")]
fn encode_row_sizes(sizes: &[Vec<u32>]) -> Vec<u8> {
    let mut encoded: Vec<u8> = sizes.iter().flatten().flat_map(|b| b.to_le_bytes()).collect();
    let sum = zephon_operator::Digest::of(&encoded);
    encoded.extend_from_slice(&sum.0);
    encoded
}

/// Row sizes saved by [`Pipeline::row_sizes`], if they fit datasets of `rows` rows.
#[cfg(feature = "text")]
fn decode_row_sizes(bytes: &[u8], rows: &[u64]) -> Option<Vec<Vec<u32>>> {
    let (bytes, sum) = bytes.split_at_checked(bytes.len().checked_sub(32)?)?;
    if bytes.len() as u64 != rows.iter().sum::<u64>() * 4 || zephon_operator::Digest::of(bytes).0[..] != *sum {
        return None;
    }
    let mut all = bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    Some(rows.iter().map(|&n| all.by_ref().take(n as usize).collect()).collect())
}

#[cfg(all(test, feature = "text"))]
mod tests {
    use super::{decode_row_sizes, encode_row_sizes};

    /// A saved row-size file is used only whole and unchanged: a flipped byte or a file for
    /// other data is measured again, not trusted.
    #[test]
    fn row_sizes_are_read_back_only_when_their_checksum_holds() {
        let file = encode_row_sizes(&[vec![3], vec![1400, 17, 9]]);
        assert_eq!(decode_row_sizes(&file, &[1, 3]), Some(vec![vec![3], vec![1400, 17, 9]]));
        assert_eq!(decode_row_sizes(&file, &[1, 2]), None, "other data");
        let mut flipped = file.clone();
        flipped[5] ^= 1;
        assert_eq!(decode_row_sizes(&flipped, &[1, 3]), None, "a flipped byte");
        assert_eq!(decode_row_sizes(&file[..10], &[1, 3]), None, "a cut file");
        assert_eq!(decode_row_sizes(&[], &[]), None, "no checksum");
    }
}
