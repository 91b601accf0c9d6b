#!/usr/bin/env python3
"""What driving zephon from Python costs: the zephon_rs wheel vs the zephon CLI on one spec.

    python benches/python_overhead.py SPEC [--steps N] [--rounds R] [--threads T]
    bash benches/report.sh python_overhead -- python benches/python_overhead.py SPEC --steps N

Run it with a Python that has zephon_rs installed (the peer venv, ~/.cache/zephon-peers/venv,
after benches/peers/run.sh, or any venv with the wheel). Each round runs, one after the other
(the order alternates from round to round):

* the CLI: ``zephon run --spec SPEC --steps N --world-size 1 --rank 0 --report R.json --quiet``
  (``$ZEPHON_BIN`` or target/release/zephon), its steady rate taken from its own report:
  tokens/s = ``tokens_per_s`` (non-pad tokens after the first step / time since the first step),
  steps/s = (steps - 1) / (``elapsed_s`` - ``ttfb_s``);
* Python, in this process: ``zephon_rs.Loader(SPEC, dp_rank=0, dp_world_size=1)`` iterated for N
  steps, each step ``step = next(loader)``, ``batch = step.batch()``, ``batch["num_tokens"].sum()``
  (what a trainer touches); steady = from the end of the first step to the end of the last, as
  the CLI measures it.

Both use the spec's threads (``--threads`` overrides both) and run with
``TOKENIZERS_PARALLELISM=false`` and ``RAYON_NUM_THREADS=1``, as benches/peers does. Prints a
markdown report: per round and the medians, the ratio Python / CLI, and the Python time per step
(``next`` + ``batch()`` + the token count, and ``batch()`` alone) over steps 2..N.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

for _k, _v in (("TOKENIZERS_PARALLELISM", "false"), ("RAYON_NUM_THREADS", "1"), ("OMP_NUM_THREADS", "1")):
    os.environ.setdefault(_k, _v)

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("spec", help="a zephon spec file")
    ap.add_argument("--steps", type=int, default=100, help="steps per run (default 100)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each one CLI run and one Python run (default 3)")
    ap.add_argument("--threads", type=int, default=None, help="engine threads for both (default: the spec's)")
    ap.add_argument("--zephon-bin", default=os.environ.get("ZEPHON_BIN") or os.path.join(
        os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target"), "release", "zephon"))
    ap.add_argument("--json-out", default=None, help="also write every figure here as JSON")
    a = ap.parse_args()
    if a.steps < 2:
        ap.error("--steps must be at least 2 (the steady rate starts after the first step)")
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    if not os.path.isfile(a.spec):
        ap.error(f"{a.spec}: no such file")
    if not (os.path.isfile(a.zephon_bin) and os.access(a.zephon_bin, os.X_OK)):
        ap.error(f"{a.zephon_bin}: no zephon binary (cargo build --release -p zephon-cli, or set $ZEPHON_BIN)")
    a.spec = os.path.abspath(a.spec)
    return a


def spec_threads(spec: str) -> str:
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        return "the spec's"
    with open(spec, "rb") as fh:
        t = tomllib.load(fh).get("run", {}).get("threads")
    return f"{t} (the spec's)" if t is not None else "the engine default (the spec sets none)"


def run_cli(a, work: str, rnd: int) -> dict:
    report = os.path.join(work, f"cli-{rnd}.json")
    cmd = [a.zephon_bin, "run", "--spec", a.spec, "--steps", str(a.steps), "--world-size", "1", "--rank", "0",
           "--report", report, "--quiet"]
    if a.threads is not None:
        cmd += ["--threads", str(a.threads)]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0 or not os.path.exists(report):
        sys.exit(f"python_overhead.py: {' '.join(cmd)} failed (rc={p.returncode}):\n{p.stderr[-2000:]}")
    with open(report) as fh:
        r = json.load(fh)
    steady_s = r["elapsed_s"] - r["ttfb_s"]
    return {"system": "CLI", "round": rnd, "steps": r["steps"], "tokens": r["tokens"],
            "ttfb_s": r["ttfb_s"], "wall_s": wall,
            "steps_per_s": (r["steps"] - 1) / steady_s if steady_s > 0 else None,
            "tokens_per_s": r["tokens_per_s"], "command": " ".join(cmd)}


def run_python(a, zephon_rs, rnd: int) -> dict:
    t0 = time.perf_counter()
    loader = zephon_rs.Loader(a.spec, dp_rank=0, dp_world_size=1, threads=a.threads)
    per_step, batch_only = [], []
    tokens = steps = tok_first = 0
    t_first = None
    for i in range(a.steps):
        ta = time.perf_counter()
        try:
            step = next(loader)
        except StopIteration:  # finite data ended
            break
        tb = time.perf_counter()
        batch = step.batch()
        tc = time.perf_counter()
        n = int(batch["num_tokens"].sum())
        td = time.perf_counter()
        tokens += n
        steps += 1
        if i == 0:
            t_first, tok_first = td, tokens
        else:
            per_step.append(td - ta)
            batch_only.append(tc - tb)
    t_end = time.perf_counter()
    loader.close()
    steady_s = t_end - t_first if t_first is not None else 0.0
    return {"system": "Python", "round": rnd, "steps": steps, "tokens": tokens,
            "ttfb_s": (t_first - t0) if t_first is not None else None, "wall_s": time.perf_counter() - t0,
            "steps_per_s": (steps - 1) / steady_s if steady_s > 0 else None,
            "tokens_per_s": (tokens - tok_first) / steady_s if steady_s > 0 else None,
            "step_s": per_step, "batch_s": batch_only}


def ms_stats(xs: list[float]) -> str:
    if not xs:
        return "–"
    ys = sorted(xs)
    p90 = ys[min(len(ys) - 1, int(0.9 * len(ys)))]
    return (f"mean {1e3 * statistics.fmean(ys):.3f} ms, median {1e3 * statistics.median(ys):.3f} ms, "
            f"p90 {1e3 * p90:.3f} ms")


def fmt(v, unit="") -> str:
    if v is None:
        return "–"
    if v >= 1e6:
        return f"{v / 1e6:.2f} M{unit}"
    if v >= 1e4:
        return f"{v / 1e3:.0f} k{unit}"
    return f"{v:.1f}{unit}"


def main() -> None:
    a = parse_args()
    import zephon_rs

    runs = []
    with tempfile.TemporaryDirectory(prefix="zephon-python-overhead-") as work:
        for rnd in range(1, a.rounds + 1):
            order = ("cli", "python") if rnd % 2 else ("python", "cli")
            for which in order:
                print(f"python_overhead: round {rnd} of {a.rounds}: {which}, {a.steps} steps", file=sys.stderr)
                runs.append(run_cli(a, work, rnd) if which == "cli" else run_python(a, zephon_rs, rnd))

    cli = [r for r in runs if r["system"] == "CLI"]
    py = [r for r in runs if r["system"] == "Python"]
    med = lambda rs, k: statistics.median([r[k] for r in rs if r[k] is not None])  # noqa: E731
    ratios = {k: [p[k] / c[k] for p, c in zip(py, cli) if p[k] and c[k]] for k in ("steps_per_s", "tokens_per_s")}
    st = os.stat(a.zephon_bin)

    out = ["# Python overhead: zephon_rs vs the zephon CLI", ""]
    out.append(f"Spec `{a.spec}`, {a.steps} steps a run, {a.rounds} rounds (each one CLI run and one Python run, "
               f"the order alternating), threads {a.threads if a.threads is not None else spec_threads(a.spec)} "
               "for both.")
    out.append(f"zephon_rs {zephon_rs.__version__} (`{zephon_rs._native.__file__}`), CLI `{a.zephon_bin}` "
               f"(built {time.strftime('%Y-%m-%d %H:%M', time.gmtime(st.st_mtime))} UTC); Python "
               f"{platform.python_version()}, {os.cpu_count()} CPUs.")
    out.append("")
    out.append("| round | system | steady steps/s | steady tokens/s | TTFB | wall (run) | tokens |")
    out.append("|---|---|---|---|---|---|---|")
    for r in runs:
        out.append(f"| {r['round']} | {r['system']} | {fmt(r['steps_per_s'])} | {fmt(r['tokens_per_s'])} | "
                   f"{r['ttfb_s']:.3f} s | {r['wall_s']:.2f} s | {r['tokens']:,} |")
    out.append("")
    out.append(f"Medians over {a.rounds} round{'s' if a.rounds != 1 else ''}:")
    out.append("")
    out.append("| system | steady steps/s | steady tokens/s | time per step (steady) |")
    out.append("|---|---|---|---|")
    for name, rs in (("CLI (`zephon run`)", cli), ("Python (`zephon_rs.Loader`)", py)):
        sps = med(rs, "steps_per_s")
        out.append(f"| {name} | {fmt(sps)} | {fmt(med(rs, 'tokens_per_s'))} | {1e3 / sps:.3f} ms |")
    out.append("")
    x = lambda v: f"{statistics.median(v):.3f}x" if v else "–"  # noqa: E731
    out.append(f"**Ratio Python / CLI** (median of the per-round ratios): steady steps/s {x(ratios['steps_per_s'])}, "
               f"steady tokens/s {x(ratios['tokens_per_s'])}.")
    out.append("")
    steps_all = [s for r in py for s in r["step_s"]]
    batch_all = [s for r in py for s in r["batch_s"]]
    out.append(f"Python time per step (steps 2..{a.steps}, {len(steps_all)} steps over all rounds):")
    out.append("")
    out.append(f"* `next(loader)` + `step.batch()` + `num_tokens.sum()`: {ms_stats(steps_all)}")
    out.append(f"* `step.batch()` alone: {ms_stats(batch_all)}")
    out.append("")
    toks = {r["tokens"] for r in runs}
    if len(toks) == 1:
        out.append(f"Every run delivered the same {toks.pop():,} non-pad tokens.")
    else:
        out.append("**Warning:** the runs delivered different token counts: "
                   + ", ".join(f"{r['system']} round {r['round']}: {r['tokens']:,}" for r in runs) + ".")
    out.append("")
    out.append("Steady = after the first step. CLI: its report's `tokens_per_s`, and (steps - 1) / (`elapsed_s` - "
               "`ttfb_s`). Python: from the end of the first step (its `batch()` and token count included) to the end "
               "of the last. TTFB: CLI from the start of `zephon run` to its first step; Python from "
               "`zephon_rs.Loader(...)` to the end of the first step (interpreter start and imports excluded). "
               "The wheel's Loader snapshots its lanes after every step so that `state_dict()` may follow any "
               "step; `zephon run` without checkpoint flags snapshots only after the last.")
    print("\n".join(out))
    if a.json_out:
        with open(a.json_out, "w") as fh:
            json.dump({"spec": a.spec, "steps": a.steps, "rounds": a.rounds, "threads": a.threads,
                       "zephon_rs": zephon_rs.__version__, "zephon_bin": a.zephon_bin, "runs": runs,
                       "ratios_python_over_cli": ratios}, fh, indent=2)


if __name__ == "__main__":
    main()
