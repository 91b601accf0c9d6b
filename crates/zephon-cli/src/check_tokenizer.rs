//! `zephon check-tokenizer`: the engine that will tokenize (the exact fast path, or the
//! `tokenizers` crate) against the `tokenizers` crate, on documents of the spec's own datasets.

use std::path::PathBuf;

use zephon::Tokenizer;
use zephon::io::{DatasetOptions, Fields};
use zephon::operator::SampleId;

use crate::CliError;

/// What `check-tokenizer` was asked to do.
#[derive(clap::Args)]
pub struct CheckTokenizerArgs {
    /// The spec whose `[tokenize]` tokenizer and datasets to check.
    #[arg(long)]
    pub spec: PathBuf,
    /// Documents per dataset, spread evenly over its rows.
    #[arg(long, default_value_t = 1000)]
    pub docs: u64,
}

pub fn check_tokenizer(args: &CheckTokenizerArgs) -> Result<(), CliError> {
    let spec = crate::read_spec(&args.spec)?;
    let t = spec.tokenize.as_ref().ok_or_else(|| CliError::Usage("the spec has no [tokenize] section".into()))?;
    let tokenizer = Tokenizer::from_file(&spec.resolve(&t.tokenizer))
        .map_err(zephon::Error::from)?
        .allow_special_tokens_in_text(t.special_tokens_in_text);
    println!("tokenizer {}: {}", tokenizer.source(), tokenizer.engine());
    for note in tokenizer.load_notes() {
        println!("  note: {note}");
    }
    let mut bad = 0;
    for d in &spec.datasets {
        let field = d.text_field.clone().unwrap_or_else(|| "text".into());
        let options = DatasetOptions {
            fields: Fields { text: Some(field.clone()), ..Fields::default() },
            ..DatasetOptions::default()
        };
        let ds = zephon::io::open_layout(&d.name, &spec.layout(d)?, &options).map_err(zephon::Error::from)?;
        let manifest = ds.manifest();
        let total = manifest.rows().max(1);
        let every = (total / args.docs.max(1)).max(1);
        let mut ids = Vec::new();
        let mut at = 0u64;
        for (s, shard) in manifest.shards.iter().enumerate() {
            for row in 0..shard.rows {
                if (at + row).is_multiple_of(every) && (ids.len() as u64) < args.docs {
                    ids.push(SampleId::new(0, s as u32, row));
                }
            }
            at += shard.rows;
        }
        let mut out = Vec::with_capacity(ids.len());
        // One shard's samples at a time, as the dataset reads them.
        for chunk in ids.chunk_by(|a, b| a.shard == b.shard) {
            ds.read(chunk, &mut out);
        }
        let texts: Vec<String> = out.into_iter().filter_map(|r| r.ok()?.str(&field).map(str::to_string)).collect();
        let report = tokenizer.check_against_reference(&texts);
        println!("dataset {}: {report}", d.name);
        if !report.is_ok() {
            bad += 1;
        }
    }
    if bad == 0 {
        println!("OK: the engine equals the tokenizers crate on every document checked");
        Ok(())
    } else {
        Err(CliError::Verify(format!("{bad} dataset(s) tokenize differently from the tokenizers crate")))
    }
}
