//! Chat conversations against Hugging Face `transformers` 5.25: the token ids and the loss
//! mask of real conversations (built from the Python documentation) under real chat
//! templates: Llama-3.1's and Qwen2.5's, each with `{% generation %}` blocks (TRL's training
//! versions: the mask is `return_assistant_tokens_mask`) and as the tokenizer ships it (the
//! mask is each assistant turn's prefix difference, rendered by `transformers`); and Qwen3's
//! and early Llama-3's, which do not render a conversation as a prefix of its continuation
//! (the mask is each assistant message's content, found in `transformers`' rendering, and the
//! end-of-turn token after it). The reference is made by scripts/testdata/chat.py when the
//! test data is fetched.

use zephon_operator::{Field, Operator, Record, SampleId, Value, columns};
use zephon_text::{AssistantSpan, Chat, ChatTemplate, LongConversations, LossOn, Tokenizer};

use super::data;

/// The conversations as stored (JSON text of `messages`), in file order.
fn conversations() -> Vec<String> {
    std::fs::read_to_string(data("chat/conversations.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["messages"].to_string())
        .collect()
}

fn chat(folder: &str, template: Option<&str>) -> Chat {
    let tokenizer = Tokenizer::from_file(&data(&format!("tokenizers/{folder}/tokenizer.json"))).unwrap();
    let config = data(&format!("tokenizers/{folder}/tokenizer_config.json"));
    let own = ChatTemplate::from_tokenizer_config(&config, None).unwrap();
    let template = match template {
        Some(file) => {
            let path = data(&format!("chat/templates/{file}"));
            // The tokenizer's special tokens as variables, as transformers passes them.
            ChatTemplate::new(&std::fs::read_to_string(&path).unwrap(), &path.display().to_string())
                .unwrap()
                .with_globals(own.globals().clone())
        }
        None => own,
    };
    Chat::new(tokenizer, template)
}

fn equals_reference(case: &str, folder: &str, template: Option<&str>) {
    let chat = chat(folder, template);
    assert_eq!(chat.template().has_generation_blocks(), template.is_some());
    let reference = std::fs::read_to_string(data(&format!("chat/reference/{case}.jsonl"))).unwrap();
    let mut n = 0;
    for (i, (line, conversation)) in reference.lines().zip(conversations()).enumerate() {
        let want: serde_json::Value = serde_json::from_str(line).unwrap();
        let ids: Vec<u32> = serde_json::from_value(want["input_ids"].clone()).unwrap();
        let mask: Vec<u8> = serde_json::from_value(want["mask"].clone()).unwrap();
        let (got_ids, got_mask) = chat.encode(&conversation).unwrap_or_else(|e| panic!("{case} #{i}: {e}"));
        assert_eq!(got_ids, ids, "{case} #{i}: ids");
        assert_eq!(got_mask, mask, "{case} #{i}: mask");
        n += 1;
    }
    assert_eq!(n, 200, "{case}: the reference covers 200 conversations");
}

#[test]
fn llama3_1_with_generation_blocks_equals_transformers() {
    equals_reference("llama3_1-tagged", "llama3_1", Some("llama3_training.jinja"));
}

#[test]
fn qwen2_5_with_generation_blocks_equals_transformers() {
    equals_reference("qwen2_5-tagged", "qwen2_5", Some("qwen2_5_training.jinja"));
}

#[test]
fn llama3_1_as_shipped_equals_the_prefix_difference_transformers_renders() {
    equals_reference("llama3_1-own", "llama3_1", None);
}

#[test]
fn qwen2_5_as_shipped_equals_the_prefix_difference_transformers_renders() {
    equals_reference("qwen2_5-own", "qwen2_5", None);
}

#[test]
fn qwen3_as_shipped_equals_transformers() {
    equals_reference("qwen3-own", "qwen3", None);
}

#[test]
fn early_llama3_as_shipped_equals_transformers() {
    equals_reference("llama3-own", "llama3", None);
}

/// The runs of marked tokens, decoded with `tokenizer`.
fn marked_runs(tokenizer: &Tokenizer, ids: &[u32], mask: &[u8]) -> Vec<String> {
    let mut runs = Vec::new();
    let mut at = 0;
    while at < mask.len() {
        if mask[at] == 0 {
            at += 1;
            continue;
        }
        let end = mask[at..].iter().position(|&b| b == 0).map_or(mask.len(), |n| at + n);
        runs.push(tokenizer.inner().decode(&ids[at..end], false).unwrap());
        at = end;
    }
    runs
}

fn tokenizer(folder: &str) -> Tokenizer {
    Tokenizer::from_file(&data(&format!("tokenizers/{folder}/tokenizer.json"))).unwrap()
}

/// The assistant messages' contents (trimmed, as the templates write them) of a conversation.
fn assistant_contents(conversation: &str) -> Vec<String> {
    let messages: Vec<serde_json::Value> = serde_json::from_str(conversation).unwrap();
    messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["content"].as_str().unwrap().trim().to_string())
        .collect()
}

/// Under templates that are not prefix-preserving, a multi-turn conversation's mask covers
/// exactly each assistant message's content and its end-of-turn token, and a single-turn one
/// (where the prefix property holds, except under early Llama-3, which writes the generation
/// prompt unasked) keeps what the model generates after the prompt: under Qwen3 the empty
/// `<think>` block, the content, `<|im_end|>` and the newline.
#[test]
fn without_the_prefix_property_the_mask_is_each_message_content_and_end_of_turn() {
    let (mut multi, mut single) = (0, 0);
    for (folder, end) in [("qwen3", "<|im_end|>"), ("llama3", "<|eot_id|>")] {
        let (chat, tokenizer) = (chat(folder, None), tokenizer(folder));
        for conversation in conversations().iter().take(200) {
            let (ids, mask) = chat.encode(conversation).unwrap();
            let runs = marked_runs(&tokenizer, &ids, &mask);
            let contents = assistant_contents(conversation);
            let want: Vec<String> = match (folder, contents.as_slice()) {
                ("qwen3", [one]) => {
                    single += 1;
                    vec![format!("<think>\n\n</think>\n\n{one}{end}\n")]
                }
                _ => {
                    multi += usize::from(contents.len() > 1);
                    contents.iter().map(|c| format!("{c}{end}")).collect()
                }
            };
            assert_eq!(runs, want, "{folder}: {conversation}");
        }
    }
    assert!(multi > 100 && single > 20, "{multi} multi-turn, {single} single-turn conversations");
}

/// Reasoning kept apart from the content (`reasoning_content`, which Qwen3's template writes
/// in a `<think>` block on the turns after the last user message and drops before it) is on
/// the loss where the template writes it, with the content and the end-of-turn token.
#[test]
fn reasoning_the_template_writes_is_on_the_loss_with_the_content() {
    let text = r#"[{"role": "user", "content": "Is 7 prime?"},
        {"role": "assistant", "content": "Yes.", "reasoning_content": "7 has no divisors but 1 and 7."},
        {"role": "user", "content": "And 9?"},
        {"role": "assistant", "content": "No: 9 is 3 times 3.", "reasoning_content": "9 = 3 * 3."}]"#;
    let (ids, mask) = chat("qwen3", None).encode(text).unwrap();
    let runs = marked_runs(&tokenizer("qwen3"), &ids, &mask);
    assert_eq!(runs, ["Yes.<|im_end|>", "9 = 3 * 3.\n</think>\n\nNo: 9 is 3 times 3.<|im_end|>"]);
}

