#!/usr/bin/env python3
"""Peer harness: our own Rust loader through the Python wheel (``zephon-rs``, import ``zephon_rs``).

Measured by peer_common.py exactly as the Python peers are (timing, RSS sampler, checkpoint,
restore in a fresh process, hash check); only the pipeline differs, and it is the one our CLI
runs: the spec bench_peers.py generates for ``zephon bench`` (``ours_spec``), read by the same
Rust engine.

    loader = zephon_rs.Loader(SPEC, dp_rank=0, dp_world_size=1, threads=--threads)
    per step:   step = next(loader); batch = step.batch()          # dict of numpy arrays
                tokens = batch["input_ids"]; non-pad = batch["num_tokens"].sum()
    checkpoint: loader.state_dict()   # {"zephon": {format, step, lanes, run: bytes},
                                      #  "lanes": {"lane_000000": bytes, ...}}
    restore:    Loader(SPEC, ...) in a fresh process, then loader.load_state_dict(state)

What a trainer does with each step is done here too: ``step.batch()`` builds every column
(``input_ids``, ``labels``, ``positions``, ``segment_ids``, ``cu_seqlens``, ``max_seqlen``,
``num_tokens``, ``loss_mask``) and ``num_tokens`` is read to count the tokens.

Checkpoint size: the bytes a checkpoint store keeps for the state dict, i.e. the lengths of its
``bytes`` values plus 8 bytes per int (``ckpt_bytes_store``). peer_common still writes the state
as JSON (bytes as hex) to hand it to the restore child; that JSON's size is recorded too
(``ckpt_bytes_json``) but is not the figure reported.

The restore check hashes every numpy column of the compared batches (the peers hash
``input_ids`` only), so the restored steps must match in labels, positions, segment ids and
counts as well.

Differences from ``zephon bench`` (the CLI row), which runs the same spec:
  * the wheel's Loader snapshots its lanes after every step (so that ``state_dict()`` can follow
    any step); ``zephon run --checkpoint-at 20`` snapshots every 20 steps and after the last;
  * the CLI counts tokens from the rows; here every step is stacked into numpy columns first;
  * the CLI's resume reads a checkpoint folder (``--resume-from``); here the state dict (JSON, as
    for the peers) is parsed and loaded with ``load_state_dict``.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import peer_common  # noqa: E402  (records process start before heavy imports)

import numpy as np  # noqa: E402
import zephon_rs  # noqa: E402


def spec_args(ap) -> None:
    """Arguments of this peer: the spec replaces the text peers' corpus/tokenizer options."""
    ap.add_argument("--spec", required=True, help="a zephon spec file (bench_peers.py writes ours_spec)")
    ap.add_argument("--threads", type=int, default=None, help="engine threads (default: the spec's [run] threads)")
    peer_common.loop_args(ap)


def extra_args(ap) -> None:
    pass


def versions() -> dict:
    return {"zephon_rs": zephon_rs.__version__, "numpy": np.__version__,
            "native_module": getattr(zephon_rs._native, "__file__", None),
            "python": sys.version.split()[0]}


def _state_store_bytes(o) -> int:
    """Bytes a checkpoint store keeps for a state dict: bytes values as they are, ints as 8."""
    if isinstance(o, dict):
        return sum(_state_store_bytes(v) for v in o.values())
    if isinstance(o, (bytes, bytearray, memoryview)):
        return len(o)
    if isinstance(o, (int, np.integer)):
        return 8
    raise TypeError(f"unexpected value in a zephon_rs state dict: {type(o).__name__}")


class _Handle:
    def __init__(self, loader) -> None:
        self.loader = loader

    def next_batch(self):
        step = next(self.loader)
        batch = step.batch()
        nonpad = int(batch["num_tokens"].sum())
        others = tuple(batch[k] for k in sorted(batch) if k != "input_ids" and isinstance(batch[k], np.ndarray))
        return batch["input_ids"], nonpad, {"arrays": others}

    def get_state(self) -> dict:
        return self.loader.state_dict()

    def state_store_bytes(self, state: dict) -> int:
        return _state_store_bytes(state)

    def close(self) -> None:
        self.loader.close()


def build(args, state):
    loader = zephon_rs.Loader(args.spec, dp_rank=0, dp_world_size=1, threads=args.threads)
    if state is not None:
        loader.load_state_dict(state)
    args.lanes = loader.lanes
    args.rows_per_step = loader.rows_per_step
    args.seq_len = loader.seq_len
    return _Handle(loader)


if __name__ == "__main__":
    peer_common.run("zephon_rs", build, extra_args, versions, base_args=spec_args)
