//! A mixture of many sources carved from the test corpora, of the size data-mixing studies use
//! (`many_sources`): the facade's tests and `benches/many_sources.sh` both read it.

use std::path::{Path, PathBuf};

use zephon_operator::RngKey;

use crate::SpecText;

/// Datasets written by [`many_sources`]: name, folder and token share, in order.
#[derive(Clone, Debug)]
pub struct ManySources {
    pub datasets: Vec<(String, PathBuf, f64)>,
}

/// Characters of one long document: about 14 k GPT-2 tokens of prose.
const LONG_CHARS: usize = 60_000;

/// Writes `count` datasets under `dir`, each one JSONL shard: about 90 one-line documents of
/// corpus A (the fortunes of 40 to 120 characters: 10 to 30 GPT-2 tokens), and in every tenth
/// dataset also one long document (about 14 k tokens of corpus B's speeches and chapters, run
/// together). Token shares are drawn between 0.1 % and 1.8 %, scaled to sum to 1 and written
/// with six decimals, as a study's table would hold them: they sum to 1 only within about
/// 1e-5. Everything follows from `seed`.
pub fn many_sources(dir: &Path, count: usize, seed: u64) -> ManySources {
    let data = crate::testdata();
    let texts = |corpus: &str| -> Vec<String> {
        let folder = data.join(format!("corpora/{corpus}/jsonl"));
        let mut files: Vec<PathBuf> = std::fs::read_dir(&folder)
            .unwrap_or_else(|e| panic!("{}: {e}", folder.display()))
            .map(|e| e.expect("a folder entry").path())
            .collect();
        files.sort();
        files
            .iter()
            .flat_map(|f| {
                let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
                text.lines()
                    .map(|l| {
                        let v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
                        v["text"].as_str().expect("a text field").to_string()
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let short: Vec<String> = texts("a-exact").into_iter().filter(|t| (40..=120).contains(&t.chars().count())).collect();
    let mut long = Vec::new();
    let mut run = String::new();
    for t in texts("b-exact") {
        run.push_str(&t);
        run.push('\n');
        if run.len() >= LONG_CHARS {
            let cut = (0..=LONG_CHARS).rev().find(|&i| run.is_char_boundary(i)).unwrap_or(0);
            long.push(run[..cut].to_string());
            run.clear();
        }
    }
    assert!(short.len() > 1000 && !long.is_empty(), "{} short and {} long documents", short.len(), long.len());
    let key = RngKey::new(seed, "many-sources");
    let drawn: Vec<f64> = (0..count as u64).map(|d| 0.001 + 0.017 * key.with(d).unit_at(0)).collect();
    let sum: f64 = drawn.iter().sum();
    let mut next = key.with(u64::MAX).below_at(0, short.len() as u64) as usize;
    let datasets = (0..count)
        .map(|d| {
            let name = format!("d{d:03}");
            let folder = dir.join(&name);
            std::fs::create_dir_all(&folder).expect("a dataset folder");
            let n = 85 + key.with(d as u64).below_at(1, 11) as usize;
            let mut lines: Vec<String> = (0..n)
                .map(|_| {
                    next = (next + 1) % short.len();
                    serde_json::json!({ "text": short[next] }).to_string()
                })
                .collect();
            if d % 10 == 0 {
                lines.push(serde_json::json!({ "text": long[(d / 10) % long.len()] }).to_string());
            }
            std::fs::write(folder.join("part-00000.jsonl"), lines.join("\n") + "\n").expect("a shard");
            let share = (drawn[d] / sum * 1e6).round() / 1e6;
            (name, folder, share)
        })
        .collect();
    ManySources { datasets }
}

impl ManySources {
    /// A spec over these datasets by their token shares at `lanes` lanes and `rows` rows a
    /// step: GPT-2, `ensure_mixture` with a slack of 4,096, best-fit rows of 1,024, 2 threads,
    /// everything else at its default.
    pub fn spec(&self, lanes: u32, rows: u32) -> SpecText {
        let data = crate::testdata();
        let mut spec = SpecText::new(lanes, rows).seed(7);
        for (name, path, share) in &self.datasets {
            spec = spec.dataset(name, path).share(*share);
        }
        spec.tokenizer(data.join("tokenizers/gpt2/tokenizer.json"), "<|endoftext|>")
            .set("ensure_mixture", "slack_tokens", 4096u64)
            .pack("best_fit", 1024)
            .set("pack", "pad_id", 50256u64)
            .threads(2)
    }

    /// The shares, in order.
    pub fn shares(&self) -> Vec<f64> {
        self.datasets.iter().map(|(_, _, s)| *s).collect()
    }
}
