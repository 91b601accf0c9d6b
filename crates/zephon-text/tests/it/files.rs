//! Real tokenizer.json files of several families: which engine each one gets (and why), and
//! that its ids equal the `tokenizers` crate's on real text.

use serde_json::json;
use zephon_text::Tokenizer;

use super::{corpus, crafted, data};

const FAST: &str = "byte-level BPE, exact fast path";
const FAST_SPLIT: &str = "byte-level BPE with Split regexes, exact fast path";

/// The ids of the unmodified `tokenizers` crate, special tokens in text read as text.
fn raw_ids(raw: &tokenizers::Tokenizer, text: &str) -> Vec<u32> {
    raw.encode_fast(text, false).unwrap().get_ids().to_vec()
}

/// Loads `path`, checks its engine, and compares it on real text with the unmodified
/// `tokenizers` crate (through `encode` and `check_against_reference`).
fn check(path: &std::path::Path, engine: &str, texts: &[String]) -> Tokenizer {
    let tok = Tokenizer::from_file(path).unwrap();
    assert_eq!(tok.engine(), engine, "{}", path.display());
    let mut raw = tokenizers::Tokenizer::from_file(path).unwrap();
    raw.set_encode_special_tokens(true);
    let mut tokens = 0;
    for text in texts {
        let ids = tok.encode(text).unwrap();
        assert_eq!(ids, raw_ids(&raw, text), "{}: {text:?}", path.display());
        tokens += ids.len();
    }
    let report = tok.check_against_reference(texts);
    assert!(report.is_ok(), "{report}");
    assert_eq!((report.docs, report.tokens), (texts.len(), tokens));
    assert!(tokens > 50_000, "{tokens}");
    tok
}

fn texts() -> Vec<String> {
    static T: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    T.get_or_init(|| corpus(150_000)).clone()
}

#[test]
fn gpt2_takes_the_fast_path() {
    check(&data("tokenizers/gpt2/tokenizer.json"), FAST, &texts());
}

#[test]
fn gpt2_with_truncation_still_takes_the_fast_path() {
    let (_dir, path) = crafted(|j| {
        j["truncation"] = json!({"direction": "Right", "max_length": 100, "strategy": "LongestFirst", "stride": 0})
    });
    let tok = Tokenizer::from_file(&path).unwrap();
    assert_eq!(tok.engine(), FAST);
    let report = tok.check_against_reference(texts());
    assert!(report.is_ok(), "{report}");
}

/// NFC composes `e` + U+0301 into `é` before the merges, on both engines.
#[test]
fn gpt2_with_nfc_takes_the_fast_path() {
    let (_dir, path) = crafted(|j| j["normalizer"] = json!({"type": "NFC"}));
    let tok = check(&path, FAST, &texts());
    let decomposed = "Cafe\u{301} nai\u{308}ve A\u{30a}ngstro\u{308}m <|endoftext|>e\u{301}";
    assert_eq!(tok.encode(decomposed).unwrap(), tok.encode_reference(decomposed).unwrap());
    assert_eq!(
        tok.encode(decomposed).unwrap(),
        super::gpt2()
            .encode(
                &decomposed
                    .replace("e\u{301}", "é")
                    .replace("i\u{308}", "ï")
                    .replace("A\u{30a}", "Å")
                    .replace("o\u{308}", "ö")
            )
            .unwrap()
    );
}

#[test]
fn gpt2_with_nfkc_takes_the_tokenizers_engine() {
    let (_dir, path) = crafted(|j| j["normalizer"] = json!({"type": "NFKC"}));
    check(&path, "tokenizers crate (no fast path: normalizer NFKC)", &texts());
}

#[test]
fn llama2_byte_fallback_sentencepiece_style() {
    check(
        &data("tokenizers/llama2/tokenizer.json"),
        "tokenizers crate (no fast path: normalizer Sequence[Prepend, Replace])",
        &texts(),
    );
}

#[test]
fn qwen3_nfc_normalizer() {
    check(&data("tokenizers/qwen3/tokenizer.json"), FAST_SPLIT, &texts());
}

#[test]
fn llama3_split_regex() {
    check(&data("tokenizers/llama3/tokenizer.json"), FAST_SPLIT, &texts());
}

#[test]
fn gpt4o_inverted_split() {
    check(&data("tokenizers/gpt4o/tokenizer.json"), FAST_SPLIT, &texts());
}

#[test]
fn deepseek_v3_many_added_tokens() {
    let tok = check(&data("tokenizers/deepseek_v3/tokenizer.json"), FAST_SPLIT, &texts());
    // Its added tokens, special or not, inside text.
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(data("tokenizers/deepseek_v3/tokenizer.json")).unwrap()).unwrap();
    let text: String = json["added_tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| format!("x{} ", t["content"].as_str().unwrap()))
        .collect();
    let mut raw = tokenizers::Tokenizer::from_file(data("tokenizers/deepseek_v3/tokenizer.json")).unwrap();
    for special in [false, true] {
        raw.set_encode_special_tokens(!special);
        let t = tok.clone().allow_special_tokens_in_text(special);
        assert_eq!(t.encode(&text).unwrap(), raw_ids(&raw, &text));
    }
}
