#!/usr/bin/env python3
"""Vision-language side-by-side benchmark driver: our zephon CLI vs Grain + Pillow.

Normally started by ``run_vlm.sh``. Same pipeline on both sides (README.md, "Vision-language"):
captioned photos (JSONL rows with image paths) -> decode -> shorter side to 336 (bilinear) +
centre crop -> CLIP normalisation, f32, [3, 336, 336] -> 576 <image> tokens + GPT-2 caption + EOS,
one sample per row padded to 640 -> 16 rows per step, 2 workers, the dataset repeated and
reshuffled per epoch. Systems run one after another, never concurrently, in ``--rounds``
alternating rounds (ours, Grain threads, Grain processes, ours, ...); the report gives every run
and the median. Writes ``results/vlm-latest.{json,md}`` (logs, specs, per-run JSON in
``results/raw/vlm/``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_peers import (REPO, TreeRun, fmt_bytes, fmt_s, log, machine_info, md_table,  # noqa: E402
                         sha256_file, wait_quiet)

EOT = "<|endoftext|>"
IMAGE = "<image>"

SETTINGS: dict[str, Any] = {
    "seed": 1234,
    "lanes": 8,                 # ours; Grain has no lanes
    "rows_per_step": 16,        # = images per step (one image per row)
    "seq_len": 640,
    "pad_id": 50256,
    "image_size": 336,
    "image_tokens": 576,
    "chunk_size": 8,            # ours [source] chunk_size
    "workers": 2,
    "steps_full": 172,          # 2752 images = 64 passes over the 43 photos
    "steps_quick": 40,
    "checkpoint_at": 20,
    "restore_steps": 5,         # batches read after a restore (and compared with the originals)
    "single_thread_steps": 86,  # ours with --threads 1 (the single-thread pipeline rate)
}

SPEC = """seed = {seed}
lanes = {lanes}
rows_per_step = {rows_per_step}

[[dataset]]
name = "captions"
path = "{data}"
weight = 1.0
text_field = "caption"
images = "{images_field}"

[source]
chunk_size = {chunk_size}
exhaustion = "repeat"

[images]
preset = "llava"        # 336 centre crop (bilinear), CLIP normalisation, f32
{layout}
[tokenize]
tokenizer = "{tokenizer}"
eos = "{eos}"
image_token = "{image}"

[pack]
algorithm = "one_per_row"
seq_len = {seq_len}
pad_id = {pad_id}

