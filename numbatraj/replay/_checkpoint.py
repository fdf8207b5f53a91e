"""Replay checkpoints: one HDF5 format and one reader for the host and the device replay.

Layout (format version 1)::

    attrs  numbatraj_replay = 1, config = JSON, state = JSON
    demo/<column>      rows [0, n_demo)           (storage dtype: uint8 codes if quantised)
    ring/<column>      physical ring rows [D, D + size), in slot order
    sampler/leaves, sampler/stamps, sampler/present    (prioritized only)

``config`` holds the constructor's arguments and the ``kind`` (``StoreReplay`` or
``StoreReplayGpu``: their streams differ, so each loads only its own); ``state`` holds the
:class:`RingState` and the kind's streams (the host sampler's ``state_dict()``; the device's
state words).  The device replays written before ``sampler/present`` was added to their
files get it from the ring state.

Every load makes every check, whichever the kind: a readable file, the format version,
readable JSON, the kind, a ring state that fits the capacity (and ``cursor == size`` while
the ring has not wrapped), each dataset's dtype and shape, and priorities that are exactly
the held rows (finite leaves >= 0, 0 where no row is held).  A failure is an
:class:`~numbatraj.errors.IntegrityError` naming the file.  The tree is then rebuilt from
the leaves by :meth:`~numbatraj.samplers.SumTree.load_leaves` (the same bits as the saved
tree).

The file is written under a temporary name beside ``path`` and published by
``numbatraj.io.atomic`` (fsync, rename, fsync of the directory).  Loading reads each dataset
straight into the new replay's preallocated arrays where it can (``read_direct``), so it
needs the buffer's memory once, not twice.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from numbatraj.data.column import ColumnSpec
from numbatraj.errors import IntegrityError
from numbatraj.io.atomic import discard, publish, temp_path

__all__ = [
    "FORMAT_VERSION",
    "RingState",
    "TreeArrays",
    "check_priorities",
    "columns_from_config",
    "open_checkpoint",
    "read_rows",
    "read_tree",
    "write_checkpoint",
]

#: 2 added the stream options (``n_envs``, ``next_of``, ``frame_stack`` in the config,
#: ``cut_first`` in the state, ``side/*`` datasets); version-1 files load with the defaults.
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)


@dataclass(frozen=True)
class RingState:
    """Where a ring stands: rows held (``n_demo`` demos, ``size`` online) and the next slot."""

    cursor: int
    size: int
    n_demo: int
    n_added: int

    def to_json(self) -> dict[str, int]:
        return {"cursor": self.cursor, "size": self.size, "n_demo": self.n_demo,
                "n_added": self.n_added}

    @classmethod
    def from_json(cls, path: str, state: dict[str, Any], demo_capacity: int,
                  ring_capacity: int) -> RingState:
        """The ring state of a checkpoint's JSON, checked against the capacities."""
        try:
            ring = cls(int(state["cursor"]), int(state["size"]), int(state["n_demo"]),
                       int(state["n_added"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise IntegrityError(f"checkpoint {path!r}: unreadable ring state: {exc!r}") from exc
        d, r = demo_capacity, ring_capacity
        nd, size, cursor = ring.n_demo, ring.size, ring.cursor
        if not (0 <= nd <= d and 0 <= size <= r and 0 <= cursor < r):
            raise IntegrityError(
                f"checkpoint {path!r}: ring state n_demo={nd}, size={size}, cursor={cursor} "
                f"does not fit demo_capacity {d}, ring capacity {r}"
            )
        if size < r and cursor != size:
            raise IntegrityError(
                f"checkpoint {path!r}: ring state size={size}, cursor={cursor} is impossible: "
                f"a ring that has not wrapped (size < ring capacity {r}) has cursor == size"
            )
        if ring.n_added < size:
            raise IntegrityError(
                f"checkpoint {path!r}: ring state n_added={ring.n_added} is below size={size}"
            )
        return ring


@dataclass(frozen=True)
class TreeArrays:
    """A prioritized replay's per-row arrays (``(capacity,)`` each), checked on load."""

    leaves: np.ndarray  # float64
    stamps: np.ndarray  # int64
    present: np.ndarray  # bool


def write_checkpoint(
    path: str | os.PathLike[str],
    config: dict[str, Any],
    state: dict[str, Any],
    rows: Iterable[tuple[str, np.ndarray, np.ndarray]],
    tree: TreeArrays | None,
    side: dict[str, np.ndarray] | None = None,
) -> None:
    """Write a checkpoint: ``rows`` yields ``(column, demo rows, ring rows)`` (host arrays of
    the storage dtype, possibly strided); ``tree`` for a prioritized replay."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"checkpoint path {path!r} is a directory")
    tmp = temp_path(path)
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs["numbatraj_replay"] = FORMAT_VERSION
            f.attrs["config"] = json.dumps(config)
            f.attrs["state"] = json.dumps(state)
            for name, demo, ring in rows:
                write_rows(f, f"demo/{name}", demo)
                write_rows(f, f"ring/{name}", ring)
            if tree is not None:
                for key in ("leaves", "stamps", "present"):
                    f.create_dataset(f"sampler/{key}", data=getattr(tree, key))
            for key, arr in (side or {}).items():
                f.create_dataset(f"side/{key}", data=arr)
        publish(tmp, path)
    except BaseException:
        discard(tmp)
        raise


@contextmanager
def open_checkpoint(path: str, kind: str) -> Iterator[tuple[h5py.File, dict[str, Any],
                                                            dict[str, Any]]]:
    """The open file, its config and its state, once the file, the format version, the JSON
    and the kind have been checked."""
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise IntegrityError(f"{path!r} is not a readable replay checkpoint: {exc}") from exc
    with f:
        version = f.attrs.get("numbatraj_replay")
        if version is None:
            raise IntegrityError(f"{path!r} is not a replay checkpoint (no numbatraj_replay attr)")
        if int(version) not in READABLE_VERSIONS:
            raise IntegrityError(
                f"checkpoint {path!r} has format version {int(version)}, this numbatraj reads "
                f"versions {', '.join(map(str, READABLE_VERSIONS))}"
            )
        try:
            cfg = json.loads(f.attrs["config"])
            state = json.loads(f.attrs["state"])
        except (KeyError, ValueError) as exc:
            raise IntegrityError(f"checkpoint {path!r}: unreadable config/state: {exc}") from exc
        if not isinstance(cfg, dict) or not isinstance(state, dict):
            raise IntegrityError(f"checkpoint {path!r}: unreadable config/state: not objects")
        got = cfg.get("kind", "StoreReplay")
        if got != kind:
            raise IntegrityError(
                f"{path!r} is a {got} checkpoint; load it with that class (host and "
                f"device streams differ)"
            )
        yield f, cfg, state


def columns_from_config(path: str, cfg: dict[str, Any],
                        make: Callable[..., Any]) -> Any:
    """``make(columns, capacity, **settings)`` from a checkpoint's config (a missing key
    is an :class:`IntegrityError`)."""
    try:
        cols = [ColumnSpec(c["name"], np.dtype(c["dtype"]), tuple(c["shape"]))
                for c in cfg["columns"]]
        args = dict(
            prioritized=cfg["prioritized"], seed=cfg["seed"], alpha=cfg["alpha"],
            beta=cfg["beta"], eps=cfg["eps"],
            quantize={k: tuple(v) for k, v in cfg["quantize"].items()} or None,
            demo_capacity=cfg["demo_capacity"], demo_fraction=cfg["demo_fraction"],
            n_envs=cfg.get("n_envs", 1), next_of=cfg.get("next_of") or None,
            frame_stack=cfg.get("frame_stack") or None,
        )
        capacity, ere = cfg["capacity"], cfg["ere"]
    except (KeyError, TypeError, AttributeError) as exc:
        raise IntegrityError(f"checkpoint {path!r}: unreadable config: {exc!r}") from exc
    rep = make(cols, capacity, **args)
    if ere is not None:
        rep.configure_ere(True, ere["eta"], ere["c_min"])
    return rep


def read_tree(f: h5py.File, path: str, capacity: int, demo_capacity: int, ring: RingState,
              *, derive_present: bool = False) -> TreeArrays:
    """The sampler's arrays, checked: exactly the held rows, finite leaves >= 0 (0 where no
    row is held).  ``derive_present``: a file without ``sampler/present`` (a device
    checkpoint written before it was stored) takes the held rows."""
    leaves = np.empty(capacity, dtype=np.float64)
    stamps = np.empty(capacity, dtype=np.int64)
    read_rows(f, "sampler/leaves", leaves, path)
    read_rows(f, "sampler/stamps", stamps, path)
    d, nd, size = demo_capacity, ring.n_demo, ring.size
    if derive_present and "sampler/present" not in f:
        present = held_rows(capacity, d, nd, size)
    else:
        present = np.empty(capacity, dtype=np.bool_)
        read_rows(f, "sampler/present", present, path)
    check_priorities(path, present, leaves, d, nd, size)
    return TreeArrays(leaves, stamps, present)


def read_side(f: h5py.File, path: str) -> dict[str, np.ndarray]:
    """The next_of side table datasets (``side/rows`` and one per target)."""
    g = f.get("side")
    if g is None or "rows" not in g:
        raise IntegrityError(f"checkpoint {path!r}: no next_of side table (side/rows)")
    return {k: g[k][()] for k in g}


def held_rows(capacity: int, demo_capacity: int, n_demo: int, size: int) -> np.ndarray:
    """bool ``(capacity,)``: the demo rows ``[0, n_demo)`` and ring rows ``[D, D + size)``."""
    held = np.zeros(capacity, dtype=np.bool_)
    held[:n_demo] = True
    held[demo_capacity : demo_capacity + size] = True
    return held


_CHUNK_BYTES = 1 << 20


def write_rows(f: h5py.File, key: str, data: np.ndarray) -> None:
    """``data`` as dataset ``key``, copied through 1 MiB pieces when its rows are strided."""
    if data.flags.c_contiguous or not data.size:
        f.create_dataset(key, data=data)
        return
    ds = f.create_dataset(key, shape=data.shape, dtype=data.dtype)
    step = max(1, _CHUNK_BYTES // max(1, data[0].nbytes))
    for a in range(0, data.shape[0], step):
        ds[a : a + step] = np.ascontiguousarray(data[a : a + step])


def read_rows(f: h5py.File, key: str, dest: np.ndarray, path: str) -> None:
    ds = f.get(key)
    if ds is None or ds.shape != dest.shape or ds.dtype != dest.dtype:
        got = "missing" if ds is None else f"{ds.dtype} {ds.shape}"
        raise IntegrityError(
            f"checkpoint {path!r}: dataset {key!r} is {got}, expected {dest.dtype} {dest.shape}"
        )
    if not dest.size:
        return
    if dest.flags.c_contiguous:
        ds.read_direct(dest)
        return
    # a column of the replay's row records: through a small contiguous buffer, so a load
    # never holds a second copy of a column
    per_row = max(1, dest[0].nbytes)
    step = max(1, _CHUNK_BYTES // per_row)
    buf = np.empty((min(step, dest.shape[0]), *dest.shape[1:]), dtype=dest.dtype)
    for a in range(0, dest.shape[0], step):
        n = min(step, dest.shape[0] - a)
        ds.read_direct(buf[:n], source_sel=np.s_[a : a + n])
        dest[a : a + n] = buf[:n]


def check_priorities(path: str, present: np.ndarray, leaves: np.ndarray, d: int, nd: int,
                     size: int) -> None:
    """The sampler's rows must be exactly the held rows (demo ``[0, nd)``, ring
    ``[d, d + size)``), with finite non-negative leaves, zero where no row is held."""
    held = held_rows(present.shape[0], d, nd, size)
    if not np.array_equal(present, held):
        i = int(np.flatnonzero(present != held)[0])
        raise IntegrityError(
            f"checkpoint {path!r}: sampler/present marks {int(present.sum())} rows (row {i} is "
            f"{'present' if present[i] else 'absent'}), but the ring state holds {nd} demo rows "
            f"and {size} ring rows ({int(held.sum())} rows: [0, {nd}) and [{d}, {d + size}))"
        )
    bad = ~np.isfinite(leaves) | (leaves < 0) | (~present & (leaves != 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise IntegrityError(
            f"checkpoint {path!r}: sampler/leaves disagrees with sampler/present at "
            f"{int(bad.sum())} rows (row {i}: leaf {float(leaves[i])!r}, "
            f"present={bool(present[i])}); leaves must be finite, >= 0, and 0 where no row is held"
        )
