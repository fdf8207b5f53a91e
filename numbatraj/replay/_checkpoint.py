"""Replay checkpoints: one HDF5 file holding rows, ring state, priorities and streams.

Layout (format version 1)::

    attrs  numbatraj_replay = 1, config = JSON, state = JSON
    demo/<column>      rows [0, n_demo)           (storage dtype: uint8 codes if quantised)
    ring/<column>      physical ring rows [D, D + size), in slot order
    sampler/leaves, sampler/stamps, sampler/present    (prioritized only)

The file is written to ``<path>.tmp``, fsynced and renamed.  Loading reads each dataset
straight into the new replay's preallocated arrays (``read_direct``), so it needs the
buffer's memory once, not twice.
"""

from __future__ import annotations

import json
import os
from typing import Any

import h5py
import numpy as np

from numbatraj.data.column import ColumnSpec
from numbatraj.errors import IntegrityError
from numbatraj.samplers._args import generator_state, set_generator_state

__all__ = ["save_replay", "load_replay", "FORMAT_VERSION"]

FORMAT_VERSION = 1


def _config(rep: Any) -> dict[str, Any]:
    cols = [
        {"name": s.name, "dtype": s.dtype.str, "shape": list(s.shape)}
        for s in rep.columns.values()
    ]
    ere = rep.ere
    return {
        "kind": "StoreReplay",
        "columns": cols,
        "capacity": rep.capacity,
        "demo_capacity": rep.demo_capacity,
        "prioritized": rep.prioritized,
        "seed": rep.seed,
        "alpha": float(rep._hyper["alpha"]),
        "beta": rep.beta,
        "eps": float(rep._hyper["eps"]),
        "quantize": {n: [q.low, q.high] for n, q in rep.quantization.items()},
        "demo_fraction": rep.demo_fraction,
        "ere": None if ere is None else {"eta": ere.eta, "c_min": ere.c_min},
    }


def save_replay(rep: Any, path: str | os.PathLike[str]) -> None:
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"checkpoint path {path!r} is a directory")
    tmp = path + ".tmp"
    sampler_state = rep.sampler.state_dict()
    keys = [k for k in ("leaves", "stamps", "present") if k in sampler_state]
    arrays = {k: sampler_state.pop(k) for k in keys}
    state = {
        "cursor": rep.cursor,
        "size": rep.size,
        "n_demo": rep.n_demo,
        "n_added": rep.n_added,
        "sampler": sampler_state,
        "generator": generator_state(rep._gen),
    }
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs["numbatraj_replay"] = FORMAT_VERSION
            f.attrs["config"] = json.dumps(_config(rep))
            f.attrs["state"] = json.dumps(state)
            d, nd, size = rep.demo_capacity, rep.n_demo, rep.size
            for name in rep.columns:
                data = rep._data[name]
                _write(f, f"demo/{name}", data[:nd])
                _write(f, f"ring/{name}", data[d : d + size])
            for k, a in arrays.items():
                f.create_dataset(f"sampler/{k}", data=a)
        publish(tmp, path)
    except BaseException:
        discard(tmp)
        raise


def publish(tmp: str, path: str) -> None:
    """fsync the finished ``tmp``, rename it to ``path`` and fsync the directory."""
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(path)


def discard(tmp: str) -> None:
    """Remove a half-written temporary file, if any."""
    try:
        os.remove(tmp)
    except FileNotFoundError:
        pass


def _fsync_dir(path: str) -> None:
    """fsync the directory holding ``path`` so the rename is durable (no-op where a
    directory cannot be opened)."""
    try:
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_CHUNK_BYTES = 1 << 20


