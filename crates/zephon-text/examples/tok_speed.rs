//! Single-thread tokens/s of the `tokenizers` crate, tiktoken-rs and zephon-text's fast path
//! on the same 8 MB of corpus text. Run: `cargo run --release -p zephon-text --example tok_speed`

fn main() {
    let d = std::path::PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/zephon-testdata");
    let mut texts = Vec::new();
    for c in ["a", "b"] {
        let s = std::fs::read_to_string(d.join(format!("corpora/{c}/jsonl/part-00001.jsonl"))).unwrap();
        let mut bytes = 0;
        for line in s.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let t = v["text"].as_str().unwrap().to_string();
            bytes += t.len();
            texts.push(t);
            if bytes > 4 << 20 {
                break;
            }
        }
    }
    let hf = tokenizers::Tokenizer::from_file(d.join("tokenizers/gpt2/tokenizer.json")).unwrap();
    let tk = tiktoken_rs::r50k_base().unwrap();
    let ours = zephon_text::Tokenizer::from_file(&d.join("tokenizers/gpt2/tokenizer.json")).unwrap();
    for round in 0..2 {
        let t = std::time::Instant::now();
        let n: usize = texts.iter().map(|x| hf.encode_fast(x.as_str(), false).unwrap().len()).sum();
        let a = n as f64 / t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        let m: usize = texts.iter().map(|x| tk.encode_ordinary(x).len()).sum();
        let b = m as f64 / t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        let k: usize = texts.iter().map(|x| ours.encode(x).unwrap().len()).sum();
        let c = k as f64 / t.elapsed().as_secs_f64();
        println!(
            "round {round}: tokenizers encode_fast {a:.0} tok/s ({n}), tiktoken-rs {b:.0} ({m}), zephon-text fast path {c:.0} ({k}): {:.2}x tokenizers",
            c / a
        );
    }
}
