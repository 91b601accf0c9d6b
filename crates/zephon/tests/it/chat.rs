//! A chat fine-tuning pipeline from the spec, on the real conversations (JSONL and Parquet)
//! with Llama-3.1's tokenizer and TRL's training template: the loss mask reaches the rows
//! (labels on the assistant's tokens only), every global step is the same at every world
//! size and across resumes, and long conversations are counted in the report.

use std::path::Path;

use zephon::testing::loaders;
use zephon::{Spec, Value};

use crate::{parse, tmp, write};

fn chat_spec(format: &str, extra: &str) -> String {
    let data = zephon_testkit::testdata();
    let file = if format == "parquet" { "conversations.parquet" } else { "conversations.jsonl" };
    format!(
        r#"seed = 5
lanes = 4
rows_per_step = 8

[[dataset]]
name = "docs"
path = "{conversations}"
weight = 1.0

[chat]
tokenizer = "{tok}"
template = "{template}"
variables = {{ bos_token = "<|begin_of_text|>", eos_token = "<|eot_id|>" }}

[pack]
algorithm = "best_fit"
bins = 4
seq_len = 512
pad_id = 128001
{extra}
[run]
threads = 2
"#,
        conversations = data.join("chat").join(file).display(),
        tok = data.join("tokenizers/llama3_1/tokenizer.json").display(),
        template = data.join("chat/templates/llama3_training.jinja").display(),
    )
}

fn u8s(v: Option<&Value>) -> Vec<u8> {
    v.and_then(Value::as_array).and_then(|a| a.as_u8()).map(<[u8]>::to_vec).unwrap_or_default()
}

fn i32s(v: Option<&Value>) -> Vec<i32> {
    v.and_then(Value::as_array).and_then(|a| a.as_i32()).map(<[i32]>::to_vec).unwrap_or_default()
}

/// Rows carry the conversation's loss mask: a position is trained on only where its label is
/// an assistant token, and with `mask_labels` the other labels are the ignore index.
#[test]
fn rows_train_on_the_assistant_tokens_only() {
    for (format, mask_labels) in [("jsonl", false), ("parquet", true)] {
        let extra = if mask_labels { "mask_labels = true\n" } else { "" };
        let spec = parse(&chat_spec(format, extra));
        let mut ranks = loaders(&spec, 1, 2, None).unwrap();
        let rows: Vec<(Vec<u8>, Vec<i32>)> = ranks
            .steps_exactly(3, |p| {
                p.iter()
                    .flat_map(|s| s.rows())
                    .map(|r| (u8s(r.get("loss_mask")), i32s(r.get("labels"))))
                    .collect::<Vec<_>>()
            })
            .unwrap()
            .concat();
        let (mut trained, mut positions) = (0usize, 0usize);
        for (mask, labels) in &rows {
            positions += mask.len();
            trained += mask.iter().filter(|&&m| m == 1).count();
            for (m, l) in mask.iter().zip(labels) {
                if mask_labels {
                    assert_eq!(*m == 1, *l != -100, "{format}: masked labels follow the mask");
                } else if *m == 1 {
                    assert_ne!(*l, -100);
                }
            }
        }
        // The answers are most of each conversation, but far from all of it.
        let share = trained as f64 / positions as f64;
        assert!((0.2..0.9).contains(&share), "{format}: {trained} of {positions} positions trained");
    }
}

