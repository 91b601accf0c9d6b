//! Data tokenized offline: token ids stored in a JSONL field, made the token axis by
//! `PreTokenized`, give the same steps, byte for byte, as tokenizing the same documents on the
//! fly, and restore from a checkpoint the same way.

use std::io::BufRead;
use std::path::Path;

use zephon::*;
use zephon_testkit::SpecText;

use crate::*;

const ROWS: usize = 400;

/// The first `ROWS` documents of corpus A as text, and as GPT-2 ids.
fn corpus(dir: &Path, tok: &Tokenizer) -> (std::path::PathBuf, std::path::PathBuf) {
    let shard = zephon_testkit::testdata().join("corpora/a/jsonl/part-00000.jsonl");
    let file = std::fs::File::open(&shard).unwrap_or_else(|e| panic!("{}: {e}", shard.display()));
    let texts: Vec<String> = std::io::BufReader::new(file)
        .lines()
        .take(ROWS)
        .map(|l| serde_json::from_str::<serde_json::Value>(&l.unwrap()).unwrap()["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(texts.len(), ROWS);
    let text_lines: Vec<String> = texts.iter().map(|t| serde_json::json!({ "text": t }).to_string()).collect();
    let id_lines: Vec<String> =
        texts.iter().map(|t| serde_json::json!({ "input_ids": tok.encode(t).unwrap() }).to_string()).collect();
    std::fs::create_dir_all(dir.join("text")).unwrap();
    std::fs::create_dir_all(dir.join("ids")).unwrap();
    (
        write(&dir.join("text"), "part-00000.jsonl", &(text_lines.join("\n") + "\n")),
        write(&dir.join("ids"), "part-00000.jsonl", &(id_lines.join("\n") + "\n")),
    )
}

fn pipeline(dataset: Dataset, first: Option<Tokenize>, tok: &Tokenizer) -> Pipeline {
    let mixture = Mixture::new().dataset(dataset.weight(1.0)).chunk_size(8);
    let p = Pipeline::new(mixture);
    let p = match first {
        Some(t) => p.tokenize(t),
        None => p.then(PreTokenized::new("input_ids").vocab_size(tok.vocab_size() as u32).unwrap().eos(50256).unwrap()),
    };
    p.pack(Pack::new(PackOptions::new(Algorithm::BestFit { bins: 8 }, 256)).unwrap())
        .shuffle(Shuffle::buffer(8).unwrap())
        .seed(3)
        .threads(2)
}

fn fingerprints(loader: &mut Loader, n: usize) -> Vec<Digest> {
    (0..n).map(|_| loader.next_step().unwrap().expect("the mixture repeats").local_fingerprint()).collect()
}

#[test]
fn stored_token_ids_give_the_steps_of_tokenizing_on_the_fly_and_restore() {
    let dir = tmp();
    let tok = Tokenizer::from_file(&zephon_testkit::testdata().join("tokenizers/gpt2/tokenizer.json")).unwrap();
    let (text, ids) = corpus(dir.path(), &tok);
    let topology = || Topology::builder().lanes(4).rows_per_step(8).build().unwrap();

    let on_the_fly = Tokenize::new(tok.clone()).eos("<|endoftext|>").unwrap();
    let mut a = pipeline(Dataset::new("a", &text), Some(on_the_fly), &tok).build(topology()).unwrap();
    let expected = fingerprints(&mut a, 30);

    let stored =
        || Dataset::new("a", &ids).fields(Fields { text: None, extra: vec!["input_ids".into()], ..Fields::default() });
    let mut b = pipeline(stored(), None, &tok).build(topology()).unwrap();
    let got = fingerprints(&mut b, 10);
    assert_eq!(got, expected[..10], "pre-tokenized steps equal tokenized-on-the-fly steps");
    let ckpt = dir.path().join("ckpt");
    b.checkpoint(&ckpt).unwrap();
    let mut restored = pipeline(stored(), None, &tok).restore(topology(), &ckpt).unwrap();
    assert_eq!(fingerprints(&mut restored, 20), expected[10..], "a restore continues the same run");
}

#[test]
fn a_token_id_outside_the_vocabulary_names_dataset_shard_and_row() {
    let dir = tmp();
    let tok = Tokenizer::from_file(&zephon_testkit::testdata().join("tokenizers/gpt2/tokenizer.json")).unwrap();
    let lines = ["{\"input_ids\": [1, 2, 3]}", "{\"input_ids\": [4, 50257]}", "{\"input_ids\": [5]}"];
    let path = write(dir.path(), "ids.jsonl", &(lines.join("\n") + "\n"));
    let ds = Dataset::new("offline", &path).fields(Fields {
        text: None,
        extra: vec!["input_ids".into()],
        ..Fields::default()
    });
    let mixture = Mixture::new().dataset(ds.weight(1.0)).chunk_size(1).exhaustion(Exhaustion::Stop, 1);
    let mut loader = Pipeline::new(mixture)
        .then(PreTokenized::new("input_ids").vocab_size(tok.vocab_size() as u32).unwrap())
        .pack(Pack::new(PackOptions::new(Algorithm::Wrap, 4)).unwrap())
        .build(Topology::builder().lanes(1).rows_per_step(1).build().unwrap())
        .unwrap();
    let err = loop {
        match loader.next_step() {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the bad row should stop the run"),
            Err(e) => break e.to_string(),
        }
    };
    assert!(
        err.contains("offline shard 0 row 1") && err.contains("token id 50257 at position 1 (vocabulary size 50257)"),
        "{err}"
    );
}

#[test]
fn the_spec_reads_stored_ids_with_a_pretokenized_section() {
    let dir = tmp();
    let tok_path = zephon_testkit::testdata().join("tokenizers/gpt2/tokenizer.json");
    let tok = Tokenizer::from_file(&tok_path).unwrap();
    let (text, ids) = corpus(dir.path(), &tok);
    // `first`: what reads the dataset's tokens, and its [source] settings.
    let spec = |path: &Path, first: &dyn Fn(SpecText) -> SpecText| {
        let text = SpecText::new(2, 4).seed(7).dataset("a", path).weight(1.0).chunk_size(4);
        parse(&first(text).pack("first_fit", 128).set("pack", "pad_id", 50256).threads(2).text())
    };
    let steps = |s: zephon::Spec| {
        let mut l = s.pipeline().unwrap().build(s.topology(1, 0).unwrap()).unwrap();
        fingerprints(&mut l, 12)
    };
    let tokenize = |s: SpecText| s.tokenizer(&tok_path, "<|endoftext|>");
    let pretokenized = |s: SpecText| {
        s.set("pretokenized", "field", "input_ids").set("pretokenized", "eos", 50256).set(
            "pretokenized",
            "vocab_size",
            50257,
        )
    };
    assert_eq!(steps(spec(&ids, &pretokenized)), steps(spec(&text, &tokenize)));

    // Finite stored ids: the end is shared by estimates unless asked; a row measure, which
    // reads the text, is refused rather than ignored.
    let finite = |balance: Option<&str>| {
        spec(&ids, &|s| {
            let s = s.set("source", "exhaustion", "stop");
            pretokenized(match balance {
                Some(b) => s.set("source", "balance", b),
                None => s,
            })
        })
    };
    let s = finite(None);
    assert!(s.pipeline().unwrap().build(s.topology(1, 0).unwrap()).is_ok());
    let s = finite(Some("row_tokens"));
    let err = s.pipeline().unwrap().build(s.topology(1, 0).unwrap()).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("RowTokens") && err.contains("tokenize step"), "{err}");

    let both = pretokenized(tokenize(SpecText::new(1, 1).dataset("a", "x").weight(1.0)));
    let err = zephon::Spec::parse(&both.text(), "both.toml", Path::new("/")).unwrap_err().to_string();
    assert!(err.contains("both.toml") && err.contains("without [tokenize]"), "{err}");
}
