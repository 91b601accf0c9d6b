#!/usr/bin/env python3
"""Side-by-side benchmark driver: our zephon CLI, our loader through the Python wheel
(zephon_rs), Zephon 0.2.0 (PyPI) and Grain.

Normally started by ``run.sh`` (which prepares the venv, the test data, the
Rust binary and the zephon_rs wheel). Runs the systems one after another, never
concurrently, on the same corpora, tokenizer and settings, then writes
``results/latest.json`` and ``results/latest.md``, prints the table and, last,
the ratios ours / peer and zephon_rs / peer and / CLI.

The inputs default to the test data's corpora A and B and its GPT-2
tokenizer.json; --tokenizer, --corpus-a, --corpus-b (a .jsonl file or a folder
of them), --text-field, --eos and --pad-id pick others. What depends on the
inputs (EOS id, token counts and the peers' document weights) is derived from
them. See README.md for what is measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import glob
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterable, Iterator

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))

try:
    import psutil
except Exception:  # pragma: no cover - the venv has it
    psutil = None

# Everything both sides must agree on. run.sh --quick only changes steps.
SETTINGS: dict[str, Any] = {
    "seed": 1234,
    "seq_len": 2048,
    "rows_per_step": 16,          # global batch (rows of seq_len tokens)
    "lanes": 8,                   # ours + Zephon 0.2.0 (canonical_replicas); Grain has no lanes
    "shuffle_rows_total": 512,    # = 64 rows per lane x 8 lanes
    "chunk_size": 64,             # ours [source] chunk_size; Zephon 0.2.0 WorkSource chunk_size
    "workers": 2,                 # threads (or processes, peers only) doing the per-record work
    "packing": "wrap",
    "token_share_a": 0.5,         # target share of corpus A tokens
    "exhaustion": "repeat",
    "steps_full": 200,
    "steps_quick": 30,
    "checkpoint_at": 20,
    "restore_steps": 10,          # batches read and hash-compared after a restore (peers)
}


# --------------------------------------------------------------------------- utils

def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for blk in iter(lambda: fh.read(1 << 20), b""):
            h.update(blk)
    return h.hexdigest()


def machine_info() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {
        "cpus": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
    }
    if psutil is not None:
        info["mem_total_bytes"] = psutil.virtual_memory().total
    return info


def _busy_times() -> tuple[float, float]:
    """(busy, total) CPU seconds summed over all CPUs since boot."""
    t = psutil.cpu_times()
    total = sum(t)
    idle = t.idle + getattr(t, "iowait", 0.0)
    return total - idle, total


def wait_quiet(max_wait: float, threshold_cores: float = 0.3) -> dict[str, Any]:
    """Wait (up to max_wait s) until other processes use < threshold_cores CPUs."""
    if psutil is None:
        return {}
    t0 = time.time()
    while True:
        b0, _ = _busy_times()
        time.sleep(2.0)
        b1, _ = _busy_times()
        busy = (b1 - b0) / 2.0
        waited = time.time() - t0
        if busy < threshold_cores or waited >= max_wait:
            if busy >= threshold_cores:
                log(f"machine still busy ({busy:.2f} cores used by other processes); measuring anyway")
            return {"busy_cores_before": round(busy, 2), "waited_s": round(waited, 1)}
        log(f"other processes use {busy:.2f} cores; waiting for a quiet machine "
            f"({waited:.0f}/{max_wait:.0f} s)")
        time.sleep(8.0)


class TreeRun:
    """Run a command; sample summed RSS of its process tree; account background CPU."""

    def __init__(self, cmd: list[str], log_path: str, env: dict[str, str], timeout: float) -> None:
        self.cmd, self.log_path, self.env, self.timeout = cmd, log_path, env, timeout

    def run(self) -> dict[str, Any]:
        import resource
        ch0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        busy0, _ = _busy_times() if psutil else (0.0, 0.0)
        t0 = time.perf_counter()
        peak, peak_procs, timed_out = 0, 0, False
        with open(self.log_path, "w") as logf:
            proc = subprocess.Popen(self.cmd, stdout=logf, stderr=subprocess.STDOUT, env=self.env, cwd=REPO)
            ps = psutil.Process(proc.pid) if psutil else None
            while True:
                try:
                    rc = proc.wait(timeout=0.05)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if time.perf_counter() - t0 > self.timeout:
                    timed_out = True
                    proc.kill()
                    rc = proc.wait()
                    break
                if ps is not None:
                    try:
                        procs = [ps] + ps.children(recursive=True)
                    except Exception:
                        continue
                    tot = 0
                    for p in procs:
                        try:
                            tot += p.memory_info().rss
                        except Exception:
                            pass
                    if tot > peak:
                        peak, peak_procs = tot, len(procs)
        wall = time.perf_counter() - t0
        ch1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        busy1, _ = _busy_times() if psutil else (0.0, 0.0)
        own_cpu = (ch1.ru_utime + ch1.ru_stime) - (ch0.ru_utime + ch0.ru_stime)
        bg = max(0.0, (busy1 - busy0) - own_cpu) / max(wall, 1e-9) if psutil else None
        return {"rc": rc, "timed_out": timed_out, "wall_s": round(wall, 3),
                "cpu_s": round(own_cpu, 3), "peak_rss_tree_bytes_external": peak,
                "peak_rss_tree_procs_external": peak_procs,
                "background_cpu_cores": None if bg is None else round(bg, 3)}


def measured_run(a, cmd: list[str], log_path: str, env: dict[str, str], outputs: list[str]) -> dict[str, Any]:
    """Wait for a quiet machine, run; rerun (up to --busy-retries) if others used CPU meanwhile."""
    attempts = []
    for attempt in range(1 + a.busy_retries):
        for p in outputs:
            for f in glob.glob(p + "*"):
                os.remove(f)
        quiet = wait_quiet(a.quiet_wait)
        run = TreeRun(cmd, log_path, env, a.timeout).run()
        run["quiet"] = quiet
        attempts.append({"background_cpu_cores": run["background_cpu_cores"], "wall_s": run["wall_s"],
                         "rc": run["rc"]})
        bg = run["background_cpu_cores"] or 0.0
        if run["rc"] != 0 or bg <= a.busy_threshold or attempt == a.busy_retries:
            break
        log(f"  other processes used {bg:.2f} cores during the run; measuring again")
    run["attempts"] = attempts
    return run


# ------------------------------------------------------------------ inputs

# Special tokens that end a document in common tokenizer families, looked up in this order among
# a tokenizer's special tokens: GPT-2 / GPT-4o / Qwen, Llama 3, Llama 2 / Mistral, DeepSeek,
# Gemma, ChatML.
EOS_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<｜end▁of▁sentence｜>", "<eos>", "<|im_end|>")
# Shard formats our CLI also reads from a folder; the peers read *.jsonl only.
OTHER_SHARD_SUFFIXES = (".jsonl.gz", ".jsonl.zst", ".parquet", ".tar")
STATS_CACHE = os.path.join(os.path.expanduser("~/.cache/zephon-peers"), "token_stats")
STATS_VERSION = 2  # bump when what corpus_stats counts changes


class InputError(Exception):
    """A problem with the tokenizer, the corpora or --eos/--pad-id: one line, no traceback."""


@dataclasses.dataclass
class Inputs:
    """What every system reads, resolved from the command line (or the test data defaults)."""
    tokenizer: str
    tokenizer_sha256: str
    eos: str
    eos_id: int
    eos_source: str
    pad_id: int
    text_field: str
    corpora: dict[str, dict[str, Any]]  # "a"/"b" -> path, files, bytes, docs, tokens, ...


def input_paths(a) -> dict[str, str]:
    """--corpus-a/--corpus-b/--tokenizer as absolute paths; the test data's A, B and GPT-2 for
    those not given."""
    defaults = {"a": os.path.join(a.data, "corpora", "a", "jsonl"),
                "b": os.path.join(a.data, "corpora", "b", "jsonl"),
                "tokenizer": os.path.join(a.data, "tokenizers", "gpt2", "tokenizer.json")}
    given = {"a": a.corpus_a, "b": a.corpus_b, "tokenizer": a.tokenizer}
    for key, path in given.items():
        if path is None and not os.path.exists(defaults[key]):
            flag = "--tokenizer" if key == "tokenizer" else f"--corpus-{key}"
            raise InputError(f"missing {defaults[key]} (the default for {flag}): run scripts/fetch-testdata.sh "
                             f"or give {flag}")
    return {key: os.path.abspath(path or defaults[key]) for key, path in given.items()}


def corpus_files(name: str, path: str) -> list[str]:
    """The *.jsonl shards of corpus ``name`` (one file or a folder of them); a folder that also
    holds shards of another format is refused: our CLI would read them, the peers would not."""
    from peer_common import jsonl_files  # not at the top: peer_common sets the peers' env vars
    try:
        files = jsonl_files(path)
    except ValueError as e:
        raise InputError(f"corpus {name}: {e}") from None
    if os.path.isdir(path):
        others = sorted(f for f in os.listdir(path) if f.endswith(OTHER_SHARD_SUFFIXES) and not f.startswith("."))
        if others:
            raise InputError(f"corpus {name}: {path} also holds shards of other formats ({', '.join(others[:3])}"
                             f"{', ...' if len(others) > 3 else ''}): our CLI would read them, the peers read "
                             "*.jsonl only; give a folder of *.jsonl files only")
    return files


def load_tokenizer(path: str) -> Any:
    import tokenizers
    if not os.path.isfile(path):
        raise InputError(f"tokenizer: {path}: no such file")
    try:
        return tokenizers.Tokenizer.from_file(path)
    except Exception as e:  # the library raises a bare Exception for a bad file
        raise InputError(f"tokenizer: {path}: not a tokenizer.json the `tokenizers` library can load ({e})") from None


def resolve_eos(tok: Any, path: str, eos: str | None) -> tuple[str, int, str]:
    """(token, id, where it came from): --eos, else the first of EOS_CANDIDATES among the
    tokenizer's special tokens."""
    if eos is not None:
        tid = tok.token_to_id(eos)
        if tid is None:
            raise InputError(f"--eos {eos!r}: {path} has no such token")
        return eos, tid, "--eos"
    special = {t.content: i for i, t in tok.get_added_tokens_decoder().items() if t.special}
    for cand in EOS_CANDIDATES:
        if cand in special:
            return cand, special[cand], "found among the tokenizer's special tokens"
    shown = ", ".join(sorted(special)[:12]) or "none"
    raise InputError(f"{path}: cannot tell its end-of-document token (none of {' '.join(EOS_CANDIDATES)} is among "
                     f"its special tokens: {shown}); name it with --eos TOKEN")


