//! Per-token sources and loss weights through packing: every position's `source_ids` is the
//! dataset its lineage names, its `loss_weights` is `loss_mask` times the weight of its
//! document (the dataset's times the record's), and both are the same at every world size and
//! across a resume.

use std::io::Write;
use std::path::Path;

use zephon_testkit::SpecText;

use crate::*;

const STEPS: u64 = 6;

/// A record's weight in the derived dataset: by its row, so that a test can compute it.
fn quality(row: u64) -> f64 {
    (row % 4) as f64 * 0.5
}

/// Corpus A's first shard with a `quality` field (0, 0.5, 1 or 1.5 by row): real documents
/// with a per-record weight.
fn weighted_corpus(dir: &Path) -> std::path::PathBuf {
    let data = zephon_testkit::testdata();
    let text = std::fs::read_to_string(data.join("corpora/a/jsonl/part-00000.jsonl")).unwrap();
    let path = dir.join("a-weighted.jsonl");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    for (row, line) in text.lines().enumerate() {
        let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
        v["quality"] = serde_json::json!(quality(row as u64));
        writeln!(out, "{v}").unwrap();
    }
    out.flush().unwrap();
    path
}

fn spec_text(dir: &Path) -> SpecText {
    let data = zephon_testkit::testdata();
    SpecText::new(4, 8)
        .seed(21)
        .dataset("a", weighted_corpus(dir))
        .share(0.5)
        .dataset_key("loss_weight", 0.5)
        .dataset_key("loss_weight_field", "quality")
        .dataset("b", data.join("corpora/b/parquet"))
        .share(0.5)
        .dataset_key("loss_weight", 2.0)
        .tokenizer(data.join("tokenizers/gpt2/tokenizer.json"), "<|endoftext|>")
        .pack("best_fit", 256)
        .set("pack", "pad_id", 50256u64)
        .set("pack", "source_ids", true)
        .set("pack", "loss_weights", true)
        .shuffle(4)
        .threads(2)
}

fn column<'a, T: zephon::operator::Element>(row: &'a zephon::operator::Record, name: &str) -> &'a [T] {
    row.get(name).and_then(|v| v.as_array()).and_then(|a| a.as_slice::<T>()).unwrap_or_else(|| panic!("{name}"))
}

#[test]
fn every_position_carries_the_dataset_its_lineage_names_and_its_documents_weight() {
    let dir = tmp();
    let spec = parse(&spec_text(dir.path()).text());
    let mut loader = spec.pipeline().unwrap().build(spec.topology(1, 0).unwrap()).unwrap();
    assert_eq!(loader.dataset_names(), ["a", "b"]);
    let (mut positions, mut weighted, mut padding) = (0usize, [0usize; 2], 0usize);
    for _ in 0..STEPS {
        let step = loader.next_step().unwrap().expect("a step");
        for row in step.rows() {
            let sources = column::<u16>(row, "source_ids");
            let weights = column::<f32>(row, "loss_weights");
            let mask = column::<u8>(row, "loss_mask");
            let segments = column::<i32>(row, "segment_ids");
            let fragments = row.lineage().fragments();
            for i in 0..sources.len() {
                let Some(seg) = usize::try_from(segments[i]).ok().and_then(|s| s.checked_sub(1)) else {
                    assert_eq!((sources[i], weights[i]), (u16::MAX, 0.0), "padding at {i}");
                    padding += 1;
                    continue;
                };
                let sample = fragments[seg].sample;
                assert_eq!(u32::from(sources[i]), sample.dataset, "position {i} of {}", row.lineage());
                let document = match sample.dataset {
                    0 => 0.5 * quality(sample.row) as f32,
                    _ => 2.0,
                };
                assert_eq!(weights[i], f32::from(mask[i]) * document, "position {i} of {}", row.lineage());
                positions += 1;
                if weights[i] > 0.0 {
                    weighted[sample.dataset as usize] += 1;
                }
            }
        }
    }
    assert!(positions > 1000 && weighted.iter().all(|&n| n > 100), "{positions} positions, {weighted:?} weighted");
    assert!(padding < positions, "{padding} padding positions");
}

