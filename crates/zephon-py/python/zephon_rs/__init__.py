"""zephon_rs: elastically deterministic data loading for foundation-model training.

Every global step is a pure function of the spec and its seed: the same bytes at every
data-parallel size, thread count and microbatch size, and after any number of resumes at other
sizes. This package is zephon's Rust loader, driven from Python::

    import zephon_rs
    loader = zephon_rs.Loader("run.toml", dp_rank=0, dp_world_size=1)
    for step in loader:
        batch = step.batch()          # dict of numpy arrays over the Rust buffers
        ...
    state = loader.state_dict()       # one entry per lane: reshards across dp sizes

``zephon_rs.torch`` adapts it to torchdata's ``StatefulDataLoader`` and to TorchTitan (torch is
not a dependency of this package).
"""

from ._batch import Batch
from ._native import (
    CHECKPOINT_FORMAT,
    CheckpointError,
    DataError,
    Error,
    Loader,
    RustBuffer,
    SpecError,
    Step,
    ValidationLoader,
    __version__,
)

__all__ = [
    "Batch",
    "CHECKPOINT_FORMAT",
    "CheckpointError",
    "DataError",
    "Error",
    "Loader",
    "RustBuffer",
    "SpecError",
    "Step",
    "ValidationLoader",
    "__version__",
    "step_fingerprint",
]


def step_fingerprint(lane_digests):
    """The global step fingerprint from ``(lane, digest)`` pairs of every lane of one step,
    gathered from any ranks: the SHA-256 over the 32-byte lane digests in lane order, as the
    ``zephon`` command's hash logs combine them. Returns the hex digest."""
    import hashlib

    h = hashlib.sha256()
    for _, d in sorted(lane_digests, key=lambda p: p[0]):
        h.update(d)
    return h.hexdigest()
