#!/usr/bin/env python3
"""Peer harness: Google Grain (PyPI ``grain``), public API only.

Pipeline (kept as close as possible to peer_zephon.py):
    A, B = MapDataset.source(JsonlLineSource(dir or file)).shuffle(seed).repeat()   # per dataset
    mixed = MapDataset.mix([A, B], weights=[w, 1-w])
    toks  = mixed.map(Tokenize(tokenizer.json, --eos, --text-field))   # json.loads + encode + EOS
    it    = toks.to_iter_dataset(ReadOptions(num_threads=T, prefetch_buffer_size=...))
    packed = experimental.ConcatThenSplitIterDataset(it, length_struct={"input_ids": S})     # wrap
           | experimental.FirstFitPackIterDataset(FlatMapIterDataset(it, SplitLong(S)),
                 length_struct={"input_ids": S}, num_packing_bins=K, shuffle_bins=False,
                 padding_struct={"input_ids": --pad-id})                                   # first_fit
    shuffled = experimental.WindowShuffleIterDataset(packed, window_size=W / num_procs, seed)
    batched  = shuffled.batch(B, drop_remainder=True)
    [batched = batched.mp_prefetch(MultiprocessingOptions(num_workers=N))]   # --worker-kind process
    state: DatasetIterator.get_state() / set_state()

Differences from peer_zephon.py (see its docstring for the full list):
  * Grain has no JSONL reader; JsonlLineSource below is a minimal
    RandomAccessDataSource (one byte-offset scan at startup, pread per row).
    JSON parsing happens in the map, as in Zephon's fetch op.
  * Global index shuffle per dataset (Zephon: shard order + within-shard order).
  * Tokenizer: tokenizers.Tokenizer.encode per document (Zephon calls an HF
    PreTrainedTokenizerFast on micro-batches of up to 64 texts). Rayon
    parallelism is disabled in both (peer_common sets the env vars).
  * --worker-kind process: whole pipeline (incl. packing/shuffle/batch) per
    mp_prefetch worker on a 1/N slice of the mixed index space; output
    depends on N. --worker-kind thread: ReadOptions.num_threads=N for the
    map stage only (packing etc. stay on the consumer thread).
  * Padding/segment ids: non-pad tokens = count(input_ids_segment_ids != 0).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import peer_common  # noqa: E402  (records process start before heavy imports)

import bisect  # noqa: E402
import json  # noqa: E402

import grain  # noqa: E402
import numpy as np  # noqa: E402
import tokenizers  # noqa: E402
from grain import experimental as gx  # noqa: E402


def extra_args(ap) -> None:
    ap.add_argument("--grain-read-threads", type=int, default=None,
                    help="ReadOptions.num_threads per process (default: N for --worker-kind thread, "
                         "1 for process workers / inline)")
    ap.add_argument("--grain-prefetch-buffer", type=int, default=500, help="ReadOptions.prefetch_buffer_size")
    ap.add_argument("--grain-worker-buffer", type=int, default=2,
                    help="MultiprocessingOptions.per_worker_buffer_size (in batches)")
    ap.add_argument("--grain-no-state-fix", action="store_true",
                    help="restore the JSON state as is (shows the remainder_slices bug: the resumed "
                         "stream diverges, matches_original=false)")


def versions() -> dict:
    return {"grain": grain.__version__, "tokenizers": tokenizers.__version__,
            "python": sys.version.split()[0]}


class JsonlLineSource:
    """RandomAccessDataSource over every non-blank line of a .jsonl file or of dir/*.jsonl (sorted).

    Pickles as (paths, offsets) and reopens files lazily in each process.
    """

    def __init__(self, root: str) -> None:
        self.paths = peer_common.jsonl_files(root)
        self.starts: list[np.ndarray] = []
        self.ends: list[np.ndarray] = []
        for p in self.paths:
            s, e, pos = [], [], 0
            with open(p, "rb") as fh:
                for line in fh:
                    if line.strip():
                        s.append(pos)
                        e.append(pos + len(line))
                    pos += len(line)
            self.starts.append(np.asarray(s, dtype=np.int64))
            self.ends.append(np.asarray(e, dtype=np.int64))
        self.cum = np.cumsum([0] + [len(s) for s in self.starts]).tolist()
        self._fds: dict[int, int] = {}

    def __len__(self) -> int:
        return int(self.cum[-1])

    def __getitem__(self, i: int) -> bytes:
        f = bisect.bisect_right(self.cum, int(i)) - 1
        j = int(i) - self.cum[f]
        fd = self._fds.get(f)
        if fd is None:
            fd = self._fds[f] = os.open(self.paths[f], os.O_RDONLY)
        a, b = int(self.starts[f][j]), int(self.ends[f][j])
        return os.pread(fd, b - a, a)

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_fds"] = {}
        return d

    def __repr__(self) -> str:  # grain uses repr in stats / fingerprints
        return f"JsonlLineSource({len(self.paths)} files, {len(self)} rows)"


class Tokenize(grain.transforms.Map):
    """bytes(JSON row) -> {"input_ids": int32[n]}: the text of ``field``, tokenized, EOS appended."""

    def __init__(self, path: str, eos: str, field: str) -> None:
        self.path, self.eos, self.field = path, eos, field
        self._tok = None
        self._eos = None

    def _ensure(self):
        if self._tok is None:
            self._tok = tokenizers.Tokenizer.from_file(self.path)
            self._eos = peer_common.token_id(self._tok, self.eos)
        return self._tok

    def map(self, raw: bytes):
        tok = self._ensure()
        text = json.loads(raw)[self.field]
        ids = tok.encode(text, add_special_tokens=False).ids
        ids.append(self._eos)
        return {"input_ids": np.asarray(ids, dtype=np.int32)}

    def __getstate__(self):
        return {"path": self.path, "eos": self.eos, "field": self.field, "_tok": None, "_eos": None}


class SplitLong(grain.experimental.FlatMapTransform):
    """Split token sequences longer than S into <= S pieces (for first_fit)."""

    def __init__(self, seq_len: int, max_fan_out: int = 1024) -> None:
        self.seq_len = seq_len
        self.max_fan_out = max_fan_out

    def flat_map(self, el):
        ids = el["input_ids"]
        return [{"input_ids": ids[i:i + self.seq_len]} for i in range(0, len(ids), self.seq_len)]


def _retuple_slices(o):
    """Undo JSON's tuple->list on ConcatThenSplit ``remainder_slices``.

    grain 0.2.18 compares each slice with the tuple sentinel (-1, -1); after a
    JSON round trip (which grain's own orbax CheckpointHandler also does) the
    list [-1, -1] compares unequal, restore thinks there is a remainder and
    the resumed stream silently diverges. Found by this harness.
    """
    if isinstance(o, dict):
        return {k: ({f: tuple(v) for f, v in val.items()} if k == "remainder_slices" and isinstance(val, dict)
                    else _retuple_slices(val)) for k, val in o.items()}
    if isinstance(o, list):
        return [_retuple_slices(v) for v in o]
    return o


class _Handle:
    def __init__(self, ds, state, retuple: bool = True) -> None:
        self.it = iter(ds)
        if state is not None:
            self.it.set_state(_retuple_slices(state) if retuple else state)

    def next_batch(self):
        b = next(self.it)
        seg = b["input_ids_segment_ids"]
        return b["input_ids"], int(np.count_nonzero(seg))

    def get_state(self) -> dict:
        return self.it.get_state()

    def close(self) -> None:
        close = getattr(self.it, "close", None)
        if close is not None:
            close()


def build(args, state):
    wa = args.weight_a
    src_a = grain.MapDataset.source(JsonlLineSource(args.corpus_a)).shuffle(seed=args.seed).repeat()
    src_b = grain.MapDataset.source(JsonlLineSource(args.corpus_b)).shuffle(seed=args.seed + 1).repeat()
    mixed = grain.MapDataset.mix([src_a, src_b], weights=[wa, 1 - wa])
    toks = mixed.map(Tokenize(args.tokenizer, args.eos, args.text_field))

    procs = args.workers if (args.workers > 0 and args.worker_kind == "process") else 0
    threads = args.grain_read_threads
    if threads is None:
        threads = args.workers if (args.workers > 0 and args.worker_kind == "thread") else 1
    it = toks.to_iter_dataset(grain.ReadOptions(num_threads=threads,
                                                prefetch_buffer_size=args.grain_prefetch_buffer))
    S = args.seq_len
    if args.packing == "wrap":
        packed = gx.ConcatThenSplitIterDataset(it, length_struct={"input_ids": S})
    else:
        pieces = gx.FlatMapIterDataset(it, SplitLong(S))
        pad_id = args.pad_id  # the driver always passes it; alone, default to the EOS id
        if pad_id is None:
            pad_id = peer_common.token_id(tokenizers.Tokenizer.from_file(args.tokenizer), args.eos)
        packed = gx.FirstFitPackIterDataset(pieces, length_struct={"input_ids": S},
                                            num_packing_bins=args.num_bins, shuffle_bins=False,
                                            padding_struct={"input_ids": pad_id})
    # --shuffle-buffer is the total number of packed rows buffered; with
    # process workers every worker runs its own copy of the pipeline, so each
    # gets an equal share (same memory and fill work before the first batch).
    window = max(1, args.shuffle_buffer // max(1, procs))
    args.grain_window_per_pipeline = window
    shuffled = gx.WindowShuffleIterDataset(packed, window_size=window, seed=args.seed)
    batched = shuffled.batch(args.batch_size, drop_remainder=True)
    if procs > 0:
        batched = batched.mp_prefetch(grain.MultiprocessingOptions(
            num_workers=procs, per_worker_buffer_size=args.grain_worker_buffer))
    return _Handle(batched, state, retuple=not args.grain_no_state_fix)


if __name__ == "__main__":
    peer_common.run("grain", build, extra_args, versions)
