//! Single-thread tokens/s of the `tokenizers` crate and zephon-text on the same 8 MB of corpus
//! text. Without arguments: GPT-2, with tiktoken-rs too. With arguments: the named fetched
//! tokenizers (`tokenizers/<name>/tokenizer.json`), e.g. `llama3 gpt4o deepseek_v3 qwen3`.
//!
//! `cargo run --release -p zephon-text --example tok_speed [-- NAME...]`

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
    let names: Vec<String> = std::env::args().skip(1).collect();
    if names.is_empty() {
        gpt2(&d, &texts);
    }
    for name in names {
        let path = d.join(format!("tokenizers/{name}/tokenizer.json"));
        let mut hf = tokenizers::Tokenizer::from_file(&path).unwrap();
        hf.set_encode_special_tokens(true);
        let ours = zephon_text::Tokenizer::from_file(&path).unwrap();
        println!("{name}: {}", ours.engine());
        for round in 0..2 {
            let t = std::time::Instant::now();
            let n: usize = texts.iter().map(|x| hf.encode_fast(x.as_str(), false).unwrap().len()).sum();
            let a = n as f64 / t.elapsed().as_secs_f64();
            let t = std::time::Instant::now();
            let k: usize = texts.iter().map(|x| ours.encode(x).unwrap().len()).sum();
            let c = k as f64 / t.elapsed().as_secs_f64();
            assert_eq!(n, k);
            println!(
                "  round {round}: tokenizers encode_fast {a:.0} tok/s, zephon-text {c:.0} ({k} tokens): {:.2}x",
                c / a
            );
        }
    }
}

fn gpt2(d: &std::path::Path, texts: &[String]) {
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
