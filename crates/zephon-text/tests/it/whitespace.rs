//! Long runs (a million spaces, newlines, digits...): the regex behind `tokenizers` fails on
//! them; both engines must still give the right ids, and the same ones.

use serde_json::json;
use zephon_text::Tokenizer;

use super::{crafted, data, gpt2, gpt2_slow};

const M: usize = 1_000_000;

/// The unmodified `tokenizers` crate on the GPT-2 file.
fn raw() -> tokenizers::Tokenizer {
    tokenizers::Tokenizer::from_file(data("tokenizers/gpt2/tokenizer.json")).unwrap()
}

fn raw_ids(text: &str) -> Vec<u32> {
    raw().encode_fast(text, false).unwrap().get_ids().to_vec()
}

fn concat(parts: &[&str]) -> Vec<u32> {
    parts.iter().flat_map(|p| gpt2().encode(p).unwrap()).collect()
}

/// Both engines and the reference agree on `text`; returns the ids.
fn agree(text: &str, slow: &Tokenizer) -> Vec<u32> {
    let fast = gpt2().encode(text).unwrap();
    // `assert!`, not `assert_eq!`: a million ids would flood the output.
    assert!(fast == gpt2().encode_reference(text).unwrap(), "fast path vs reference");
    assert!(fast == slow.encode(text).unwrap(), "fast path vs the tokenizers engine");
    let decoded = raw().decode(&fast, false).unwrap();
    assert!(decoded == text, "the ids decode back to the text");
    fast
}

#[test]
fn a_million_spaces_or_newlines_then_a_word() {
    let slow = gpt2_slow();
    let spaces = " ".repeat(M);
    // A run that ends the text is one piece; the unmodified tokenizers crate finds no match
    // at all there and also keeps it whole, so it is an independent check of the merges.
    assert!(agree(&spaces, &slow) == raw_ids(&spaces));
    let newlines = "\n".repeat(M - 1);
    assert!(agree(&newlines, &slow) == raw_ids(&newlines));

    // Followed by a word, the run loses its last character to the word's piece (a space
    // joins the word, a newline stands alone): `\s+(?!\S)`.
    let text = format!("Hello{spaces}world");
    assert!(agree(&text, &slow) == concat(&["Hello", &" ".repeat(M - 1), " world"]));
    let text = format!("x{}y", "\n".repeat(M));
    let ids = agree(&text, &slow);
    assert!(ids == concat(&["x", &newlines, "\n", "y"]));
    assert!(ids != raw_ids(&text), "the premise: the tokenizers crate gets this wrong, silently");
}

#[test]
fn mixed_whitespace_runs_followed_by_words() {
    let slow = gpt2_slow();
    let run = " \t\n\u{a0}\r\n\u{3000} ".repeat(M / 8);
    agree(&format!("{run}word{run} word"), &slow);
    let run = &run[..run.len() / 8];
    for tail in ["\u{a0}x", "!", "7", "'s", "\n"] {
        agree(&format!("{run}{tail}{run}"), &slow);
    }
    // Many runs of ordinary length in one document.
    let mut text = String::new();
    for n in 0..2000 {
        text.push_str(&" ".repeat(n % 97));
        text.push_str(["a", "\n", "1", "\t\t", ".", "'ll"][n % 6]);
    }
    agree(&text, &slow);
}

#[test]
fn long_runs_of_letters_digits_and_punctuation() {
    let slow = gpt2_slow();
    for (unit, n) in [
        ("a", M),
        ("7", M),
        ("!", M),
        ("é", M / 20),
        ("日", M / 20),
        ("\u{301}", M / 20),
        ("🙂", M / 20),
        ("ab1. ", M / 20),
        ("'s", M / 20),
    ] {
        let text = format!("x {} y", unit.repeat(n / unit.len()));
        agree(&text, &slow);
    }
}

