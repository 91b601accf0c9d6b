//! Vision-language pipelines on real photos: the invariants hold with images in the records.
//!
//! An image-caption dataset (HF image Parquet) and an interleaved one (JSONL with two image
//! paths and `<image>` markers per document) go through decode → resize → normalise → ViT
//! patches → tokenize around the placeholders → best-fit packing → shuffle.
//! - every global step is equal at W = 1, 2, 4, 8, with 1 and 2 threads, through microbatches,
//!   and across resumes at another world size;
//! - every image is delivered exactly once per epoch, whole, on its placeholder tokens;
//! - bad images are errors naming dataset, shard, row and image, or counted skips.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use zephon::operator::{SampleId, Value};
use zephon::{Spec, Topology, testing};
use zephon_testkit::SpecText;

const IMAGE_TOKEN: u32 = 50257;

/// GPT-2's tokenizer.json with an added special `<image>` token (id 50257).
fn tokenizer_with_image_token(dir: &Path) -> PathBuf {
    let src = zephon_testkit::testdata().join("tokenizers/gpt2/tokenizer.json");
    let mut json: serde_json::Value = serde_json::from_slice(&std::fs::read(src).unwrap()).unwrap();
    json["added_tokens"].as_array_mut().unwrap().push(serde_json::json!({
        "id": IMAGE_TOKEN, "content": "<image>", "single_word": false, "lstrip": false,
        "rstrip": false, "normalized": false, "special": true
    }));
    let out = dir.join("tokenizer.json");
    std::fs::write(&out, serde_json::to_vec(&json).unwrap()).unwrap();
    out
}

