#!/usr/bin/env python3
"""Peer harness: reference Zephon (PyPI ``zephon==0.2.0``), public API only.

Pipeline (kept as close as possible to peer_grain.py):
    A, B = Dataset.from_path(dir, fmt="jsonl")                         # *.jsonl shards (a single
                                                                       # file: via a folder linking it)
    ws   = StaticMixtureWorkSource([A, B], MixtureSpec({a: w, b: 1-w}),
                                   seed, chunk_size, shuffle_shards=True,
                                   shuffle_within_shard=True, exhausted_policy="repeat")
    Pipeline(ws)
      .tokenize(tokenizer=PreTrainedTokenizerFast(tokenizer.json), field=--text-field,
                special_tokens="eos", add_attention_mask=False
                [, split_long_samples=True, max_length=S   # first_fit only])
      .pack_flat(S, algorithm="wrap")                         # --packing wrap
      | .pack_flat(S, algorithm="first_fit", num_bins, pad_token_id=--pad-id)  # --packing first_fit
      .shuffle(buffer_size=--shuffle-buffer / L, seed, algorithm="block")   # per lane
      .batch(B / L)                                                         # per-lane microbatch
      .options(max_workers=N, worker_allocation="per_stage_fixed", runner=..., canonical_replicas=L)
    L consecutive microbatches (one per lane, lane round-robin) -> one global [B, S] step
    batch.to_training(dtype=np.int64)["input_ids"]

Differences from peer_grain.py (all deliberate or unavoidable):
  * Document order: Zephon shuffles shard order + order within each shard
    (its WorkSource knobs); Grain applies a global index shuffle per dataset
    (MapDataset.shuffle). Both reshuffle per repeat epoch.
  * Mixing: Zephon allocates per-chunk quotas with Bresenham accumulators and
    interleaves inside a chunk by smooth weighted round robin; Grain's
    MapDataset.mix interleaves by exact proportions over the index space.
  * Tokenizer object: Zephon's tokenize op wants an HF-style tokenizer
    (callable, bos/eos ids), so we wrap the same tokenizer.json in
    transformers.PreTrainedTokenizerFast (same Rust `tokenizers` backend).
    Grain calls tokenizers.Tokenizer.encode_batch directly in a batched map.
    EOS (--eos, e.g. <|endoftext|>) is appended per document in both; no BOS.
  * Newline normalisation: Zephon's decode_text() op is NOT used (it would
    normalise newlines; Grain does not), JSONL rows already hold str.
  * first_fit: Zephon's first_fit keeps num_bins open bins and flushes FIFO;
    Grain's FirstFitPackIterDataset fills N bins then emits all N at once.
    Long docs are pre-split to <= S tokens in both (Zephon: tokenize
    split_long_samples; Grain: a flat_map). `wrap` vs ConcatThenSplit is the
    closer pair and the default.
  * Shuffle: algorithm="block" (tumbling window) to match Grain's
    WindowShuffleIterDataset; Zephon's own default is "streaming"
    (reservoir) -> --zephon-shuffle-algorithm.
  * Parallelism: Zephon runs accumulators (packing, shuffle, batch assembly)
    serially on its pump thread in the main process and fans the per-record
    work (fetch/tokenize/pack materialisation) out to N threads or processes;
    Grain with --worker-kind process runs the whole pipeline in N
    mp_prefetch workers, each on a 1/N slice (so output depends on N).
  * JSONL reading: Zephon's JsonlShard re-scans the file from the start for
    every fetch batch (no byte-offset index in 0.2.0); Grain uses our own
    byte-offset source (one scan at startup, then pread per row).
  * Checkpoint: Zephon's pipeline.checkpoint() dict (engine state: in-flight
    WorkChunks with full sample-id lists, per-lane progress/replay cursors,
    lane WorkSource cursors); restore replays the in-flight chunks and drops
    the already-delivered prefix. Grain's get_state() is per-iterator
    positions; restore re-reads from the last window/packing start.
    Both are serialised to JSON by the harness for the size figure.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import peer_common  # noqa: E402  (records process start before heavy imports)

import numpy as np  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402
import zephon  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402
from zephon import Pipeline  # noqa: E402
from zephon.io import Dataset  # noqa: E402
from zephon.work import MixtureSpec, StaticMixtureWorkSource  # noqa: E402


def extra_args(ap) -> None:
    ap.add_argument("--zephon-chunk-size", type=int, default=None,
                    help="WorkSource chunk_size (samples per chunk); default zephon's 16384, "
                         "clamped so both datasets can supply a chunk")
    ap.add_argument("--lanes", type=int, default=8,
                    help="canonical_replicas (lanes); each lane gets batch_size/lanes rows per step "
                         "and shuffle_buffer/lanes rows of shuffle buffer")
    ap.add_argument("--zephon-shuffle-algorithm", default="block",
                    choices=("block", "streaming", "block_warmup"))
    ap.add_argument("--zephon-mtp", action="store_true",
                    help="RuntimeOptions.mtp_mode: run the engine in a subprocess")
    ap.add_argument("--zephon-explain", action="store_true", help="print pipeline.explain()")


def versions() -> dict:
    return {"zephon": zephon.__version__, "tokenizers": tokenizers.__version__,
            "transformers": transformers.__version__, "python": sys.version.split()[0]}


class _Handle:
    """One step = one microbatch from each of the ``lanes`` lanes, concatenated.

    With several lanes on one rank Zephon yields per-lane microbatches in lane
    round-robin order, so ``lanes`` consecutive items are one global batch.
    """

    def __init__(self, pipe, pad_id: int, lanes: int) -> None:
        self.pipe = pipe
        self.it = iter(pipe)
        self.pad_id = pad_id
        self.lanes = lanes

    def next_batch(self):
        parts, nonpad = [], 0
        for _ in range(self.lanes):
            b = next(self.it)
            nonpad += sum(len(r.payload["input_ids"]) - (r.meta.padding_length or 0) for r in b.records)
            parts.append(b.to_training(dtype=np.int64)["input_ids"])
        toks = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
        return toks, int(nonpad)

    def get_state(self) -> dict:
        return self.pipe.checkpoint()

    def close(self) -> None:
        close = getattr(self.it, "close", None)
        if close is not None:
            close()


def shard_dir(path: str) -> str:
    """Zephon 0.2.0 reads folders only: serve a single .jsonl file through a folder holding a
    link to it (named after the file's real path, so the restore child finds the same folder)."""
    if os.path.isdir(path):
        return path
    (real,) = [os.path.realpath(f) for f in peer_common.jsonl_files(path)]
    folder = os.path.join(tempfile.gettempdir(), "zephon-peer-shards",
                          hashlib.sha256(real.encode()).hexdigest()[:16])
    os.makedirs(folder, exist_ok=True)
    link = os.path.join(folder, os.path.basename(real))
    if not os.path.lexists(link):
        os.symlink(real, link)
    return folder


def load_tokenizer(path: str, eos: str) -> PreTrainedTokenizerFast:
    """The tokenizer with ``eos`` as its EOS (and BOS, unused). transformers would add a token it
    does not know as a new one, so check first that the file has it."""
    tok = PreTrainedTokenizerFast(tokenizer_file=path)
    peer_common.token_id(tok.backend_tokenizer, eos)
    tok.eos_token = tok.bos_token = eos
    return tok


def build(args, state):
    tok = load_tokenizer(args.tokenizer, args.eos)
    eos = int(tok.eos_token_id)
    pad_id = eos if args.pad_id is None else args.pad_id

    ds_a = Dataset.from_path("a", shard_dir(args.corpus_a), fmt="jsonl")
    ds_b = Dataset.from_path("b", shard_dir(args.corpus_b), fmt="jsonl")
    wa = args.weight_a
    chunk = args.zephon_chunk_size or 16384
    # repeat-liveness: each dataset must hold at least ceil(w * chunk) + 1 samples
    limit = min(int(len(ds_a) / max(wa, 1e-9)), int(len(ds_b) / max(1 - wa, 1e-9))) - 2
    if chunk > limit:
        chunk = max(1, limit)
    args.zephon_chunk_size_effective = chunk
    ws = StaticMixtureWorkSource(
        [ds_a, ds_b], MixtureSpec({"a": wa, "b": 1 - wa}), chunk_size=chunk, seed=args.seed,
        shuffle_shards=True, shuffle_within_shard=True, exhausted_policy="repeat",
    )
    S = args.seq_len
    p = Pipeline(ws)
    tok_kw = dict(tokenizer=tok, field=args.text_field, special_tokens="eos", add_attention_mask=False)
    if args.packing == "first_fit":
        tok_kw.update(split_long_samples=True, max_length=S)
    p = p.tokenize(**tok_kw)
    if args.packing == "wrap":
        p = p.pack_flat(S, algorithm="wrap", emit_positions=True)
    else:
        p = p.pack_flat(S, algorithm="first_fit", num_bins=args.num_bins, pad_token_id=pad_id,
                        emit_positions=True)
    L = args.lanes
    if args.batch_size % L or args.shuffle_buffer % L:
        raise SystemExit(f"--batch-size ({args.batch_size}) and --shuffle-buffer ({args.shuffle_buffer}) "
                         f"must be multiples of --lanes ({L})")
    args.zephon_microbatch = args.batch_size // L
    args.zephon_shuffle_buffer_per_lane = args.shuffle_buffer // L
    p = p.shuffle(buffer_size=args.shuffle_buffer // L, seed=args.seed, algorithm=args.zephon_shuffle_algorithm)
    p = p.batch(args.batch_size // L)
    opts = dict(canonical_replicas=args.lanes, mtp_mode=bool(args.zephon_mtp))
    if args.workers > 0:
        opts.update(max_workers=args.workers, worker_allocation="per_stage_fixed",
                    runner="process" if args.worker_kind == "process" else "threads")
    else:
        opts.update(max_workers=1, worker_allocation="per_stage_fixed", runner="inline")
    p = p.options(**opts)
    if args.zephon_explain:
        print(p.explain(), file=sys.stderr)
    if state is not None:
        p.restore(state)
    return _Handle(p, pad_id, L)


if __name__ == "__main__":
    peer_common.run("zephon", build, extra_args, versions)