#[test]
fn the_columns_are_the_same_at_every_world_size_and_across_a_resume() {
    let dir = tmp();
    let spec = parse(&spec_text(dir.path()).text());
    let reference = loaders(&spec, 1, 2, None).steps_exactly(STEPS, zephon::testing::fingerprint).unwrap();
    for w in [2, 4] {
        let got = loaders(&spec, w, 1, None).steps_exactly(STEPS, zephon::testing::fingerprint).unwrap();
        assert_eq!(got, reference, "W = {w}");
    }
    let ckpt = dir.path().join("ckpt");
    let mut first = loaders(&spec, 4, 1, None);
    let head = first.steps_exactly(2, zephon::testing::fingerprint).unwrap();
    first.checkpoint(&ckpt).unwrap();
    drop(first);
    let tail = loaders(&spec, 2, 2, Some(&ckpt)).steps_exactly(STEPS - 2, zephon::testing::fingerprint).unwrap();
    assert_eq!([head, tail].concat(), reference, "a resume 4 → 2");
    // The weights are part of the run: other weights make other steps.
    let other = parse(&spec_text(dir.path()).text().replace("loss_weight = 2.0", "loss_weight = 3.0"));
    let got = loaders(&other, 1, 2, None).steps_exactly(STEPS, zephon::testing::fingerprint).unwrap();
    assert_ne!(got, reference, "a dataset's weight changes the rows");
}

#[test]
fn loss_weights_without_the_column_and_bad_record_weights_are_refused() {
    let dir = tmp();
    let without = spec_text(dir.path()).text().replace("loss_weights = true", "loss_weights = false");
    let err = zephon::Spec::parse(&without, "t.toml", "/".as_ref()).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("dataset a") && err.contains("loss_weights"), "{err}");
    let negative = parse(&spec_text(dir.path()).text().replace("loss_weight = 0.5", "loss_weight = -1.0"));
    let err = match negative.pipeline().and_then(|p| p.build(negative.topology(1, 0).unwrap())) {
        Err(e) => e.to_string(),
        Ok(_) => String::new(),
    };
    assert!(err.contains("dataset a") && err.contains("-1"), "{err}");
    // A record whose weight field holds text is a bad record naming the field.
    let bad =
        parse(&spec_text(dir.path()).text().replace("loss_weight_field = \"quality\"", "loss_weight_field = \"id\""));
    let mut loader = bad.pipeline().unwrap().build(bad.topology(1, 0).unwrap()).unwrap();
    let err = loader.next_step().err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("field `id`") && err.contains("loss weight"), "{err}");
}

#[test]
fn a_builder_pipeline_with_loss_weights_and_no_column_to_carry_them_is_refused() {
    use zephon::{Dataset, Mixture, Pipeline, Tokenize, Tokenizer};
    let data = zephon_testkit::testdata();
    let tokenizer = Tokenizer::from_file(&data.join("tokenizers/gpt2/tokenizer.json")).unwrap();
    let mixture = || Mixture::new().dataset(Dataset::new("a", data.join("corpora/a/jsonl")).loss_weight(0.5));
    let topology = || zephon::Topology::builder().lanes(2).rows_per_step(2).build().unwrap();
    let tokenize = || Tokenize::new(tokenizer.clone()).eos("<|endoftext|>").unwrap();
    // No packer: nothing would carry the weight.
    let err = Pipeline::new(mixture()).tokenize(tokenize()).build(topology()).err().map(|e| e.to_string());
    assert!(err.as_deref().is_some_and(|e| e.contains("dataset a") && e.contains("no packer")), "{err:?}");
    // A packer that does not write the column.
    let pack = zephon::Pack::new(zephon::PackOptions::new(zephon::Algorithm::Wrap, 64)).unwrap();
    let err = Pipeline::new(mixture()).tokenize(tokenize()).pack(pack).build(topology()).err().map(|e| e.to_string());
    assert!(err.as_deref().is_some_and(|e| e.contains("dataset a") && e.contains("loss_weights")), "{err:?}");
}