/// An interleaved JSONL over the captioned photos: documents with two images each.
fn interleaved(dir: &Path) -> PathBuf {
    let data = zephon_testkit::testdata().join("images/captioned");
    let rows: Vec<serde_json::Value> = std::fs::read_to_string(data.join("captions.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut out = Vec::new();
    for (i, pair) in rows.chunks(2).enumerate() {
        let files: Vec<String> =
            pair.iter().map(|r| data.join(r["file"].as_str().unwrap()).display().to_string()).collect();
        let captions: Vec<&str> = pair.iter().map(|r| r["caption"].as_str().unwrap()).collect();
        let text = match captions.as_slice() {
            [a, b] => format!("Look: <image> {a} And then <image> {b}"),
            [a] => format!("Only <image> {a}"),
            _ => unreachable!(),
        };
        out.push(serde_json::json!({"id": i, "images": files, "text": text}).to_string());
    }
    let path = dir.join("interleaved.jsonl");
    std::fs::write(&path, out.join("\n") + "\n").unwrap();
    path
}

/// The vision-language spec over both datasets at `lanes` lanes and `rows` rows a step, with
/// what a test varies (`[source]` and `[run]` settings) set by `vary`.
fn spec(dir: &Path, lanes: u32, rows: u32, vary: impl FnOnce(SpecText) -> SpecText) -> Spec {
    let tok = tokenizer_with_image_token(dir);
    let parquet = zephon_testkit::testdata().join("images/captioned/parquet");
    let text = SpecText::new(lanes, rows)
        .seed(5)
        .dataset("captions", parquet)
        .weight(1.0)
        .dataset_key("text_field", "caption")
        .dataset_key("images", "image")
        .dataset("interleaved", interleaved(dir))
        .weight(1.0)
        .dataset_key("images", "images")
        .chunk_size(2)
        .set("images", "size", 56)
        .set("images", "fit", "center_crop")
        .set("images", "layout", "vit")
        .set("images", "patch", 14)
        .tokenizer(tok, "<|endoftext|>")
        .set("tokenize", "image_token", "<image>")
        .pack("best_fit", 96)
        .set("pack", "bins", 4)
        .shuffle(2);
    Spec::parse(&vary(text).text(), "vision.toml", "/".as_ref()).unwrap()
}

/// Global fingerprints of steps `from..to` at world size `w` (every rank in this process),
/// through microbatches of `mb` rows; resuming from and checkpointing into folders.
fn run(
    spec: &Spec,
    w: u32,
    threads: usize,
    to: u64,
    mb: usize,
    resume: Option<&Path>,
    save: Option<&Path>,
) -> Vec<zephon::Digest> {
    let mut ranks = testing::loaders(spec, w, threads, resume).unwrap();
    let n = to.saturating_sub(ranks.position().0);
    let out = ranks.steps_exactly(n, |parts| testing::fingerprint_through_microbatches(parts, mb).unwrap()).unwrap();
    if let Some(d) = save {
        ranks.checkpoint(d).unwrap();
    }
    out
}

#[test]
fn vlm_steps_are_the_same_at_every_world_size_thread_count_microbatch_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    let s = spec(dir.path(), 8, 8, |s| s.set("source", "exhaustion", "repeat").threads(2));
    let steps = 5;
    let reference = run(&s, 1, 1, steps, 8, None, None);
    for (w, threads, mb) in [(1, 2, 2), (2, 1, 4), (4, 2, 1), (8, 1, 1)] {
        assert_eq!(run(&s, w, threads, steps, mb, None, None), reference, "W={w} threads={threads} microbatch={mb}");
    }
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let mut resumed = run(&s, 2, 2, 2, 4, None, Some(&a));
    resumed.extend(run(&s, 4, 1, 3, 2, Some(&a), Some(&b)));
    resumed.extend(run(&s, 8, 1, steps, 1, Some(&b), None));
    assert_eq!(resumed, reference, "W=2 → 4 at step 2 → 8 at step 3");
}

#[test]
fn every_image_is_delivered_once_per_epoch_whole_on_its_placeholders() {
    let dir = tempfile::tempdir().unwrap();
    let s = spec(dir.path(), 4, 4, |s| {
        s.set("source", "exhaustion", "redistribute").set("source", "passes", 1).threads(2).tail("partial")
    });
    // Which images exist: 43 captioned photos, and 43 more in the interleaved documents.
    let mut seen: BTreeMap<(SampleId, u32), u32> = BTreeMap::new();
    for (w, resume_at) in [(1u32, None), (2, Some(3u64))] {
        seen.clear();
        let ck = dir.path().join(format!("ck-{w}"));
        let mut loaders: Vec<_> =
            (0..w).map(|r| s.pipeline().unwrap().build(s.topology(w, r).unwrap()).unwrap()).collect();
        let mut step = 0;
        loop {
            if Some(step) == resume_at {
                for l in &loaders {
                    l.checkpoint(&ck).unwrap();
                }
                // Continue at another world size from the checkpoint.
                loaders =
                    (0..4).map(|r| s.pipeline().unwrap().restore(s.topology(4, r).unwrap(), &ck).unwrap()).collect();
            }
            let mut any = false;
            for l in &mut loaders {
                let Some(local) = l.next_step().unwrap() else { continue };
                any = true;
                for row in local.rows() {
                    let ids = row.get("input_ids").and_then(Value::as_array).and_then(|a| a.as_u32()).unwrap();
                    for a in row.attachments() {
                        let span = a.span().unwrap();
                        let seg = match a.get("segment") {
                            Some(Value::Int(k)) => *k as usize,
                            other => panic!("{other:?}"),
                        };
                        let sample = row.lineage().fragments()[seg - 1].sample;
                        *seen.entry((sample, a.item())).or_default() += 1;
                        assert_eq!(span.len(), 16, "56 px / 14 = 4×4 patches, one token each");
                        assert!(ids[span.start() as usize..span.end() as usize].iter().all(|&t| t == IMAGE_TOKEN));
                        let px = a.get("pixel_values").and_then(Value::as_array).unwrap();
                        assert_eq!(px.shape().dims(), &[16, 3 * 14 * 14]);
                    }
                }
            }
            if !any {
                break;
            }
            step += 1;
        }
        let captions: u32 = seen.keys().filter(|(s, _)| s.dataset == 0).count() as u32;
        let interleaved: u32 = seen.keys().filter(|(s, _)| s.dataset == 1).count() as u32;
        assert_eq!((captions, interleaved), (43, 43), "W={w}: every image of both datasets arrived");
        assert!(
            seen.values().all(|&n| n == 1),
            "W={w}: an image arrived twice: {:?}",
            seen.iter().find(|(_, n)| **n != 1)
        );
    }
}

#[test]
fn bad_images_name_dataset_shard_row_and_image_or_are_counted_skips() {
    let dir = tempfile::tempdir().unwrap();
    let edge = zephon_testkit::testdata().join("images/edge");
    let rows = [
        ("gen_trunc_50.jpg", "truncated"),
        ("gen_sof_65535x65535.jpg", "pixel"),
        ("libjpeg-turbo_testorig12.jpg", "12-bit"),
        ("gen_random.jpg", ""),
        ("gen_empty.jpg", ""),
        ("missing.jpg", "missing.jpg"),
    ];
    let lines: Vec<String> =
        std::iter::once(serde_json::json!({"images": [edge.join("gen_base.jpg")], "text": "fine"}).to_string())
            .chain(rows.iter().map(|(f, _)| serde_json::json!({"images": [edge.join(f)], "text": "bad"}).to_string()))
            .collect();
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, lines.join("\n") + "\n").unwrap();
    let tok = tokenizer_with_image_token(dir.path());
    let spec = |policy: &str| {
        Spec::parse(
            &format!(
                "lanes = 1\nrows_per_step = 1\n[[dataset]]\nname = \"edge\"\npath = \"{}\"\nweight = 1.0\nimages = \"images\"\n\
                 [source]\norder = \"sequential\"\nexhaustion = \"stop\"\nchunk_size = 1\n[images]\nsize = 56\n[tokenize]\ntokenizer = \"{}\"\nimage_token = \"<image>\"\n\
                 [pack]\nalgorithm = \"one_per_row\"\nseq_len = 64\n[run]\nbad_records = \"{policy}\"\ntail = \"partial\"\n",
                bad.display(),
                tok.display()
            ),
            "edge.toml",
            "/".as_ref(),
        )
        .unwrap()
    };
    let s = spec("fail");
    let mut l = s.pipeline().unwrap().build(Topology::builder().lanes(1).rows_per_step(1).build().unwrap()).unwrap();
    assert!(l.next_step().unwrap().is_some(), "the good image makes a row");
    let e = l.next_step().err().unwrap().to_string();
    assert!(e.contains("edge shard 0 row 1") && e.contains("image #0") && e.contains("gen_trunc_50.jpg"), "{e}");
    let s = spec("skip");
    let mut l = s.pipeline().unwrap().build(Topology::builder().lanes(1).rows_per_step(1).build().unwrap()).unwrap();
    let mut delivered = 0;
    while l.next_step().unwrap().is_some() {
        delivered += 1;
    }
    assert_eq!(delivered, 1);
    let report = l.report();
    assert_eq!(report.datasets[0].skipped, rows.len() as u64, "{report:?}");
}

