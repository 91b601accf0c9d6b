//! A text pipeline in the builder DSL: two text datasets mixed 50/50 by tokens,
//! GPT-2 tokenization, best-fit packing to 2048, a shuffle buffer, and batching; this rank's
//! steps (rank and world size from `RANK`/`WORLD_SIZE`), with a checkpoint after step 3.
//!
//! Needs the fetched test data (`bash scripts/fetch-testdata.sh`), or paths:
//! `cargo run --release -p zephon --example text_mix -- [A_DIR B_DIR TOKENIZER_JSON]`

use std::path::PathBuf;

use zephon::*;

fn main() -> zephon::Result<()> {
    let data = std::env::var_os("ZEPHON_TESTDATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/zephon-testdata"));
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let (a, b, tokenizer) = match args.as_slice() {
        [a, b, t] => (a.clone(), b.clone(), t.clone()),
        _ => (data.join("corpora/a/jsonl"), data.join("corpora/b/jsonl"), data.join("tokenizers/gpt2/tokenizer.json")),
    };

    let mixture = Mixture::new()
        .dataset(Dataset::new("short", a).share(0.5))
        .dataset(Dataset::new("long", b).share(0.5))
        .chunk_size(64);
    let tokenize = Tokenize::new(Tokenizer::from_file(&tokenizer)?)
        .eos("<|endoftext|>")?
        .long_documents(LongDocuments::Split { max_tokens: 2048 })?;
    let pack = Pack::new(PackOptions { pad_id: 50256, ..PackOptions::new(Algorithm::BestFit { bins: 32 }, 2048) })?;
    let pipeline = Pipeline::new(mixture)
        .tokenize(tokenize)
        .ensure_mixture(EnsureMixture::slack_tokens(4096))
        .pack(pack)
        .shuffle(Shuffle::buffer(8)?)
        .seed(1234);

    // 8 lanes, 16 rows of 2048 tokens per global step; this process's rank from the launcher.
    let topology = Topology::builder().lanes(8).rows_per_step(16).from_env()?;
    println!("{}", pipeline.explain(&topology)?);
    let mut loader = pipeline.build(topology)?;
    for _ in 0..4 {
        let Some(step) = loader.next_step()? else { break };
        let batch = step.to_batch()?;
        println!("step {}: {} (local fingerprint {})", step.step().0, batch.describe(), step.local_fingerprint());
        for mb in step.microbatches(2)? {
            let _micro = mb.to_batch()?; // → tensors, forward, backward
        }
    }
    let dir = std::env::temp_dir().join("zephon-text-mix-checkpoint");
    println!("checkpoint: {}", loader.checkpoint(&dir)?.display());
    Ok(())
}
