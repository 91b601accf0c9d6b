//! Settings of a tokenizer.json that would change lengths or make ids random.

use serde_json::json;
use zephon_text::{Error, Tokenizer};

use super::{corpus, crafted, gpt2};

/// A real document of more than 1,800 GPT-2 tokens.
fn long_document() -> String {
    let tok = gpt2();
    corpus(1 << 20).into_iter().find(|t| tok.count(t).unwrap() > 1800).expect("a long document")
}

#[test]
fn truncation_is_cleared_on_both_engines_and_noted() {
    let (_dir, path) = crafted(|j| {
        j["truncation"] = json!({"direction": "Right", "max_length": 512, "strategy": "LongestFirst", "stride": 0})
    });
    let doc = long_document();
    let full = gpt2().encode(&doc).unwrap();
    // The premise: the tokenizers crate applies the file's truncation.
    let raw = tokenizers::Tokenizer::from_file(&path).unwrap();
    assert!(raw.encode_fast(doc.as_str(), false).unwrap().len() < full.len());

    let tok = Tokenizer::from_file(&path).unwrap();
    assert_eq!(tok.engine(), "byte-level BPE, exact fast path");
    assert_eq!(tok.encode(&doc).unwrap(), full);
    assert_eq!(tok.encode_reference(&doc).unwrap(), full);
    assert!(tok.inner().get_truncation().is_none());
    assert_eq!(tok.load_notes().len(), 1, "{:?}", tok.load_notes());
    let note = &tok.load_notes()[0];
    assert!(note.starts_with("truncation (max_length 512") && note.contains("cleared"), "{note}");
    assert!(gpt2().load_notes().is_empty());
}

#[test]
fn padding_is_cleared_on_both_engines_and_noted() {
    let (_dir, path) = crafted(|j| {
        j["padding"] = json!({"strategy": {"Fixed": 4096}, "direction": "Right", "pad_to_multiple_of": null,
            "pad_id": 50256, "pad_type_id": 0, "pad_token": "<|endoftext|>"})
    });
    let raw = tokenizers::Tokenizer::from_file(&path).unwrap();
    assert_eq!(raw.encode_fast("Hello world", false).unwrap().len(), 4096, "the premise: tokenizers pads");

    let tok = Tokenizer::from_file(&path).unwrap();
    assert_eq!(tok.encode("Hello world").unwrap(), [15496, 995]);
    assert_eq!(tok.encode_reference("Hello world").unwrap(), [15496, 995]);
    let doc = long_document();
    assert_eq!(tok.encode_reference(&doc).unwrap(), gpt2().encode(&doc).unwrap());
    let note = tok.load_notes().join("\n");
    assert!(note.starts_with("padding (to 4096 tokens") && note.contains("cleared"), "{note}");
}

#[test]
fn both_settings_cleared_on_a_file_off_the_fast_path() {
    let (_dir, path) = crafted(|j| {
        j["normalizer"] = json!({"type": "Strip", "strip_left": false, "strip_right": false});
        j["truncation"] = json!({"direction": "Left", "max_length": 7, "strategy": "LongestFirst", "stride": 0});
        j["padding"] = json!({"strategy": "BatchLongest", "direction": "Left", "pad_to_multiple_of": 64,
            "pad_id": 0, "pad_type_id": 0, "pad_token": "!"});
    });
    let tok = Tokenizer::from_file(&path).unwrap();
    assert!(tok.engine().starts_with("tokenizers crate"), "{}", tok.engine());
    let doc = long_document();
    assert_eq!(tok.encode(&doc).unwrap(), gpt2().encode(&doc).unwrap());
    assert_eq!(tok.load_notes().len(), 2);
}

#[test]
fn dropout_is_refused_with_the_file_and_the_setting() {
    let (_dir, path) = crafted(|j| j["model"]["dropout"] = json!(0.1));
    // The premise: with dropout, the tokenizers crate gives different ids from run to run.
    let raw = tokenizers::Tokenizer::from_file(&path).unwrap();
    let text = "Determinism is the product. ".repeat(50);
    let runs: std::collections::HashSet<Vec<u32>> =
        (0..5).map(|_| raw.encode_fast(text.as_str(), false).unwrap().get_ids().to_vec()).collect();
    assert!(runs.len() > 1);

    let err = Tokenizer::from_file(&path).unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()) && msg.contains("dropout 0.1"), "{msg}");
    for off in [json!(null), json!(0.0)] {
        let (_dir, path) = crafted(|j| j["model"]["dropout"] = off);
        assert!(Tokenizer::from_file(&path).is_ok());
    }
}

#[test]
fn the_fingerprint_names_the_hash_the_engine_and_the_special_token_mode() {
    let tok = gpt2();
    let f = tok.fingerprint();
    assert!(
        f.to_text().contains(tok.sha256())
            && f.to_text().contains(tok.engine())
            && f.to_text().contains("special_tokens_in_text=false"),
        "{f}"
    );
    let on = tok.clone().allow_special_tokens_in_text(true).fingerprint();
    assert_ne!(on, f);
    let (_dir, path) = crafted(|j| j["normalizer"] = json!({"type": "NFKC"}));
    let slow = Tokenizer::from_file(&path).unwrap();
    assert!(slow.fingerprint().to_text().contains("no fast path: normalizer NFKC"), "{}", slow.fingerprint());
}
