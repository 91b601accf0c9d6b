#!/usr/bin/env python3
"""Chat benchmark (issue 33): conversations/s and tokens/s of our zephon (`[chat]`, the CLI) against
Zephon 0.2.0's `Pipeline.tokenize_chat` (PyPI), on the same conversations, template, tokenizer and
packing, side by side. Normally started by ``chat.sh`` (which builds the CLI and prepares the venv).

Both systems do the same work: read the conversations (JSONL), render each with the same Jinja
template (TRL's Llama-3.1 training template, with ``{% generation %}`` blocks), tokenize the
rendered text with the same tokenizer.json, build the assistant-only loss mask from the generation
blocks, and pack conversations best-fit into rows of 2048 tokens (64 open rows per lane, 8 lanes,
16 rows a step), with 2 worker threads, for the same number of passes over the data, delivering
every conversation (ours: ``[run] tail = "partial"``; theirs: ``batch(drop_last=False)``).

    ours   zephon run --spec S (S: [chat] tokenizer/template/variables, [pack] best_fit, [source]
           exhaustion = "stop", passes = P, [run] threads = 2, tail = "partial")
    theirs Dataset.from_path(folder with the .jsonl, fmt="jsonl")
           StaticMixtureWorkSource([ds], {docs: 1}, chunk_size, seed, shuffle_within_shard=True,
                                   exhausted_policy="repeat", stop_after_passes=P)
           Pipeline(ws).tokenize_chat(tokenizer=PreTrainedTokenizerFast(tokenizer.json +
                                      tokenizer_config.json), chat_template=<the same .jinja>,
                                      span_source="generation_tags", loss_scope="all_assistant")
                       .pack_flat(2048, algorithm="best_fit", num_bins=64, pad_token_id=128001)
                       .batch(rows_per_step / lanes, drop_last=False)
                       .options(canonical_replicas=8, max_workers=2, runner="threads"|"process",
                                worker_allocation="per_stage_fixed")

Sub-commands:
    (none)       the driver: checks tokens per conversation on both sides, then alternates timed
                 runs (ours, theirs, ours, theirs, ...) and writes results/chat-latest.{md,json}
    peer         one timed Zephon 0.2.0 run (a fresh process each time; writes --json-out)
    peer-counts  tokens and supervised tokens per conversation from Zephon 0.2.0 (one pass, in
                 stored order, no packing), for the token check
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

# Everything both sides must agree on.
SETTINGS: dict[str, Any] = {
    "seed": 5,
    "lanes": 8,
    "rows_per_step": 16,
    "seq_len": 2048,
    "bins": 64,                 # open rows per lane (ours [pack] bins; theirs num_bins per lane)
    "pad_id": 128001,           # <|end_of_text|>
    "chunk_size": 179,          # conversations per work chunk (ours [source] chunk_size; theirs
                                # chunk_size): 1611 = 9 x 179. Zephon 0.2.0 leaves out the last,
                                # partial chunk of every pass (256 would deliver 1536 of 1611)
    "workers": 2,               # threads doing the per-record work, each side
    "bos_token": "<|begin_of_text|>",
    "eos_token": "<|eot_id|>",  # the tokenizer_config.json's; theirs appends it when a render lacks it
}


def log(msg: str) -> None:
    print(f"[chat] {msg}", file=sys.stderr, flush=True)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for blk in iter(lambda: fh.read(1 << 20), b""):
            h.update(blk)
    return h.hexdigest()


def data_paths(data: str) -> dict[str, str]:
    return {
        "conversations": os.path.join(data, "chat", "conversations.jsonl"),
        "tokenizer_dir": os.path.join(data, "tokenizers", "llama3_1"),
        "tokenizer": os.path.join(data, "tokenizers", "llama3_1", "tokenizer.json"),
        "tokenizer_config": os.path.join(data, "tokenizers", "llama3_1", "tokenizer_config.json"),
        "template": os.path.join(data, "chat", "templates", "llama3_training.jinja"),
    }


# ------------------------------------------------------------------ Zephon 0.2.0 (child processes)

def _peer_imports():
    import peer_common  # noqa: F401  (TOKENIZERS_PARALLELISM=false, RAYON_NUM_THREADS=1)
    import numpy as np
    import transformers
    import zephon
    from transformers import PreTrainedTokenizerFast
    from zephon import Pipeline
    from zephon.io import Dataset
    from zephon.work import MixtureSpec, StaticMixtureWorkSource
    return np, transformers, zephon, PreTrainedTokenizerFast, Pipeline, Dataset, MixtureSpec, StaticMixtureWorkSource


def _peer_tokenizer(PreTrainedTokenizerFast, paths: dict[str, str]):
    """tokenizer.json with tokenizer_config.json's special tokens (bos <|begin_of_text|>, eos
    <|eot_id|>): what the template sees as bos_token/eos_token, as our spec's variables say."""
    tok = PreTrainedTokenizerFast.from_pretrained(paths["tokenizer_dir"])
    assert tok.bos_token == SETTINGS["bos_token"] and tok.eos_token == SETTINGS["eos_token"], \
        (tok.bos_token, tok.eos_token)
    return tok