/// `assistant_span = content` marks each message's content and end-of-turn token under a
/// prefix-preserving template too (no newline after `<|im_end|>`), and is refused with
/// `{% generation %}` blocks, which say what the assistant's tokens are.
#[test]
fn content_spans_are_the_content_and_the_end_of_turn_under_any_template() {
    let generated = chat("qwen2_5", None);
    let content = chat("qwen2_5", None).assistant_span(AssistantSpan::Content).unwrap();
    let qwen = tokenizer("qwen2_5");
    assert_ne!(generated.fingerprint().digest(), content.fingerprint().digest());
    for conversation in conversations().iter().take(50) {
        let (ids, mask) = content.encode(conversation).unwrap();
        let want: Vec<String> = assistant_contents(conversation).iter().map(|c| format!("{c}<|im_end|>")).collect();
        assert_eq!(marked_runs(&qwen, &ids, &mask), want);
        let (same_ids, wider) = generated.encode(conversation).unwrap();
        assert_eq!(same_ids, ids);
        assert!(mask.iter().zip(&wider).all(|(c, g)| c <= g), "content spans lie inside the generated ones");
    }
    let e = chat("qwen2_5", Some("qwen2_5_training.jinja")).assistant_span(AssistantSpan::Content).unwrap_err();
    assert!(e.to_string().contains("generation"), "{e}");
}

