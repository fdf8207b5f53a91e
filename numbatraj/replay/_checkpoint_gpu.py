"""Checkpoints of :class:`~numbatraj.replay.StoreReplayGpu`: the host layout of
``_checkpoint.py`` (``demo/<column>``, ``ring/<column>``, JSON config and state) with the
device streams: the Philox draw counter, the max priority and IS exponent, and the
sum-tree leaves and generation stamps.  Written to ``<path>.tmp`` and renamed; loading
reads each dataset into one host buffer of that dataset's size and copies it to the device.
"""

from __future__ import annotations

import json
import os
from typing import Any

import h5py
import numpy as np

from numbatraj.data.column import ColumnSpec
from numbatraj.errors import IntegrityError
from numbatraj.replay import _lanes
from numbatraj.replay._checkpoint import FORMAT_VERSION, _read, discard, publish

__all__ = ["save_replay_gpu", "load_replay_gpu"]

KIND = "StoreReplayGpu"


def save_replay_gpu(rep: Any, path: str | os.PathLike[str]) -> None:
    path = os.fspath(path)
    tmp = path + ".tmp"
    istate = rep._istate.copy_to_host()
    fstate = rep._fstate.copy_to_host()
    ere = rep.ere
    cfg = {
        "kind": KIND,
        "columns": [{"name": s.name, "dtype": s.dtype.str, "shape": list(s.shape)}
                    for s in rep.columns.values()],
        "capacity": rep.capacity, "demo_capacity": rep.demo_capacity,
        "prioritized": rep.prioritized, "seed": rep.seed, "alpha": rep._alpha,
        "beta": float(fstate[_lanes.BETA]), "eps": rep._eps,
        "quantize": {n: [q.low, q.high] for n, q in rep.quantization.items()},
        "demo_fraction": rep._fraction,
        "ere": None if ere is None else {"eta": ere.eta, "c_min": ere.c_min},
    }
    state = {"cursor": rep.cursor, "size": rep.size, "n_demo": rep.n_demo,
             "n_added": rep.n_added, "istate": istate.tolist(),
             "max_priority": float(fstate[_lanes.MAXP]), "ere_step_set": rep._ere_step_set}
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs["numbatraj_replay"] = FORMAT_VERSION
            f.attrs["config"] = json.dumps(cfg)
            f.attrs["state"] = json.dumps(state)
            d, nd, size = rep.demo_capacity, rep.n_demo, rep.size
            for name, spec in rep.columns.items():
                col = rep._data[name]
                for key, lo, n in (("demo", 0, nd), ("ring", d, size)):
                    rows = col[lo : lo + n].copy_to_host() if n else np.empty((0, 1))
                    rows = rows.astype(rep._cols.storage_dtype(name), copy=False)
                    f.create_dataset(f"{key}/{name}", data=rows.reshape(n, *spec.shape))
            if rep.prioritized:
                f.create_dataset("sampler/leaves", data=rep.tree_leaves())
                f.create_dataset("sampler/stamps", data=rep._gen.copy_to_host())
        publish(tmp, path)
    except BaseException:
        discard(tmp)
        raise


def load_replay_gpu(cls: type, path: str | os.PathLike[str]) -> Any:
    path = os.fspath(path)
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise IntegrityError(f"{path!r} is not a readable replay checkpoint: {exc}") from exc
    with f:
        if f.attrs.get("numbatraj_replay") is None:
            raise IntegrityError(f"{path!r} is not a replay checkpoint (no numbatraj_replay attr)")
        cfg = json.loads(f.attrs["config"])
        state = json.loads(f.attrs["state"])
        if cfg.get("kind") != KIND:
            raise IntegrityError(
                f"{path!r} is a {cfg.get('kind', 'StoreReplay')} checkpoint; load it with that "
                f"class (host and device streams differ)"
            )
        cols = [ColumnSpec(c["name"], np.dtype(c["dtype"]), tuple(c["shape"]))
                for c in cfg["columns"]]
        rep = cls(cols, cfg["capacity"], prioritized=cfg["prioritized"], seed=cfg["seed"],
                  alpha=cfg["alpha"], beta=cfg["beta"], eps=cfg["eps"],
                  quantize={k: tuple(v) for k, v in cfg["quantize"].items()} or None,
                  demo_capacity=cfg["demo_capacity"], demo_fraction=cfg["demo_fraction"])
        if cfg["ere"] is not None:
            rep.configure_ere(True, cfg["ere"]["eta"], cfg["ere"]["c_min"])
        d, nd, size = rep.demo_capacity, int(state["n_demo"]), int(state["size"])
        cursor, r = int(state["cursor"]), rep.ring_capacity
        if not (0 <= nd <= d and 0 <= size <= r and 0 <= cursor < r) or (
            size < r and cursor != size
        ):
            raise IntegrityError(
                f"checkpoint {path!r}: ring state n_demo={nd}, size={size}, cursor={cursor} is "
                f"impossible for demo_capacity {d} and ring capacity {r} (a ring that has not "
                f"wrapped has cursor == size)"
            )
        for name in rep.columns:
            e = rep._cols.row_elems(name)
            dt = rep._cols.storage_dtype(name)
            for key, lo, n in (("demo", 0, nd), ("ring", d, size)):
                buf = np.empty((n, *rep.columns[name].shape), dt)
                _read(f, f"{key}/{name}", buf, path)
                if n:
                    rep._data[name][lo : lo + n].copy_to_device(buf.reshape(n, e))
        if rep.prioritized:
            leaves = np.empty(rep.capacity, np.float64)
            stamps = np.empty(rep.capacity, np.int64)
            _read(f, "sampler/leaves", leaves, path)
            _read(f, "sampler/stamps", stamps, path)
            p = rep._p
            sums = np.zeros(2 * p)
            mins = np.full(2 * p, np.inf)
            sums[p : p + rep.capacity] = leaves
            present = np.zeros(rep.capacity, bool)
            present[:nd] = True
            present[d : d + size] = True
            mins[p : p + rep.capacity] = np.where(present, leaves, np.inf)
            width = p // 2
            while width >= 1:  # level by level, children first: the same fl(left + right)
                left, right = sums[2 * width : 4 * width : 2], sums[2 * width + 1 : 4 * width : 2]
                sums[width : 2 * width] = left + right
                mins[width : 2 * width] = np.minimum(
                    mins[2 * width : 4 * width : 2], mins[2 * width + 1 : 4 * width : 2]
                )
                width //= 2
            rep._sums.copy_to_device(sums)
            rep._mins.copy_to_device(mins)
            rep._gen.copy_to_device(stamps)
        rep._istate.copy_to_device(np.asarray(state["istate"], np.int64))
        rep._fstate.copy_to_device(np.array([state["max_priority"], cfg["beta"]], np.float64))
        rep._cursor, rep._size, rep._n_demo = int(state["cursor"]), size, nd
        rep._n_added = int(state["n_added"])
        rep._ere_step_set = bool(state["ere_step_set"])
    return rep