/// The same global steps at world sizes 1, 2 and 4, and after a resume at another world size,
/// from JSONL and from Parquet alike (the same conversations give the same steps).
#[test]
fn chat_steps_are_the_same_at_every_world_size_and_across_resumes() {
    let jsonl = parse(&chat_spec("jsonl", ""));
    let reference = loaders(&jsonl, 1, 2, None).unwrap().fingerprints(6).unwrap();
    assert_eq!(reference.len(), 6);
    for w in [2, 4] {
        assert_eq!(loaders(&jsonl, w, 1, None).unwrap().fingerprints(6).unwrap(), reference, "W={w}");
    }
    let dir = tmp();
    let mut two = loaders(&jsonl, 2, 2, None).unwrap();
    let mut got = two.fingerprints(3).unwrap();
    two.checkpoint(dir.path()).unwrap();
    got.extend(loaders(&jsonl, 4, 1, Some(dir.path())).unwrap().fingerprints(3).unwrap());
    assert_eq!(got, reference);
    let parquet = parse(&chat_spec("parquet", ""));
    // Parquet's shards hash differently from JSONL's, so the fingerprints of their runs differ;
    // the rows do not.
    let rows = |spec: &Spec| -> Vec<Vec<u32>> {
        let mut r = loaders(spec, 1, 2, None).unwrap();
        r.steps_exactly(2, |p| {
            p.iter()
                .flat_map(|s| s.rows())
                .flat_map(|row| {
                    row.get("input_ids").and_then(Value::as_array).and_then(|a| a.as_u32()).unwrap().to_vec()
                })
                .collect::<Vec<u32>>()
        })
        .unwrap()
    };
    assert_eq!(rows(&jsonl), rows(&parquet));
}

/// Long conversations, by policy: truncated and skipped ones are counted and reported (and
/// said as what the data lost); split ones are counted.
#[test]
fn long_conversations_are_counted_and_reported() {
    for (policy, field) in [
        ("truncate", "conversations_truncated"),
        ("skip", "conversations_skipped"),
        ("split_at_turns", "conversations_split"),
    ] {
        let text = chat_spec("jsonl", "")
            .replace("[pack]", &format!("long_conversations = \"{policy}\"\nmax_tokens = 200\n\n[pack]"));
        let spec = parse(&text);
        let mut ranks = loaders(&spec, 1, 2, None).unwrap();
        ranks.steps_exactly(4, |_| ()).unwrap();
        let report = ranks.into_ranks().remove(0).report();
        let json = serde_json::to_value(&report).unwrap();
        let n = json["datasets"][0][field].as_u64().unwrap();
        assert!(n > 0, "{policy}: {json}");
        let lines = report.lines().join("\n");
        assert!(lines.contains("long_conversations"), "{policy}: {lines}");
    }
}

/// Settings that cannot work are refused when the spec is read, naming them.
#[test]
fn chat_settings_that_cannot_work_are_refused() {
    let base = chat_spec("jsonl", "");
    for (text, want) in [
        (base.replace("[chat]", "[chat]\nmax_tokens = 10"), "max_tokens without long_conversations"),
        (base.clone() + "\n[tokenize]\ntokenizer = \"t.json\"\n", "goes without [tokenize]"),
        (base.replace("loss_mask", "x").replace("[chat]", "[chat]\nloss_on = \"most\""), "unknown variant"),
    ] {
        let e = Spec::parse(&text, "chat.toml", Path::new("/")).unwrap_err().to_string();
        assert!(e.contains(want), "want {want:?}: {e}");
    }
    let d = tmp();
    let bad = write(d.path(), "bad.jinja", "{% for m in messages %}{{ m.content }");
    let text = base.replace(
        &zephon_testkit::testdata().join("chat/templates/llama3_training.jinja").display().to_string(),
        &bad.display().to_string(),
    );
    let e = parse(&text).pipeline().err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("[chat]") && e.contains("bad.jinja"), "{e}");
    // The training template's generation blocks say which tokens are the assistant's.
    let content = base.replace("[chat]", "[chat]\nassistant_span = \"content\"");
    let e = parse(&content).pipeline().err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("[chat]") && e.contains("assistant_span") && e.contains("generation"), "{e}");
}

