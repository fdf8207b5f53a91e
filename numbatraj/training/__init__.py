"""The last mile: window batches with LeRobot semantics, normalisation, torch/JAX handoff,
DataLoader-safe datasets.

torch is optional (``numbatraj[torch]``): :class:`TorchDataset` and
:class:`TorchIterableDataset` import it on first access, everything else works without it.
"""

from typing import Any

from numbatraj.training.fields import Field, delta_indices
from numbatraj.training.loader import BatchLoader, epoch_order, frame_rows

__all__ = [
    "BatchLoader",
    "Field",
    "TorchDataset",
    "TorchIterableDataset",
    "delta_indices",
    "epoch_order",
    "frame_rows",
]


def __getattr__(name: str) -> Any:
    if name in ("TorchDataset", "TorchIterableDataset"):
        from numbatraj.training import datasets

        return getattr(datasets, name)
    raise AttributeError(f"module 'numbatraj.training' has no attribute {name!r}")
