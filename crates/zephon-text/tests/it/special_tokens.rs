//! Special tokens written inside document text: text by default, control tokens on request,
//! the same on both engines.

use proptest::prelude::*;
use zephon_operator::Operator;
use zephon_text::{Tokenize, Tokenizer};

use super::{data, doc, gpt2, gpt2_slow, ids};

const EOS: u32 = 50256;

#[test]
fn special_tokens_in_text_are_text_by_default_on_both_engines() {
    let text = "hello<|endoftext|>world";
    let ordinary: Vec<u32> = tiktoken_rs::r50k_base().unwrap().encode_ordinary(text).into_iter().collect();
    assert!(!ordinary.contains(&EOS));
    for tok in [gpt2(), gpt2_slow()] {
        assert!(!tok.special_tokens_in_text());
        assert_eq!(tok.encode(text).unwrap(), ordinary, "{}", tok.engine());
        assert_eq!(tok.encode_reference(text).unwrap(), ordinary);
        assert_eq!(tok.encode_prefix(text, 2).unwrap().0[..2], ordinary[..2]);
    }
    assert!(gpt2_slow().engine().starts_with("tokenizers crate"));
}

#[test]
fn the_opt_in_makes_them_control_tokens_on_both_engines() {
    let text = "hello<|endoftext|>world";
    for tok in [gpt2(), gpt2_slow()] {
        let tok = tok.allow_special_tokens_in_text(true);
        assert!(tok.special_tokens_in_text());
        assert_eq!(tok.encode(text).unwrap(), [31373, EOS, 6894], "{}", tok.engine());
        assert_eq!(tok.encode_reference(text).unwrap(), [31373, EOS, 6894]);
        // And back.
        let off = tok.allow_special_tokens_in_text(false);
        assert!(!off.encode(text).unwrap().contains(&EOS));
    }
}

#[test]
fn the_operator_adds_its_own_eos_whatever_the_mode() {
    let t = Tokenize::new(gpt2()).eos("<|endoftext|>").unwrap();
    let mut out = Vec::new();
    t.apply(doc("a<|endoftext|>b"), &mut out).unwrap();
    let got = ids(&out[0]);
    assert_eq!(got.iter().filter(|&&i| i == EOS).count(), 1, "{got:?}");
    assert_eq!(got.last(), Some(&EOS));
}

#[test]
fn non_special_added_tokens_stay_tokens_in_text() {
    // Qwen3: `<|im_start|>` is special, `<tool_call>` is not.
    let tok = Tokenizer::from_file(&data("tokenizers/qwen3/tokenizer.json")).unwrap();
    let (im_start, tool_call) = (tok.token_id("<|im_start|>").unwrap(), tok.token_id("<tool_call>").unwrap());
    let text = "<|im_start|>user\nrun <tool_call>{\"a\": 1}</tool_call>";
    let default = tok.encode(text).unwrap();
    assert!(!default.contains(&im_start) && default.contains(&tool_call), "{default:?}");
    let raw = {
        let mut t = tokenizers::Tokenizer::from_file(data("tokenizers/qwen3/tokenizer.json")).unwrap();
        t.set_encode_special_tokens(true);
        t.encode_fast(text, false).unwrap().get_ids().to_vec()
    };
    assert_eq!(default, raw);
    let on = tok.allow_special_tokens_in_text(true).encode(text).unwrap();
    assert_eq!(on[0], im_start);
}

fn text_strategy() -> impl Strategy<Value = String> {
    let atoms = prop::sample::select(vec![
        "a",
        " ",
        "hello",
        " world",
        "\n",
        "<|endoftext|>",
        "<|endoftext",
        "|>",
        "<|",
        "endoftext",
        "'s",
        "1",
    ]);
    prop::collection::vec(atoms, 0..30).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
    #[test]
    fn fast_path_equals_tokenizers_in_both_modes(text in text_strategy(), special in any::<bool>()) {
        let fast = gpt2().allow_special_tokens_in_text(special);
        let slow = gpt2_slow().allow_special_tokens_in_text(special);
        let want = slow.encode(&text).unwrap();
        prop_assert_eq!(fast.encode(&text).unwrap(), want.clone());
        prop_assert_eq!(fast.encode_reference(&text).unwrap(), want.clone());
        prop_assert_eq!(want.contains(&EOS), special && text.contains("<|endoftext|>"));
    }
}
