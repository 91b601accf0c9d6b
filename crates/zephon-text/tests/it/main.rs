//! The tokenize operator with the real GPT-2 tokenizer.

use zephon_core::Datasets;
use zephon_operator::{Fragment, OpError, Operator, Record, SampleId, Value};
use zephon_text::{LongDocuments, Tokenize, Tokenizer};

mod added_tokens;
mod chat;
mod files;
mod modern;
mod settings;
mod special_tokens;
mod whitespace;

/// A fetched test file.
fn data(path: &str) -> std::path::PathBuf {
    zephon_testkit::testdata().join(path)
}

/// The parsed GPT-2 tokenizer.json, to make modified copies of.
fn gpt2_json() -> serde_json::Value {
    static JSON: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    JSON.get_or_init(|| {
        serde_json::from_slice(&std::fs::read(data("tokenizers/gpt2/tokenizer.json")).unwrap()).unwrap()
    })
    .clone()
}

/// A modified copy of the GPT-2 tokenizer.json written to a temporary directory, and the
/// result of loading it.
fn crafted(edit: impl FnOnce(&mut serde_json::Value)) -> (tempfile::TempDir, std::path::PathBuf) {
    let mut json = gpt2_json();
    edit(&mut json);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    std::fs::write(&path, serde_json::to_vec(&json).unwrap()).unwrap();
    (dir, path)
}

/// GPT-2 forced onto the `tokenizers` engine by a normalizer that does nothing (`Strip` of
/// neither side), which the fast path does not take.
fn gpt2_slow() -> Tokenizer {
    static T: std::sync::OnceLock<Tokenizer> = std::sync::OnceLock::new();
    T.get_or_init(|| {
        let (_dir, path) = crafted(|j| {
            j["normalizer"] = serde_json::json!({"type": "Strip", "strip_left": false, "strip_right": false})
        });
        let tok = Tokenizer::from_file(&path).unwrap();
        assert_eq!(tok.engine(), "tokenizers crate (no fast path: normalizer Strip)");
        tok
    })
    .clone()
}

/// The first texts of corpus `a` and `b` (shard 1), up to about `bytes` bytes each.
fn corpus(bytes: usize) -> Vec<String> {
    let mut out = Vec::new();
    for c in ["a", "b"] {
        let text = std::fs::read_to_string(data(&format!("corpora/{c}/jsonl/part-00001.jsonl"))).unwrap();
        let mut n = 0;
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let t = v["text"].as_str().unwrap().to_string();
            n += t.len();
            out.push(t);
            if n > bytes {
                break;
            }
        }
    }
    out
}

/// Loaded once per test binary (loading parses 50 k merges and runs the fast path's self-check).
fn gpt2() -> Tokenizer {
    static TOKENIZER: std::sync::OnceLock<Tokenizer> = std::sync::OnceLock::new();
    TOKENIZER
        .get_or_init(|| {
            Tokenizer::from_file(&zephon_testkit::testdata().join("tokenizers/gpt2/tokenizer.json")).unwrap()
        })
        .clone()
}

fn doc(text: &str) -> Record {
    Record::from_sample(SampleId::new(1, 2, 3))
        .with(&"text".into(), Value::text(text))
        .with(&"id".into(), Value::Int(9))
}