/// An `[images]` or `[tokenize]` setting that would have no effect is refused with its key,
/// never ignored.
#[test]
fn image_settings_without_effect_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let base = spec(dir.path(), 2, 2, |s| s.threads(1));
    let text = |images: &str, tokenize_extra: &str| {
        let tok = tokenizer_with_image_token(dir.path());
        let data = zephon_testkit::testdata().join("images/captioned/parquet");
        format!(
            "lanes = 2\nrows_per_step = 2\n[[dataset]]\nname = \"c\"\npath = \"{}\"\nweight = 1.0\ntext_field = \
             \"caption\"\nimages = \"image\"\n[images]\n{images}\n[tokenize]\ntokenizer = \"{}\"\nimage_token = \
             \"<image>\"\n{tokenize_extra}\n[pack]\nalgorithm = \"wrap\"\nseq_len = 96\n",
            data.display(),
            tok.display()
        )
    };
    assert!(base.pipeline().is_ok());
    for (images, extra, want) in [
        ("fit = \"stretch\"", "", "fit applies to a fixed size"),
        ("size = 56\ndynamic_pixels = [3136, 12544]", "", "not both"),
        ("layout = \"chw\"\npatch = 16\ntokens = 4", "", "needs layout = \"vit\""),
        ("preset = \"qwen2_vl\"\npatch = 16", "", "needs layout = \"vit\""),
        ("size = 56", "image_start = \"<|endoftext|>\"", "image_start and image_end go together"),
    ] {
        let spec = Spec::parse(&text(images, extra), "v.toml", "/".as_ref()).unwrap();
        let e = spec.pipeline().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains(want), "{images} / {extra}: {e}");
    }
    // A patch size on the preset's ViT layout is taken, not ignored: it changes the tokens.
    let patches = |images: &str| {
        let spec = Spec::parse(&text(images, ""), "v.toml", "/".as_ref()).unwrap();
        spec.pipeline().unwrap().explain(&spec.topology(1, 0).unwrap()).unwrap()
    };
    assert_ne!(patches("size = 56"), patches("size = 56\npatch = 8"));
}

