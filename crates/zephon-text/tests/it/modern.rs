//! The fast path on today's byte-level BPE families (Split regexes before `ByteLevel`,
//! sometimes NFC): token for token the `tokenizers` crate's ids, on millions of real tokens
//! and on adversarial text.

use proptest::prelude::*;
use zephon_text::Tokenizer;

use super::data;

const FAST_SPLIT: &str = "byte-level BPE with Split regexes, exact fast path";
const FAMILIES: [&str; 4] = ["llama3", "gpt4o", "deepseek_v3", "qwen3"];

fn load(name: &str) -> Tokenizer {
    static T: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, Tokenizer>>> =
        std::sync::OnceLock::new();
    let map = T.get_or_init(Default::default);
    let mut map = map.lock().unwrap();
    map.entry(name.to_string())
        .or_insert_with(|| {
            let tok = Tokenizer::from_file(&data(&format!("tokenizers/{name}/tokenizer.json"))).unwrap();
            assert_eq!(tok.engine(), FAST_SPLIT, "{name}");
            tok
        })
        .clone()
}

/// The unmodified `tokenizers` crate, special tokens in text read as text or not.
fn raw(name: &str, special: bool) -> tokenizers::Tokenizer {
    let mut t = tokenizers::Tokenizer::from_file(data(&format!("tokenizers/{name}/tokenizer.json"))).unwrap();
    t.set_encode_special_tokens(!special);
    t
}

/// Every document of corpora a and b, in order, until `tokens` GPT-2-sized tokens' worth.
fn documents(bytes: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut n = 0;
    'all: for shard in 0..4 {
        for c in ["b", "a"] {
            let text = std::fs::read_to_string(data(&format!("corpora/{c}/jsonl/part-0000{shard}.jsonl"))).unwrap();
            for line in text.lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                let t = v["text"].as_str().unwrap().to_string();
                n += t.len();
                out.push(t);
                if n > bytes {
                    break 'all;
                }
            }
        }
    }
    out
}

fn real_documents(name: &str) {
    let tok = load(name);
    let raw = raw(name, false);
    let mut tokens = 0;
    for (i, doc) in documents(14 << 20).iter().enumerate() {
        let ids = tok.encode(doc).unwrap();
        let want = raw.encode_fast(doc.as_str(), false).unwrap();
        assert!(ids == want.get_ids(), "{name}: document {i} differs");
        tokens += ids.len();
        if tokens > 3_100_000 {
            break;
        }
    }
    assert!(tokens > 3_000_000, "{name}: compared {tokens} tokens");
}

#[test]
fn llama3_real_documents() {
    real_documents("llama3");
}

#[test]
fn gpt4o_real_documents() {
    real_documents("gpt4o");
}

#[test]
fn deepseek_v3_real_documents() {
    real_documents("deepseek_v3");
}

#[test]
fn qwen3_real_documents() {
    real_documents("qwen3");
}

/// Text written to break pre-tokenizers, and every added token of each file inside text.
#[test]
fn adversarial_texts_and_every_added_token() {
    let fixed = [
        "  \n\n \r\n\r\n\t\t x \u{a0}\u{a0}y \u{3000}\u{3000}z\n \n",
        "e\u{301}\u{302} a\u{308}\u{308} \u{301}\u{301}start n\u{303}o Å Å",
        "👩\u{200d}👩\u{200d}👧\u{200d}👦 🏳\u{fe0f}\u{200d}🌈 👍🏽 🇫🇷🇩🇪 a👩\u{200d}💻b",
        "中文字符和標點。日本語のテキスト、カタカナ！한국어 텍스트? 一二三四五六七八九十",
        "עברית שלום, עולם! العربية مرحبا بالعالم ١٢٣٤٥ \u{200f}rtl\u{200e}",
        "1 12 123 1234 12345 1234567890123 ١٢٣٤٥٦ ９８７６５ 1,234,567.89 3.14159e-10",
        "I'm you're he's we'll they'd she've IT'S YOU'RE WE'LL THEY'D I'M It'S 'tis o'clock rock'n'roll '''",
        "camelCaseWord HTTPServerError XMLHttpRequest iPhone eBay McDonald's ǅungla ʰa",
        "path/to/file.rs:12:34 https://example.com/a?b=c&d=e#f <tag attr=\"v\"/> {\"k\": [1, 2]}",
        "tabs\tand\u{b}vertical\u{c}feeds\u{85}nel\u{2028}ls\u{2029}ps end",
        "\r\r\r\n\n\n\r\n  \r  \n  x",
    ];
    for name in FAMILIES {
        let tok = load(name);
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(data(&format!("tokenizers/{name}/tokenizer.json"))).unwrap())
                .unwrap();
        let added: String = json["added_tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| format!("x{}y {} ", t["content"].as_str().unwrap(), t["content"].as_str().unwrap()))
            .collect();
        for special in [false, true] {
            let tok = tok.clone().allow_special_tokens_in_text(special);
            let raw = raw(name, special);
            for text in fixed.iter().copied().chain([added.as_str()]) {
                let ids = tok.encode(text).unwrap();
                assert_eq!(ids, raw.encode_fast(text, false).unwrap().get_ids(), "{name} ({special}): {text:?}");
                assert_eq!(ids, tok.encode_reference(text).unwrap());
            }
        }
    }
}

fn text_strategy() -> impl Strategy<Value = String> {
    let atoms = prop::sample::select(vec![
        "a",
        "B",
        "é",
        "e\u{301}",
        "\u{301}",
        "ǅ",
        "ʰ",
        "日本",
        "カ",
        "한",
        "ש",
        "ع",
        "🙂",
        "👩\u{200d}💻",
        "\u{200d}",
        "\u{fe0f}",
        " ",
        "  ",
        "\n",
        "\r\n",
        "\r",
        "\t",
        "\u{a0}",
        "\u{3000}",
        "'s",
        "'S",
        "'ll",
        "'",
        "1",
        "23",
        "4567",
        "٣",
        "½",
        ",",
        "!!",
        "/",
        "_",
        "-",
        "$",
        "<|endoftext|>",
        "<|im_start|>",
        "<|begin_of_text|>",
        "<｜",
        "｜>",
    ]);
    prop::collection::vec(atoms, 0..50).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 150, ..ProptestConfig::default() })]
    #[test]
    fn random_text_equals_tokenizers(text in text_strategy(), which in 0usize..4, special in any::<bool>()) {
        let tok = load(FAMILIES[which]).allow_special_tokens_in_text(special);
        prop_assert_eq!(tok.encode(&text).unwrap(), tok.encode_reference(&text).unwrap());
    }
}

/// What a restore asks for (`encode_prefix`) is a prefix of the whole encoding, on every
/// family, with added tokens, NFC and Split regexes in the way.
#[test]
fn prefixes_are_prefixes_of_the_whole_encoding() {
    let text = "Hello <|im_start|>wörld e\u{301}  12345 \r\n\n<｜User｜>x'S  ".repeat(40);
    for name in FAMILIES {
        for special in [false, true] {
            let tok = load(name).allow_special_tokens_in_text(special);
            let whole = tok.encode(&text).unwrap();
            for min in [0, 1, 2, 7, 50, whole.len() - 1, whole.len(), whole.len() + 5] {
                let (ids, done) = tok.encode_prefix(&text, min).unwrap();
                assert!(ids.len() >= min.min(whole.len()) && whole.starts_with(&ids), "{name} {min}");
                assert_eq!(done, ids.len() == whole.len(), "{name} {min}");
            }
        }
    }
}
