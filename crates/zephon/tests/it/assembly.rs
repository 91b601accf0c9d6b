//! Operators state what they need of the pipeline, and the builder assembles a third-party
//! operator by the same loop as the built-in ones, with no knowledge of it.

use std::sync::Arc;

use zephon::operator::{Assembly, OpError, Operator, Record, Settings};
use zephon::*;

fn gpt2() -> Tokenizer {
    Tokenizer::from_file(&zephon_testkit::testdata().join("tokenizers/gpt2/tokenizer.json")).unwrap()
}

fn mixture() -> Mixture {
    let data = zephon_testkit::testdata();
    Mixture::new()
        .dataset(Dataset::new("a", data.join("corpora/a/jsonl")).share(0.5))
        .dataset(Dataset::new("b", data.join("corpora/b/jsonl")).share(0.5))
        .chunk_size(16)
}

/// Drops token ids at or above a bound it learns from the tokenizer before it (a third-party
/// operator: the builder has never heard of it).
#[derive(Clone)]
struct BelowVocab {
    bound: Option<usize>,
}

impl Operator for BelowVocab {
    fn name(&self) -> &str {
        "below_vocab"
    }
    fn fingerprint(&self) -> Settings {
        Settings::new("below_vocab", 1).set("bound", self.bound)
    }
    fn apply(&self, r: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        let bound = self.bound.ok_or_else(|| OpError::Fatal("not assembled".into()))?;
        if let Some(t) = r.get("tokens").and_then(|v| v.as_array()).and_then(|a| a.as_slice::<u32>())
            && t.iter().any(|&id| id as usize >= bound)
        {
            return Err(OpError::Data(format!("a token id is not below {bound}")));
        }
        out.push(r);
        Ok(())
    }
    fn assemble(&self, plan: &Assembly<'_>) -> Result<Option<Arc<dyn Operator>>, OpError> {
        let (_, bound) = plan
            .before(|o| o.vocab_size)
            .ok_or_else(|| OpError::Fatal("below_vocab needs a tokenizer before it".into()))?;
        Ok(Some(Arc::new(BelowVocab { bound: Some(bound) })))
    }
}

#[test]
fn a_third_party_operator_learns_the_vocabulary_from_the_tokenizer_before_it() {
    let tokenize = Tokenize::new(gpt2()).eos("<|endoftext|>").unwrap();
    let pipeline = Pipeline::new(mixture())
        .tokenize(tokenize)
        .then(BelowVocab { bound: None })
        .pack(Pack::new(PackOptions::new(Algorithm::BestFit { bins: 4 }, 256)).unwrap())
        .seed(3)
        .threads(2);
    let topology = Topology::builder().lanes(4).rows_per_step(8).build().unwrap();
    let plan = pipeline.explain(&topology).unwrap();
    assert!(plan.contains("below_vocab/v1 bound=50257"), "{plan}");
    let mut loader = pipeline.build(topology).unwrap();
    for _ in 0..3 {
        assert!(loader.next_step().unwrap().is_some());
    }

    let e = Pipeline::new(mixture())
        .then(BelowVocab { bound: None })
        .build(Topology::builder().lanes(4).rows_per_step(8).build().unwrap());
    let e = e.expect_err("no tokenizer before it").to_string();
    assert!(e.contains("below_vocab: below_vocab needs a tokenizer before it"), "{e}");
}

#[test]
fn ensure_mixture_measures_past_the_packer_after_it_and_needs_shares() {
    let pack = || Pack::new(PackOptions::new(Algorithm::BestFit { bins: 4 }, 256)).unwrap();
    let tokenize = || Tokenize::new(gpt2()).eos("<|endoftext|>").unwrap();
    let topology = Topology::builder().lanes(4).rows_per_step(8).build().unwrap();
    let plan = Pipeline::new(mixture())
        .tokenize(tokenize())
        .ensure_mixture(EnsureMixture::slack_tokens(512))
        .pack(pack())
        .shuffle(Shuffle::buffer(8).unwrap());
    let text = plan.explain(&topology).unwrap();
    // Four open rows of 256 positions: the packer's offer, taken by ensure_mixture; the shuffle
    // after ensure_mixture keeps its slack.
    assert!(text.contains("beyond a standing stock of 1024 tokens"), "{text}");
    assert!(text.contains("keeping each dataset within 512 tokens of its share"), "{text}");

    let weights = Mixture::new()
        .dataset(Dataset::new("a", zephon_testkit::testdata().join("corpora/a/jsonl")).weight(1.0))
        .chunk_size(16);
    let e = Pipeline::new(weights)
        .tokenize(tokenize())
        .ensure_mixture(EnsureMixture::slack_tokens(512))
        .pack(pack())
        .build(topology);
    let e = e.expect_err("weights are not shares").to_string();
    assert!(e.contains("ensure_mixture needs token shares on the datasets"), "{e}");
}