fn record(messages: &str) -> Record {
    Record::from_sample(SampleId::new(0, 0, 7)).with(&Field::new("messages"), Value::text(messages))
}

/// The loss modes: the last turn is a suffix of all turns' mask, everything is all ones.
#[test]
fn loss_modes_mark_what_they_say() {
    let text = &conversations().into_iter().find(|c| c.matches("\"assistant\"").count() >= 2).unwrap();
    let all = chat("llama3_1", Some("llama3_training.jinja")).encode(text).unwrap().1;
    let last =
        chat("llama3_1", Some("llama3_training.jinja")).loss_on(LossOn::LastAssistantTurn).encode(text).unwrap().1;
    let every = chat("llama3_1", None).loss_on(LossOn::Everything).encode(text).unwrap().1;
    let ones = |m: &[u8]| m.iter().filter(|&&b| b == 1).count();
    assert!(ones(&last) > 0 && ones(&last) < ones(&all), "{} of {}", ones(&last), ones(&all));
    let first_last = last.iter().position(|&b| b == 1).unwrap();
    assert_eq!(last[first_last..], all[first_last..], "the last turn's tokens, as all turns mark them");
    assert!(every.iter().all(|&b| b == 1));
}

/// Bad conversations are bad records naming the message; a template error gives the
/// template's own message.
#[test]
fn bad_conversations_are_bad_records_that_say_why() {
    let c = chat("qwen2_5", None);
    for (text, want) in [
        (r#"[{"role": "user", "content": "q"}, {"role": "wizard", "content": "x"}]"#, "message 1 has role \"wizard\""),
        (r#"[{"role": "user"}]"#, "message 0 (user) has no content"),
        (r#"{"role": "user"}"#, "not a list of messages"),
    ] {
        let e = c.apply(record(text), &mut Vec::new()).unwrap_err();
        assert!(matches!(e, zephon_operator::OpError::Data(_)) && e.to_string().contains(want), "{text}: {e}");
    }
    let strict = ChatTemplate::new(
        "{% if messages[0].role != 'system' %}{{ raise_exception('a system message first') }}{% endif %}x",
        "strict",
    )
    .unwrap();
    let tok = Tokenizer::from_file(&data("tokenizers/qwen2_5/tokenizer.json")).unwrap();
    let e = Chat::new(tok, strict).apply(record(r#"[{"role": "user", "content": "q"}]"#), &mut Vec::new()).unwrap_err();
    assert!(e.to_string().contains("a system message first"), "{e}");
    let missing = Record::from_sample(SampleId::new(0, 0, 1));
    assert!(c.apply(missing, &mut Vec::new()).unwrap_err().to_string().contains("no field \"messages\""));
}

/// A conversation longer than the limit: split at turn boundaries (pieces that together are
/// the conversation, each within the limit), truncated (its first tokens), or skipped; each
/// marked for the counting accumulator, which drops the skipped one.
#[test]
fn long_conversations_are_split_at_turns_truncated_or_skipped() {
    let text = conversations().into_iter().find(|c| c.matches("\"assistant\"").count() >= 3).unwrap();
    let base = chat("llama3_1", Some("llama3_training.jinja"));
    let (ids, mask) = base.encode(&text).unwrap();
    let limit = ids.len() / 2;
    let run = |policy| {
        let c = chat("llama3_1", Some("llama3_training.jinja")).long_conversations(policy, limit).unwrap();
        let mut out = Vec::new();
        c.apply(record(&text), &mut out).unwrap();
        let mut acc = c.accumulator(zephon_operator::LaneContext { lane: zephon_operator::Lane(0), seed: 1 }).unwrap();
        let mut passed = Vec::new();
        for r in out {
            acc.push(r, &mut passed).unwrap();
        }
        (passed, acc.export().values)
    };
    let seq = |r: &Record, f: &str| -> Vec<u64> {
        match r.get(f) {
            Some(Value::Seq(a)) => match (a.as_u32(), a.as_u8()) {
                (Some(v), _) => v.iter().map(|&x| u64::from(x)).collect(),
                (_, Some(v)) => v.iter().map(|&x| u64::from(x)).collect(),
                _ => panic!("{f}: {a:?}"),
            },
            other => panic!("{f}: {other:?}"),
        }
    };
    let (pieces, counts) = run(LongConversations::SplitAtTurns);
    assert!(pieces.len() >= 2 && pieces.iter().all(|p| seq(p, columns::TOKENS).len() <= limit));
    let joined: Vec<u64> = pieces.iter().flat_map(|p| seq(p, columns::TOKENS)).collect();
    assert_eq!(joined, ids.iter().map(|&i| u64::from(i)).collect::<Vec<_>>());
    let joined_mask: Vec<u64> = pieces.iter().flat_map(|p| seq(p, columns::LOSS_MASK)).collect();
    assert_eq!(joined_mask, mask.iter().map(|&i| u64::from(i)).collect::<Vec<_>>());
    assert_eq!(counts[..4], [1, 0, 0, 0]);
    let (kept, counts) = run(LongConversations::Truncate);
    assert_eq!(seq(&kept[0], columns::TOKENS).len(), limit);
    assert_eq!(counts[..4], [0, 1, (ids.len() - limit) as u64, 0]);
    let (none, counts) = run(LongConversations::Skip);
    assert!(none.is_empty());
    assert_eq!(counts[..4], [0, 0, 0, 1]);
}

/// Vision-language conversations (photos with `{"type": "image"}` parts) under TRL's
/// Qwen2.5-VL training template: the ids and mask equal transformers' with each
/// `<|image_pad|>` widened to the image's placeholder count, every image placed on its run
/// (`<|vision_start|>`, the pads, `<|vision_end|>`), no placeholder on the loss.
#[test]
fn vision_language_conversations_equal_transformers_with_images_placed() {
    use zephon_operator::Attachment;
    use zephon_text::ImagePlaceholders;
    let tokenizer = Tokenizer::from_file(&data("tokenizers/qwen2_5/tokenizer.json")).unwrap();
    let (start, pad, end) = ("<|vision_start|>", "<|image_pad|>", "<|vision_end|>");
    let images = ImagePlaceholders::new(&tokenizer, "image", &format!("{start}{pad}{end}"), pad)
        .unwrap()
        .around(&tokenizer, start, end)
        .unwrap();
    let pad_id = tokenizer.token_id(pad).unwrap();
    let c = chat("qwen2_5", Some("qwen2_5_vl_training.jinja")).images(images);
    let rows = std::fs::read_to_string(data("chat/vlm.jsonl")).unwrap();
    let reference = std::fs::read_to_string(data("chat/reference/qwen2_5_vl-tagged.jsonl")).unwrap();
    let (kind, tokens) = (Field::new(columns::IMAGE), Field::new(columns::IMAGE_TOKENS));
    let mut n = 0;
    for (i, (row, line)) in rows.lines().zip(reference.lines()).enumerate() {
        let row: serde_json::Value = serde_json::from_str(row).unwrap();
        let want: serde_json::Value = serde_json::from_str(line).unwrap();
        let count = row["images"].as_array().unwrap().len();
        // Placeholder counts differ by image, as dynamic resolution makes them.
        let per_image: Vec<usize> = (0..count).map(|k| 3 + 5 * k + i % 4).collect();
        let mut r = record(&row["messages"].to_string());
        for (k, &t) in per_image.iter().enumerate().rev() {
            r.attach(Attachment::new(&kind, k as u32).with(&tokens, Value::Int(t as i64)));
        }
        let (mut ids, mut mask) = (Vec::new(), Vec::new());
        let mut widths = per_image.iter();
        let want_ids: Vec<u32> = serde_json::from_value(want["input_ids"].clone()).unwrap();
        let want_mask: Vec<u8> = serde_json::from_value(want["mask"].clone()).unwrap();
        for (&id, &m) in want_ids.iter().zip(&want_mask) {
            let times = if id == pad_id { *widths.next().unwrap() } else { 1 };
            ids.extend(std::iter::repeat_n(id, times));
            mask.extend(std::iter::repeat_n(if id == pad_id { 0 } else { m }, times));
        }
        let mut out = Vec::new();
        c.apply(r, &mut out).unwrap_or_else(|e| panic!("#{i}: {e}"));
        let got = out.pop().unwrap();
        let seq = |f: &str| got.get(f).and_then(Value::as_array).unwrap().clone();
        assert_eq!(seq(columns::TOKENS).as_u32().unwrap(), &ids[..], "#{i}: ids");
        assert_eq!(seq(columns::LOSS_MASK).as_u8().unwrap(), &mask[..], "#{i}: mask");
        let mut placed: Vec<_> = got.attachments().iter().map(|a| (a.item(), a.span().unwrap())).collect();
        placed.sort_by_key(|p| p.0);
        assert_eq!(placed.len(), count, "#{i}");
        for ((item, span), &width) in placed.iter().zip(&per_image) {
            let run = &ids[span.start() as usize..span.end() as usize];
            assert_eq!(run.len(), width + 2, "#{i} image {item}");
            assert_eq!(run[0], tokenizer.token_id(start).unwrap());
            assert!(run[1..=width].iter().all(|&t| t == pad_id) && run[width + 1] == tokenizer.token_id(end).unwrap());
        }
        n += 1;
    }
    assert_eq!(n, 43, "the reference covers every photo's conversation");
}

/// A conversation whose markers and images disagree is a bad record, as is one carrying
/// images that chat was not told to place.
#[test]
fn images_and_markers_must_agree() {
    use zephon_operator::Attachment;
    use zephon_text::ImagePlaceholders;
    let tokenizer = Tokenizer::from_file(&data("tokenizers/qwen2_5/tokenizer.json")).unwrap();
    let marker = "<|vision_start|><|image_pad|><|vision_end|>";
    let images = ImagePlaceholders::new(&tokenizer, "image", marker, "<|image_pad|>").unwrap();
    let c = chat("qwen2_5", Some("qwen2_5_vl_training.jinja")).images(images);
    let two = r#"[{"role": "user", "content": [{"type": "image"}, {"type": "image"}]}, {"role": "assistant", "content": "a"}]"#;
    let image = |k: u32| {
        Attachment::new(&Field::new(columns::IMAGE), k).with(&Field::new(columns::IMAGE_TOKENS), Value::Int(4))
    };
    let mut one = record(two);
    one.attach(image(0));
    let e = c.apply(one, &mut Vec::new()).unwrap_err().to_string();
    assert!(e.contains("2 \"<|vision_start|><|image_pad|><|vision_end|>\" markers for 1 images"), "{e}");
    let e = c.apply(record(two), &mut Vec::new()).unwrap_err().to_string();
    assert!(e.contains("markers for 0 images"), "{e}");
    let mut unplaced = record(two);
    unplaced.attach(image(0));
    let e = chat("qwen2_5", Some("qwen2_5_vl_training.jinja")).apply(unplaced, &mut Vec::new()).unwrap_err();
    assert!(e.to_string().contains("set images on chat"), "{e}");
}

/// Images' runs are never on the loss and never cut: under `loss_on = everything` only they are
/// off the loss; a long conversation truncated keeps the images that fit whole, and split, each
/// piece carries its own images whole.
#[test]
fn images_are_never_on_the_loss_nor_cut() {
    use zephon_operator::Attachment;
    use zephon_text::ImagePlaceholders;
    let tokenizer = Tokenizer::from_file(&data("tokenizers/qwen2_5/tokenizer.json")).unwrap();
    let pad = "<|image_pad|>";
    let images = ImagePlaceholders::new(&tokenizer, "image", &format!("<|vision_start|>{pad}<|vision_end|>"), pad)
        .unwrap()
        .around(&tokenizer, "<|vision_start|>", "<|vision_end|>")
        .unwrap();
    let two = r#"[{"role": "user", "content": [{"type": "text", "text": "Two pictures."}, {"type": "image"}, {"type": "image"}, {"type": "text", "text": "What is in each?"}]}, {"role": "assistant", "content": "A camera and a fish."}]"#;
    let with_images = || {
        let mut r = record(two);
        for k in 0..2 {
            r.attach(
                Attachment::new(&Field::new(columns::IMAGE), k)
                    .with(&Field::new(columns::IMAGE_TOKENS), Value::Int(40)),
            );
        }
        r
    };
    let spans = |r: &Record| -> Vec<(u32, u32)> {
        let mut s: Vec<_> =
            r.attachments().iter().map(|a| (a.span().unwrap().start(), a.span().unwrap().end())).collect();
        s.sort();
        s
    };
    let whole = {
        let c = chat("qwen2_5", Some("qwen2_5_vl_training.jinja")).images(images.clone());
        let mut out = Vec::new();
        c.apply(with_images(), &mut out).unwrap();
        out.pop().unwrap()
    };
    let (first, second) = match spans(&whole)[..] {
        [a, b] => (a, b),
        ref other => panic!("{other:?}"),
    };
    assert_eq!((first.1 - first.0, second.0), (42, first.1), "two runs of 40 pads with start and end, adjacent");
    // Under loss_on = everything, every token is on the loss but the images' runs.
    let everything = {
        let c = chat("qwen2_5", Some("qwen2_5_vl_training.jinja")).images(images.clone()).loss_on(LossOn::Everything);
        let mut out = Vec::new();
        c.apply(with_images(), &mut out).unwrap();
        out.pop().unwrap()
    };
    let mask = everything.get(columns::LOSS_MASK).and_then(Value::as_array).unwrap().as_u8().unwrap().to_vec();
    for (i, m) in mask.iter().enumerate() {
        let in_image = (first.0 as usize..second.1 as usize).contains(&i);
        assert_eq!(*m, u8::from(!in_image), "position {i}");
    }
    // A limit inside the second image.
    let limit = second.0 as usize + 5;
    let run = |policy| {
        let c = chat("qwen2_5", Some("qwen2_5_vl_training.jinja"))
            .images(images.clone())
            .long_conversations(policy, limit)
            .unwrap();
        let mut out = Vec::new();
        c.apply(with_images(), &mut out).unwrap();
        out
    };
    let kept = run(LongConversations::Truncate);
    let tokens = |r: &Record| r.get(columns::TOKENS).and_then(Value::as_array).unwrap().as_u32().unwrap().to_vec();
    assert_eq!(tokens(&kept[0]).len(), second.0 as usize, "truncated before the second image");
    assert_eq!(spans(&kept[0]), vec![first]);
    let pieces = run(LongConversations::SplitAtTurns);
    assert!(pieces.len() >= 2);
    assert_eq!(spans(&pieces[0]), vec![first]);
    assert_eq!(spans(&pieces[1]).first().map(|s| s.0), Some(0), "the second image opens the next piece");
    assert_eq!(pieces.iter().flat_map(tokens).collect::<Vec<_>>(), tokens(&whole));
    // An image longer than the limit cannot be kept whole anywhere.
    let c = chat("qwen2_5", Some("qwen2_5_vl_training.jinja"))
        .images(images)
        .long_conversations(LongConversations::SplitAtTurns, 30);
    let e = c.unwrap().apply(with_images(), &mut Vec::new()).unwrap_err().to_string();
    assert!(e.contains("longer than the length limit"), "{e}");
}
