//! Added tokens that overlap, with mixed `normalized` and `special` flags: the fast path
//! finds the same ones as the `tokenizers` crate.

use proptest::prelude::*;
use serde_json::json;
use zephon_text::Tokenizer;

use super::crafted;

/// (content, normalized, special); ids follow GPT-2's vocabulary.
const ADDED: &[(&str, bool, bool)] = &[
    ("<x>", true, false),
    ("x>y", false, false),
    ("<x>y z", true, false),
    ("y z", false, true),
    ("<|end", true, false),
    ("endof", false, false),
    ("Ω", false, false),
    ("ΩΩ", true, true),
    ("q q", true, false),
    (" z", false, false),
];

fn with_added(added: &[(String, bool, bool)]) -> Tokenizer {
    let (_dir, path) = crafted(|j| {
        let list = j["added_tokens"].as_array_mut().unwrap();
        for (i, (content, normalized, special)) in added.iter().enumerate() {
            list.push(json!({"id": 50257 + i, "content": content, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": normalized, "special": special}));
        }
    });
    let tok = Tokenizer::from_file(&path).unwrap();
    assert_eq!(tok.engine(), "byte-level BPE, exact fast path");
    tok
}

fn mixed() -> Tokenizer {
    static T: std::sync::OnceLock<Tokenizer> = std::sync::OnceLock::new();
    T.get_or_init(|| with_added(&ADDED.iter().map(|(c, n, s)| (c.to_string(), *n, *s)).collect::<Vec<_>>())).clone()
}

fn both_modes(tok: &Tokenizer, text: &str) -> [Vec<u32>; 2] {
    [false, true].map(|special| {
        let t = tok.clone().allow_special_tokens_in_text(special);
        let ids = t.encode(text).unwrap();
        assert!(
            ids == t.encode_reference(text).unwrap(),
            "special tokens in text: {special}, {}",
            &text[..text.len().min(200)]
        );
        ids
    })
}

#[test]
fn non_normalized_tokens_are_found_first() {
    let tok = mixed();
    let id = |t: &str| tok.token_id(t).unwrap();
    // `x>y` (not normalized) wins over `<x>` (normalized) although it starts later.
    let [ids, _] = both_modes(&tok, "<x>y");
    assert_eq!(ids, [tok.encode("<").unwrap()[0], id("x>y")]);
    // `endof` (raw pass) wins over `<|end` (normalized pass), which starts earlier.
    let [ids, _] = both_modes(&tok, "a<|endofx");
    assert!(ids.contains(&id("endof")) && !ids.contains(&id("<|end")), "{ids:?}");
    // Read as text, the special `<|endoftext|>` hides `endof` from the raw pass, and the
    // normalized pass then finds `<|end` in it.
    let [text_mode, control] = both_modes(&tok, "a<|endoftext|>");
    assert!(text_mode.contains(&id("<|end")) && !text_mode.contains(&id("endof")), "{text_mode:?}");
    assert_eq!(control, [tok.encode("a").unwrap()[0], 50256]);
    // A special match read as text stays text and hides what it covers from its own pass
    // (` z` inside `y z`), as in `tokenizers`.
    let [text_mode, control] = both_modes(&tok, "y z");
    assert_eq!(control, [id("y z")]);
    assert_eq!(text_mode, super::gpt2().encode("y z").unwrap());
    let [text_mode, _] = both_modes(&tok, "x z");
    assert_eq!(text_mode, [tok.encode("x").unwrap()[0], id(" z")]);
}

#[test]
fn many_added_tokens() {
    // 3000 distinct tokens sharing prefixes and overlapping each other.
    let added: Vec<(String, bool, bool)> =
        (0..3000).map(|i| (format!("<t{}{}>", i % 97, "z".repeat(i / 97)), i % 3 == 0, i % 7 == 0)).collect();
    let tok = with_added(&added);
    let mut text = String::new();
    for i in 0..5000 {
        text.push_str(&format!("<t{}{}> w{} <t{}", (i * 31) % 113, "z".repeat(i % 37), i % 3, i % 11));
    }
    let [a, b] = both_modes(&tok, &text);
    assert_ne!(a, b);
}

fn text_strategy() -> impl Strategy<Value = String> {
    let atoms = prop::sample::select(vec![
        "<", "x", ">", "y", " ", "z", "<x>", "x>y", "y z", "<|", "end", "of", "text", "|>", "Ω", "q", " q", "\n",
    ]);
    prop::collection::vec(atoms, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
    #[test]
    fn overlapping_added_tokens_equal_tokenizers(text in text_strategy()) {
        both_modes(&mixed(), &text);
    }
}