def resolve_pad_id(tok: Any, pad_id: int | None, eos_id: int) -> int:
    if pad_id is None:
        return eos_id
    vocab = tok.get_vocab_size(with_added_tokens=True)
    if not 0 <= pad_id < vocab:
        raise InputError(f"--pad-id {pad_id}: not an id of the tokenizer (0..{vocab - 1})")
    return pad_id


def read_texts(path: str, field: str) -> Iterator[str]:
    """The ``field`` text of every non-blank row of a JSONL file; a bad row is an InputError
    naming its line."""
    with open(path, "rb") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise InputError(f"{path}:{lineno}: not valid JSON ({e})") from None
            if not isinstance(row, dict) or field not in row:
                has = ", ".join(map(repr, row)) if isinstance(row, dict) else f"a JSON {type(row).__name__}"
                raise InputError(f"{path}:{lineno}: no field {field!r} (the row has {has or 'no fields'}); "
                                 "name the text field with --text-field")
            text = row[field]
            if not isinstance(text, str):
                raise InputError(f"{path}:{lineno}: field {field!r} holds a JSON {type(text).__name__}, not a string")
            yield text


def batches(items: Iterable[str], n: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for x in items:
        batch.append(x)
        if len(batch) == n:
            yield batch
            batch = []
    if batch:
        yield batch


def count_tokens(files: list[str], tok: Any, field: str) -> dict[str, Any]:
    """Docs and tokens (no special tokens; +1 EOS per doc) of the files."""
    docs = empty = toks = 0
    for f in files:
        for texts in batches(read_texts(f, field), 512):
            docs += len(texts)
            empty += texts.count("")
            toks += sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False))
    return {"docs": docs, "empty_docs": empty, "tokens": toks, "tokens_with_eos": toks + docs,
            "mean_tokens_per_doc_with_eos": round((toks + docs) / max(1, docs), 3)}


def file_identity(path: str) -> list[Any]:
    st = os.stat(path)
    return [os.path.realpath(path), st.st_size, st.st_mtime_ns]


