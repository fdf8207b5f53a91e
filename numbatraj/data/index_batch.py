"""IndexBatch: what a sampler produces and a column consumes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from numbatraj._cuda import is_device_array
from numbatraj.errors import SchemaError

__all__ = ["IndexBatch"]


@dataclass(frozen=True)
class IndexBatch:
    """Row indices of one minibatch, plus what the sampling policy knows about them.

    Attributes
    ----------
    indices : int64 array, shape ``(B,)`` or ``(B, T)``
        Row numbers; ``(B, T)`` for sequence windows.  A numpy array on the host or a Numba
        device array on the GPU.
    weights : float32 array ``(B,)``, optional
        Importance-sampling weights (prioritized sampling).
    is_first : bool array, same shape as ``indices``, optional
        True where a row starts an episode (sequence windows reset recurrent state there).
    stamps : int64 array ``(B,)``, optional
        Generation stamps of the sampled rows (prioritized sampling; stale updates are
        ignored by comparing stamps).
    """

    indices: Any
    weights: Any = None
    is_first: Any = None
    stamps: Any = None

    def __post_init__(self) -> None:
        idx = self.indices
        if (type(idx) is not np.ndarray or idx.dtype != np.int64) and not is_device_array(idx):
            idx = np.asarray(idx)
            if idx.dtype != np.int64:
                if idx.dtype.kind not in "iu":
                    raise SchemaError(f"IndexBatch indices must be integers, got {idx.dtype}")
                idx = idx.astype(np.int64)
            object.__setattr__(self, "indices", idx)
        if idx.ndim not in (1, 2):
            raise SchemaError(f"IndexBatch indices must be (B,) or (B, T), got shape {idx.shape}")
        for name in ("weights", "stamps"):
            a = getattr(self, name)
            if a is not None and tuple(a.shape) != (idx.shape[0],):
                raise SchemaError(
                    f"IndexBatch {name} has shape {a.shape}, expected ({idx.shape[0]},)"
                )
        if self.is_first is not None and tuple(self.is_first.shape) != tuple(idx.shape):
            raise SchemaError(
                f"IndexBatch is_first has shape {self.is_first.shape}, expected {idx.shape}"
            )

    @property
    def on_device(self) -> bool:
        """True when the indices live in GPU memory."""
        return is_device_array(self.indices)

    @property
    def batch_size(self) -> int:
        return int(self.indices.shape[0])

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.indices.shape)

    def __len__(self) -> int:
        return self.batch_size
