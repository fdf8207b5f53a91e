"""DataLoader-safe datasets: :class:`TorchDataset` (map-style) and :class:`TorchIterableDataset`.

Both pickle by path and keyword arguments only: a worker (fork, forkserver or spawn)
reopens the store and loads its columns into its own memory on first use, so nothing
unpicklable (an HDF5 handle, a compiled kernel) crosses a process boundary.  Importing this
module imports torch.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from numbatraj.data.store import TrajectoryStore
from numbatraj.training.loader import BatchLoader, epoch_order, frame_rows

__all__ = ["TorchDataset", "TorchIterableDataset"]


def _path(store_or_path: TrajectoryStore | str | os.PathLike[str]) -> str:
    if isinstance(store_or_path, TrajectoryStore):
        return store_or_path.path
    return os.fspath(store_or_path)


class _ByPath:
    """Shared part: the arguments, and a loader built lazily in whichever process runs."""

    def __init__(self, store_or_path: Any, kwargs: dict[str, Any]) -> None:
        self.path = _path(store_or_path)
        self._kwargs = kwargs
        self._loader: BatchLoader | None = None
        # checks every argument now, in the parent, without loading any column
        with TrajectoryStore(self.path) as store:
            self._rows = frame_rows(store, kwargs.get("episodes"))
            from numbatraj.training.fields import resolve_fields

            resolve_fields(store, **{k: kwargs[k] for k in
                                     ("deltas", "delta_timestamps", "columns", "normalize",
                                      "images")})

    @property
    def loader(self) -> BatchLoader:
        if self._loader is None:
            self._loader = BatchLoader(self.path, 1, output="torch", shuffle=False,
                                       drop_last=False, **self._kwargs)
        return self._loader

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_loader"] = None  # each process builds its own from the path
        return state


class TorchDataset(_ByPath, Dataset):  # type: ignore[misc]
    """Map-style dataset: item ``i`` is the sample whose current frame is row ``rows[i]``.

    With ``episodes=None`` that is store row ``i``.  An item is a dict like one row of a
    :class:`BatchLoader` batch (no batch axis), as torch tensors; ``__getitems__`` gathers a
    whole DataLoader batch in one kernel call.  Arguments are those of :class:`BatchLoader`.
    """

    def __init__(
        self,
        store_or_path: TrajectoryStore | str | os.PathLike[str],
        *,
        deltas: Mapping[str, Any] | None = None,
        delta_timestamps: Mapping[str, Any] | None = None,
        columns: Any = None,
        normalize: Mapping[str, str] | None = None,
        images: str = "uint8",
        episodes: Any = None,
    ) -> None:
        super().__init__(store_or_path, dict(
            deltas=deltas, delta_timestamps=delta_timestamps, columns=columns,
            normalize=normalize, images=images, episodes=episodes))

    def __len__(self) -> int:
        return int(self._rows.shape[0])

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return self.__getitems__([i])[0]

    def __getitems__(self, indices: Any) -> list[dict[str, torch.Tensor]]:
        idx = np.asarray(indices, dtype=np.int64)
        n = len(self)
        if idx.size and (idx.min() < -n or idx.max() >= n):
            bad = int(idx[(idx < -n) | (idx >= n)][0])
            raise IndexError(f"TorchDataset index {bad} out of range for {n} items")
        batch = self.loader.gather(self._rows[idx % n] if idx.size else idx)
        return [{k: v[j] for k, v in batch.items()} for j in range(idx.shape[0])]


class TorchIterableDataset(_ByPath, IterableDataset):  # type: ignore[misc]
    """Iterable dataset of whole batches; each DataLoader worker takes a disjoint share.

    Epoch ``e``'s permutation is :func:`~numbatraj.training.loader.epoch_order` of
    ``(seed, e)``, cut into batches of ``batch_size``; worker ``w`` of ``n`` yields batches
    ``w, w + n, w + 2n, ...``, so no frame is served twice.  Use ``DataLoader(ds,
    batch_size=None)`` and call :meth:`set_epoch` before each epoch (as with
    ``DistributedSampler``).
    """

    def __init__(
        self,
        store_or_path: TrajectoryStore | str | os.PathLike[str],
        *,
        batch_size: int,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        deltas: Mapping[str, Any] | None = None,
        delta_timestamps: Mapping[str, Any] | None = None,
        columns: Any = None,
        normalize: Mapping[str, str] | None = None,
        images: str = "uint8",
        episodes: Any = None,
    ) -> None:
        super().__init__(store_or_path, dict(
            deltas=deltas, delta_timestamps=delta_timestamps, columns=columns,
            normalize=normalize, images=images, episodes=episodes))
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            from numbatraj.errors import SamplerError

            raise SamplerError(f"batch_size must be an int >= 1, got {batch_size!r}")
        self.batch_size = batch_size
        self.seed = int(seed)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        n, b = int(self._rows.shape[0]), self.batch_size
        return n // b if self.drop_last else -(-n // b)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        order = epoch_order(int(self._rows.shape[0]), self.seed, self.epoch, self.shuffle)
        b = self.batch_size
        for k in range(worker, len(self), workers):
            yield self.loader.gather(self._rows[order[k * b : (k + 1) * b]])