/// Under Qwen3's own template, which does not render a multi-turn conversation as a prefix
/// of its continuation, every conversation is read (none is a bad record: the run fails on
/// the first), the rows train on the assistant's tokens, and the steps are the same at every
/// world size and across a resume.
#[test]
fn qwen3s_own_template_reads_every_conversation_with_the_same_steps_everywhere() {
    let data = zephon_testkit::testdata();
    let text = chat_spec("jsonl", "")
        .replace(
            &data.join("tokenizers/llama3_1/tokenizer.json").display().to_string(),
            &data.join("tokenizers/qwen3/tokenizer.json").display().to_string(),
        )
        .replace(
            &data.join("chat/templates/llama3_training.jinja").display().to_string(),
            &data.join("tokenizers/qwen3/tokenizer_config.json").display().to_string(),
        )
        .replace("variables = { bos_token = \"<|begin_of_text|>\", eos_token = \"<|eot_id|>\" }\n", "")
        .replace("pad_id = 128001", "pad_id = 151643");
    assert!(text.contains("qwen3/tokenizer_config.json") && !text.contains("llama"), "{text}");
    let spec = parse(&text);
    let reference = loaders(&spec, 1, 2, None).unwrap().fingerprints(6).unwrap();
    assert_eq!(loaders(&spec, 4, 1, None).unwrap().fingerprints(6).unwrap(), reference, "W=4");
    let dir = tmp();
    let mut two = loaders(&spec, 2, 1, None).unwrap();
    let mut got = two.fingerprints(3).unwrap();
    two.checkpoint(dir.path()).unwrap();
    got.extend(loaders(&spec, 4, 1, Some(dir.path())).unwrap().fingerprints(3).unwrap());
    assert_eq!(got, reference, "2 -> 4 resume");
    let masks: Vec<u8> = loaders(&spec, 1, 2, None)
        .unwrap()
        .steps_exactly(3, |p| p.iter().flat_map(|s| s.rows()).flat_map(|r| u8s(r.get("loss_mask"))).collect::<Vec<_>>())
        .unwrap()
        .concat();
    let share = masks.iter().filter(|&&m| m == 1).count() as f64 / masks.len() as f64;
    assert!((0.2..0.9).contains(&share), "{share} of the positions trained");
}

/// A validation pass over conversations: every conversation once, the same steps at world
/// sizes 1 and 4, each rank ending after the same step.
#[test]
fn a_validation_pass_over_conversations_is_the_same_at_every_world_size() {
    let data = zephon_testkit::testdata();
    let text = chat_spec("jsonl", "")
        + &format!(
            "\n[validation]\n[[validation.dataset]]\nname = \"held-out\"\npath = \"{}\"\n",
            data.join("chat/conversations.parquet").display()
        );
    let spec = parse(&text);
    let fingerprints = |w: u32| {
        let mut loaders: Vec<zephon::ValidationLoader> =
            (0..w).map(|r| spec.validation().unwrap().unwrap().build(spec.topology(w, r).unwrap()).unwrap()).collect();
        let mut out = Vec::new();
        let mut records = 0;
        loop {
            let parts: Vec<_> = loaders.iter_mut().map(|l| l.next_step().unwrap()).collect();
            if parts.iter().all(Option::is_none) {
                break;
            }
            let parts: Vec<_> = parts.into_iter().map(|p| p.expect("every rank ends after the same step")).collect();
            records += parts.iter().flat_map(|p| p.rows()).filter(|r| r.lineage().first_sample().is_some()).count();
            out.push(zephon::testing::fingerprint(&parts));
        }
        (out, records)
    };
    let (one, records) = fingerprints(1);
    assert_eq!(records, 1611, "every conversation once");
    assert_eq!(fingerprints(4).0, one);
}

/// Short conversations made of the real ones: each one's first user message and the reply.
fn first_exchanges(dir: &Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(zephon_testkit::testdata().join("chat/conversations.jsonl")).unwrap();
    let mut out = String::new();
    for line in text.lines() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        let messages = row["messages"].as_array().unwrap();
        let first = messages.iter().position(|m| m["role"] == "user").unwrap();
        let pair = &messages[first..first + 2];
        out += &serde_json::json!({ "messages": pair }).to_string();
        out.push('\n');
    }
    write(dir, "exchanges.jsonl", &out)
}