def peer_main(argv: list[str]) -> None:
    import peer_common
    t_proc0 = peer_common.proc_start_epoch()
    ap = argparse.ArgumentParser(prog="bench_chat.py peer")
    ap.add_argument("--data", required=True)
    ap.add_argument("--passes", type=int, required=True)
    ap.add_argument("--worker-kind", choices=("thread", "process"), default="thread")
    ap.add_argument("--json-out", required=True)
    a = ap.parse_args(argv)
    (np, transformers, zephon, PreTrainedTokenizerFast, Pipeline, Dataset, MixtureSpec,
     StaticMixtureWorkSource) = _peer_imports()
    from peer_zephon import shard_dir
    S = SETTINGS
    paths = data_paths(a.data)
    t_import_done = time.time()
    t0 = time.perf_counter()
    tok = _peer_tokenizer(PreTrainedTokenizerFast, paths)
    ds = Dataset.from_path("docs", shard_dir(paths["conversations"]), fmt="jsonl")
    ws = StaticMixtureWorkSource(
        [ds], MixtureSpec({"docs": 1.0}), chunk_size=S["chunk_size"], seed=S["seed"],
        shuffle_shards=True, shuffle_within_shard=True, exhausted_policy="repeat",
        stop_after_passes=a.passes,
    )
    p = Pipeline(ws).tokenize_chat(
        tokenizer=tok, field="messages", chat_template=paths["template"],
        span_source="generation_tags", loss_scope="all_assistant",
    )
    p = p.pack_flat(S["seq_len"], algorithm="best_fit", num_bins=S["bins"], pad_token_id=S["pad_id"],
                    emit_positions=True)
    L = S["lanes"]
    p = p.batch(S["rows_per_step"] // L, drop_last=False)
    p = p.options(canonical_replicas=L, max_workers=S["workers"], worker_allocation="per_stage_fixed",
                  runner="process" if a.worker_kind == "process" else "threads")
    it = iter(p)
    t_built = time.perf_counter()
    batches = nonpad = positions = convs = 0
    t_first = None
    first_nonpad = first_convs = 0
    for b in it:
        for r in b.records:
            ids = r.payload["input_ids"]
            pad = r.meta.padding_length or 0
            n = len(ids) - pad
            nonpad += n
            positions += len(ids)
            pos = r.payload.get("positions")
            if pos is not None:
                convs += int(np.count_nonzero(np.asarray(pos)[:n] == 0))
        batches += 1
        if t_first is None:
            t_first = time.perf_counter()
            first_nonpad, first_convs = nonpad, convs
    t_end = time.perf_counter()
    close = getattr(it, "close", None)
    if close is not None:
        close()
    steady_s = max(1e-9, t_end - (t_first or t_end))
    out = {
        "system": "zephon-0.2.0",
        "worker_kind": a.worker_kind,
        "versions": {"zephon": zephon.__version__, "transformers": transformers.__version__,
                     "tokenizers": __import__("tokenizers").__version__,
                     "jinja2": __import__("jinja2").__version__, "python": sys.version.split()[0]},
        "passes": a.passes,
        "microbatches": batches,
        "tokens": nonpad,
        "positions": positions,
        "conversations": convs,
        "import_s": round(t_import_done - t_proc0, 4),
        "build_s": round(t_built - t0, 4),
        "ttfb_s": round((t_first or t_end) - t0, 4),
        "elapsed_s": round(t_end - t0, 4),
        "steady_s": round(steady_s, 4),
        "steady_tokens": nonpad - first_nonpad,
        "steady_conversations": convs - first_convs,
        "tokens_per_s": (nonpad - first_nonpad) / steady_s,
        "tokens_per_s_overall": nonpad / max(1e-9, t_end - t0),
        **peer_common.rusage(),
    }
    with open(a.json_out, "w") as fh:
        json.dump(out, fh, indent=2)


def peer_counts_main(argv: list[str]) -> None:
    """Tokens and supervised tokens of each conversation through Zephon 0.2.0's tokenize_chat (one
    pass, stored order, inline, no packing); the records keep their upstream "id"."""
    ap = argparse.ArgumentParser(prog="bench_chat.py peer-counts")
    ap.add_argument("--data", required=True)
    ap.add_argument("--json-out", required=True)
    a = ap.parse_args(argv)
    (np, _tf, _z, PreTrainedTokenizerFast, Pipeline, Dataset, MixtureSpec,
     StaticMixtureWorkSource) = _peer_imports()
    from peer_zephon import shard_dir
    paths = data_paths(a.data)
    tok = _peer_tokenizer(PreTrainedTokenizerFast, paths)
    ds = Dataset.from_path("docs", shard_dir(paths["conversations"]), fmt="jsonl")
    ws = StaticMixtureWorkSource([ds], MixtureSpec({"docs": 1.0}), chunk_size=SETTINGS["chunk_size"],
                                 seed=0, shuffle_shards=False, shuffle_within_shard=False,
                                 exhausted_policy="repeat", stop_after_passes=1)
    p = Pipeline(ws).tokenize_chat(
        tokenizer=tok, field="messages", chat_template=paths["template"],
        span_source="generation_tags", loss_scope="all_assistant", preserve_upstream_payload=True,
    ).options(max_workers=1, worker_allocation="per_stage_fixed", runner="inline")
    counts: dict[str, list[int]] = {}
    eos_id = tok.convert_tokens_to_ids(SETTINGS["eos_token"])
    ends_eos = 0
    for r in p:
        ids = np.asarray(r.payload["input_ids"])
        mask = np.asarray(r.payload["loss_mask"])
        counts[r.payload["id"]] = [int(ids.size), int(mask.sum())]
        ends_eos += int(ids.size > 0 and ids[-1] == eos_id)
    with open(a.json_out, "w") as fh:
        json.dump({"counts": counts, "ends_with_eos": ends_eos}, fh)


# ------------------------------------------------------------------ ours (the CLI)

def toml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid TOML basic string


def ours_spec(paths: dict[str, str], passes: int, *, counts: bool = False, n_rows: int = 0) -> str:
    S = SETTINGS
    if counts:
        # One pass in stored order, one conversation a row, every row in step 0: `zephon inspect`
        # prints each row's tokens and the row of the file it came from.
        head = f"seed = {S['seed']}\nlanes = 1\nrows_per_step = {n_rows}\n"
        source = 'order = "sequential"\nshuffle_shards = false\nexhaustion = "stop"\npasses = 1\n'
        pack = f'algorithm = "one_per_row"\nseq_len = {S["seq_len"]}\npad_id = {S["pad_id"]}\n'
    else:
        head = f"seed = {S['seed']}\nlanes = {S['lanes']}\nrows_per_step = {S['rows_per_step']}\n"
        source = f'chunk_size = {S["chunk_size"]}\nexhaustion = "stop"\npasses = {passes}\n'
        pack = (f'algorithm = "best_fit"\nseq_len = {S["seq_len"]}\npad_id = {S["pad_id"]}\n'
                f'bins = {S["bins"]}\n')
    return (
        head
        + f'\n[[dataset]]\nname = "docs"\npath = {toml_str(paths["conversations"])}\nweight = 1.0\n'
        + "\n[source]\n" + source
        + f'\n[chat]\ntokenizer = {toml_str(paths["tokenizer"])}\ntemplate = {toml_str(paths["template"])}\n'
        + f'variables = {{ bos_token = {toml_str(S["bos_token"])}, eos_token = {toml_str(S["eos_token"])} }}\n'
        + "\n[pack]\n" + pack
        + f'\n[run]\nthreads = {S["workers"]}\ntail = "partial"\n'
    )


def ours_counts(zephon_bin: str, paths: dict[str, str], ids: list[str], tmp: str) -> dict[str, int]:
    spec = os.path.join(tmp, "counts.toml")
    with open(spec, "w") as fh:
        fh.write(ours_spec(paths, 1, counts=True, n_rows=len(ids)))
    proc = subprocess.run([zephon_bin, "inspect", "--spec", spec, "--step", "0", "--threads", "2"],
                          capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"zephon inspect failed:\n{proc.stderr[-3000:]}")
    counts: dict[str, int] = {}
    pending = None
    for line in proc.stdout.splitlines():
        m = re.match(r"\s+lane \d+ row \d+: (\d+) segment\(s\) (\d+) tokens", line)
        if m:
            if int(m.group(1)) != 1:
                raise SystemExit(f"one_per_row gave a row of {m.group(1)} segments: {line}")
            pending = int(m.group(2))
            continue
        m = re.match(r"\s+docs shard 0 row (\d+) ", line)
        if m and pending is not None:
            counts[ids[int(m.group(1))]] = pending
            pending = None
    return counts


def run_ours(zephon_bin: str, paths, passes: int, tmp: str, raw: str, tag: str) -> dict[str, Any]:
    spec = os.path.join(tmp, f"ours-{passes}.toml")
    if not os.path.exists(spec):
        with open(spec, "w") as fh:
            fh.write(ours_spec(paths, passes))
    report = os.path.join(raw, f"{tag}.json")
    cmd = [zephon_bin, "run", "--spec", spec, "--quiet", "--world-size", "1", "--rank", "0",
           "--report", report]
    res = timed(cmd, os.path.join(raw, f"{tag}.log"))
    if res["rc"] != 0:
        raise SystemExit(f"ours failed (rc {res['rc']}), see {raw}/{tag}.log")
    with open(report) as fh:
        r = json.load(fh)
    return {"system": "ours", "passes": passes, "tokens": r["tokens"], "positions": r["positions"],
            "steps": r["steps"], "ttfb_s": r["ttfb_s"], "elapsed_s": r["elapsed_s"],
            "tokens_per_s": r["tokens_per_s"], "tokens_per_s_overall": r["tokens_per_s_overall"],
            "fill": r["fill"], "skipped_records": r["skipped_records"], "peak_rss_bytes": r["peak_rss_bytes"],
            "data_clean": _data_clean(r["data"]),
            "time_by_stage": r.get("time_by_stage"), **res}


def _data_clean(d: dict[str, Any]) -> bool:
    return d["tail_dropped_rows"] == 0 and not d["lanes_cut_off"] and all(
        x["skipped"] == 0 and x["conversations_truncated"] == 0 and x["conversations_skipped"] == 0
        and x["conversations_split"] == 0 for x in d["datasets"])


def run_peer(python: str, data: str, passes: int, kind: str, raw: str, tag: str, env) -> dict[str, Any]:
    out = os.path.join(raw, f"{tag}.json")
    if os.path.exists(out):
        os.remove(out)
    cmd = [python, os.path.abspath(__file__), "peer", "--data", data, "--passes", str(passes),
           "--worker-kind", kind, "--json-out", out]
    res = timed(cmd, os.path.join(raw, f"{tag}.log"), env)
    if res["rc"] != 0 or not os.path.exists(out):
        raise SystemExit(f"Zephon 0.2.0 failed (rc {res['rc']}), see {raw}/{tag}.log")
    with open(out) as fh:
        r = json.load(fh)
    return {**r, **res}


# ------------------------------------------------------------------ measuring

def _busy() -> float:
    import psutil
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def wait_quiet(max_wait: float, threshold: float = 0.3) -> float:
    """Wait (up to max_wait s) until other processes use less than `threshold` cores."""
    t0 = time.time()
    while True:
        b0 = _busy()
        time.sleep(2.0)
        busy = (_busy() - b0) / 2.0
        if busy < threshold or time.time() - t0 >= max_wait:
            if busy >= threshold:
                log(f"machine still busy ({busy:.2f} cores used by others); measuring anyway")
            return busy
        log(f"other processes use {busy:.2f} cores; waiting ({time.time() - t0:.0f}/{max_wait:.0f} s)")
        time.sleep(5.0)


QUIET_WAIT = 120.0
KIND_LABEL = {"thread": "threads", "process": "processes"}


def timed(cmd: list[str], log_path: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run cmd after waiting for a quiet machine; wall time, own CPU time, background CPU."""
    import resource
    before = wait_quiet(QUIET_WAIT)
    ch0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    b0 = _busy()
    t0 = time.perf_counter()
    with open(log_path, "w") as lf:
        rc = subprocess.run(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env, cwd=REPO).returncode
    wall = time.perf_counter() - t0
    ch1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = (ch1.ru_utime + ch1.ru_stime) - (ch0.ru_utime + ch0.ru_stime)
    bg = max(0.0, (_busy() - b0) - own) / max(wall, 1e-9)
    return {"rc": rc, "wall_s": round(wall, 3), "cpu_s": round(own, 3),
            "background_cpu_cores": round(bg, 3), "busy_cores_before": round(before, 2)}


# ------------------------------------------------------------------ the driver

def machine() -> dict[str, Any]:
    model = ""
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    import platform
    return {"nproc": len(os.sched_getaffinity(0)), "cpus": os.cpu_count(), "cpu_model": model,
            "kernel": platform.release()}


def git_commit() -> str:
    try:
        c = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                           cwd=REPO).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=REPO).stdout.strip()
        return c + (" (with uncommitted changes)" if dirty else "")
    except OSError:
        return "?"


def token_check(a, paths, python, env, tmp, raw) -> dict[str, Any]:
    ids = []
    with open(paths["conversations"]) as fh:
        for line in fh:
            if line.strip():
                ids.append(json.loads(line)["id"])
    if len(set(ids)) != len(ids):
        raise SystemExit("conversation ids are not unique")
    log(f"token check: {len(ids)} conversations through our CLI (zephon inspect, one a row)")
    ours = ours_counts(a.zephon_bin, paths, ids, tmp)
    log("token check: the same through Zephon 0.2.0's tokenize_chat")
    out = os.path.join(raw, "peer-counts.json")
    proc = subprocess.run([python, os.path.abspath(__file__), "peer-counts", "--data", a.data,
                           "--json-out", out], capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"peer-counts failed:\n{proc.stderr[-3000:]}")
    with open(out) as fh:
        pc = json.load(fh)
    theirs = {k: v[0] for k, v in pc["counts"].items()}
    diffs = {k: (ours.get(k), theirs.get(k)) for k in ids if ours.get(k) != theirs.get(k)}
    res = {
        "conversations": len(ids),
        "ours_conversations": len(ours), "theirs_conversations": len(theirs),
        "ours_tokens": sum(ours.values()), "theirs_tokens": sum(theirs.values()),
        "theirs_supervised_tokens": sum(v[1] for v in pc["counts"].values()),
        "theirs_ends_with_eos": pc["ends_with_eos"],
        "max_tokens": max(theirs.values()) if theirs else 0,
        "differing": len(diffs),
        "differing_examples": dict(list(diffs.items())[:10]),
    }
    log(f"token check: ours {res['ours_tokens']:,} tokens, theirs {res['theirs_tokens']:,}; "
        f"{res['differing']} conversations differ")
    return res


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarize(runs: list[dict[str, Any]], per_pass_convs: int) -> dict[str, Any]:
    """Medians over rounds. Conversations/s: steady = steady tokens/s divided by the mean tokens of a
    conversation (the token check makes them the same on both sides); overall = every conversation
    of every pass over the time from pipeline build (ours: the run's start) to the last batch."""
    if not runs:
        return {}
    convs = runs[0]["passes"] * per_pass_convs
    tpc = runs[0]["tokens"] / convs
    return {
        "runs": len(runs),
        "conversations": convs,
        "tokens": runs[0]["tokens"],
        "tokens_per_conversation": tpc,
        "tokens_per_s": median(r["tokens_per_s"] for r in runs),
        "tokens_per_s_overall": median(r["tokens_per_s_overall"] for r in runs),
        "conversations_per_s": median(r["tokens_per_s"] / tpc for r in runs),
        "conversations_per_s_overall": median(convs / r["elapsed_s"] for r in runs),
        "ttfb_s": median(r["ttfb_s"] for r in runs),
        "elapsed_s": median(r["elapsed_s"] for r in runs),
        "cpu_s": median(r["cpu_s"] for r in runs),
        "background_cpu_cores": max(r["background_cpu_cores"] for r in runs),
    }


def fmt_rate(v) -> str:
    if v is None:
        return "–"
    if v >= 1e6:
        return f"{v / 1e6:.2f} M"
    if v >= 1e4:
        return f"{v / 1e3:.0f} k"
    if v >= 1e3:
        return f"{v / 1e3:.2f} k"
    return f"{v:.0f}"


def md_table(header, rows) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def render_md(doc: dict[str, Any]) -> str:
    m, S, tc = doc["machine"], doc["settings"], doc["token_check"]
    ours = doc["summary"]["ours"]
    lines = [
        f"# Chat: zephon `[chat]` vs Zephon 0.2.0 `tokenize_chat` ({doc['date']})",
        "",
        f"Machine: {m['nproc']} CPUs (nproc; {m['cpu_model']}), Linux {m['kernel']}. "
        f"Commit: {doc['commit']}. Versions (theirs): "
        + ", ".join(f"{k} {v}" for k, v in doc["versions"].items()) + ".",
        "",
        f"Command: `{doc['command']}`",
        "",
        f"Inputs (the same for both): `{doc['inputs']['conversations']}` ({doc['per_pass']:,} "
        f"conversations, sha256 {doc['inputs']['conversations_sha256'][:12]}), template "
        f"`{doc['inputs']['template']}`, tokenizer `{doc['inputs']['tokenizer']}` (sha256 "
        f"{doc['inputs']['tokenizer_sha256'][:12]}; bos `{S['bos_token']}`, eos `{S['eos_token']}`).",
        "",
        f"Settings (both): render + tokenize + assistant mask (generation blocks) + pack `best_fit` into "
        f"rows of {S['seq_len']} ({S['bins']} open rows a lane, pad id {S['pad_id']}), {S['lanes']} lanes, "
        f"{S['rows_per_step']} rows a step, {S['workers']} worker threads, chunks of {S['chunk_size']} "
        f"conversations, {doc['passes']} passes over the data ({ours['conversations']:,} conversations, "
        f"{ours['tokens']:,} tokens), every conversation delivered; {doc['rounds']} "
        f"round{'s' if doc['rounds'] != 1 else ''}, runs alternating (ours, then theirs), medians.",
        "",
    ]
    rows = []
    order = [("ours", "zephon (ours)", "CLI, 2 threads")] + [
        (f"theirs-{k}", "Zephon 0.2.0 (PyPI)", f"tokenize_chat, 2 {KIND_LABEL[k]}")
        for k in doc["peer_kinds"]]
    for key, name, cfg in order:
        s = doc["summary"].get(key)
        if not s:
            continue
        rows.append([name, cfg, fmt_rate(s["conversations_per_s"]), fmt_rate(s["tokens_per_s"]),
                     fmt_rate(s["conversations_per_s_overall"]), fmt_rate(s["tokens_per_s_overall"]),
                     f"{s['ttfb_s']:.2f} s", f"{s['elapsed_s']:.1f} s", f"{s['cpu_s']:.1f} s",
                     f"{s['background_cpu_cores']:.2f}"])
    lines.append(md_table(["system", "config", "conversations/s (steady)", "tokens/s (steady)",
                           "conversations/s (overall)", "tokens/s (overall)", "TTFB", "run time",
                           "CPU time", "background CPU (max)"], rows))
    lines.append("")
    busy = max(r["background_cpu_cores"] for r in doc["runs"])
    if busy > 0.15:
        lines += [f"**Warning:** other processes used up to {busy:.2f} cores during a run (of "
                  f"{m['nproc']}); the figures of that run are low. See the raw numbers.", ""]
    for k in doc["peer_kinds"]:
        r = doc["ratios"].get(f"theirs-{k}")
        if r:
            lines.append(f"Ratio ours / Zephon 0.2.0 ({KIND_LABEL[k]}): {r['conversations_per_s']:.1f}x conversations/s "
                         f"and {r['tokens_per_s']:.1f}x tokens/s steady; {r['conversations_per_s_overall']:.1f}x "
                         f"conversations/s and {r['tokens_per_s_overall']:.1f}x tokens/s overall.")
    lines += [
        "",
        "Steady = after the first batch: tokens/s = non-pad tokens delivered after the first batch over "
        "the time from the first batch to the last; conversations/s = that divided by the mean tokens of "
        "a conversation (the same on both sides, see the token check). Overall = every conversation "
        "(tokens) of every pass over the time from pipeline build (ours: the start of `zephon run`, "
        "spec parsing included) to the last batch. TTFB = the same start to the first batch (theirs "
        "without Python start-up and imports, listed in the raw numbers as import_s). Background CPU = "
        "cores other processes used during the run. Both packers hold 8 x 64 open rows, so the first "
        "batch comes only after about 1 M tokens (two passes) have been rendered and tokenized; those "
        "tokens are delivered within the steady window, which makes both steady figures high by about "
        "that over the run's tokens (about 1 % at 200 passes): compare the overall figures too.",
        "",
        "## Tokens per conversation",
        "",
    ]
    if not tc:
        lines.append("Not checked (--skip-token-check). In the timed runs they delivered "
                     + ", ".join(f"{k}: {v:,}" for k, v in doc["delivered_tokens"].items())
                     + " non-pad tokens.")
    else:
        lines.append(
        f"One pass, stored order, one conversation at a time: ours {tc['ours_conversations']:,} "
        f"conversations, {tc['ours_tokens']:,} tokens (`zephon inspect` on a `one_per_row` spec); "
        f"Zephon 0.2.0 {tc['theirs_conversations']:,} conversations, {tc['theirs_tokens']:,} tokens "
        f"({tc['theirs_supervised_tokens']:,} supervised; {tc['theirs_ends_with_eos']:,} renders end with "
        f"`{S['eos_token']}`, so its rule of appending the EOS when a render lacks it adds nothing). "
        f"Conversations whose token counts differ: {tc['differing']}"
        + (f" (examples, ours/theirs: {tc['differing_examples']})" if tc["differing"] else "") + ". "
        f"Longest conversation: {tc['max_tokens']} tokens (no conversation is longer than a row, so "
        f"neither side splits or drops one). In the timed runs they delivered "
        + ", ".join(f"{k}: {v:,}" for k, v in doc["delivered_tokens"].items()) + " non-pad tokens.")
    lines += [
        "",
        "## Differences between the pipelines",
        "",
        "* Rendering: ours renders with minijinja (transformers' settings: trim/lstrip blocks, "
        "Python string methods), theirs with transformers' `apply_chat_template` (jinja2) and the "
        "assistant mask from `return_assistant_tokens_mask`; tokenizing: ours our tokenizer engine, "
        "theirs `tokenizers` (Rust) through `PreTrainedTokenizerFast`, one conversation a call.",
        "* Reading: the same JSONL; Zephon 0.2.0 reads a folder only (a folder linking the file, as "
        "peer_zephon.py does) and rescans the file from the start for every fetch batch.",
        "* Order: both shuffle rows within each pass by their own seeded orders (the packed rows "
        "differ, the work does not). Loss mask: ours is shifted into labels' positions in the rows; "
        "theirs unshifted (the shift happens at `to_training`).",
        "* Parallelism: ours 2 worker threads for reading and chat, packing on the lanes; theirs 2 "
        "workers (threads: the jinja2 render holds the GIL; processes: its process runner) for the "
        "per-record stages, packing serial on its pump thread.",
        "",
        "## Raw numbers",
        "",
    ]
    raw_rows = []
    for r in doc["runs"]:
        raw_rows.append([r["round"], r["key"], r["passes"], f"{r['tokens']:,}", f"{r['tokens_per_s']:,.0f}",
                         f"{r['tokens_per_s_overall']:,.0f}", f"{r['ttfb_s']:.3f}", f"{r['elapsed_s']:.3f}",
                         f"{r['wall_s']:.3f}", f"{r['cpu_s']:.2f}", f"{r['background_cpu_cores']:.2f}",
                         f"{r.get('import_s', 0):.2f}" if "import_s" in r else "–"])
    lines.append(md_table(["round", "system", "passes", "tokens", "tokens/s steady", "tokens/s overall",
                           "TTFB s", "run s", "process wall s", "CPU s", "background cores", "import s"],
                          raw_rows))
    lines += ["", f"Per-run JSON reports and logs: `{doc['raw_dir']}` (not committed); everything above "
              f"is also in `{doc['json_path']}`.", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zephon-bin", default=os.path.join(REPO, "target", "release", "zephon"))
    ap.add_argument("--python", default=sys.executable, help="the peer venv's python")
    ap.add_argument("--data", default=os.environ.get("ZEPHON_TESTDATA",
                                                     os.path.expanduser("~/.cache/zephon-testdata")))
    ap.add_argument("--passes", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peer-kinds", default="thread", help="comma list among thread, process")
    ap.add_argument("--quiet-wait", type=float, default=120.0)
    ap.add_argument("--skip-token-check", action="store_true")
    ap.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    ap.add_argument("--command", default=None, help="the command line to record")
    a = ap.parse_args()
    global QUIET_WAIT
    QUIET_WAIT = a.quiet_wait
    a.data = os.path.abspath(a.data)
    kinds = [k for k in a.peer_kinds.split(",") if k]
    for k in kinds:
        if k not in ("thread", "process"):
            raise SystemExit(f"--peer-kinds: unknown {k!r}")
    paths = data_paths(a.data)
    for k, p in paths.items():
        if not os.path.exists(p):
            raise SystemExit(f"missing {k}: {p} (run scripts/fetch-testdata.sh)")
    if not os.access(a.zephon_bin, os.X_OK):
        raise SystemExit(f"no zephon binary at {a.zephon_bin}")
    a.out_dir = os.path.abspath(a.out_dir)
    raw = os.path.join(a.out_dir, "raw", "chat")
    os.makedirs(raw, exist_ok=True)
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", RAYON_NUM_THREADS="1")
    tmp = tempfile.mkdtemp(prefix="zephon-chat-bench-")

    tc = None
    if not a.skip_token_check:
        tc = token_check(a, paths, a.python, env, tmp, raw)
    per_pass = tc["conversations"] if tc else sum(1 for line in open(paths["conversations"]) if line.strip())

    runs: list[dict[str, Any]] = []
    for rnd in range(1, a.rounds + 1):
        log(f"round {rnd}/{a.rounds}: ours ({a.passes} passes)")
        r = run_ours(a.zephon_bin, paths, a.passes, tmp, raw, f"ours-r{rnd}")
        r.update(round=rnd, key="ours")
        runs.append(r)
        log(f"  ours: {r['tokens_per_s']:,.0f} tokens/s steady, {r['elapsed_s']:.2f} s")
        for k in kinds:
            log(f"round {rnd}/{a.rounds}: Zephon 0.2.0, 2 {KIND_LABEL[k]} ({a.passes} passes)")
            r = run_peer(a.python, a.data, a.passes, k, raw, f"theirs-{k}-r{rnd}", env)
            r.update(round=rnd, key=f"theirs-{k}")
            runs.append(r)
            log(f"  theirs ({KIND_LABEL[k]}): {r['tokens_per_s']:,.0f} tokens/s steady, {r['elapsed_s']:.2f} s")

    if tc:
        want = a.passes * tc["ours_tokens"]
        for r in runs:
            r["all_delivered"] = r["tokens"] == want
            if not r["all_delivered"]:
                log(f"WARNING: {r['key']} round {r['round']} delivered {r['tokens']:,} tokens, not {want:,}")
    summary = {key: summarize([r for r in runs if r["key"] == key], per_pass)
               for key in ["ours"] + [f"theirs-{k}" for k in kinds]}
    ratios = {}
    for k in kinds:
        t = summary.get(f"theirs-{k}")
        if t:
            ratios[f"theirs-{k}"] = {m: summary["ours"][m] / t[m] for m in
                                     ("conversations_per_s", "tokens_per_s", "conversations_per_s_overall",
                                      "tokens_per_s_overall")}
    delivered = {}
    for key in summary:
        toks = sorted({r["tokens"] for r in runs if r["key"] == key})
        delivered[key] = toks[0] if len(toks) == 1 else toks
    peer_versions = next((r["versions"] for r in runs if "versions" in r), {})
    doc = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "commit": git_commit(),
        "command": a.command or " ".join(shlex.quote(x) for x in sys.argv),
        "versions": peer_versions,
        "inputs": {"conversations": paths["conversations"],
                   "conversations_sha256": sha256_file(paths["conversations"]),
                   "template": paths["template"], "tokenizer": paths["tokenizer"],
                   "tokenizer_sha256": sha256_file(paths["tokenizer"])},
        "settings": SETTINGS,
        "passes": a.passes,
        "per_pass": per_pass,
        "rounds": a.rounds,
        "peer_kinds": kinds,
        "token_check": tc or {},
        "delivered_tokens": delivered,
        "summary": summary,
        "ratios": ratios,
        "runs": runs,
        "raw_dir": os.path.relpath(raw, REPO) if raw.startswith(REPO + os.sep) else raw,
        "json_path": os.path.relpath(os.path.join(a.out_dir, "chat-latest.json"), REPO)
        if os.path.abspath(a.out_dir).startswith(REPO + os.sep) else os.path.join(a.out_dir, "chat-latest.json"),
    }
    os.makedirs(a.out_dir, exist_ok=True)
    with open(os.path.join(a.out_dir, "chat-latest.json"), "w") as fh:
        json.dump(doc, fh, indent=2)
    md = render_md(doc)
    with open(os.path.join(a.out_dir, "chat-latest.md"), "w") as fh:
        fh.write(md)
    print(md)
    for k in kinds:
        r = ratios.get(f"theirs-{k}")
        if r:
            print(f"ours / Zephon 0.2.0 ({KIND_LABEL[k]}): {r['conversations_per_s']:.1f}x conversations/s, "
                  f"{r['tokens_per_s']:.1f}x tokens/s (steady)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "peer":
        peer_main(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "peer-counts":
        peer_counts_main(sys.argv[2:])
    else:
        main()
