"""Shared measurement scaffolding for the peer harness (peer_zephon.py, peer_grain.py).

A peer module supplies a ``Peer`` object with:

    build(args, state: dict | None) -> handle
        Build the pipeline (and restore ``state`` if given) and return a handle.
    handle.next_batch() -> (tokens: np.ndarray[B, S], nonpad: int[, extra: dict])
        ``extra`` (optional, peer_grain_vlm.py) may hold ``images`` (int, counted
        into images/s) and ``arrays`` (e.g. the pixels): hashed with the tokens,
        but only for the batches the restore check compares (hashing 20 MB of
        pixels per batch would slow the measured loop).
    handle.get_state() -> dict        (JSON-serialisable after ``_jsonable``)
    handle.state_store_bytes(state) -> int   (optional, peer_zephon_rs.py: the bytes a
        checkpoint store keeps for that state, recorded as ``ckpt_bytes_store``)
    handle.close() -> None

The driver (``run``) does, in the parent process:
  1. build + iterate ``--steps`` batches, timing the first batch (TTFB) and
     the steady state; after batch ``--ckpt-step`` it takes a checkpoint,
     writes it to ``<json-out>.ckpt.json`` and records the hashes of the
     batches the restore will compare;
  2. closes the iterator and starts a *fresh Python process* of the same
     script with ``--restore-from`` that rebuilds the pipeline, restores the
     state, times the first batch after restore and checks that the batches
     it delivers hash-equal the ones the parent saw after the checkpoint;
  3. writes one JSON with both phases.

Peak RSS is measured two ways: ``resource.getrusage`` (self, and children
that have exited: max of any single child) and a psutil sampler that sums RSS
over the live process tree every 50 ms (this is the number to compare when a
peer uses worker processes; it double-counts shared pages).
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import resource
import subprocess
import sys
import threading
import time
from typing import Any, Callable

# Parallelism must come from the loader's own workers in both peers: stop the
# HF `tokenizers` Rust pool (rayon) from fanning out underneath them. Zephon
# sets the same variables itself only when it loads a tokenizer by id.
for _k, _v in (("TOKENIZERS_PARALLELISM", "false"), ("RAYON_NUM_THREADS", "1")):
    os.environ.setdefault(_k, _v)

import numpy as np  # noqa: E402

try:
    import psutil  # installed with grain
except Exception:  # pragma: no cover
    psutil = None


def proc_start_epoch() -> float:
    """This process's start as a Unix time, to about 10 ms: its start in clock ticks since boot
    (/proc/self/stat) against /proc/uptime. psutil's create_time() adds /proc/stat's btime, a
    whole second, so it reads up to 1 s early (the same offset for every process of a boot)."""
    try:
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
        now = time.time()
        with open("/proc/self/stat") as fh:
            start_ticks = int(fh.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        return now - (uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        pass
    if psutil is not None:
        return psutil.Process().create_time()
    return time.time()


def jsonl_files(path: str) -> list[str]:
    """The shards of a corpus: ``path`` itself (a .jsonl file) or a folder's ``*.jsonl``, sorted
    (hidden files left out, as every system here does). ValueError when there are none."""
    if os.path.isdir(path):
        files = sorted(glob.glob(os.path.join(path, "*.jsonl")))
        if not files:
            raise ValueError(f"{path}: no *.jsonl files in this folder")
        return files
    if not os.path.exists(path):
        raise ValueError(f"{path}: no such file or folder")
    if not path.endswith(".jsonl"):
        raise ValueError(f"{path}: not a .jsonl file (give a .jsonl file or a folder of them)")
    return [path]


def token_id(tokenizer: Any, token: str) -> int:
    """The id of ``token`` in a ``tokenizers.Tokenizer``, or SystemExit naming it."""
    tid = tokenizer.token_to_id(token)
    if tid is None:
        raise SystemExit(f"the tokenizer has no token {token!r} (--eos)")
    return int(tid)


def common_args(ap: argparse.ArgumentParser) -> None:
    """Arguments of the text peers (peer_zephon.py, peer_grain.py)."""
    ap.add_argument("--corpus-a", required=True, help="a .jsonl file or a folder of *.jsonl (short docs)")
    ap.add_argument("--corpus-b", required=True, help="a .jsonl file or a folder of *.jsonl (long docs)")
    ap.add_argument("--weight-a", type=float, default=0.5)
    ap.add_argument("--tokenizer", required=True, help="path to HF tokenizer.json")
    ap.add_argument("--text-field", default="text", help="JSONL field holding the document text")
    ap.add_argument("--eos", default="<|endoftext|>", help="token appended to every document")
    ap.add_argument("--pad-id", type=int, default=None, help="padding id for first_fit (default: the EOS id)")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--batch-size", type=int, default=16,
                    help="global batch: rows of --seq-len tokens per step")
    loop_args(ap)
    ap.add_argument("--packing", choices=("wrap", "first_fit"), default="wrap",
                    help="wrap = concat-then-split (no padding); first_fit = bin packing with padding")
    ap.add_argument("--num-bins", type=int, default=16, help="first_fit bins")
    ap.add_argument("--shuffle-buffer", type=int, default=512,
                    help="packed rows held in shuffle buffers in total (a peer with several lanes or "
                         "worker pipelines splits it evenly between them)")


def loop_args(ap: argparse.ArgumentParser) -> None:
    """Arguments of the measurement loop, shared by every peer (text and vision-language)."""
    ap.add_argument("--steps", type=int, default=50, help="batches in the main run")
    ap.add_argument("--workers", type=int, default=0,
                    help="parallel workers (processes or threads, see --worker-kind); 0 = inline")
    ap.add_argument("--worker-kind", choices=("process", "thread"), default="process")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ckpt-step", type=int, default=None, help="checkpoint after this batch (default steps//2)")
    ap.add_argument("--restore-steps", type=int, default=None,
                    help="batches to read after restore (default min(steps-ckpt_step, 10))")
    ap.add_argument("--json-out", required=True)
    ap.add_argument("--no-restore", action="store_true", help="skip the restore phase")
    # internal: child mode
    ap.add_argument("--restore-from", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--expect-hashes", default=None, help=argparse.SUPPRESS)


class RssSampler:
    """Peak of summed RSS over this process and all its descendants."""

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.peak = 0
        self.peak_procs = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        if psutil is None:
            return
        try:
            me = psutil.Process()
            procs = [me] + me.children(recursive=True)
        except Exception:
            return
        total = 0
        for p in procs:
            try:
                total += p.memory_info().rss
            except Exception:
                pass
        if total > self.peak:
            self.peak = total
            self.peak_procs = len(procs)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> "RssSampler":
        self._t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._sample()
        self._stop.set()
        self._t.join(timeout=1)


def rusage() -> dict[str, Any]:
    # Linux reports ru_maxrss in KiB. CPU time covers this process and the
    # children it has waited for (worker processes that have exited).
    me = resource.getrusage(resource.RUSAGE_SELF)
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "ru_maxrss_self_bytes": me.ru_maxrss * 1024,
        "ru_maxrss_children_bytes": ch.ru_maxrss * 1024,
        "cpu_s_self": round(me.ru_utime + me.ru_stime, 3),
        "cpu_s_children": round(ch.ru_utime + ch.ru_stime, 3),
    }


def batch_hash(tokens: np.ndarray, arrays: tuple = ()) -> str:
    a = np.ascontiguousarray(np.asarray(tokens, dtype=np.int64))
    h = hashlib.sha1(a.tobytes() + str(a.shape).encode())
    for x in arrays:  # e.g. pixels: hashed as stored (dtype, shape, bytes)
        x = np.ascontiguousarray(np.asarray(x))
        h.update(f"{x.dtype}{x.shape}".encode())
        h.update(memoryview(x).cast("B"))
    return h.hexdigest()[:16]


def _next(handle: Any) -> tuple[Any, int, dict]:
    """handle.next_batch() as (tokens, nonpad, extra); text peers return no extra."""
    r = handle.next_batch()
    return r[0], r[1], (r[2] if len(r) > 2 else {})


def _jsonable(o: Any) -> Any:
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, bytes):
        return {"__bytes_hex__": o.hex()}
    return o


def _unjson(o: Any) -> Any:
    if isinstance(o, dict):
        if set(o) == {"__bytes_hex__"}:
            return bytes.fromhex(o["__bytes_hex__"])
        return {k: _unjson(v) for k, v in o.items()}
    if isinstance(o, list):
        return [_unjson(v) for v in o]
    return o


def _zstd_len(data: bytes) -> int | None:
    try:
        from backports import zstd  # type: ignore
    except Exception:
        try:
            from compression import zstd  # type: ignore  # py3.14
        except Exception:
            return None
    return len(zstd.compress(data))


def run(peer_name: str, build: Callable[[argparse.Namespace, dict | None], Any],
        extra_args: Callable[[argparse.ArgumentParser], None], versions: Callable[[], dict],
        base_args: Callable[[argparse.ArgumentParser], None] = common_args) -> None:
    t_proc0 = proc_start_epoch()
    ap = argparse.ArgumentParser(prog=f"peer_{peer_name}")
    base_args(ap)
    extra_args(ap)
    args = ap.parse_args()
    if args.ckpt_step is None:
        args.ckpt_step = max(1, args.steps // 2)
    if args.restore_steps is None:
        args.restore_steps = max(1, min(args.steps - args.ckpt_step, 10))
    if args.restore_from:
        _child(peer_name, build, args, t_proc0)
        return
    _parent(peer_name, build, args, t_proc0, versions)


def _drain(handle: Any, n: int) -> tuple[list[str], int, int, int]:
    hashes, nonpad_total, tok_total, images = [], 0, 0, 0
    for _ in range(n):
        toks, nonpad, extra = _next(handle)
        hashes.append(batch_hash(toks, extra.get("arrays", ())))
        nonpad_total += nonpad
        tok_total += int(np.asarray(toks).size)
        images += int(extra.get("images", 0))
    return hashes, nonpad_total, tok_total, images


def _parent(peer_name, build, args, t_proc0, versions) -> None:
    out: dict[str, Any] = {"peer": peer_name, "versions": versions(), "config": vars(args).copy()}
    ckpt_path = args.json_out + ".ckpt.json"
    with RssSampler() as rss:
        t_import_done = time.time()
        t0 = time.perf_counter()
        handle = build(args, None)
        t_built = time.perf_counter()
        out["config"] = vars(args).copy()  # build() may record effective values
        toks, nonpad, extra = _next(handle)
        t_first = time.perf_counter()
        shape = list(np.asarray(toks).shape)
        extra_shapes = [list(np.asarray(x).shape) for x in extra.get("arrays", ())]

        def compared(step: int) -> bool:  # batches the restore child must reproduce
            return args.ckpt_step < step <= args.ckpt_step + args.restore_steps

        # Only the batches the restore child compares are hashed (a [16, 2048] batch costs ~0.5 ms,
        # which a fast loader would notice); the others keep a placeholder.
        hashes = [batch_hash(toks, extra.get("arrays", ())) if compared(1) else ""]
        nonpad_all, tok_all = nonpad, int(np.asarray(toks).size)
        images_all = int(extra.get("images", 0))
        nonpad_after_first, images_after_first, ckpt_save_s, state_bytes = 0, 0, 0.0, b""
        store_bytes = None
        for step in range(1, args.steps + 1):
            if step > 1:
                toks, nonpad, extra = _next(handle)
                hashes.append(batch_hash(toks, extra.get("arrays", ())) if compared(step) else "")
                nonpad_all += nonpad
                nonpad_after_first += nonpad
                tok_all += int(np.asarray(toks).size)
                images_all += int(extra.get("images", 0))
                images_after_first += int(extra.get("images", 0))
            if step == args.ckpt_step:
                tc = time.perf_counter()
                state = handle.get_state()
                state_bytes = json.dumps(_jsonable(state), separators=(",", ":")).encode()
                if hasattr(handle, "state_store_bytes"):
                    store_bytes = handle.state_store_bytes(state)
                with open(ckpt_path, "wb") as fh:
                    fh.write(state_bytes)
                ckpt_save_s = time.perf_counter() - tc
        t_end = time.perf_counter()
        handle.close()
    steady_s = max(1e-9, t_end - t_first - ckpt_save_s)
    overall_s = max(1e-9, t_end - t0 - ckpt_save_s)
    out["main"] = {
        "batch_shape": shape,
        "batches": args.steps,
        "import_s": round(t_import_done - t_proc0, 4),
        "build_s": round(t_built - t0, 4),
        "ttfb_s": round(t_first - t0, 4),
        "ttfb_from_process_start_s": round(t_import_done - t_proc0 + (t_first - t0), 4),
        "nonpad_tokens": nonpad_all,
        "total_tokens": tok_all,
        "pad_fraction": round(1 - nonpad_all / max(1, tok_all), 5),
        "tokens_per_s_after_first": round(nonpad_after_first / steady_s, 1),
        "tokens_per_s_overall": round(nonpad_all / overall_s, 1),
        **({"extra_shapes": extra_shapes, "images": images_all,
            "images_per_s_after_first": round(images_after_first / steady_s, 3),
            "images_per_s_overall": round(images_all / overall_s, 3),
            "steady_s": round(steady_s, 4), "overall_s": round(overall_s, 4)} if images_all else {}),
        "ckpt_step": args.ckpt_step,
        "ckpt_save_s": round(ckpt_save_s, 4),
        "ckpt_bytes_json": len(state_bytes),
        "ckpt_bytes_json_zstd": _zstd_len(state_bytes) if state_bytes else None,
        **({"ckpt_bytes_store": store_bytes} if store_bytes is not None else {}),
        "peak_rss_tree_bytes": rss.peak,
        "peak_rss_tree_procs": rss.peak_procs,
        **rusage(),
    }
    after = hashes[args.ckpt_step: args.ckpt_step + args.restore_steps]
    if not args.no_restore and state_bytes and after:
        child_json = args.json_out + ".restore.json"
        cmd = [sys.executable, sys.argv[0], *sys.argv[1:], "--restore-from", ckpt_path,
               "--expect-hashes", ",".join(after), "--restore-steps", str(len(after))]
        # replace --json-out for the child
        i = cmd.index("--json-out")
        cmd[i + 1] = child_json
        tc = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - tc
        if proc.returncode != 0 or not os.path.exists(child_json):
            out["restore"] = {"error": f"rc={proc.returncode}", "stderr_tail": proc.stderr[-3000:]}
        else:
            with open(child_json) as fh:
                out["restore"] = json.load(fh)
            out["restore"]["child_process_wall_s"] = round(wall, 4)
    with open(args.json_out, "w") as fh:
        json.dump(out, fh, indent=2)
    print(json.dumps(out, indent=2))


def _child(peer_name, build, args, t_proc0) -> None:
    with open(args.restore_from, "rb") as fh:
        raw = fh.read()
    expect = args.expect_hashes.split(",") if args.expect_hashes else []
    with RssSampler() as rss:
        t_import_done = time.time()
        t0 = time.perf_counter()
        state = _unjson(json.loads(raw))
        handle = build(args, state)
        t_built = time.perf_counter()
        toks, nonpad, extra = _next(handle)
        t_first = time.perf_counter()
        hashes = [batch_hash(toks, extra.get("arrays", ()))]
        more, nonpad_more, _, _ = _drain(handle, max(0, args.restore_steps - 1))
        hashes += more
        t_end = time.perf_counter()
        handle.close()
    res = {
        "import_s": round(t_import_done - t_proc0, 4),
        "build_and_restore_s": round(t_built - t0, 4),
        "ttfb_after_restore_s": round(t_first - t0, 4),
        "ttfb_after_restore_from_process_start_s": round(t_import_done - t_proc0 + (t_first - t0), 4),
        "batches": len(hashes),
        "tokens_per_s_after_first": round(nonpad_more / max(1e-9, t_end - t_first), 1) if more else None,
        "matches_original": hashes == expect[: len(hashes)],
        "hashes": hashes,
        "expected": expect,
        "peak_rss_tree_bytes": rss.peak,
        **rusage(),
    }
    with open(args.json_out, "w") as fh:
        json.dump(res, fh, indent=2)