def corpus_stats(name: str, files: list[str], tok: Any, tokenizer_sha256: str, field: str) -> dict[str, Any]:
    """count_tokens of one corpus, cached under a key of the files (real paths, sizes, mtimes),
    the tokenizer's sha256 and the text field: never reused for other input."""
    ident = [file_identity(f) for f in files]
    key = hashlib.sha256(json.dumps({"version": STATS_VERSION, "tokenizer_sha256": tokenizer_sha256,
                                     "text_field": field, "files": ident}).encode()).hexdigest()[:24]
    cache = os.path.join(STATS_CACHE, key + ".json")
    try:
        with open(cache) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        pass
    log(f"corpus {name}: counting its tokens once (cached in {cache}) ...")
    stats = {"key": key, "files": len(files), "bytes": sum(size for _, size, _ in ident),
             **count_tokens(files, tok, field)}
    if stats["docs"] == 0:
        raise InputError(f"corpus {name}: no documents in {', '.join(files[:3])}")
    os.makedirs(STATS_CACHE, exist_ok=True)
    with open(cache + ".tmp", "w") as fh:
        json.dump(stats, fh, indent=2)
    os.replace(cache + ".tmp", cache)
    return stats


def resolve_inputs(a, paths: dict[str, str]) -> Inputs:
    tok = load_tokenizer(paths["tokenizer"])
    sha = sha256_file(paths["tokenizer"])
    eos, eos_id, eos_source = resolve_eos(tok, paths["tokenizer"], a.eos)
    pad_id = resolve_pad_id(tok, a.pad_id, eos_id)
    files = {name: corpus_files(name, paths[name]) for name in ("a", "b")}  # both checked before counting
    corpora = {name: {"path": paths[name], **corpus_stats(name, files[name], tok, sha, a.text_field)}
               for name in ("a", "b")}
    return Inputs(tokenizer=paths["tokenizer"], tokenizer_sha256=sha, eos=eos, eos_id=eos_id,
                  eos_source=eos_source, pad_id=pad_id, text_field=a.text_field, corpora=corpora)


def mixture(corpora: dict[str, Any], mix: str, token_share_a: float) -> dict[str, Any]:
    """Doc weights for the peers and token shares for ours that describe the same mixture."""
    ma = corpora["a"]["mean_tokens_per_doc_with_eos"]
    mb = corpora["b"]["mean_tokens_per_doc_with_eos"]
    if mix == "tokens":
        ta = token_share_a
        wa = (ta / ma) / (ta / ma + (1 - ta) / mb)
    else:  # docs: 50/50 documents (the peers' native reading of "50/50")
        wa = 0.5
        ta = (wa * ma) / (wa * ma + (1 - wa) * mb)
    return {"mode": mix, "peer_doc_weight_a": round(wa, 6), "peer_doc_weight_b": round(1 - wa, 6),
            "ours_token_share_a": round(ta, 6), "ours_token_share_b": round(1 - ta, 6),
            "expected_token_share_a": round(ta, 4),
            "mean_tokens_per_doc_with_eos": {"a": ma, "b": mb}}


# ------------------------------------------------------------------ our zephon

SPEC_HEAD = """seed = {seed}
lanes = {lanes}
rows_per_step = {rows_per_step}        # global batch in rows of seq_len tokens

"""

SPEC_DATASET = """[[dataset]]
name = "{name}"
path = {path}
share = {share}               # token share
text_field = {text_field}
"""

SPEC_TAIL = """
[source]
chunk_size = {chunk_size}
exhaustion = "{exhaustion}"

[tokenize]
tokenizer = {tokenizer}
eos = {eos}

[pack]
algorithm = "{packing}"        # or "first_fit" / "best_fit"
seq_len = {seq_len}
pad_id = {pad_id}

[shuffle]
buffer = {shuffle_per_lane}               # rows, per lane

[run]
threads = {workers}
"""


