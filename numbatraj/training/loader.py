"""BatchLoader: train-ready window batches from a store, with LeRobot's semantics."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from numbatraj.data.store import TrajectoryStore
from numbatraj.errors import DeviceUnavailableError, EpisodeError, SamplerError, SchemaError
from numbatraj.training._gather import WindowGather
from numbatraj.training.fields import Field, resolve_fields
from numbatraj.training.outputs import OUTPUTS, as_host_out, convert, import_torch

__all__ = ["BatchLoader", "epoch_order", "frame_rows"]

_STATE_VERSION = 1


def frame_rows(store: TrajectoryStore, episodes: Iterable[int] | None) -> np.ndarray:
    """Every store row of the selected episodes (each can be a current frame), int64."""
    n_ep = store.n_episodes
    if episodes is None:
        sel = np.arange(n_ep, dtype=np.int64)
    else:
        raw = list(episodes)
        if any(isinstance(e, bool) or not isinstance(e, (int, np.integer)) for e in raw):
            raise EpisodeError(f"episodes must be int episode ordinals, got {raw[:8]!r}")
        sel = np.asarray(raw, dtype=np.int64)
        bad = sel[(sel < 0) | (sel >= n_ep)]
        if bad.size:
            raise EpisodeError(f"episodes holds {int(bad[0])}, outside the store's episodes "
                               f"[0, {n_ep})")
        if np.unique(sel).size != sel.size:
            raise EpisodeError("episodes lists an episode twice")
    if sel.size == 0:
        raise EpisodeError(f"the episode selection of {store.path!r} is empty; nothing to load")
    lengths = store.episode_lengths[sel]
    starts = store.episode_offsets[sel]
    total = int(lengths.sum())
    # rows = starts repeated per frame + the frame's position inside its episode
    first = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    return first + np.arange(total, dtype=np.int64)


def epoch_order(n: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """Positions ``0..n-1`` in epoch ``epoch``'s order: a permutation fixed by (seed, epoch)."""
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    return np.random.default_rng([seed, epoch]).permutation(n).astype(np.int64)