/// A vision-language chat spec: conversations with photos (`{"type": "image"}` parts) under
/// TRL's Qwen2.5-VL training template, images at Qwen2-VL's dynamic resolution.
fn vlm_chat_text(vary: &str) -> String {
    let data = zephon_testkit::testdata();
    format!(
        r#"seed = 9
lanes = 4
rows_per_step = 4

[[dataset]]
name = "photos"
path = "{vlm}"
weight = 1.0
images = "images"

[images]
preset = "qwen2_vl"
dynamic_pixels = [3136, 12544]

[chat]
tokenizer = "{tok}"
template = "{template}"
image_marker = "<|vision_start|><|image_pad|><|vision_end|>"
image_token = "<|image_pad|>"
image_start = "<|vision_start|>"
image_end = "<|vision_end|>"

[pack]
algorithm = "best_fit"
bins = 4
seq_len = 1024
pad_id = 151643

[run]
threads = 2
{vary}"#,
        vlm = data.join("chat/vlm.jsonl").display(),
        tok = data.join("tokenizers/qwen2_5/tokenizer.json").display(),
        template = data.join("chat/templates/qwen2_5_vl_training.jinja").display(),
    )
}

fn vlm_chat_spec(vary: &str) -> Spec {
    Spec::parse(&vlm_chat_text(vary), "vlm-chat.toml", "/".as_ref()).unwrap_or_else(|e| panic!("{e}"))
}