[run]
threads = {workers}
"""

LAYOUTS = {
    # the Pillow side's tensor: [3, 336, 336] per image (what HF's CLIPImageProcessor hands LLaVA)
    "chw": 'layout = "chw"         # [3, 336, 336] pixels, as the Pillow side\ntokens = 576\n',
    # the preset as it is: ViT patches of 14 -> [576, 588] per image (one more permutation)
    "vit": "",
}


# ------------------------------------------------------------------ helpers

def image_tokenizer(src: str, dst: str) -> str:
    """GPT-2 tokenizer.json plus the special token <image> = 50257 (written when missing/stale)."""
    with open(src) as fh:
        d = json.load(fh)
    if not any(t["content"] == IMAGE for t in d["added_tokens"]):
        d["added_tokens"].append({"id": 50257, "content": IMAGE, "single_word": False, "lstrip": False,
                                  "rstrip": False, "normalized": False, "special": True})
    text = json.dumps(d, ensure_ascii=False)
    old = None
    if os.path.exists(dst):
        with open(dst) as fh:
            old = fh.read()
    if old != text:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst, "w") as fh:
            fh.write(text)
    return dst


def measured(a, cmd: list[str], log_path: str, env: dict[str, str], clean) -> dict[str, Any]:
    """Wait for a quiet machine and run; rerun (--busy-retries) when others used CPU meanwhile."""
    attempts = []
    for attempt in range(1 + a.busy_retries):
        clean()
        quiet = wait_quiet(a.quiet_wait)
        run = TreeRun(cmd, log_path, env, a.timeout).run()
        run["quiet"] = quiet
        attempts.append({k: run[k] for k in ("background_cpu_cores", "wall_s", "rc")})
        bg = run["background_cpu_cores"] or 0.0
        if run["rc"] != 0 or bg <= a.busy_threshold or attempt == a.busy_retries:
            break
        log(f"  other processes used {bg:.2f} cores during the run; measuring again")
    run["attempts"] = attempts
    return run


def rm(*paths: str):
    def clean() -> None:
        for p in paths:
            if os.path.isdir(p):
                shutil.rmtree(p)
            elif os.path.exists(p):
                os.remove(p)
    return clean


def tail(path: str, n: int = 2000) -> str:
    try:
        with open(path, errors="replace") as fh:
            return fh.read()[-n:]
    except OSError:
        return ""


def read_hash_log(path: str) -> dict[tuple[int, int], str]:
    out = {}
    with open(path) as fh:
        for line in fh:
            parts = line.split()
            if len(parts) >= 3 and parts[0].isdigit():
                out[(int(parts[0]), int(parts[1]))] = parts[2]
    return out


# ------------------------------------------------------------------ ours

# Extra `[images]` lines for our side (`--images-extra`), e.g. the libjpeg-turbo backend.
IMAGES_EXTRA = ""


def write_spec(path: str, data: str, images_field: str, layout: str, tokenizer: str, threads: int) -> None:
    S = SETTINGS
    with open(path, "w") as fh:
        fh.write(SPEC.format(seed=S["seed"], lanes=S["lanes"], rows_per_step=S["rows_per_step"], data=data,
                             images_field=images_field, chunk_size=S["chunk_size"], layout=LAYOUTS[layout] + IMAGES_EXTRA,
                             tokenizer=tokenizer, eos=EOT, image=IMAGE, seq_len=S["seq_len"],
                             pad_id=S["pad_id"], workers=threads))


def ours_summary(rep: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    rows = SETTINGS["rows_per_step"]
    images = rep["images"]
    el, ttfb = rep["elapsed_s"], rep["ttfb_s"]
    steady_s = max(1e-9, el - ttfb)
    s = {
        "steps": rep["steps"], "images": images,
        # one image per row, so the first step holds `rows` images
        "images_per_s": round((images - rows) / steady_s, 3) if images else None,
        "images_per_s_overall": round(images / el, 3) if images else None,
        "tokens_per_s": rep.get("tokens_per_s"), "tokens_per_s_overall": rep.get("tokens_per_s_overall"),
        "ttfb_s": ttfb, "checkpoint_bytes": rep.get("checkpoint_bytes") or None,
        "peak_rss_bytes": rep.get("peak_rss_bytes") or run["peak_rss_tree_bytes_external"],
        "peak_rss_tree_bytes_external": run["peak_rss_tree_bytes_external"], "peak_rss_procs": 1,
        "cpu_cores": round(run["cpu_s"] / max(1e-9, run["wall_s"]), 2),
        "background_cpu_cores": run["background_cpu_cores"],
        "skipped_records": rep.get("skipped_records"),
    }
    if images != rep["steps"] * rows:
        s["warning"] = f"{images} images in {rep['steps']} steps of {rows} rows"
    return s


def run_ours(a, cfg: str, layout: str, threads: int, steps: int, ckpt: int | None, tag: str, env, raw,
             tokenizer: str, data: str) -> dict[str, Any]:
    res: dict[str, Any] = {"system": "zephon (ours)", "config": cfg, "layout": layout, "threads": threads}
    spec = os.path.join(raw, f"zephon-{layout}-t{threads}.spec.toml")
    write_spec(spec, data, "file", layout, tokenizer, threads)
    rep, h1, ck = (os.path.join(raw, f"{tag}.{x}") for x in ("report.json", "hashes.tsv", "ckpt"))
    cmd = [a.zephon_bin, "run", "--spec", spec, "--steps", str(steps), "--quiet", "--report", rep,
           "--world-size", "1", "--rank", "0"]
    if ckpt:
        cmd += ["--checkpoint-at", str(ckpt), "--checkpoint-dir", ck, "--hash-log", h1]
    res["command"] = " ".join(cmd)
    log(f"running {cfg}: {steps} steps")
    run = measured(a, cmd, os.path.join(raw, f"{tag}.log"), env, rm(rep, h1, ck))
    res["run"] = run
    if run["rc"] != 0 or not os.path.exists(rep):
        res["status"] = "timeout" if run["timed_out"] else f"failed (rc={run['rc']})"
        res["log_tail"] = tail(os.path.join(raw, f"{tag}.log"))
        log(f"  {res['status']}")
        return res
    with open(rep) as fh:
        res["report"] = json.load(fh)
    res["status"] = "ok"
    res["summary"] = s = ours_summary(res["report"], run)
    if ckpt:
        R = a.restore_steps
        rep2, h2 = os.path.join(raw, f"{tag}.resume.report.json"), os.path.join(raw, f"{tag}.resume.hashes.tsv")
        cmd2 = [a.zephon_bin, "run", "--spec", spec, "--steps", str(ckpt + R), "--quiet", "--report", rep2,
                "--resume-from", os.path.join(ck, f"step-{ckpt:08d}"), "--hash-log", h2,
                "--world-size", "1", "--rank", "0"]
        res["resume_command"] = " ".join(cmd2)
        run2 = measured(a, cmd2, os.path.join(raw, f"{tag}.resume.log"), env, rm(rep2, h2))
        res["resume_run"] = run2
        if run2["rc"] == 0 and os.path.exists(rep2):
            with open(rep2) as fh:
                res["resume_report"] = r2 = json.load(fh)
            s["resume_ttfb_s"] = r2["ttfb_s"]
            s["resume_peak_rss_bytes"] = r2.get("peak_rss_bytes")
            want = {k: v for k, v in read_hash_log(h1).items() if ckpt <= k[0] < ckpt + R}
            got = read_hash_log(h2)
            s["resume_matches"] = bool(want) and got == want
            s["resume_compared"] = f"{len(want)} lane digests (SHA-256 over tokens and pixels), steps {ckpt}..{ckpt + R - 1}"
        else:
            s["resume_ttfb_s"] = None
            res["resume_log_tail"] = tail(os.path.join(raw, f"{tag}.resume.log"))
    log(f"  {fmt_ips(s['images_per_s'])} img/s steady, {fmt_ips(s['images_per_s_overall'])} overall, "
        f"TTFB {fmt_s(s['ttfb_s'])}, resume TTFB {fmt_s(s.get('resume_ttfb_s'))}, "
        f"CPU {s['cpu_cores']} cores, background {s['background_cpu_cores']}")
    return res


# ------------------------------------------------------------------ Grain

def run_grain(a, kind: str, tag: str, env, raw, tokenizer: str, captions: str) -> dict[str, Any]:
    S = SETTINGS
    cfg = f"Grain + Pillow, {S['workers']} {'threads' if kind == 'thread' else 'processes'}"
    res: dict[str, Any] = {"system": "Grain + Pillow", "config": cfg, "worker_kind": kind}
    out = os.path.join(raw, f"{tag}.json")
    cmd = [a.python, os.path.join(HERE, "peer_grain_vlm.py"), "--captions", captions, "--tokenizer", tokenizer,
           "--image-size", str(S["image_size"]), "--image-tokens", str(S["image_tokens"]),
           "--seq-len", str(S["seq_len"]), "--pad-id", str(S["pad_id"]), "--batch-size", str(S["rows_per_step"]),
           "--steps", str(a.steps), "--ckpt-step", str(a.ckpt_step), "--restore-steps", str(a.restore_steps),
           "--workers", str(S["workers"]), "--worker-kind", kind, "--seed", str(S["seed"]), "--crop", a.crop,
           "--json-out", out]
    res["command"] = " ".join(cmd)
    log(f"running {cfg}: {a.steps} steps")
    run = measured(a, cmd, os.path.join(raw, f"{tag}.log"), env,
                   rm(out, out + ".ckpt.json", out + ".restore.json"))
    res["run"] = run
    if run["rc"] != 0 or not os.path.exists(out):
        res["status"] = "timeout" if run["timed_out"] else f"failed (rc={run['rc']})"
        res["log_tail"] = tail(os.path.join(raw, f"{tag}.log"))
        log(f"  {res['status']}")
        return res
    with open(out) as fh:
        data = json.load(fh)
    m, r = data["main"], data.get("restore", {})
    for k in ("hashes", "expected"):
        r.pop(k, None)
    res["raw"] = data
    res["status"] = "ok"
    res["summary"] = s = {
        "steps": m["batches"], "images": m.get("images"),
        "images_per_s": m.get("images_per_s_after_first"), "images_per_s_overall": m.get("images_per_s_overall"),
        "tokens_per_s": m["tokens_per_s_after_first"], "tokens_per_s_overall": m["tokens_per_s_overall"],
        "ttfb_s": m["ttfb_s"], "ttfb_from_process_start_s": m["ttfb_from_process_start_s"],
        "resume_ttfb_s": r.get("ttfb_after_restore_s"),
        "resume_ttfb_from_process_start_s": r.get("ttfb_after_restore_from_process_start_s"),
        "checkpoint_bytes": m["ckpt_bytes_json"], "peak_rss_bytes": m["peak_rss_tree_bytes"],
        "peak_rss_procs": m["peak_rss_tree_procs"], "resume_peak_rss_bytes": r.get("peak_rss_tree_bytes"),
        "cpu_cores": round(run["cpu_s"] / max(1e-9, run["wall_s"]), 2),
        "background_cpu_cores": run["background_cpu_cores"],
        "resume_matches": r.get("matches_original"),
        "resume_compared": f"{r.get('batches')} batches, SHA-1 over tokens and pixels" if r else None,
        "batch_shapes": [m["batch_shape"]] + m.get("extra_shapes", []),
    }
    log(f"  {fmt_ips(s['images_per_s'])} img/s steady, {fmt_ips(s['images_per_s_overall'])} overall, "
        f"TTFB {fmt_s(s['ttfb_s'])}, resume TTFB {fmt_s(s['resume_ttfb_s'])}, "
        f"CPU {s['cpu_cores']} cores, background {s['background_cpu_cores']}")
    return res


# ------------------------------------------------------------------ report

METRICS = ("images_per_s", "images_per_s_overall", "tokens_per_s", "tokens_per_s_overall", "ttfb_s",
           "ttfb_from_process_start_s", "resume_ttfb_s", "checkpoint_bytes", "peak_rss_bytes", "cpu_cores",
           "background_cpu_cores")


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r["summary"] for r in runs if r.get("status") == "ok"]
    med: dict[str, Any] = {"runs": len(runs), "ok": len(ok)}
    for k in METRICS:
        vals = [s[k] for s in ok if s.get(k) is not None]
        med[k] = round(statistics.median(vals), 4) if vals else None
        med[k + "_all"] = vals
    rm_ = [s.get("resume_matches") for s in ok if s.get("resume_matches") is not None]
    med["resume_matches"] = all(rm_) if rm_ else None
    med["peak_rss_procs"] = max((s.get("peak_rss_procs") or 1 for s in ok), default=None)
    return med


def fmt_ips(v) -> str:
    return "–" if v is None else f"{v:.1f}"


def fmt_k(v) -> str:
    return "–" if v is None else (f"{v / 1e3:.1f} k" if v < 1e6 else f"{v / 1e6:.2f} M")


def runs_cell(vals: list, f=fmt_ips) -> str:
    if not vals:
        return "–"
    med = statistics.median(vals)
    return f"**{f(med)}** ({', '.join(f(v) for v in vals)})" if len(vals) > 1 else f(med)


def render_md(doc: dict[str, Any]) -> str:
    S, mach, agg = doc["settings"], doc["machine"], doc["aggregate"]
    L = [f"# Vision-language pipeline: zephon vs Grain + Pillow ({doc['mode']} run, {doc['generated_at']})", ""]
    L.append(f"Machine: {mach['cpus']} CPUs ({mach.get('cpu_model', '')}), "
             f"{(mach.get('mem_total_bytes') or 0) / 2**30:.0f} GiB RAM, Linux {mach['kernel']}, Python "
             f"{mach['python']}. Versions: {doc['versions_line']}.")
    L.append("")
    L.append(f"Pipeline: {doc['data']['images']} captioned photos ({doc['data']['mpx']:.1f} Mpx, "
             f"{doc['data']['mean_mpx']:.2f} Mpx per image), JSONL rows with image paths, repeated and "
             f"reshuffled per epoch -> decode -> shorter side to {S['image_size']} (bilinear) + centre crop -> "
             f"CLIP normalisation, f32 [3, {S['image_size']}, {S['image_size']}] -> {S['image_tokens']} `<image>` "
             f"tokens + GPT-2 caption + EOS, one sample per row padded to {S['seq_len']} -> {S['rows_per_step']} "
             f"rows (= images) per step, {S['workers']} workers; {doc['steps']} steps "
             f"({doc['steps'] * S['rows_per_step']} images), checkpoint after step {doc['checkpoint_at']}, restore "
             f"in a fresh process. {doc['rounds']} rounds, systems one after another, alternating; each cell: "
             "**median** (every run).")
    L.append("")
    hdr = ["system", "config", "images/s (steady)", "images/s (overall)", "tokens/s (steady)", "TTFB",
           "resume TTFB", "checkpoint", "peak RSS (tree)", "CPU (cores)", "resume identical"]
    rows = []
    for key in doc["order"]:
        g = agg.get(key)
        if not g:
            continue
        if not g["ok"]:
            rows.append([doc["labels"][key][0], doc["labels"][key][1], "failed"] + ["–"] * 8)
            continue
        star = " ★" if key == doc.get("grain_best") else ""
        rows.append([doc["labels"][key][0], doc["labels"][key][1] + star, runs_cell(g["images_per_s_all"]),
                     runs_cell(g["images_per_s_overall_all"]), runs_cell(g["tokens_per_s_all"], fmt_k),
                     runs_cell(g["ttfb_s_all"], lambda v: f"{v:.2f} s"),
                     runs_cell(g["resume_ttfb_s_all"], lambda v: f"{v:.2f} s"),
                     fmt_bytes(g["checkpoint_bytes"]) if g["checkpoint_bytes"] else "–",
                     runs_cell(g["peak_rss_bytes_all"], fmt_bytes)
                     + (f" ({g['peak_rss_procs']} procs)" if (g.get("peak_rss_procs") or 1) > 1 else ""),
                     runs_cell(g["cpu_cores_all"], lambda v: f"{v:.2f}"),
                     {True: "yes", False: "NO", None: "–"}[g["resume_matches"]]])
    L.append(md_table(hdr, rows))
    L.append("")
    c = doc.get("comparison") or {}
    if c:
        L.append(f"**zephon / Grain + Pillow ({c['grain_config']}, the faster by median overall images/s):** "
                 f"{c['ratio_steady']:.2f}x steady images/s, {c['ratio_overall']:.2f}x overall images/s.")
        L.append("")
    sc = doc.get("scaling") or {}
    if sc:
        L.append("Use of the 2 cores (pipeline images/s vs 2 x a single thread's rate on the same photos):")
        L.append("")
        L.append(md_table(["system", "single thread", "2 workers (median steady)", "efficiency"], sc["rows"]))
        L.append("")
        for n in sc.get("notes", []):
            L.append(n)
        L.append("")
    dec = doc.get("pillow_decode")
    if dec:
        L.append(f"Single-thread Pillow {dec['pillow']} (libjpeg-turbo {dec['libjpeg_turbo']}) on the same "
                 f"{dec['files']} files, from memory, best of {dec['reps']}:")
        L.append("")
        drows = []
        for name, m in dec["modes"].items():
            drows.append([name, f"{m['all']['images_per_s']:.1f}", f"{m['all']['mpx_per_s']:.0f}",
                          f"{m['baseline']['mpx_per_s']:.0f}", f"{m['progressive']['mpx_per_s']:.0f}"])
        L.append(md_table(["Pillow, 1 thread", "images/s", "Mpx/s (all)",
                           f"Mpx/s ({dec['modes']['decode']['baseline']['images']} baseline)",
                           f"Mpx/s ({dec['modes']['decode']['progressive']['images']} progressive)"], drows))
        L.append("")
        L.append("Ours, raw decode (zune-jpeg, `cargo run --release -p zephon-vision --example decode_speed`, "
                 "not rerun by this script): 145-188 Mpx/s on baseline photos.")
        L.append("")
    ex = doc.get("extras") or {}
    if ex:
        L.append("Other runs of ours (not in the comparison):")
        L.append("")
        for k, v in ex.items():
            L.append(f"* {v}")
        L.append("")
    if doc.get("explain"):
        L.append("`zephon explain` of the compared spec (operators):")
        L.append("")
        L.append("```")
        L += doc["explain"]
        L.append("```")
        L.append("")
    L.append("images/s (steady) = images of steps 2..N / time from the first step to the end; overall = all "
             "images / time from the start (ours: process start incl. spec parse and tokenizer load; Grain: "
             "pipeline build, imports excluded). tokens/s = non-pad tokens (576 image placeholders + caption + "
             "EOS per row). TTFB = start to first step (Grain excludes ~1 s of Python imports). Resume TTFB = "
             "fresh process, restore of the checkpoint to its first step. Peak RSS = the CLI's own peak "
             "(ours, one process) / RSS summed over the process tree, sampled every 50 ms (Grain). CPU = CPU "
             "time / wall time of the whole run. See benches/peers/README.md for every difference.")
    busy = [f"{r['label']}: {r['bg']:.2f}" for r in doc.get("busy", [])]
    if busy:
        L.append("")
        L.append("**Warning:** other processes used CPU during these runs (cores, averaged): " + "; ".join(busy)
                 + ".")
    return "\n".join(L) + "\n"


# ------------------------------------------------------------------ main

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--ckpt-step", type=int, default=SETTINGS["checkpoint_at"])
    ap.add_argument("--restore-steps", type=int, default=SETTINGS["restore_steps"])
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds (each system once per round)")
    ap.add_argument("--worker-kinds", default="thread,process", help="Grain worker kinds (comma list)")
    ap.add_argument("--layout", choices=tuple(LAYOUTS), default="chw",
                    help="ours, compared: chw = [3, 336, 336] as the Pillow side (default); vit = the preset's "
                         "[576, 588] patches")
    ap.add_argument("--no-extras", action="store_true",
                    help="skip ours with --threads 1, ours with the other layout, the Parquet check and the "
                         "Pillow single-thread rates")
    ap.add_argument("--crop", choices=("box", "after"), default="box", help="Grain side, see peer_grain_vlm.py")
    ap.add_argument("--data", default=os.environ.get("ZEPHON_TESTDATA") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "zephon-testdata"))
    ap.add_argument("--zephon-bin", default=os.path.join(REPO, "target", "release", "zephon"))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    ap.add_argument("--images-extra", default="",
                    help='extra [images] lines for ours, e.g. \'backend = "libjpeg-turbo"\\nreduced_decode = 2\' '
                         '(needs a CLI built with --features turbojpeg)')
    ap.add_argument("--out-name", default="vlm-latest", help="report file name under --out-dir (no extension)")
    ap.add_argument("--quiet-wait", type=float, default=300.0)
    ap.add_argument("--busy-retries", type=int, default=1)
    ap.add_argument("--busy-threshold", type=float, default=0.3)
    ap.add_argument("--timeout", type=float, default=1800.0)
    a = ap.parse_args()
    global IMAGES_EXTRA
    IMAGES_EXTRA = a.images_extra.replace("\\n", "\n") + ("\n" if a.images_extra else "")
    S = SETTINGS
    a.steps = a.steps or (S["steps_quick"] if a.quick else S["steps_full"])
    if not 0 < a.ckpt_step < a.steps:
        ap.error("--ckpt-step must be in (0, steps)")
    a.restore_steps = max(1, min(a.restore_steps, a.steps - a.ckpt_step))
    kinds = [k for k in a.worker_kinds.split(",") if k]

    root = os.path.join(a.data, "images", "captioned")
    captions = os.path.join(root, "captions.jsonl")
    parquet = os.path.join(root, "parquet")
    gpt2 = os.path.join(a.data, "tokenizers", "gpt2", "tokenizer.json")
    for p in (captions, gpt2):
        if not os.path.isfile(p):
            sys.exit(f"missing {p}; run scripts/fetch-testdata.sh")
    if not (os.path.isfile(a.zephon_bin) and os.access(a.zephon_bin, os.X_OK)):
        sys.exit(f"no zephon binary at {a.zephon_bin} (build it, or set ZEPHON_BIN)")
    tokenizer = image_tokenizer(gpt2, os.path.expanduser("~/.cache/zephon-peers/gpt2-image/tokenizer.json"))
    raw = os.path.join(a.out_dir, "raw", "vlm")
    os.makedirs(raw, exist_ok=True)
    env = dict(os.environ)
    env.update({"TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
                "OMP_NUM_THREADS": "1"})

    # the data, as the Grain side's Pillow sees it
    info = subprocess.run([a.python, "-c", (
        "import json,os,sys; from PIL import Image; r=sys.argv[1]; rows=[json.loads(l) for l in open(r) if l.strip()]\n"
        "px=[Image.open(os.path.join(os.path.dirname(r), x['file'])).size for x in rows]\n"
        "print(json.dumps({'images': len(rows), 'mpx': sum(w*h for w,h in px)/1e6}))"), captions],
        capture_output=True, text=True, env=env)
    data = json.loads(info.stdout.strip().splitlines()[-1])
    data["mean_mpx"] = data["mpx"] / data["images"]
    data.update({"captions": captions, "parquet": parquet})

    versions: dict[str, Any] = {}
    rev = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"], capture_output=True, text=True)
    if rev.stdout.strip():
        versions["repo"] = f"git {rev.stdout.strip()}"
    st = os.stat(a.zephon_bin)
    versions["zephon_bin"] = (f"{a.zephon_bin} ({st.st_size} B, built "
                              f"{_dt.datetime.fromtimestamp(st.st_mtime, _dt.timezone.utc):%Y-%m-%d %H:%M} UTC)")
    v = subprocess.run([a.python, "-c", "import json, grain, PIL, tokenizers, numpy; from PIL import features; "
                        "print(json.dumps({'grain': grain.__version__, 'pillow': PIL.__version__, "
                        "'libjpeg-turbo': features.version('libjpeg_turbo'), 'tokenizers': tokenizers.__version__, "
                        "'numpy': numpy.__version__}))"], capture_output=True, text=True, env=env)
    try:
        versions.update(json.loads(v.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        pass

    # explain (and the spec the comparison uses)
    spec_main = os.path.join(raw, f"zephon-{a.layout}-t{S['workers']}.spec.toml")
    write_spec(spec_main, captions, "file", a.layout, tokenizer, S["workers"])
    ex = subprocess.run([a.zephon_bin, "explain", "--spec", spec_main], capture_output=True, text=True)
    explain = ex.stdout.splitlines() if ex.returncode == 0 else [f"explain failed (rc={ex.returncode})",
                                                                 *ex.stderr.splitlines()[-5:]]

    labels = {"ours": ("zephon (ours)", f"CLI, {S['workers']} threads, {S['lanes']} lanes, `{a.layout}` pixels"
                               + (f", `{'; '.join(IMAGES_EXTRA.split(chr(10))).strip('; ')}`" if IMAGES_EXTRA else ""))}
    order = ["ours"]
    for k in kinds:
        key = f"grain-{k}"
        order.append(key)
        labels[key] = ("Grain + Pillow", f"{S['workers']} {'threads' if k == 'thread' else 'processes'}")
    runs: dict[str, list] = {k: [] for k in order}
    extras: dict[str, Any] = {}
    t_start = time.time()
    for rnd in range(1, a.rounds + 1):
        log(f"round {rnd}/{a.rounds}")
        runs["ours"].append(run_ours(a, labels["ours"][1], a.layout, S["workers"], a.steps, a.ckpt_step,
                                     f"r{rnd}-zephon", env, raw, tokenizer, captions))
        for k in kinds:
            runs[f"grain-{k}"].append(run_grain(a, k, f"r{rnd}-grain-{k}", env, raw, tokenizer, captions))

    if not a.no_extras:
        log("extras: ours single-thread, ours other layout, Parquet, Pillow single-thread")
        n1 = min(a.steps, S["single_thread_steps"])
        extras["ours_1_thread"] = run_ours(a, "CLI, 1 thread", a.layout, 1, n1, None, "x-zephon-t1", env, raw,
                                           tokenizer, captions)
        other = "vit" if a.layout == "chw" else "chw"
        extras["ours_other_layout"] = run_ours(a, f"CLI, {S['workers']} threads, `{other}` layout", other,
                                               S["workers"], a.steps, None, f"x-zephon-{other}", env, raw,
                                               tokenizer, captions)
        # the Parquet form of the same data (image: struct<bytes, path>): a short functional run
        pq_spec = os.path.join(raw, "zephon-parquet.spec.toml")
        write_spec(pq_spec, parquet, "image", a.layout, tokenizer, S["workers"])
        pq_rep = os.path.join(raw, "x-zephon-parquet.report.json")
        rm(pq_rep)()
        pq = subprocess.run([a.zephon_bin, "run", "--spec", pq_spec, "--steps", "6", "--quiet", "--report", pq_rep,
                             "--world-size", "1", "--rank", "0"], capture_output=True, text=True, env=env)
        extras["parquet"] = {"rc": pq.returncode, "stderr_tail": pq.stderr[-1000:]}
        if pq.returncode == 0 and os.path.exists(pq_rep):
            with open(pq_rep) as fh:
                extras["parquet"]["report"] = json.load(fh)
        dec_json = os.path.join(raw, "pillow-decode-speed.json")
        wait_quiet(a.quiet_wait)
        d = subprocess.run([a.python, os.path.join(HERE, "pillow_decode_speed.py"), "--dir", os.path.join(root, "jpg"),
                            "--reps", "3", "--json-out", dec_json], capture_output=True, text=True, env=env)
        if d.returncode == 0:
            with open(dec_json) as fh:
                extras["pillow_decode"] = json.load(fh)

    agg = {k: aggregate(v) for k, v in runs.items()}
    grain_ok = [k for k in order[1:] if agg[k]["ok"]]
    best = max(grain_ok, key=lambda k: agg[k]["images_per_s_overall"] or 0) if grain_ok else None
    comparison = None
    if best and agg["ours"]["ok"]:
        o, g = agg["ours"], agg[best]
        comparison = {"grain_config": labels[best][1], "grain_key": best,
                      "ratio_steady": o["images_per_s"] / g["images_per_s"],
                      "ratio_overall": o["images_per_s_overall"] / g["images_per_s_overall"],
                      "ratio_tokens_steady": o["tokens_per_s"] / g["tokens_per_s"]}

    scaling = None
    t1 = extras.get("ours_1_thread", {})
    dec = extras.get("pillow_decode")
    if t1.get("status") == "ok" or dec:
        rows, notes = [], []
        if t1.get("status") == "ok" and agg["ours"]["ok"]:
            one, two = t1["summary"]["images_per_s"], agg["ours"]["images_per_s"]
            rows.append(["zephon (ours)", f"{one:.1f} images/s (`run --threads 1`, steady)", f"{two:.1f} images/s",
                         f"{two / (2 * one):.0%}"])
            mpx = two * data["mean_mpx"]
            notes.append(f"Ours as decode throughput: {two:.1f} images/s x {data['mean_mpx']:.2f} Mpx = {mpx:.0f} "
                         f"source Mpx/s decoded (and resized, normalised, tokenized), i.e. "
                         f"{mpx / (2 * 188):.0%}-{mpx / (2 * 145):.0%} of 2 x zune-jpeg's raw 145-188 Mpx/s "
                         "(a decode-only rate on baseline photos; this set also has progressive JPEGs, "
                         f"{dec['modes']['decode']['progressive']['images'] if dec else '?'} of 43 files, "
                         "which decode several times slower, so this fraction understates the scaling; the "
                         "single-thread pipeline row above is the like-for-like figure).")
        if dec and best and agg[best]["ok"]:
            one = dec["modes"]["per-image map"]["all"]["images_per_s"]
            two = agg[best]["images_per_s"]
            rows.append([f"Grain + Pillow ({labels[best][1]})",
                         f"{one:.1f} images/s (Pillow per-image map, best of {dec['reps']}, no tokenizer)",
                         f"{two:.1f} images/s", f"{two / (2 * one):.0%}"])
        scaling = {"rows": rows, "notes": notes}

    busy = []
    for key, lst in list(runs.items()) + [(k, [v]) for k, v in extras.items() if isinstance(v, dict) and "run" in v]:
        for i, r in enumerate(lst):
            for rk in ("run", "resume_run"):
                bg = (r.get(rk) or {}).get("background_cpu_cores")
                if bg is not None and bg > 0.15:
                    busy.append({"label": f"{key} #{i + 1} {rk}", "bg": bg})

    ex_lines = {}
    for k, v in extras.items():
        if k == "pillow_decode":
            continue
        if k == "parquet":
            rep = v.get("report") or {}
            ex_lines[k] = (f"Parquet form (`path = .../parquet`, `images = \"image\"`): "
                           + (f"ok, {rep.get('steps')} steps, {rep.get('images')} images, "
                              f"{rep.get('tokens')} tokens" if v["rc"] == 0 and rep else f"failed (rc={v['rc']})"))
            continue
        if v.get("status") == "ok":
            s = v["summary"]
            ex_lines[k] = (f"{v['config']}: {v['summary']['steps']} steps, {fmt_ips(s['images_per_s'])} images/s "
                           f"steady, {fmt_ips(s['images_per_s_overall'])} overall, TTFB {fmt_s(s['ttfb_s'])}, "
                           f"peak RSS {fmt_bytes(s['peak_rss_bytes'])}, CPU {s['cpu_cores']:.2f} cores")
        else:
            ex_lines[k] = f"{v.get('config')}: {v.get('status')}"

    doc = {
        "generated_at": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "mode": "quick" if a.quick else ("full" if a.steps == S["steps_full"] else "custom"),
        "steps": a.steps, "checkpoint_at": a.ckpt_step, "restore_steps": a.restore_steps, "rounds": a.rounds,
        "wall_s": round(time.time() - t_start, 1),
        "machine": machine_info(), "versions": versions,
        "versions_line": ", ".join(f"{k} {v}" for k, v in versions.items() if k != "zephon_bin"),
        "settings": {**S, "layout_compared": a.layout, "images_extra": a.images_extra, "grain_crop": a.crop, "worker_kinds": kinds,
                     "tokenizer": tokenizer, "tokenizer_sha256": sha256_file(tokenizer)},
        "data": data, "explain": explain, "labels": labels, "order": order, "grain_best": best,
        "aggregate": agg, "comparison": comparison, "scaling": scaling, "pillow_decode": dec,
        "extras": ex_lines, "busy": busy, "runs": runs, "extra_runs": extras,
    }
    with open(os.path.join(a.out_dir, a.out_name + ".json"), "w") as fh:
        json.dump(doc, fh, indent=2)
    md = render_md(doc)
    with open(os.path.join(a.out_dir, a.out_name + ".md"), "w") as fh:
        fh.write(md)
    print(md)
    log(f"wrote {os.path.join(a.out_dir, a.out_name + '.json')} and .md")


if __name__ == "__main__":
    main()