class BatchLoader:
    """Window batches over a store: every frame of the selected episodes can be the current one.

    Parameters
    ----------
    store : TrajectoryStore or path
        A path is opened (and the loader owns it).  Every column a batch needs is loaded
        whole into memory once: sampling never reads disk.
    batch_size : int
    deltas : mapping of name -> sequence of int, optional
        Frame offsets per key, e.g. ``{"action": range(16), "images": [-1, 0]}``.  Offsets
        outside the current frame's episode are clamped to its first/last frame and flagged
        in ``"<key>_is_pad"`` (bool ``(B, T)``), as LeRobot does.
    delta_timestamps : mapping of name -> sequence of float, optional
        Offsets in seconds, converted with the store's fps (``round(ts * fps)``; each must be
        within 1e-4 s of the 1/fps grid).  A store without fps refuses them.
    columns : sequence of str, optional
        Keys of the batch (default: every column; keys of ``deltas`` are always included).
        On a store imported from LeRobot, ``observation.state``, ``action`` and
        ``observation.images.<cam>`` are accepted as aliases; the batch uses the name given.
    normalize : mapping of name -> {"mean_std", "min_max"}, optional
        Applied inside the gather (float32 out): ``(x - mean) / (std + 1e-8)`` or
        ``((x - min) / (max - min + 1e-8)) * 2 - 1``, stats from
        :meth:`TrajectoryStore.stats`.
    seed : int
        The epoch permutation is ``default_rng([seed, epoch]).permutation``.
    shuffle, drop_last : bool
        ``drop_last=False`` serves every frame exactly once per epoch (the last batch short).
    episodes : sequence of int, optional
        Episode ordinals to draw current frames from (windows never cross episodes).
    output : {"numpy", "torch", "jax"}
        ``"torch"`` wraps the gathered buffers (``torch.from_numpy``, no copy); ``"jax"`` goes
        through DLPack.
    device : {"cpu", "cuda"}
        ``"cuda"`` mirrors the sources in GPU memory once and gathers there; batches are numba
        device arrays (``output="numpy"``) or CUDA torch tensors (``output="torch"``).
    pin_memory : bool
        Gather into pinned torch buffers (``output="torch"``, needs CUDA); two sets are reused
        in turn, so a batch stays valid until two more have been drawn.
    images : {"uint8", "float"}
        ``"float"`` returns uint8 image columns as float32 in [0, 1] (``x / 255``).

    Notes
    -----
    Each batch is a dict: one entry per key (``(B, ...)``, or ``(B, T, ...)`` for a key with
    deltas), ``"<key>_is_pad"`` for each key with deltas, ``"index"`` (int64 store row of the
    current frame) and ``"episode_index"`` (int64 episode ordinal).  ``iter(loader)`` yields
    the rest of the current epoch and moves to the next.
    """

    def __init__(
        self,
        store: TrajectoryStore | str | os.PathLike[str],
        batch_size: int,
        *,
        deltas: Mapping[str, Any] | None = None,
        delta_timestamps: Mapping[str, Any] | None = None,
        columns: Iterable[str] | None = None,
        normalize: Mapping[str, str] | None = None,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = True,
        episodes: Iterable[int] | None = None,
        output: str = "numpy",
        device: str = "cpu",
        pin_memory: bool = False,
        images: str = "uint8",
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size < 1:
            raise SamplerError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise SamplerError(f"seed must be an int >= 0, got {seed!r}")
        if output not in OUTPUTS:
            raise SchemaError(f"output={output!r}; expected one of {', '.join(OUTPUTS)}")
        if device not in ("cpu", "cuda"):
            raise SchemaError(f"device={device!r}; expected 'cpu' or 'cuda'")
        if pin_memory:
            if output != "torch" or device != "cpu":
                raise SchemaError("pin_memory=True needs output='torch' and device='cpu' "
                                  "(it stages host batches for a copy to the GPU)")
            if not import_torch().cuda.is_available():
                raise DeviceUnavailableError("pin_memory=True needs a CUDA build of torch and a "
                                             "GPU; this torch has no CUDA")
        self._owns = not isinstance(store, TrajectoryStore)
        self.store: TrajectoryStore = (
            store if isinstance(store, TrajectoryStore) else TrajectoryStore(store)
        )
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.output = output
        self.device = device
        self.pin_memory = bool(pin_memory)
        self.fields: list[Field] = resolve_fields(
            self.store, deltas=deltas, delta_timestamps=delta_timestamps, columns=columns,
            normalize=normalize, images=images,
        )
        self.rows = frame_rows(self.store, episodes)
        self._gather = WindowGather(self.store, self.fields, device)
        self.epoch = 0
        self._pos = 0  # items of the current epoch already served
        self._order: np.ndarray | None = None
        self._pinned: list[dict[str, Any]] = []
        self._pin_turn = 0

    # ------------------------------------------------------------------ sizes
    @property
    def n_frames(self) -> int:
        """Frames that can be the current frame (rows of the selected episodes)."""
        return int(self.rows.shape[0])

    def __len__(self) -> int:
        """Batches per epoch."""
        n, b = self.n_frames, self.batch_size
        return n // b if self.drop_last else -(-n // b)

    def shapes(self, batch: int | None = None) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Key -> ``(shape, numpy dtype)`` of a batch of ``batch`` items (default batch_size)."""
        return self._gather.shapes(self.batch_size if batch is None else int(batch))

    # ------------------------------------------------------------------ epochs
    def _epoch_order(self) -> np.ndarray:
        if self._order is None:
            self._order = epoch_order(self.n_frames, self.seed, self.epoch, self.shuffle)
        return self._order

    def _end(self) -> int:
        return len(self) * self.batch_size if self.drop_last else self.n_frames

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """The rest of the current epoch, batch by batch; then the epoch number moves on."""
        while self._pos < self._end():
            yield self.next_batch()
        self._next_epoch()

    def _next_epoch(self) -> None:
        self.epoch += 1
        self._pos = 0
        self._order = None

    def next_batch(self, out: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The next batch of the epoch (a new epoch starts when this one is spent)."""
        if self._pos >= self._end():
            self._next_epoch()
        order = self._epoch_order()
        stop = min(self._pos + self.batch_size, self._end())
        cur = self.rows[order[self._pos : stop]]
        batch = self.gather(cur, out=out)
        self._pos = stop
        return batch

    def state_dict(self) -> dict[str, int]:
        """Where the loader is: restore with :meth:`load_state_dict` to resume exactly."""
        return {"version": _STATE_VERSION, "epoch": self.epoch, "position": self._pos,
                "seed": self.seed, "n_frames": self.n_frames, "batch_size": self.batch_size}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume at ``state``'s epoch and position (same seed, frames and batch size)."""
        for key, mine in (("seed", self.seed), ("n_frames", self.n_frames),
                          ("batch_size", self.batch_size)):
            if int(state.get(key, -1)) != mine:
                raise SamplerError(f"state_dict has {key}={state.get(key)!r}, this loader has "
                                   f"{mine}; it can only resume a loader built the same way")
        pos, epoch = int(state["position"]), int(state["epoch"])
        if not 0 <= pos <= self.n_frames or epoch < 0:
            raise SamplerError(f"state_dict position {pos} / epoch {epoch} is out of range")
        self.epoch, self._pos, self._order = epoch, pos, None

    # ------------------------------------------------------------------ gathering
    def gather(self, index: Any, out: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The batch whose current frames are store rows ``index`` (int ``(B,)``).

        ``out`` may give the buffer of any key (numpy arrays, torch CPU tensors or DLPack
        exporters of exactly the batch's dtype and shape, writable, contiguous); the others
        are allocated.  Returns the batch in the loader's ``output`` form.
        """
        cur = np.ascontiguousarray(index)
        if cur.dtype.kind not in "iu" or cur.ndim != 1:
            raise SchemaError(f"gather: index must be a 1-D int array, got {cur.dtype} "
                              f"{cur.shape}")
        cur = cur.astype(np.int64, copy=False)
        self._gather.check_rows(cur, "gather")
        shapes = self._gather.shapes(cur.shape[0])
        given = dict(out or {})
        unknown = set(given) - set(shapes)
        if unknown:
            raise SchemaError(f"out names {sorted(unknown)}, which the batch does not have; "
                              f"keys: {', '.join(shapes)}")
        if self.device == "cuda":
            return self._gather_device(cur, shapes, given)
        bufs: dict[str, np.ndarray] = {}
        holders: dict[str, Any] = {}
        pinned = self._pinned_set(cur.shape[0], shapes) if self.pin_memory and not given else None
        for key, (shape, dtype) in shapes.items():
            if key in given:
                bufs[key] = as_host_out(given[key], shape, dtype, f"out[{key!r}]")
                holders[key] = given[key]
            elif pinned is not None:
                holders[key] = pinned[key]
                bufs[key] = pinned[key].numpy()
            else:
                bufs[key] = np.empty(shape, dtype)
        self._gather.gather(cur, bufs)
        if self.output == "torch" and (given or pinned is not None):
            torch = import_torch()
            return {k: holders[k] if k in holders and _is_tensor(torch, holders[k])
                    else torch.from_numpy(bufs[k]) for k in shapes}
        return convert(bufs, self.output, "cpu")

    def _pinned_set(self, batch: int, shapes: Mapping[str, Any]) -> dict[str, Any]:
        torch = import_torch()
        if len(self._pinned) < 2 or next(iter(self._pinned[0].values())).shape[0] != batch:
            self._pinned = [
                {k: torch.from_numpy(np.empty(0, dt)).new_empty(sh).pin_memory()
                 for k, (sh, dt) in shapes.items()}
                for _ in range(2)
            ]
        self._pin_turn ^= 1
        return self._pinned[self._pin_turn]

    def _gather_device(self, cur: np.ndarray, shapes: Mapping[str, Any],
                       given: Mapping[str, Any]) -> dict[str, Any]:
        from numbatraj._cuda import get_cuda

        cuda = get_cuda()
        bufs: dict[str, Any] = {}
        for key, (shape, dtype) in shapes.items():
            if key in given:
                obj = given[key]
                if not (hasattr(obj, "__cuda_array_interface__") or hasattr(obj, "copy_to_host")):
                    raise SchemaError(f"out[{key!r}] must be a CUDA array (device='cuda'), "
                                      f"got {type(obj).__name__}")
                arr = obj if hasattr(obj, "copy_to_host") else cuda.as_cuda_array(obj)
                if np.dtype(arr.dtype) != dtype or tuple(arr.shape) != tuple(shape):
                    raise SchemaError(f"out[{key!r}] is {np.dtype(arr.dtype).name} "
                                      f"{tuple(arr.shape)}, expected {dtype.name} {shape}")
                if not arr.is_c_contiguous():
                    raise SchemaError(f"out[{key!r}] must be C-contiguous")
                bufs[key] = arr
            else:
                bufs[key] = cuda.device_array(shape, dtype)
        self._gather.gather_device(cur, bufs)
        return convert(bufs, self.output, "cuda")

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Close the store when the loader opened it."""
        if self._owns:
            self.store.close()

    def __repr__(self) -> str:
        keys = ", ".join(f.key for f in self.fields)
        return (f"BatchLoader({self.store.path!r}, batch_size={self.batch_size}, "
                f"frames={self.n_frames}, keys=[{keys}], epoch={self.epoch})")


def _is_tensor(torch: Any, obj: Any) -> bool:
    return isinstance(obj, torch.Tensor)
