"""A step's columns, and the label convention they hold.

zephon's rows carry ``labels`` already shifted: ``labels[i]`` is the token after
``input_ids[i]`` in the same document, -100 at a document's end, on padding and where the loss
mask is 0 (``"next_token"``: for a model that does not shift, as TorchTitan's). Hugging Face
causal LMs shift inside the model: their ``labels`` are the tokens themselves, and a model given
zephon's labels would learn the token after next. ``Step.batch(layout="hf")`` gives the
columns a ``transformers`` model takes (``input_ids``, ``labels``, ``position_ids``), with the
labels in its convention; ``layout="hf_flat"`` packs them into one row without padding, as
``DataCollatorWithFlattening`` does. ``source_ids`` (each token's dataset) and ``loss_weights``
(each label's weight, moved with its label) come along when the packer writes them. Every batch
says which convention it holds in ``batch.label_convention``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

IGNORE = -100

LAYOUTS = ("zephon", "hf", "hf_flat")


class Batch(dict):
    """A step's columns by name (numpy arrays, text and bytes columns as lists), and the label
    convention of its ``labels``: ``"next_token"`` (zephon's layout) or ``"hf"``."""

    __slots__ = ("label_convention",)

    def __init__(self, columns: dict, label_convention: str) -> None:
        super().__init__(columns)
        self.label_convention = label_convention

    def __repr__(self) -> str:
        return f"Batch({dict.__repr__(self)}, label_convention={self.label_convention!r})"


def finish(columns: dict, layout: str) -> Batch:
    """The batch of a step's columns in ``layout`` (called by ``Step.batch``)."""
    if layout == "zephon":
        return Batch(columns, "next_token")
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}: give one of {', '.join(LAYOUTS)}")
    for need in ("input_ids", "labels", "positions"):
        if need not in columns:
            raise ValueError(f"layout {layout!r} needs the packer's {need!r} column (a [pack] table)")
    ids = np.asarray(columns["input_ids"], dtype=np.int64)
    ours = np.asarray(columns["labels"], dtype=np.int64)
    positions = np.asarray(columns["positions"], dtype=np.int64)
    # The model predicts labels[j] from position j - 1: zephon's label of j - 1 is it when
    # position j - 1 is trained (its loss mask), and a row's first token is predicted from
    # nothing.
    trained = np.asarray(columns["loss_mask"]) != 0 if "loss_mask" in columns else ours != IGNORE
    labels = np.full_like(ours, IGNORE)
    labels[:, 1:] = np.where(trained[:, :-1], ours[:, :-1], IGNORE)
    out: dict[str, Any] = {"input_ids": ids, "labels": labels, "position_ids": positions}
    # Each token's dataset stays with the token; a position's loss weight moves with its label.
    if "source_ids" in columns:
        out["source_ids"] = np.asarray(columns["source_ids"])
    if "loss_weights" in columns:
        ours_w = np.asarray(columns["loss_weights"])
        weights = np.zeros_like(ours_w)
        weights[:, 1:] = ours_w[:, :-1]
        out["loss_weights"] = weights
    if layout == "hf_flat":
        if "num_tokens" not in columns:
            raise ValueError("layout 'hf_flat' needs the packer's 'num_tokens' column")
        keep = [slice(0, int(n)) for n in np.asarray(columns["num_tokens"]).reshape(-1)]
        out = {k: np.concatenate([v[r, s] for r, s in enumerate(keep)])[None, :] for k, v in out.items()}
    return Batch(out, "hf")
