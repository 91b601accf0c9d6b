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
        "positions": positions}, labels)`` as int64 CPU tensors (with ``"source_ids"`` and
        ``"loss_weights"`` in the dict when ``[pack]`` writes them), one microbatch at a time:
        ``[B, L]`` for TorchTitan 0.3 (``B = local_batch_size``, ``L = seq_len``), flat ``[T]``
        for TorchTitan's data package (``T = num_tokens_per_batch``). Positions restart at 0 at
        every document, which is how TorchTitan finds documents for its attention masks; labels
        are the next token within a document, -100 elsewhere.

        A zephon step (the spec's rows per step, split over the dp ranks) is one optimizer step:
        each rank's rows of it come as ``local_rows / local_batch_size`` microbatches, which
        TorchTitan's gradient accumulation covers (``global_batch_size`` = the spec's rows per
        step). TorchTitan keeps ``local_batch_size`` when the dp size changes and changes its
        accumulation, so a run checkpointed at dp 16 resumes at dp 8 with the same memory per
        GPU. Its state is taken between steps only. Built by TorchTitan's validator
        (``repeat=False`` / ``infinite=False``), it reads the spec's ``[validation]`` pass: every
        held-out record once, ending on the same step on every rank."""

        @dataclasses.dataclass(kw_only=True, slots=True)
        class Config(base.Config):  # type: ignore[misc, name-defined]
            spec: str = ""
            """The zephon spec (a TOML file) that makes the data."""
            threads: Optional[int] = None
            """Engine worker threads (default: the spec's, else this process's cores shared
            among the ranks of its node, ``LOCAL_WORLD_SIZE``)."""
            snapshot_every: int = 1
            """Steps between the states a checkpoint can take (`Loader(snapshot_every=...)`): the
            trainer's checkpoint interval in loader steps makes steps cheaper, but a checkpoint
            at any other step is then refused."""
            if flat:
                repeat: bool = True
                """False (TorchTitan's validator): the spec's ``[validation]`` pass, read once."""
            else:
                infinite: bool = True
                """False (TorchTitan's validator): the spec's ``[validation]`` pass, read once."""

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
            """The zephon ``Step`` behind the last microbatch (its provenance and lane digests)."""
            self.validation = not (config.repeat if flat else config.infinite)
            self._pending = 0
            """Microbatches of the current step not handed out yet (0: between steps)."""
            if self.validation:
                from ._native import ValidationLoader

                self.loader = ValidationLoader(config.spec, dp_rank=dp_rank, dp_world_size=dp_world_size,
                                               threads=config.threads)
                rows = self.loader.local_rows
                schedule = [(0, rows * dp_world_size)]
            else:
                # The trainer may checkpoint at a step off its interval (at the end of training),
                # so every step keeps its state unless the config says otherwise.
                self.loader = Loader(config.spec, dp_rank=dp_rank, dp_world_size=dp_world_size,
                                     threads=config.threads, snapshot_every=config.snapshot_every)
                rows = self.loader.local_rows
                schedule = self.loader.rows_schedule
            length = self.loader.seq_len
            if length is None:
                raise ValueError(f"spec {config.spec}: TorchTitan needs fixed-length rows: give it a [pack] table")
            where = f"spec {config.spec} at dp size {dp_world_size}"
            if len(schedule) > 1:
                step, g = schedule[1]
                raise ValueError(
                    f"{where}: rows per step change at step {step} (to {g}), but TorchTitan's gradient accumulation "
                    f"is fixed for a run: give the spec one rows_per_step, or train each segment as a run of its own"
                )
            if flat:
                micro = num_tokens_per_batch if num_tokens_per_batch is not None else rows * length
                if micro % length or (rows * length) % micro:
                    raise ValueError(
                        f"num_tokens_per_batch = {micro}, but {where} gives {rows} rows of {length} tokens on each "
                        f"rank a step: give a multiple of {length} that divides {rows * length}"
                    )
                self.micro_rows = micro // length
            else:
                if seq_len is not None and seq_len != length:
                    raise ValueError(f"seq_len = {seq_len}, but {where} gives rows of {length} tokens")
                micro = local_batch_size if local_batch_size is not None else rows
                if micro <= 0 or rows % micro:
                    raise ValueError(
                        f"local_batch_size = {micro}, but {where} gives {rows} rows on each rank a step: give a "
                        f"local_batch_size that divides {rows}"
                    )
                self.micro_rows = micro
            if max_context_length is not None and max_context_length < length:
                raise ValueError(f"max_context_length = {max_context_length} is shorter than the spec's rows of {length}")
            self.microbatches_per_step = rows // self.micro_rows
            """Microbatches a step gives on each rank: the gradient accumulation the trainer needs."""

        def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
            for step in self.loader:
                if step is None:
                    return
                self.last_step = step
                batches = step.microbatches(self.micro_rows, int64=True)
                for k, b in enumerate(batches):
                    self._pending = len(batches) - k - 1
                    inputs = {"input": as_tensor(b["input_ids"]), "positions": as_tensor(b["positions"])}
                    # The packer's per-token sources and loss weights, when the spec asks for them.
                    for extra in ("source_ids", "loss_weights"):
                        if extra in b:
                            inputs[extra] = as_tensor(b[extra])
                    labels = as_tensor(b["labels"])
                    if self.flat:
                        inputs = {k: v.reshape(-1) for k, v in inputs.items()}
                        labels = labels.reshape(-1)
                    yield inputs, labels

        def state_dict(self) -> dict[str, Any]:
            if self._pending and self.last_step is not None:
                taken = self.microbatches_per_step - self._pending
                raise RuntimeError(
                    f"a checkpoint between microbatches: step {self.last_step.index} has "
                    f"{self.microbatches_per_step} microbatches on this rank and {taken} were taken; "
                    "checkpoint after a step's last microbatch (TorchTitan does, after its gradient accumulation)"
                )
            if self.validation:
                return {}
            return self.loader.state_dict()

        def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
            if state_dict and not self.validation:
                self.loader.load_state_dict(state_dict)

        def close(self) -> None:
            if not self.validation:
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