fn ids(r: &Record) -> &[u32] {
    match r.get("tokens") {
        Some(Value::Seq(a)) if a.as_u32().is_some() => a.as_u32().unwrap_or_default(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn gpt2_ids_eos_and_lineage() {
    let t = Tokenize::new(gpt2()).eos("<|endoftext|>").unwrap();
    let mut out = Vec::new();
    t.apply(doc("Hello world, this is a test."), &mut out).unwrap();
    assert_eq!(ids(&out[0]), &[15496, 995, 11, 428, 318, 257, 1332, 13, 50256]);
    assert_eq!(out[0].lineage().as_single(), Some(&Fragment::range(SampleId::new(1, 2, 3), 0, 9).unwrap()));
    assert!(out[0].get("text").is_none(), "the text is dropped");
    assert_eq!(out[0].get("id"), Some(&Value::Int(9)), "other fields stay");
    let both = Tokenize::new(gpt2()).bos("<|endoftext|>").unwrap().eos("<|endoftext|>").unwrap();
    out.clear();
    both.apply(doc("Hi"), &mut out).unwrap();
    assert_eq!(ids(&out[0]), &[50256, 17250, 50256]);
}

#[test]
fn agrees_with_an_independent_gpt2_encoder_on_real_documents() {
    let reference = tiktoken_rs::r50k_base().unwrap();
    let tok = gpt2();
    let dir = zephon_testkit::testdata().join("corpora");
    let ds = Datasets::new(vec![
        zephon_io::open("a", &dir.join("a/jsonl"), &Default::default()).unwrap(),
        zephon_io::open("b", &dir.join("b/jsonl"), &Default::default()).unwrap(),
    ]);
    let mut checked = 0;
    for (d, step) in [(0u32, 11u64), (1, 13)] {
        let rows = ds.manifests()[d as usize].shards[1].rows;
        let sample: Vec<SampleId> = (0..rows).step_by(step as usize).map(|r| SampleId::new(d, 1, r)).collect();
        for r in ds.read(&sample) {
            let text = r.unwrap().str("text").unwrap().to_string();
            let want: Vec<u32> = reference.encode_ordinary(&text).into_iter().collect();
            assert_eq!(tok.encode(&text).unwrap(), want);
            checked += want.len();
        }
    }
    assert!(checked > 200_000, "compared {checked} tokens");
}

#[test]
fn long_documents_split_into_disjoint_pieces_or_truncate() {
    let text = "word ".repeat(1000);
    let whole = {
        let mut out = Vec::new();
        Tokenize::new(gpt2()).eos("<|endoftext|>").unwrap().apply(doc(&text), &mut out).unwrap();
        ids(&out[0]).to_vec()
    };
    let split = Tokenize::new(gpt2())
        .eos("<|endoftext|>")
        .unwrap()
        .long_documents(LongDocuments::Split { max_tokens: 300 })
        .unwrap();
    let mut out = Vec::new();
    split.apply(doc(&text), &mut out).unwrap();
    assert_eq!(out.len(), whole.len().div_ceil(300));
    let mut joined = Vec::new();
    for (i, piece) in out.iter().enumerate() {
        let f = piece.lineage().as_single().unwrap();
        let p = f.positions().unwrap();
        assert_eq!((p.start() as usize, p.end() as usize), (i * 300, (i * 300 + 300).min(whole.len())));
        joined.extend_from_slice(ids(piece));
    }
    assert_eq!(joined, whole);
    let trunc = Tokenize::new(gpt2()).long_documents(LongDocuments::Truncate { max_tokens: 50 }).unwrap();
    out.clear();
    trunc.apply(doc(&text), &mut out).unwrap();
    assert_eq!(ids(&out[0]), &whole[..50]);
    assert!(Tokenize::new(gpt2()).long_documents(LongDocuments::Split { max_tokens: 0 }).is_err());
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let dir = tempfile_dir();
    let p = dir.join("tokenizer.json");
    std::fs::write(&p, b"{\"truncated\": ").unwrap();
    let e = Tokenizer::from_file(&p).unwrap_err().to_string();
    assert!(e.contains(&p.display().to_string()) && e.contains("not a valid tokenizer.json"), "{e}");
    let e = Tokenizer::from_file(&dir.join("missing.json")).unwrap_err().to_string();
    assert!(e.contains("missing.json"), "{e}");
    assert!(Tokenize::new(gpt2()).eos("<|no such token|>").unwrap_err().to_string().contains("no token"));
    let t = Tokenize::new(gpt2());
    let mut out = Vec::new();
    let no_text = Record::from_sample(SampleId::new(0, 0, 0));
    assert!(matches!(t.apply(no_text, &mut out), Err(OpError::Data(m)) if m.contains("no field")));
    assert!(matches!(t.apply(doc(""), &mut out), Err(OpError::Data(m)) if m.contains("no tokens")));
    let fingerprint = t.fingerprint();
    assert!(fingerprint.to_text().contains(gpt2().sha256()), "the tokenizer's hash is in the fingerprint");
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("zephon-text-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

mod fast_path {
    use proptest::prelude::*;

    use super::gpt2;

    #[test]
    fn gpt2_uses_the_fast_path() {
        assert_eq!(gpt2().engine(), "byte-level BPE, exact fast path");
    }

    #[test]
    fn the_fast_path_equals_tokenizers_on_real_documents() {
        let tok = gpt2();
        let dir = zephon_testkit::testdata().join("corpora");
        let mut tokens = 0;
        for (corpus, every) in [("a", 3usize), ("b", 4)] {
            for shard in 0..4 {
                let text = std::fs::read_to_string(dir.join(format!("{corpus}/jsonl/part-0000{shard}.jsonl"))).unwrap();
                for line in text.lines().step_by(every) {
                    let v: serde_json::Value = serde_json::from_str(line).unwrap();
                    let doc = v["text"].as_str().unwrap();
                    let fast = tok.encode(doc).unwrap();
                    assert_eq!(fast, tok.encode_reference(doc).unwrap(), "{}", v["id"]);
                    tokens += fast.len();
                }
            }
        }
        assert!(tokens > 3_000_000, "compared {tokens} tokens");
    }

    fn text_strategy() -> impl Strategy<Value = String> {
        let atoms = prop::sample::select(vec![
            "a",
            "B",
            "é",
            "ß",
            "日本",
            "🙂",
            " ",
            "  ",
            "\n",
            "\t",
            "\r\n",
            "'s",
            "'ll",
            "'",
            "1",
            "23",
            "4.5",
            ",",
            "!!",
            "<|endoftext|>",
            "<|endoftext",
            "|>",
            "the",
            " the",
            "Ġ",
            "\u{00a0}",
            "\u{200b}",
            "x\u{0301}",
        ]);
        prop::collection::vec(atoms, 0..60).prop_map(|v| v.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]
        #[test]
        fn the_fast_path_equals_tokenizers_on_random_text(text in text_strategy()) {
            let tok = gpt2();
            prop_assert_eq!(tok.encode(&text).unwrap(), tok.encode_reference(&text).unwrap());
        }

        #[test]
        fn long_pieces_use_the_queue_and_still_agree(n in 60usize..700, unit in prop::sample::select(vec!["a", " ", "1", "ab", "é", "-"])) {
            let tok = gpt2();
            let text = unit.repeat(n);
            prop_assert_eq!(tok.encode(&text).unwrap(), tok.encode_reference(&text).unwrap());
        }
    }
}

mod prefix {
    use proptest::prelude::*;
    use zephon_operator::Operator;
    use zephon_text::{LongDocuments, Tokenize};

    use super::{doc, gpt2};

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
        /// What a restore asks for (pieces up to a position) is exactly the start of what a run
        /// produced, and covers that position.
        #[test]
        fn apply_prefix_is_a_prefix_of_apply(
            words in 1usize..900,
            until in 1u32..1500,
            max in prop::sample::select(vec![7usize, 64, 300]),
            bos in any::<bool>(),
            truncate in any::<bool>(),
        ) {
            let text: String = (0..words).map(|i| ["tok ", "en. ", "<|endoftext|>", "naïve ", "12 ", "\n\n"][i % 6]).collect();
            let mut t = Tokenize::new(gpt2()).eos("<|endoftext|>").unwrap();
            if bos {
                t = t.bos("<|endoftext|>").unwrap();
            }
            let policy = if truncate { LongDocuments::Truncate { max_tokens: max } } else { LongDocuments::Split { max_tokens: max } };
            let t = t.long_documents(policy).unwrap();
            let (mut full, mut part) = (Vec::new(), Vec::new());
            t.apply(doc(&text), &mut full).unwrap();
            t.apply_prefix(doc(&text), until, &mut part).unwrap();
            prop_assert!(part.len() <= full.len());
            prop_assert_eq!(&full[..part.len()], &part[..]);
            for f in &full {
                let end = f.lineage().as_single().unwrap().positions().unwrap().end();
                if end <= until {
                    prop_assert!(part.iter().any(|p| p == f), "piece ending at {end} missing for until {until}");
                }
            }
            let covered = part.last().map_or(0, |p| p.lineage().as_single().unwrap().positions().unwrap().end());
            let total = full.last().unwrap().lineage().as_single().unwrap().positions().unwrap().end();
            prop_assert!(covered >= until.min(total), "covers {covered} of {until}");
        }
    }
}

#[test]
fn tokenize_offers_its_vocabulary_and_refuses_to_come_before_the_images_it_places() {
    use zephon_operator::{Assembly, Neighbour, Offer, Operator};
    let t = Tokenize::new(gpt2());
    assert_eq!(t.offer().vocab_size, Some(50257));
    let fields = ["body".to_string(), "text".to_string()];
    let names = ["a".to_string(), "b".to_string()];
    let mut plan =
        Assembly { datasets: &names, text_fields: &fields, shares: None, loss_weights: &[], before: &[], after: &[] };
    let assembled = t.assemble(&plan).unwrap().expect("it takes the datasets' text fields");
    assert!(
        assembled.fingerprint().to_text().contains(r#"dataset_fields=["body", "text"]"#),
        "{}",
        assembled.describe()
    );
    let after = [Neighbour { name: "images".into(), offer: Offer::none().with_decodes("image") }];
    plan.after = &after;
    let e = t.assemble(&plan).err().expect("images after tokenize").to_string();
    assert!(e.contains("images (decoding image) must come before tokenize"), "{e}");
}
