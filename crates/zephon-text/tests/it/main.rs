//! The tokenize operator with the real GPT-2 tokenizer.

use zephon_core::{Array, Datasets, Fragment, OpError, Operator, Record, SampleId, Value};
use zephon_text::{LongDocuments, Tokenize, Tokenizer};

fn gpt2() -> Tokenizer {
    Tokenizer::from_file(&zephon_testkit::testdata().join("tokenizers/gpt2/tokenizer.json")).unwrap()
}

fn doc(text: &str) -> Record {
    Record::from_sample(SampleId::new(1, 2, 3)).with(&"text".into(), Value::Str(text.into())).with(&"id".into(), Value::Int(9))
}

fn ids(r: &Record) -> &[u32] {
    match r.get("tokens") {
        Some(Value::Seq(Array::U32(v))) => v,
        other => panic!("{other:?}"),
    }
}

#[test]
fn gpt2_ids_eos_and_lineage() {
    let t = Tokenize::new(gpt2()).eos("<|endoftext|>").unwrap();
    let mut out = Vec::new();
    t.apply(doc("Hello world, this is a test."), &mut out).unwrap();
    assert_eq!(ids(&out[0]), &[15496, 995, 11, 428, 318, 257, 1332, 13, 50256]);
    assert_eq!(out[0].lineage().as_single(), Some(&Fragment { sample: SampleId::new(1, 2, 3), start: 0, end: 9 }));
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
            let want: Vec<u32> = reference.encode_ordinary(&text).into_iter().map(|x| x as u32).collect();
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
    let split = Tokenize::new(gpt2()).eos("<|endoftext|>").unwrap().long_documents(LongDocuments::Split { max_tokens: 300 }).unwrap();
    let mut out = Vec::new();
    split.apply(doc(&text), &mut out).unwrap();
    assert_eq!(out.len(), whole.len().div_ceil(300));
    let mut joined = Vec::new();
    for (i, piece) in out.iter().enumerate() {
        let f = piece.lineage().as_single().unwrap();
        assert_eq!((f.start as usize, f.end as usize), (i * 300, (i * 300 + 300).min(whole.len())));
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
    assert!(fingerprint.contains(gpt2().sha256()), "the tokenizer's hash is in the fingerprint");
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("zephon-text-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