def toml_str(s: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's, with non-ASCII kept as is)."""
    return json.dumps(s, ensure_ascii=False)


def ours_spec(packing: str, inputs: Inputs, mix: dict[str, Any]) -> str:
    """The spec our CLI runs: the same inputs and SETTINGS the peers get."""
    S = SETTINGS
    parts = [SPEC_HEAD.format(seed=S["seed"], lanes=S["lanes"], rows_per_step=S["rows_per_step"])]
    for name, c in inputs.corpora.items():
        parts.append(SPEC_DATASET.format(name=name, path=toml_str(c["path"]), share=mix[f"ours_token_share_{name}"],
                                         text_field=toml_str(inputs.text_field)))
        if c["empty_docs"]:  # our reader calls them bad records; the peers keep them (EOS only)
            parts.append("allow_empty = true\n")
    parts.append(SPEC_TAIL.format(
        chunk_size=S["chunk_size"], exhaustion=S["exhaustion"], tokenizer=toml_str(inputs.tokenizer),
        eos=toml_str(inputs.eos), packing=packing, seq_len=S["seq_len"], pad_id=inputs.pad_id,
        shuffle_per_lane=S["shuffle_rows_total"] // S["lanes"], workers=S["workers"]))
    return "".join(parts)


OURS_KEYS = ("tokens_per_s", "tokens_per_s_overall", "ttfb_s", "resume_ttfb_s", "checkpoint_bytes",
             "peak_rss_bytes", "steps", "tokens")


def run_ours(a, inputs: Inputs, mix, env, raw_dir, tmp) -> dict[str, Any]:
    res: dict[str, Any] = {"system": "zephon (ours)", "interface": "zephon bench (Rust CLI)"}
    if a.zephon_status:
        res["status"] = a.zephon_status
        return res
    binary = a.zephon_bin
    if not binary or not os.path.isfile(binary) or not os.access(binary, os.X_OK):
        res["status"] = "not built"
        res["detail"] = f"no executable at {binary}"
        return res
    S = SETTINGS
    spec = ours_spec(a.packing, inputs, mix)
    spec_path = os.path.join(tmp, "spec.toml")
    with open(spec_path, "w") as fh:
        fh.write(spec)
    shutil.copy(spec_path, os.path.join(raw_dir, "zephon.spec.toml"))
    out_json = os.path.join(raw_dir, "zephon.json")
    if os.path.exists(out_json):
        os.remove(out_json)
    cmd = [binary, "bench", "--spec", spec_path, "--steps", str(a.steps),
           "--checkpoint-at", str(a.ckpt_step), "--json-out", out_json]
    res["command"] = " ".join(cmd)
    st = os.stat(binary)
    res["binary"] = {"path": binary, "bytes": st.st_size,
                     "mtime": _dt.datetime.fromtimestamp(st.st_mtime, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    log("running zephon (ours): " + " ".join(cmd))
    log_path = os.path.join(raw_dir, "zephon.log")
    run = measured_run(a, cmd, log_path, env, [out_json])
    res["run"] = run
    tail = ""
    try:
        with open(log_path, errors="replace") as fh:
            tail = fh.read()[-2000:]
    except OSError:
        pass
    if run["timed_out"]:
        res["status"] = f"failed (timeout after {a.timeout:.0f} s)"
        res["log_tail"] = tail
        return res
    data = None
    if os.path.exists(out_json):
        try:
            with open(out_json) as fh:
                data = json.load(fh)
        except ValueError as e:
            res["status"] = f"failed (bad JSON: {e})"
            res["log_tail"] = tail
            return res
    if data is None:
        low = tail.lower()
        # A binary without `bench` (ZEPHON_BIN may name any build): a stub exits 0 without
        # output; clap says "unrecognized subcommand" (or "unexpected argument") for a
        # subcommand or flag it does not have.
        if run["rc"] == 0 or any(m in low for m in ("unrecognized subcommand", "unexpected argument",
                                                    "no such subcommand")):
            res["status"] = "not built"
            res["detail"] = f"`zephon bench` wrote no JSON (rc={run['rc']}); this binary has no such subcommand"
        else:
            res["status"] = f"failed (rc={run['rc']})"
        res["log_tail"] = tail
        return res
    missing = [k for k in OURS_KEYS if k not in data]
    res["status"] = "ok" if run["rc"] == 0 and not missing else f"incomplete (rc={run['rc']}, missing {missing})"
    res["raw"] = data
    rss_ext = run["peak_rss_tree_bytes_external"]
    res["summary"] = {
        "config": f"CLI, {S['workers']} threads, {S['lanes']} lanes",
        "tokens_per_s": data.get("tokens_per_s"),
        "tokens_per_s_overall": data.get("tokens_per_s_overall"),
        "ttfb_s": data.get("ttfb_s"),
        "ttfb_from_process_start_s": data.get("ttfb_s"),
        "resume_ttfb_s": data.get("resume_ttfb_s"),
        "checkpoint_bytes": data.get("checkpoint_bytes"),
        "checkpoint_bytes_zstd": None,
        # The CLI runs the fresh and the resumed pipeline as child processes and reports the
        # larger peak of the two; its own process later times the bare tokenizer, which the
        # external tree sample would include, so the self-reported figure is the one to compare.
        "peak_rss_bytes": data.get("peak_rss_bytes") or rss_ext,
        "peak_rss_tree_bytes_external": rss_ext,
        "resume_matches": data.get("resume_matches"),
        "pad_fraction": data.get("pad_fraction"),
        "background_cpu_cores": run["background_cpu_cores"],
    }
    return res


# ------------------------------------------------------------------ our zephon through the Python wheel

ZEPHON_RS_LABEL = "zephon_rs (Python)"
CLI_LABEL = "zephon (ours)"


def zephon_rs_module(python: str, env: dict[str, str]) -> dict[str, Any] | None:
    """The version and file of the zephon_rs the peer venv imports, or None without one."""
    try:
        p = subprocess.run([python, "-c", "import json, zephon_rs; print(json.dumps({'version': "
                            "zephon_rs.__version__, 'native': zephon_rs._native.__file__}))"],
                           capture_output=True, text=True, env=env, timeout=60)
        info = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else None
    except Exception:
        return None
    if info and os.path.exists(info.get("native") or ""):
        st = os.stat(info["native"])
        info["native_bytes"] = st.st_size
        info["native_mtime"] = _dt.datetime.fromtimestamp(st.st_mtime, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return info


def run_ours_py(a, inputs: Inputs, mix, env, raw_dir, tmp) -> dict[str, Any]:
    """Our loader through the wheel: peer_zephon_rs.py on the spec the CLI gets, measured by
    peer_common.py as the peers are."""
    S = SETTINGS
    res: dict[str, Any] = {"system": ZEPHON_RS_LABEL, "interface": "zephon_rs.Loader (Python wheel)", "runs": {}}
    if a.zephon_rs_status:
        res["status"] = a.zephon_rs_status
        return res
    module = zephon_rs_module(a.python, env)
    if module is None:
        res["status"] = "not installed"
        res["detail"] = (f"{a.python} cannot import zephon_rs (run.sh builds the wheel and installs it into the "
                         "peer venv unless --no-build)")
        return res
    res["module"] = module
    spec_path = os.path.join(tmp, "zephon_rs.spec.toml")
    with open(spec_path, "w") as fh:
        fh.write(ours_spec(a.packing, inputs, mix))
    shutil.copy(spec_path, os.path.join(raw_dir, "zephon_rs.spec.toml"))
    out_json = os.path.join(raw_dir, "peer-zephon_rs.json")
    for p in glob.glob(out_json + "*"):
        os.remove(p)
    cmd = [a.python, os.path.join(HERE, "peer_zephon_rs.py"), "--spec", spec_path, "--threads", str(S["workers"]),
           "--steps", str(a.steps), "--ckpt-step", str(a.ckpt_step),
           "--restore-steps", str(min(S["restore_steps"], a.steps - a.ckpt_step)), "--json-out", out_json]
    log(f"running {ZEPHON_RS_LABEL} {module['version']}, {S['workers']} threads, {a.steps} steps ...")
    config = f"Python wheel, {S['workers']} threads, {S['lanes']} lanes"
    entry = peer_entry(a, "peer-zephon_rs", cmd, config, "thread", env, raw_dir, out_json)
    res["runs"]["thread"] = entry
    if entry.get("status") == "ok":
        res["status"] = "ok"
        res["best"] = "thread"
        res["summary"] = entry["summary"]
    else:
        res["status"] = entry.get("status", "failed")
        res["detail"] = f"see {os.path.join(raw_dir, 'peer-zephon_rs.log')}"
    return res


# ------------------------------------------------------------------ peers

def peer_entry(a, tag: str, cmd: list[str], config: str, kind: str, env, raw_dir, out_json: str) -> dict[str, Any]:
    """Run one peer_*.py measurement (peer_common.py) and summarise its JSON."""
    log_path = os.path.join(raw_dir, f"{tag}.log")
    run = measured_run(a, cmd, log_path, env, [out_json])
    entry: dict[str, Any] = {"command": " ".join(cmd), "run": run}
    if run["rc"] != 0 or not os.path.exists(out_json):
        with open(log_path, errors="replace") as fh:
            entry["log_tail"] = fh.read()[-3000:]
        entry["status"] = "timeout" if run["timed_out"] else f"failed (rc={run['rc']})"
        log(f"  {entry['status']}")
        return entry
    with open(out_json) as fh:
        data = json.load(fh)
    m, r = data["main"], data.get("restore", {})
    for k in ("hashes", "expected"):
        r.pop(k, None)
    entry["status"] = "ok"
    entry["raw"] = data
    store = m.get("ckpt_bytes_store")  # zephon_rs: the state dict's bytes as a store keeps them
    entry["summary"] = {
        "config": config,
        "worker_kind": kind,
        "tokens_per_s": m["tokens_per_s_after_first"],
        "tokens_per_s_overall": m["tokens_per_s_overall"],
        "ttfb_s": m["ttfb_s"],
        "ttfb_from_process_start_s": m["ttfb_from_process_start_s"],
        "resume_ttfb_s": r.get("ttfb_after_restore_s"),
        "resume_ttfb_from_process_start_s": r.get("ttfb_after_restore_from_process_start_s"),
        "checkpoint_bytes": m["ckpt_bytes_json"] if store is None else store,
        "checkpoint_bytes_zstd": m.get("ckpt_bytes_json_zstd") if store is None else None,
        "peak_rss_bytes": m["peak_rss_tree_bytes"],
        "peak_rss_procs": m["peak_rss_tree_procs"],
        "resume_matches": r.get("matches_original"),
        "pad_fraction": m["pad_fraction"],
        "cpu_s": round(m.get("cpu_s_self", 0) + m.get("cpu_s_children", 0), 2),
        "background_cpu_cores": run["background_cpu_cores"],
    }
    s = entry["summary"]
    log(f"  {fmt_rate(s['tokens_per_s'])} tok/s steady, {fmt_rate(s['tokens_per_s_overall'])} overall, "
        f"TTFB {fmt_s(s['ttfb_s'])}, resume TTFB {fmt_s(s['resume_ttfb_s'])}, "
        f"resume identical: {s['resume_matches']}")
    return entry


def run_peer(name, a, inputs: Inputs, mix, env, raw_dir) -> dict[str, Any]:
    S = SETTINGS
    label = {"zephon": "Zephon 0.2.0 (PyPI)", "grain": "Grain"}[name]
    res: dict[str, Any] = {"system": label, "runs": {}}
    for kind in a.worker_kinds:
        out_json = os.path.join(raw_dir, f"peer-{name}-{kind}.json")
        for p in glob.glob(out_json + "*"):
            os.remove(p)
        cmd = [a.python, os.path.join(HERE, f"peer_{name}.py"),
               "--corpus-a", inputs.corpora["a"]["path"], "--corpus-b", inputs.corpora["b"]["path"],
               "--tokenizer", inputs.tokenizer, f"--text-field={inputs.text_field}", f"--eos={inputs.eos}",
               "--pad-id", str(inputs.pad_id),
               "--weight-a", str(mix["peer_doc_weight_a"]),
               "--seq-len", str(S["seq_len"]), "--batch-size", str(S["rows_per_step"]),
               "--steps", str(a.steps), "--ckpt-step", str(a.ckpt_step),
               "--restore-steps", str(min(S["restore_steps"], a.steps - a.ckpt_step)),
               "--workers", str(S["workers"]), "--worker-kind", kind,
               "--packing", a.packing, "--shuffle-buffer", str(S["shuffle_rows_total"]),
               "--seed", str(S["seed"]), "--json-out", out_json]
        if name == "zephon":
            cmd += ["--lanes", str(S["lanes"]), "--zephon-chunk-size", str(S["chunk_size"])]
        log(f"running {label}, {S['workers']} {kind} workers, {a.steps} steps ...")
        config = f"{S['workers']} {'threads' if kind == 'thread' else 'processes'}"
        res["runs"][kind] = peer_entry(a, f"peer-{name}-{kind}", cmd, config, kind, env, raw_dir, out_json)
    ok = {k: v for k, v in res["runs"].items() if v.get("status") == "ok"}
    if ok:
        # "Faster" = higher end-to-end rate (first batch included): the steady
        # figure of a block/window shuffle swings with where the run ends.
        best = max(ok, key=lambda k: ok[k]["summary"]["tokens_per_s_overall"] or 0)
        res["best"] = best
        res["status"] = "ok"
        res["summary"] = ok[best]["summary"]
    else:
        res["status"] = "failed"
    return res


# ------------------------------------------------------------------ report

def fmt_rate(v) -> str:
    if v is None:
        return "–"
    if v >= 1e6:
        return f"{v / 1e6:.2f} M"
    return f"{v / 1e3:.0f} k"


def fmt_s(v) -> str:
    return "–" if v is None else f"{v:.2f} s"


def fmt_bytes(v) -> str:
    if v is None:
        return "–"
    if v >= 1 << 20:
        return f"{v / (1 << 20):.0f} MiB"
    if v >= 1 << 10:
        return f"{v / 1024:.1f} KiB"
    return f"{v} B"


def table_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for key in ("zephon", "zephon_rs", "zephon-0.2.0", "grain"):
        r = results.get(key)
        if r is None:
            continue
        if r.get("status") != "ok" or "summary" not in r:
            st = r.get("status", "?")
            rows.append([f"{key}: {st}" if key == "zephon" else f"{r['system']}: {st}"] + ["–"] * 8)
            continue
        s = r["summary"]
        cfg = s["config"] + (" (faster of " + "/".join(r["runs"]) + ")" if len(r.get("runs", {})) > 1 else "")
        if r.get("carried_over_from"):
            cfg += f"; measured {r['carried_over_from']}"
        ck = fmt_bytes(s["checkpoint_bytes"])
        if s.get("checkpoint_bytes_zstd"):
            ck += f" ({fmt_bytes(s['checkpoint_bytes_zstd'])} zstd)"
        rows.append([r["system"], cfg, fmt_rate(s["tokens_per_s"]), fmt_rate(s["tokens_per_s_overall"]),
                     fmt_s(s["ttfb_s"]) + (f" / {s['ttfb_from_process_start_s']:.2f}"
                                            if key != "zephon" and s.get("ttfb_from_process_start_s") else ""),
                     fmt_s(s["resume_ttfb_s"]), ck, fmt_bytes(s["peak_rss_bytes"]),
                     {True: "yes", False: "NO", None: "–"}[s.get("resume_matches")]])
    return rows


def all_runs_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for key in ("zephon_rs", "zephon-0.2.0", "grain"):
        r = results.get(key)
        if not r:
            continue
        for kind, e in r.get("runs", {}).items():
            if e.get("status") != "ok":
                rows.append([r["system"], kind, e.get("status", "?")] + ["–"] * 6)
                continue
            s = e["summary"]
            rows.append([r["system"], s["config"] + (" ★" if r.get("best") == kind and key != "zephon_rs" else ""),
                         fmt_rate(s["tokens_per_s"]), fmt_rate(s["tokens_per_s_overall"]), fmt_s(s["ttfb_s"]),
                         fmt_s(s["resume_ttfb_s"]), fmt_bytes(s["peak_rss_bytes"]) + f" ({s['peak_rss_procs']} procs)",
                         f"{s['cpu_s']:.{1 if s['cpu_s'] < 10 else 0}f} s", f"{s['background_cpu_cores']:.2f}"
                         if s.get("background_cpu_cores") is not None else "–"])
    return rows


def md_table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def short_path(path: str) -> str:
    home = os.path.expanduser("~")
    return "~" + path[len(home):] if path.startswith(home + os.sep) else path


def inputs_lines(i: dict[str, Any]) -> list[str]:
    """The report's list of what every system read."""
    lines = ["Inputs (the same for every system):", "",
             f"* tokenizer `{short_path(i['tokenizer'])}` (sha256 {i['tokenizer_sha256'][:12]}); EOS "
             f"`{i['eos']}` = {i['eos_id']} ({i['eos_source']}), appended to every document; pad id "
             f"{i['pad_id']}; text field `{i['text_field']}`"]
    for name, c in i["corpora"].items():
        empty = f", {c['empty_docs']:,} of them empty" if c["empty_docs"] else ""
        lines.append(f"* corpus {name.upper()}: `{short_path(c['path'])}` ({c['files']} file"
                     f"{'s' if c['files'] != 1 else ''}, {c['docs']:,} rows{empty}, {fmt_bytes(c['bytes'])}; "
                     f"{c['tokens_with_eos'] / 1e6:.2f} M tokens with EOS, "
                     f"{c['mean_tokens_per_doc_with_eos']:.1f} per document)")
    return lines


def ok_summary(r: dict[str, Any] | None) -> dict[str, Any] | None:
    return r["summary"] if r and r.get("status") == "ok" and r.get("summary") else None


def ratios(results: dict[str, Any], ours_key: str = "zephon",
           others: tuple[str, ...] = ("zephon-0.2.0", "grain")) -> dict[str, dict[str, float | None]]:
    """Ours (``ours_key``: the CLI, or zephon_rs) / each of ``others``, steady and overall
    tokens/s (systems that did not run are left out)."""
    ours = ok_summary(results.get(ours_key))
    out: dict[str, dict[str, float | None]] = {}
    for key in others:
        peer = ok_summary(results.get(key))
        if ours and peer:
            out[results[key]["system"]] = {
                m: round(ours[m] / peer[m], 2) if ours.get(m) and peer.get(m) else None
                for m in ("tokens_per_s", "tokens_per_s_overall")}
    return out


def ratio_line(r: dict[str, dict[str, float | None]]) -> str:
    if not r:
        return "Ratios: none (ours or every peer did not run)."
    x = lambda v: "–" if v is None else f"{v:.1f}x"  # noqa: E731
    return "Ratios, ours / peer (tokens/s): " + "; ".join(
        f"{system} {x(v['tokens_per_s'])} steady, {x(v['tokens_per_s_overall'])} overall" for system, v in r.items())


def ratios_zephon_rs(results: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """zephon_rs / each peer and zephon_rs / our CLI (keyed by the systems' names)."""
    return ratios(results, "zephon_rs", ("zephon-0.2.0", "grain", "zephon"))


def ratio_line_zephon_rs(r: dict[str, dict[str, float | None]]) -> str:
    if not r:
        return f"Ratios, {ZEPHON_RS_LABEL}: none ({ZEPHON_RS_LABEL} or every other system did not run)."
    x = lambda v, d: "–" if v is None else f"{v:.{d}f}x"  # noqa: E731
    peers = {k: v for k, v in r.items() if k != CLI_LABEL}
    parts = []
    if peers:
        parts.append(f"Ratios, {ZEPHON_RS_LABEL} / peer (tokens/s): " + "; ".join(
            f"{system} {x(v['tokens_per_s'], 1)} steady, {x(v['tokens_per_s_overall'], 1)} overall"
            for system, v in peers.items()))
    if CLI_LABEL in r:
        v = r[CLI_LABEL]
        parts.append(f"{ZEPHON_RS_LABEL} / zephon CLI (the Python-side overhead): {x(v['tokens_per_s'], 2)} steady, "
                     f"{x(v['tokens_per_s_overall'], 2)} overall")
    return ". ".join(parts) + "."


def render_md(doc: dict[str, Any]) -> str:
    S, m, mach = doc["settings"], doc["mixture"], doc["machine"]
    res = doc["results"]
    lines = [f"# zephon (CLI and Python) vs Zephon 0.2.0 vs Grain ({doc['mode']} run, {doc['generated_at']})", ""]
    lines.append(f"Machine: {mach['cpus']} CPUs ({mach.get('cpu_model', '')}), "
                 f"{(mach.get('mem_total_bytes') or 0) / 2**30:.0f} GiB RAM, Linux {mach['kernel']}, "
                 f"Python {mach['python']}. Versions: {doc.get('versions_line', '')}.")
    lines.append("")
    lines += inputs_lines(doc["inputs"])
    lines.append("")
    lines.append(f"Settings: EOS per doc, "
                 f"mix {m['mode']} ({'50/50 tokens' if m['mode'] == 'tokens' else '50/50 documents'}: peers sample "
                 f"docs with weight A={m['peer_doc_weight_a']:.4f}, ours plans token share "
                 f"A={m['ours_token_share_a']:.4f}), pack `{S['packing']}` to {S['seq_len']}, shuffle "
                 f"{S['shuffle_rows_total']} packed rows in total, {S['rows_per_step']} rows/step, "
                 f"{S['workers']} workers, {doc['steps']} steps "
                 f"({doc['steps'] * S['rows_per_step'] * S['seq_len'] / 1e6:.2f} M tokens), checkpoint at step "
                 f"{doc['checkpoint_at']}, restore in a fresh process.")
    lines.append("")
    hdr = ["system", "config", "tokens/s (steady)", "tokens/s (overall)", "TTFB (pipeline / from process start)",
           "resume TTFB", "checkpoint", "peak RSS (tree)", "resume identical"]
    lines.append(md_table(hdr, table_rows(res)))
    lines.append("")
    lines.append(ratio_line(doc["ratios"]))
    lines.append("")
    if "zephon_rs" in res:
        lines.append(ratio_line_zephon_rs(doc.get("ratios_zephon_rs") or {}))
        lines.append("")
    runs = all_runs_rows(res)
    if runs:
        lines.append("Every Python run: zephon_rs and each peer configuration (★ = the peer's faster by overall "
                     "tokens/s, shown above):")
        lines.append("")
        lines.append(md_table(["system", "config", "tokens/s (steady)", "tokens/s (overall)", "TTFB", "resume TTFB",
                               "peak RSS", "CPU time", "background CPU (cores)"], runs))
        lines.append("")
    if doc["steps"] * S["rows_per_step"] <= 2 * S["shuffle_rows_total"]:
        lines.append(f"**Note:** {doc['steps']} steps x {S['rows_per_step']} rows is at most twice the "
                     f"{S['shuffle_rows_total']}-row shuffle buffer, so most of the run is served from the "
                     "buffer filled before the first batch: the steady tokens/s figures are not meaningful "
                     "here. Use the full run for throughput.")
        lines.append("")
    for key, name in (("zephon", CLI_LABEL), ("zephon_rs", ZEPHON_RS_LABEL)):
        z = res.get(key)
        if z and z.get("status") != "ok":
            lines.append(f"{name}: {z.get('status')}" + (f" — {z['detail']}" if z.get("detail") else ""))
            lines.append("")
    lines.append("tokens/s = non-pad tokens delivered per second after the first batch (steady) or from "
                 "pipeline build (overall). TTFB = pipeline build to first batch, in process (the second "
                 "figure for the Python rows adds Python start-up and imports). Resume TTFB = restore of the step-"
                 f"{doc['checkpoint_at']} checkpoint to the first batch after it, fresh process. Checkpoint = "
                 "bytes of the state as JSON (peers) / as written by the CLI (ours) / of the `state_dict()`'s "
                 "bytes values plus 8 per int (zephon_rs). zephon_rs runs the CLI's spec through the Python "
                 "wheel, measured as the peers are (`step.batch()` every step). Peak RSS = RSS summed over "
                 "the live process tree, sampled every 50 ms (double-counts pages shared between processes). "
                 "See benches/peers/README.md for every difference between the pipelines.")
    bg = [(k, r) for k, r in res.items() if isinstance(r, dict)]
    busy = []
    for k, r in bg:
        for kind, e in (r.get("runs") or {"": r}).items():
            c = (e.get("run") or {}).get("background_cpu_cores")
            if c is not None and c > 0.15:
                busy.append(f"{r.get('system', k)} {kind}".strip() + f": {c:.2f}")
    if busy:
        lines.append("")
        lines.append("**Warning:** other processes used CPU during these runs (cores, averaged): "
                     + "; ".join(busy) + ". Rerun on a quiet machine for clean numbers.")
    return "\n".join(lines) + "\n"


def carry_over(results: dict[str, Any], a, prev_path: str, mix: dict[str, Any], inputs: dict[str, Any]) -> None:
    """Keep the systems this run skipped (--zephon-only / --peers-only) from the previous
    latest.json, if that run used the same settings and inputs (files, tokenizer, EOS, pad id,
    text field), so the table stays side by side."""
    try:
        with open(prev_path) as fh:
            prev = json.load(fh)
    except (OSError, ValueError):
        return
    same = (prev.get("steps") == a.steps and prev.get("checkpoint_at") == a.ckpt_step
            and prev.get("mixture", {}).get("mode") == mix["mode"]
            and prev.get("settings", {}).get("packing") == a.packing
            and all(prev.get("settings", {}).get(k) == SETTINGS[k] for k in
                    ("seed", "seq_len", "rows_per_step", "lanes", "shuffle_rows_total", "chunk_size", "workers"))
            and prev.get("inputs") == inputs)
    if not same:
        return
    for key, r in prev.get("results", {}).items():
        if key in results or not isinstance(r, dict) or r.get("status") != "ok":
            continue
        r = dict(r)
        r.setdefault("carried_over_from", prev.get("generated_at"))
        results[key] = r
        log(f"{key}: reusing the result of {r['carried_over_from']} (same settings; not rerun now)")


# ------------------------------------------------------------------ main

SYSTEMS = ("cli", "zephon_rs", "zephon-0.2.0", "grain")  # --systems names, in the order they run


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"{SETTINGS['steps_quick']} steps instead of "
                    f"{SETTINGS['steps_full']}")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--zephon-only", action="store_true", help="run only our zephon CLI")
    g.add_argument("--peers-only", action="store_true", help="run only Zephon 0.2.0 and Grain")
    g.add_argument("--systems", default=None,
                   help="comma list of the systems to run, among " + ", ".join(SYSTEMS) + " (default: all, "
                        "the peers as --peers says; --zephon-only = cli, --peers-only = zephon-0.2.0,grain)")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--ckpt-step", type=int, default=SETTINGS["checkpoint_at"])
    ap.add_argument("--mix", choices=("tokens", "docs"), default="tokens",
                    help="tokens (default): 50/50 token share, peers get the document weights that give it; "
                         "docs: 50/50 documents, ours gets the token share that gives it")
    ap.add_argument("--packing", choices=("wrap", "first_fit"), default=SETTINGS["packing"])
    ap.add_argument("--worker-kinds", default="thread,process",
                    help="peer worker kinds to try (comma list of thread, process); the faster is reported")
    ap.add_argument("--peers", default="zephon,grain", help="which peers (comma list)")
    ins = ap.add_argument_group("inputs", "what every system reads (default: the test data's corpora A and B "
                                "and the GPT-2 tokenizer.json under --data)")
    ins.add_argument("--tokenizer", default=None, help="an HF tokenizer.json")
    ins.add_argument("--corpus-a", default=None, help="corpus A: a .jsonl file or a folder of *.jsonl shards")
    ins.add_argument("--corpus-b", default=None, help="corpus B: a .jsonl file or a folder of *.jsonl shards")
    ins.add_argument("--text-field", default="text", help="the JSONL field holding the text (default: text)")
    ins.add_argument("--eos", default=None,
                     help="token appended to every document (default: the first of " + " ".join(EOS_CANDIDATES)
                          + " among the tokenizer's special tokens)")
    ins.add_argument("--pad-id", type=int, default=None, help="padding id (default: the EOS id)")
    ins.add_argument("--data", default=os.environ.get("ZEPHON_TESTDATA") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "zephon-testdata"),
        help="test data root (as scripts/fetch-testdata.sh: $ZEPHON_TESTDATA or $XDG_CACHE_HOME/zephon-testdata)")
    ap.add_argument("--zephon-bin", default=os.path.join(REPO, "target", "release", "zephon"))
    ap.add_argument("--zephon-status", default=None, help=argparse.SUPPRESS)  # set by run.sh on build failure
    ap.add_argument("--zephon-rs-status", default=None, help=argparse.SUPPRESS)  # set by run.sh: wheel not built
    ap.add_argument("--python", default=sys.executable, help="interpreter of the peer venv")
    ap.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    ap.add_argument("--quiet-wait", type=float, default=120.0,
                    help="before each run, wait up to this many seconds for other processes to go idle")
    ap.add_argument("--busy-retries", type=int, default=1,
                    help="rerun a measurement up to this many times when other processes used more than "
                         "--busy-threshold cores during it")
    ap.add_argument("--busy-threshold", type=float, default=0.3, help="cores (see --busy-retries)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="per run, seconds")
    a = ap.parse_args()
    a.steps = a.steps or (SETTINGS["steps_quick"] if a.quick else SETTINGS["steps_full"])
    if not 0 < a.ckpt_step < a.steps:
        ap.error("--ckpt-step must be in (0, steps)")
    a.worker_kinds = [k for k in a.worker_kinds.split(",") if k]
    peer_systems = {"zephon": "zephon-0.2.0", "grain": "grain"}
    if a.systems is not None:
        chosen = [x.strip() for x in a.systems.split(",") if x.strip()]
        bad = [x for x in chosen if x not in SYSTEMS]
        if bad or not chosen:
            ap.error(f"--systems: {', '.join(bad) or 'empty'}; choose among {', '.join(SYSTEMS)}")
    elif a.zephon_only:
        chosen = ["cli"]
    else:
        bad = [p for p in a.peers.split(",") if p and p not in peer_systems]
        if bad:
            ap.error(f"--peers: {', '.join(bad)}; choose among zephon, grain")
        chosen = ([] if a.peers_only else ["cli", "zephon_rs"]) + [peer_systems[p] for p in a.peers.split(",") if p]
    a.systems = [x for x in SYSTEMS if x in chosen]
    return a


def system_versions(python: str, env: dict[str, str]) -> dict[str, str]:
    """Our git revision and the peer venv's library versions (those that can be found)."""
    versions = {}
    try:
        rev = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"], capture_output=True,
                             text=True).stdout.strip()
        if rev:
            versions["ours"] = f"git {rev}"
    except OSError:
        pass
    try:
        v = subprocess.run([python, "-c", "import json, zephon, grain, tokenizers, transformers, numpy; "
                            "print(json.dumps({'zephon': zephon.__version__, 'grain': grain.__version__, "
                            "'tokenizers': tokenizers.__version__, 'transformers': transformers.__version__, "
                            "'numpy': numpy.__version__}))"], capture_output=True, text=True, env=env)
        versions.update(json.loads(v.stdout.strip().splitlines()[-1]))
    except Exception:
        pass
    module = zephon_rs_module(python, env)
    if module:
        versions["zephon_rs"] = module["version"]
    return versions


def run_all(a, inputs: Inputs, mix, env, raw_dir, versions) -> dict[str, Any]:
    """Ours (CLI, then the wheel), then each peer, one after another (those in --systems)."""
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="zephon-bench-") as tmp:
        if "cli" in a.systems:
            results["zephon"] = run_ours(a, inputs, mix, env, raw_dir, tmp)
            log(f"zephon (ours): {results['zephon'].get('status')}")
        if "zephon_rs" in a.systems:
            results["zephon_rs"] = run_ours_py(a, inputs, mix, env, raw_dir, tmp)
            log(f"{ZEPHON_RS_LABEL}: {results['zephon_rs'].get('status')}")
        if "zephon-0.2.0" in a.systems:
            results["zephon-0.2.0"] = run_peer("zephon", a, inputs, mix, env, raw_dir)
            results["zephon-0.2.0"]["system"] = f"Zephon {versions.get('zephon', '0.2.0')} (PyPI)"
        if "grain" in a.systems:
            results["grain"] = run_peer("grain", a, inputs, mix, env, raw_dir)
            results["grain"]["system"] = f"Grain {versions.get('grain', '')}".strip()
    return results


def main() -> None:
    a = parse_args()
    try:
        paths = input_paths(a)
        inputs = resolve_inputs(a, paths)
    except InputError as e:
        sys.exit(f"bench_peers.py: {e}")
    log(f"tokenizer {inputs.tokenizer}, EOS {inputs.eos!r} = {inputs.eos_id}, pad id {inputs.pad_id}, "
        f"text field {inputs.text_field!r}; corpora A {inputs.corpora['a']['path']}, B {inputs.corpora['b']['path']}")

    raw_dir = os.path.join(a.out_dir, "raw")
    os.makedirs(raw_dir, exist_ok=True)
    env = dict(os.environ)
    # Parallelism comes from each loader's own workers only.
    env.update({"TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
                "OMP_NUM_THREADS": "1"})

    mix = mixture(inputs.corpora, a.mix, SETTINGS["token_share_a"])
    log(f"mixture: {json.dumps(mix)}")
    versions = system_versions(a.python, env)
    results = run_all(a, inputs, mix, env, raw_dir, versions)
    inputs_doc = dataclasses.asdict(inputs)
    carry_over(results, a, os.path.join(a.out_dir, "latest.json"), mix, inputs_doc)
    doc = {
        "generated_at": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "mode": "quick" if a.quick else ("full" if a.steps == SETTINGS["steps_full"] else "custom"),
        "steps": a.steps, "checkpoint_at": a.ckpt_step,
        "machine": machine_info(), "versions": versions,
        "versions_line": ", ".join(f"{k} {v}" for k, v in versions.items()),
        "settings": {**SETTINGS, "packing": a.packing, "worker_kinds_tried": a.worker_kinds,
                     "tokenizer_sha256": inputs.tokenizer_sha256, "paths": paths},
        "inputs": inputs_doc, "corpus_stats": inputs.corpora, "mixture": mix, "results": results,
        "ratios": ratios(results),
        "ratios_zephon_rs": ratios_zephon_rs(results),
    }
    md = render_md(doc)
    stem = "latest"
    with open(os.path.join(a.out_dir, stem + ".json"), "w") as fh:
        json.dump(doc, fh, indent=2)
    with open(os.path.join(a.out_dir, stem + ".md"), "w") as fh:
        fh.write(md)
    print(md)
    log(f"wrote {os.path.join(a.out_dir, stem + '.json')} and .md")
    print(ratio_line(doc["ratios"]))
    if "zephon_rs" in results:
        print(ratio_line_zephon_rs(doc["ratios_zephon_rs"]))


if __name__ == "__main__":
    main()