/// Runs of every kind and length next to each other, against tiktoken's r50k_base: an
/// encoder that shares no code with this crate (its regex handles these lengths).
#[test]
fn runs_equal_tiktoken() {
    let tiktoken = tiktoken_rs::r50k_base().unwrap();
    let tok = gpt2();
    let units = [" ", "\n", "\t", "\r\n", "\u{a0}", "a", "7", "!", "é", "'s", "'S", " x"];
    let mut seed = 1u64;
    for n in [1usize, 2, 3, 5, 8, 17, 64, 65, 300, 1500] {
        let mut text = String::new();
        for _ in 0..12 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            text.push_str(&units[(seed >> 33) as usize % units.len()].repeat(n));
        }
        let want: Vec<u32> = tiktoken.encode_ordinary(&text).into_iter().collect();
        assert_eq!(tok.encode(&text).unwrap(), want, "{text:?}");
        assert_eq!(tok.encode_reference(&text).unwrap(), want);
    }
}

/// A pattern the crate has no hand-written equivalent for: where its regex fails, the
/// `tokenizers` engine reports an error instead of returning wrong ids.
#[test]
fn an_unknown_pattern_that_fails_is_an_error_not_wrong_ids() {
    let (_dir, path) = crafted(|j| {
        j["pre_tokenizer"] = json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\s+(?!\\S)|\\s+|\\S+"}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]});
    });
    let tok = Tokenizer::from_file(&path).unwrap();
    assert!(tok.engine().contains("needs backtracking"), "{}", tok.engine());
    let raw = tokenizers::Tokenizer::from_file(&path).unwrap();
    assert_eq!(tok.encode("Hello  world").unwrap(), raw.encode_fast("Hello  world", false).unwrap().get_ids());
    let err = tok.encode(&format!("a{}b", " ".repeat(M))).unwrap_err();
    assert!(err.to_string().contains("silently"), "{err}");
}

/// The real files whose pre-tokenizer is a `Split` regex of the `\s+(?!\S)` family: on the
/// `tokenizers` engine, a million spaces or newlines still give the right pieces.
#[test]
fn split_regex_files_handle_a_million_spaces_and_newlines() {
    for name in ["llama3", "gpt4o", "deepseek_v3", "qwen3"] {
        let path = data(&format!("tokenizers/{name}/tokenizer.json"));
        let tok = Tokenizer::from_file(&path).unwrap();
        let enc = |t: &str| tok.encode(t).unwrap();
        let raw = tokenizers::Tokenizer::from_file(&path).unwrap();
        let spaces = " ".repeat(M - 1);
        let newlines = "\n".repeat(M);
        // Whole runs are one piece each: the BPE model of the tokenizers crate on the piece is
        // an independent check of the merges.
        assert!(enc(&spaces) == model_ids(&raw, &spaces), "{name}");
        assert!(enc(&newlines) == model_ids(&raw, &newlines), "{name}");
        if name == "gpt4o" {
            // The premise: its inverted Split keeps only regex matches, and a failed regex
            // has none, so the unmodified crate silently drops the whole run.
            assert!(raw.encode_fast(spaces.as_str(), false).unwrap().get_ids().is_empty());
        }
        // A space run gives its last space to the word after it; a newline run stays whole.
        let got = enc(&format!("Hello {spaces}world"));
        assert!(got == [enc("Hello"), enc(&spaces), enc(" world")].concat(), "{name}");
        let got = enc(&format!("x{newlines}y"));
        assert!(got == [enc("x"), enc(&newlines), enc("y")].concat(), "{name}");
    }
}

/// The ids the `tokenizers` crate's BPE model gives `piece` as one pre-token (bytes mapped to
/// GPT-2's byte symbols as `ByteLevel` does).
fn model_ids(raw: &tokenizers::Tokenizer, piece: &str) -> Vec<u32> {
    use tokenizers::Model;
    let mut chars = Vec::new();
    let mut n = 0;
    for b in 0..=255u32 {
        let printable = (33..=126).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
        chars.push(if printable {
            char::from_u32(b).unwrap()
        } else {
            n += 1;
            char::from_u32(255 + n).unwrap()
        });
    }
    let mapped: String = piece.bytes().map(|b| chars[b as usize]).collect();
    raw.get_model().tokenize(&mapped).unwrap().iter().map(|t| t.id).collect()
}