/// Conversations with photos: every global step is the same at W = 1, 2, 4 and across a
/// resume at another world size; in one pass every photo arrives once, on its run of
/// `<|vision_start|>`, one `<|image_pad|>` per merged patch, `<|vision_end|>`, none of it on
/// the loss, while the assistant's replies are.
#[test]
fn vlm_chat_places_every_photo_once_off_the_loss_at_every_world_size() {
    let s = vlm_chat_spec("[source]\nexhaustion = \"repeat\"\n");
    let reference = run(&s, 1, 2, 4, 4, None, None);
    for w in [2, 4] {
        assert_eq!(run(&s, w, 1, 4, 4 / w as usize, None, None), reference, "W={w}");
    }
    let dir = tempfile::tempdir().unwrap();
    let mut resumed = run(&s, 2, 2, 2, 2, None, Some(dir.path()));
    resumed.extend(run(&s, 4, 1, 4, 1, Some(dir.path()), None));
    assert_eq!(resumed, reference, "W=2 → 4 at step 2");

    let s = vlm_chat_spec("tail = \"partial\"\n[source]\nexhaustion = \"redistribute\"\npasses = 1\n");
    let tokenizer =
        zephon_text::Tokenizer::from_file(&zephon_testkit::testdata().join("tokenizers/qwen2_5/tokenizer.json"))
            .unwrap();
    let id = |t: &str| tokenizer.token_id(t).unwrap();
    let (start, pad, end) = (id("<|vision_start|>"), id("<|image_pad|>"), id("<|vision_end|>"));
    let mut loader = s.pipeline().unwrap().build(s.topology(1, 0).unwrap()).unwrap();
    let mut seen: BTreeMap<(SampleId, u32), u32> = BTreeMap::new();
    let (mut trained, mut widths) = (0usize, std::collections::BTreeSet::new());
    while let Some(local) = loader.next_step().unwrap() {
        for row in local.rows() {
            let ids = row.get("input_ids").and_then(Value::as_array).and_then(|a| a.as_u32()).unwrap();
            let mask = row.get("loss_mask").and_then(Value::as_array).and_then(|a| a.as_u8()).unwrap();
            trained += mask.iter().filter(|&&m| m == 1).count();
            for a in row.attachments() {
                let span = a.span().unwrap();
                let (from, to) = (span.start() as usize, span.end() as usize);
                let run = &ids[from..to];
                assert!(run.len() > 2 && run[0] == start && run[run.len() - 1] == end, "{run:?}");
                assert!(run[1..run.len() - 1].iter().all(|&t| t == pad));
                assert!(mask[from..to].iter().all(|&m| m == 0), "an image position is on the loss");
                let px = a.get("pixel_values").and_then(Value::as_array).unwrap();
                // Qwen2-VL merges 2×2 patches into one token.
                assert_eq!(px.shape().dims()[0], 4 * (run.len() - 2));
                widths.insert(run.len() - 2);
                let seg = match a.get("segment") {
                    Some(Value::Int(k)) => *k as usize,
                    other => panic!("{other:?}"),
                };
                *seen.entry((row.lineage().fragments()[seg - 1].sample, a.item())).or_default() += 1;
            }
        }
    }
    assert_eq!(seen.len(), 61, "every photo of the 43 conversations arrived");
    assert!(seen.values().all(|&n| n == 1), "a photo arrived twice");
    assert!(widths.len() > 1, "dynamic resolution gives photos different widths: {widths:?}");
    assert!(trained > 0);
}

/// `[chat]` image keys without `[images]`, images without `image_token`, a start without an
/// end, and token shares (an image's count is known only once decoded) are refused.
#[test]
fn vlm_chat_settings_that_cannot_work_are_refused() {
    assert!(vlm_chat_spec("").pipeline().is_ok());
    let text = vlm_chat_text("");
    let shares = Spec::parse(&text.replace("weight = 1.0", "share = 1.0"), "v.toml", "/".as_ref()).unwrap_err();
    assert!(shares.to_string().contains("[chat] with [images] and token shares"), "{shares}");
    let images = "[images]\npreset = \"qwen2_vl\"\ndynamic_pixels = [3136, 12544]\n";
    let no_images = text.replace(images, "").replace("images = \"images\"\n", "");
    let e = Spec::parse(&no_images, "v.toml", "/".as_ref()).unwrap_err().to_string();
    assert!(e.contains("[chat] image_marker places images, and there is no [images] table"), "{e}");
    for (from, to, want) in [
        ("image_token = \"<|image_pad|>\"\n", "", "[chat] image_token is needed with [images]"),
        ("image_end = \"<|vision_end|>\"\n", "", "[chat] image_start and image_end go together"),
        ("image_token = \"<|image_pad|>\"", "image_token = \"<|no such token|>\"", "<|no such token|>"),
    ] {
        let spec = Spec::parse(&text.replace(from, to), "v.toml", "/".as_ref()).unwrap();
        let e = spec.pipeline().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains(want), "want {want:?}: {e}");
    }
}
