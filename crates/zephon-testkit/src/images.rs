//! Test operators for records that carry attachments: a byte "tokenizer" that turns each `#`
//! of the text into an atomic image span with a shaped pixel array, and a splitter that cuts
//! documents into pieces without cutting an image.

use std::sync::Arc;

use zephon_core::*;
use zephon_operator::*;

/// The placeholder token of an image.
pub const IMAGE: u32 = 257;

/// Byte tokens plus EOS, where each `#` becomes `span_len(k)` [`IMAGE`] tokens carrying image
/// `k`: an atomic attachment with a `pixels` array of shape `[h, w, 3]` (sizes and values drawn
/// from the sample id and `k`), and a per-token `weights` Seq of shape `[n, 2]`.
///
/// `transpose` swaps `h` and `w` in the shape while keeping the same bytes: a pipeline that
/// differs only in an array's shape.
pub struct ImageTokenize {
    pub transpose: bool,
}

/// Placeholder tokens of image `k`: 1 to 4.
pub fn span_len(k: u32) -> u32 {
    1 + (k * 7 + 3) % 4
}

fn pixels(sample: SampleId, k: u32, transpose: bool) -> Array {
    let key = RngKey::new(0, "test-image")
        .with(sample.dataset as u64)
        .with(sample.shard as u64)
        .with(sample.row)
        .with(k as u64);
    let h = 1 + key.below_at(0, 4) as usize;
    let w = 1 + key.below_at(1, 5) as usize;
    let data: Vec<u8> = (0..h * w * 3).map(|i| key.at(2 + i as u64) as u8).collect();
    let shape = if transpose { [w, h, 3] } else { [h, w, 3] };
    Array::with_shape(data, shape).expect("h·w·3 elements")
}

impl Operator for ImageTokenize {
    fn name(&self) -> &str {
        "image-tokenize"
    }
    fn fingerprint(&self) -> Settings {
        Settings::new("bytes+images", 1).set("transpose", self.transpose)
    }
    fn apply(&self, mut record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        let text = match record.take("text") {
            Some(Value::Str(t)) => t,
            _ => return Err(OpError::Data("no text field".into())),
        };
        let sample = record.lineage().first_sample().ok_or_else(|| OpError::Fatal("no lineage".into()))?;
        let mut ids = Vec::with_capacity(text.len() + 1);
        let mut k = 0;
        for b in text.bytes() {
            if b == b'#' {
                let n = span_len(k);
                let span = Span::at(ids.len() as u32, n).ok_or_else(|| OpError::Fatal("span overflow".into()))?;
                ids.extend(std::iter::repeat_n(IMAGE, n as usize));
                record.attach(
                    Attachment::new(&"image".into(), k)
                        .placed(span, true)
                        .with(&"pixels".into(), Value::Array(pixels(sample, k, self.transpose))),
                );
                k += 1;
            } else {
                ids.push(u32::from(b));
            }
        }
        ids.push(crate::EOS);
        let n = ids.len();
        let weights: Vec<f32> = (0..n * 2).map(|i| i as f32 * 0.5).collect();
        record.set(&"weights".into(), Value::Seq(Array::with_shape(weights, [n, 2]).expect("n·2 elements")));
        record.set(&"tokens".into(), Value::seq(ids));
        record.set_lineage(Lineage::single(Fragment::span(sample, Span::prefix(n as u32))));
        out.push(record);
        Ok(())
    }
}

/// Cuts each record into pieces of at most `max` tokens, moving a cut back before an image it
/// would fall inside ([`Record::piece_ends`]); pieces are views, nothing is copied.
pub struct Split {
    pub max: usize,
}

impl Operator for Split {
    fn name(&self) -> &str {
        "split"
    }
    fn fingerprint(&self) -> Settings {
        Settings::new("max", 1).set("max", self.max)
    }
    fn apply(&self, record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        let mut start = 0;
        for end in record.piece_ends(self.max)? {
            out.push(record.slice(start, end).map_err(OpError::fatal)?);
            start = end;
        }
        Ok(())
    }
}

/// `docs` documents of words and `#` images, split over 3 shards, from `seed`.
pub fn image_corpus(docs: usize, max_words: u64, seed: u64) -> Datasets {
    const WORDS: [&str; 8] = ["lane", "#", "step", "seed", "#", "rank", "pack", "row"];
    let key = RngKey::new(seed, "test-image-corpus");
    let texts: Vec<String> = (0..docs as u64)
        .map(|d| {
            let n = 1 + key.with(d).below_at(0, max_words);
            (0..n)
                .map(|w| WORDS[key.with(d).below_at(w + 1, WORDS.len() as u64) as usize])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let per = texts.len().div_ceil(3);
    let shards: Vec<Vec<String>> = texts.chunks(per.max(1)).map(|c| c.to_vec()).collect();
    Datasets::new(vec![Arc::new(MemoryDataset::from_texts("images", "text", shards))])
}

/// Every image a row carries, as (sample, item): the sample is the one whose segment holds it.
pub fn images_of(row: &Record) -> Vec<(SampleId, u32)> {
    let fragments = row.lineage().fragments();
    row.attachments()
        .iter()
        .map(|a| {
            let segment = match a.get("segment") {
                Some(Value::Int(s)) => *s as usize,
                // An unpacked record has one fragment.
                _ => 1,
            };
            (fragments[segment - 1].sample, a.item())
        })
        .collect()
}