def _write(f: h5py.File, key: str, data: np.ndarray) -> None:
    """``data`` as dataset ``key``, copied through 1 MiB pieces when its rows are strided."""
    if data.flags.c_contiguous or not data.size:
        f.create_dataset(key, data=data)
        return
    ds = f.create_dataset(key, shape=data.shape, dtype=data.dtype)
    step = max(1, _CHUNK_BYTES // max(1, data[0].nbytes))
    for a in range(0, data.shape[0], step):
        ds[a : a + step] = np.ascontiguousarray(data[a : a + step])


def _read(f: h5py.File, key: str, dest: np.ndarray, path: str) -> None:
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


def _check_priorities(path: str, present: np.ndarray, leaves: np.ndarray, d: int, nd: int,
                      size: int) -> None:
    """The sampler's rows must be exactly the held rows (demo ``[0, nd)``, ring
    ``[d, d + size)``), with finite non-negative leaves, zero where no row is held."""
    held = np.zeros(present.shape[0], dtype=np.bool_)
    held[:nd] = True
    held[d : d + size] = True
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


def load_replay(cls: type, path: str | os.PathLike[str]) -> Any:
    path = os.fspath(path)
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise IntegrityError(f"{path!r} is not a readable replay checkpoint: {exc}") from exc
    with f:
        version = f.attrs.get("numbatraj_replay")
        if version is None:
            raise IntegrityError(f"{path!r} is not a replay checkpoint (no numbatraj_replay attr)")
        if int(version) != FORMAT_VERSION:
            raise IntegrityError(
                f"checkpoint {path!r} has format version {int(version)}, this numbatraj reads "
                f"version {FORMAT_VERSION}"
            )
        try:
            cfg = json.loads(f.attrs["config"])
            state = json.loads(f.attrs["state"])
        except (KeyError, ValueError) as exc:
            raise IntegrityError(f"checkpoint {path!r}: unreadable config/state: {exc}") from exc
        if cfg.get("kind", "StoreReplay") != "StoreReplay":
            raise IntegrityError(
                f"{path!r} is a {cfg['kind']} checkpoint; load it with that class (host and "
                f"device streams differ)"
            )
        cols = [
            ColumnSpec(c["name"], np.dtype(c["dtype"]), tuple(c["shape"])) for c in cfg["columns"]
        ]
        rep = cls(
            cols,
            cfg["capacity"],
            prioritized=cfg["prioritized"],
            seed=cfg["seed"],
            alpha=cfg["alpha"],
            beta=cfg["beta"],
            eps=cfg["eps"],
            quantize={k: tuple(v) for k, v in cfg["quantize"].items()} or None,
            demo_capacity=cfg["demo_capacity"],
            demo_fraction=cfg["demo_fraction"],
        )
        if cfg["ere"] is not None:
            rep.configure_ere(True, cfg["ere"]["eta"], cfg["ere"]["c_min"])
        d, nd, size = rep.demo_capacity, int(state["n_demo"]), int(state["size"])
        cursor = int(state["cursor"])
        r = rep.ring_capacity
        if not (0 <= nd <= d and 0 <= size <= r and 0 <= cursor < r):
            raise IntegrityError(
                f"checkpoint {path!r}: ring state n_demo={nd}, size={size}, cursor={cursor} "
                f"does not fit demo_capacity {d}, ring capacity {rep.ring_capacity}"
            )
        if size < r and cursor != size:
            raise IntegrityError(
                f"checkpoint {path!r}: ring state size={size}, cursor={cursor} is impossible: "
                f"a ring that has not wrapped (size < ring capacity {r}) has cursor == size"
            )
        for name in rep.columns:
            data = rep._data[name]
            _read(f, f"demo/{name}", data[:nd], path)
            _read(f, f"ring/{name}", data[d : d + size], path)
        sampler_state = dict(state["sampler"])
        if rep.prioritized:
            cap = rep.capacity
            for key, dt in (("leaves", np.float64), ("stamps", np.int64), ("present", np.bool_)):
                a = np.empty(cap, dtype=dt)
                _read(f, f"sampler/{key}", a, path)
                sampler_state[key] = a
            _check_priorities(path, sampler_state["present"], sampler_state["leaves"], d, nd,
                              size)
        rep.sampler.load_state_dict(sampler_state)
        set_generator_state(rep._gen, state["generator"])
        rep._cursor, rep._size, rep._n_demo = cursor, size, nd
        rep._n_added = int(state["n_added"])
    return rep
