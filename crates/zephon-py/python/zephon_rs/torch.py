"""PyTorch adapters for :class:`zephon_rs.Loader`.

- :func:`to_tensors` turns a step's batch into torch tensors without copying (the tensors share
  the Rust buffers);
- :class:`StepDataset` is an ``IterableDataset`` with the ``Stateful`` protocol, for torchdata's
  ``StatefulDataLoader(dataset, batch_size=None, num_workers=0)`` (zephon parallelises in Rust);
- ``TitanDataLoader`` is a TorchTitan data loader (``BaseDataLoader``) for the TorchTitan that is
  installed (0.3 releases, or the newer one with flat batches), built the way TorchTitan's
  trainer builds its loader; its state goes under the checkpointer's ``"dataloader"`` key and,
  unlike TorchTitan's own loaders, resumes exactly after a change of data-parallel size.

Importing this module imports torch; ``zephon_rs`` itself never does.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Iterator, Mapping, Optional

import numpy as np
import torch

from ._native import Loader, RustBuffer

__all__ = ["StepDataset", "TitanDataLoader", "as_tensor", "to_tensors"]

_HALF = {"bf16": torch.bfloat16, "f16": torch.float16}


def as_tensor(array: np.ndarray) -> torch.Tensor:
    """A tensor over ``array``'s memory. A writeable array from a step is shared without a copy;
    a read-only one (its buffer is still shared with other Rust values) is copied, so that
    writing the tensor can never change what Rust holds. ``bf16``/``f16`` columns (``uint16``
    bit patterns in numpy) become ``bfloat16``/``float16`` tensors."""
    base = array.base
    if not array.flags.writeable:
        array = array.copy()
    t = torch.from_numpy(array)
    if isinstance(base, RustBuffer) and base.dtype in _HALF:
        t = t.view(_HALF[base.dtype])
    return t


def to_tensors(batch: Mapping[str, Any]) -> dict[str, Any]:
    """Every numpy array of a batch as a tensor (:func:`as_tensor`); text and byte columns
    (lists) are kept as they are."""
    return {k: as_tensor(v) if isinstance(v, np.ndarray) else v for k, v in batch.items()}


class StepDataset(torch.utils.data.IterableDataset):
    """This rank's steps as an iterable of batches (a dict of tensors per global step, token
    columns as int64), with ``state_dict``/``load_state_dict``.

    Use it with ``torchdata.stateful_dataloader.StatefulDataLoader(ds, batch_size=None,
    num_workers=0)``: the steps are already batches, and zephon's threads do the parallel work.
    Worker processes would each need a Loader of their own and would change nothing about the
    data; a Loader copied into a worker refuses to run, naming the cause."""

    def __init__(self, spec: Any, **loader_kwargs: Any) -> None:
        super().__init__()
        self.loader = Loader(spec, **loader_kwargs)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for step in self.loader:
            yield to_tensors(step.batch(int64=True))

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self.loader.load_state_dict(state_dict)


def _titan_base() -> tuple[type, bool]:
    """TorchTitan's ``BaseDataLoader``, and whether that TorchTitan wants flat ``[T]`` batches
    (its data package) rather than ``[B, L]`` ones (0.3 releases)."""
    try:
        from torchtitan.components.data.loader import BaseDataLoader

        return BaseDataLoader, True
    except ImportError:
        from torchtitan.components.dataloader import BaseDataLoader

        return BaseDataLoader, False


def _make_titan_loader() -> type:
    base, flat = _titan_base()

    class TitanDataLoader(base):  # type: ignore[misc, valid-type]
        """A TorchTitan data loader over a zephon spec. It yields ``({"input": ids,
        "positions": positions}, labels)`` as int64 CPU tensors: ``[B, L]`` for TorchTitan 0.3
        (``B = local_batch_size``, ``L = seq_len``), flat ``[T]`` for TorchTitan's data package
        (``T = num_tokens_per_batch``). Positions restart at 0 at every document, which is how
        TorchTitan finds documents for its attention masks; labels are the next token within a
        document, -100 elsewhere. The spec decides the data; the trainer's sizes must match it,
        and a mismatch is refused naming both."""

        @dataclasses.dataclass(kw_only=True, slots=True)
        class Config(base.Config):  # type: ignore[misc, name-defined]
            spec: str = ""
            """The zephon spec (a TOML file) that makes the data."""
            threads: Optional[int] = None
            """Engine worker threads (default: the spec's, else every core)."""
            snapshot_every: int = 1
            """Steps between the states a checkpoint can take (`Loader(snapshot_every=...)`): the
            trainer's checkpoint interval in loader steps makes steps cheaper, but a checkpoint
            at any other step is then refused."""
            if flat:
                repeat: bool = True
                """Set by TorchTitan's validator; whether the data repeats is the spec's
                ``[source] exhaustion``."""
            else:
                infinite: bool = True
                """Set by TorchTitan's validator; whether the data repeats is the spec's
                ``[source] exhaustion``."""

        def __init__(
            self,
            config: Any,
            *,
            dp_world_size: int,
            dp_rank: int,
            tokenizer: Any = None,
            seq_len: Optional[int] = None,
            local_batch_size: Optional[int] = None,
            max_context_length: Optional[int] = None,
            num_tokens_per_batch: Optional[int] = None,
            snapshot_every_n_steps: Optional[int] = None,
            **_: Any,
        ) -> None:
            if not config.spec:
                raise ValueError("TitanDataLoader.Config(spec=...) names no zephon spec")
            self.config = config
            self.flat = flat
            self.last_step: Optional[Any] = None
            """The zephon ``Step`` behind the last batch (its provenance and lane digests)."""
            # The trainer may checkpoint at a step off its interval (at the end of training), so
            # every step keeps its state unless the config says otherwise.
            self.loader = Loader(config.spec, dp_rank=dp_rank, dp_world_size=dp_world_size, threads=config.threads,
                                 snapshot_every=config.snapshot_every)
            rows, length = self.loader.local_rows, self.loader.seq_len
            if length is None:
                raise ValueError(f"spec {config.spec}: TorchTitan needs fixed-length rows: give it a [pack] table")
            want = {
                "local_batch_size": (local_batch_size, rows),
                "seq_len": (seq_len, length),
                "num_tokens_per_batch": (num_tokens_per_batch, rows * length),
            }
            for name, (got, ours) in want.items():
                if got is not None and got != ours:
                    raise ValueError(
                        f"{name} = {got}, but spec {config.spec} gives {ours} at dp size {dp_world_size} "
                        f"({self.loader.rows_per_step} rows of {length} tokens a step, {rows} on each rank)"
                    )
            if max_context_length is not None and max_context_length < length:
                raise ValueError(f"max_context_length = {max_context_length} is shorter than the spec's rows of {length}")

        def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
            for step in self.loader:
                self.last_step = step
                b = step.batch(int64=True)
                ids, pos, labels = (as_tensor(b[k]) for k in ("input_ids", "positions", "labels"))
                if self.flat:
                    ids, pos, labels = ids.reshape(-1), pos.reshape(-1), labels.reshape(-1)
                yield {"input": ids, "positions": pos}, labels

        def state_dict(self) -> dict[str, Any]:
            return self.loader.state_dict()

        def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
            if state_dict:
                self.loader.load_state_dict(state_dict)

        def close(self) -> None:
            self.loader.close()

    TitanDataLoader.__module__ = TitanDataLoader.Config.__module__ = __name__
    return TitanDataLoader


def __getattr__(name: str) -> Any:
    # TorchTitan is imported only when its adapter is asked for.
    if name == "TitanDataLoader":
        cls = _make_titan_loader()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