/// Conversation datasets mixed by token shares: the plan counts each dataset's conversations
/// as chat renders and tokenizes them (whole conversations, within a few percent of every
/// conversation counted), and `ensure_mixture` holds 30 / 70 where the model sees it: no
/// dataset runs ahead of its share by more than L × (slack + seq_len) tokens at any step, the
/// same steps at W = 1 and 2 and across a resume on 4.
#[test]
fn conversation_datasets_mix_by_token_shares() {
    let dir = tmp();
    let exchanges = first_exchanges(dir.path());
    let text = chat_spec("jsonl", "").replacen("weight = 1.0", "share = 0.3", 1).replace(
        "[chat]",
        &format!(
            "[[dataset]]\nname = \"exchanges\"\npath = \"{}\"\nshare = 0.7\n\n[ensure_mixture]\nslack_tokens = 2048\n\n[chat]",
            exchanges.display()
        ),
    );
    let spec = parse(&text);
    let mut ranks = loaders(&spec, 1, 2, None).unwrap();
    let estimates = ranks[0].token_estimates().unwrap().to_vec();
    // Every conversation of each dataset, counted.
    let data = zephon_testkit::testdata();
    let tokenizer = zephon_text::Tokenizer::from_file(&data.join("tokenizers/llama3_1/tokenizer.json")).unwrap();
    let path = data.join("chat/templates/llama3_training.jinja");
    let template = zephon_text::ChatTemplate::new(&std::fs::read_to_string(&path).unwrap(), "llama3_training")
        .unwrap()
        .with_globals(
            [("bos_token", "<|begin_of_text|>"), ("eos_token", "<|eot_id|>")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), serde_json::Value::from(v)))
                .collect(),
        );
    let chat = zephon_text::Chat::new(tokenizer, template);
    for (e, file) in estimates.iter().zip([data.join("chat/conversations.jsonl"), exchanges]) {
        let rows = std::fs::read_to_string(file).unwrap();
        let counts: Vec<usize> = rows
            .lines()
            .map(|l| {
                let m = serde_json::from_str::<serde_json::Value>(l).unwrap()["messages"].to_string();
                chat.encode(&m).unwrap().0.len()
            })
            .collect();
        let mean = counts.iter().sum::<usize>() as f64 / counts.len() as f64;
        let off = e.tokens_per_row() / mean - 1.0;
        println!("{}: estimated {:.1} tokens a conversation, counted {mean:.1}", e.dataset, e.tokens_per_row());
        assert!(off.abs() < 0.05, "{}: estimated {:.1}, counted {mean:.1}", e.dataset, e.tokens_per_row());
    }
    let (mut tokens, mut worst) = ([0u64; 2], 0f64);
    let reference = ranks
        .steps_exactly(60, |parts| {
            for row in parts.iter().flat_map(|p| p.rows()) {
                for f in row.lineage().fragments() {
                    tokens[f.sample.dataset as usize] += u64::from(f.len());
                }
            }
            let total = (tokens[0] + tokens[1]) as f64;
            worst = worst.max(tokens[0] as f64 - 0.3 * total).max(tokens[1] as f64 - 0.7 * total);
            zephon::testing::fingerprint(parts)
        })
        .unwrap();
    let share = tokens[0] as f64 / (tokens[0] + tokens[1]) as f64;
    println!("conversations {share:.3} of {} tokens; most ahead of a share {worst:.0}", tokens[0] + tokens[1]);
    assert!(worst <= 4.0 * (2048.0 + 512.0), "a dataset ran {worst:.0} tokens ahead of its share");
    assert!((share - 0.3).abs() < 0.02, "{share:.3}");
    assert_eq!(loaders(&spec, 2, 1, None).unwrap().fingerprints(60).unwrap(), reference, "W=2");
    let ck = tmp();
    let mut two = loaders(&spec, 2, 2, None).unwrap();
    let mut resumed = two.fingerprints(25).unwrap();
    two.checkpoint(ck.path()).unwrap();
    resumed.extend(loaders(&spec, 4, 1, Some(ck.path())).unwrap().fingerprints(35).unwrap());
    assert_eq!(resumed, reference, "W=2 to step 25, resumed on W=4");
}
