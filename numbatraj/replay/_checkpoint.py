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

Checksums (on unless ``checksums=False``): every dataset carries an attribute ``nbh64``,
the digests (:mod:`numbatraj.data.checksums`) of its rows in pieces of
``max(1, 1 MiB // row bytes)`` rows, and the root an attribute ``digests`` with the digest of
the ``config`` and ``state`` text; the file is in the HDF5 1.10 format, whose metadata has
checksums of its own.  A load checks every piece it reads: a flipped bit is an
:class:`~numbatraj.errors.IntegrityError` naming the file and dataset, never a wrong row.

The file is written under a temporary name beside ``path`` while holding the path's
publish lock (a second save of the same path waits for the first), every write, the
flush and the close checked, reopened once to check it reads back, and published by
``numbatraj.io.atomic`` (fsync, rename, fsync of the directory); any failure is a
:class:`~numbatraj.errors.WriteFailedError` and leaves the previous checkpoint in place.
Loading reads each dataset
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

from numbatraj.data.checksums import digest_bytes, digest_chunks
from numbatraj.data.column import ColumnSpec
from numbatraj.errors import IntegrityError, NumbatrajError, WriteFailedError
from numbatraj.io.atomic import (
    discard,
    fsync_file,
    publish,
    publish_lock,
    remove_stale_temps,
    temp_path,
)
from numbatraj.io.h5write import LIBVER, close_discarded, flushed

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
    *,
    checksums: bool = True,
) -> None:
    """Write a checkpoint: ``rows`` yields ``(column, demo rows, ring rows)`` (host arrays of
    the storage dtype, possibly strided); ``tree`` for a prioritized replay.  ``checksums``
    (default) records the digests a load checks."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"checkpoint path {path!r} is a directory")
    with publish_lock(path, wait=True, what="checkpoint save"):
        remove_stale_temps(path)
        tmp = temp_path(path)
        try:
            cfg_text, state_text = json.dumps(config), json.dumps(state)
            expect: dict[str, tuple[Any, ...]] = {}
            f = h5py.File(tmp, "w-", libver=LIBVER)
            try:
                f.attrs["numbatraj_replay"] = FORMAT_VERSION
                f.attrs["config"] = cfg_text
                f.attrs["state"] = state_text
                if checksums:
                    f.attrs["digests"] = json.dumps(
                        {"config": digest_bytes(cfg_text.encode()),
                         "state": digest_bytes(state_text.encode())})
                for name, demo, ring in rows:
                    for key, data in ((f"demo/{name}", demo), (f"ring/{name}", ring)):
                        write_rows(f, key, data, checksums=checksums)
                        expect[key] = data.shape
                if tree is not None:
                    for key in ("leaves", "stamps", "present"):
                        write_rows(f, f"sampler/{key}", getattr(tree, key), checksums=checksums)
                        expect[f"sampler/{key}"] = getattr(tree, key).shape
                for key, arr in (side or {}).items():
                    write_rows(f, f"side/{key}", arr, checksums=checksums)
                    expect[f"side/{key}"] = arr.shape
                f.flush()  # raises what a failed close would only print
            except BaseException:
                close_discarded(f)
                raise
            f.close()
            fsync_file(tmp)
            with h5py.File(tmp, "r") as g:  # reads back: metadata checksums, every dataset
                missing = [k for k, shape in expect.items()
                           if not isinstance(g.get(k), h5py.Dataset) or g[k].shape != shape]
                if missing or g.attrs.get("state") != state_text:
                    raise OSError(f"the written checkpoint does not read back ({missing})")
            publish(tmp, path)
        except BaseException as exc:
            discard(tmp)
            if isinstance(exc, OSError) and not isinstance(exc, NumbatrajError):
                raise WriteFailedError(
                    exc.errno, f"saving checkpoint {path!r} failed ({exc.strerror or exc}); "
                    f"the previous checkpoint (if any) is untouched"
                ) from exc
            if isinstance(exc, RuntimeError | KeyError | ValueError) and \
                    not isinstance(exc, NumbatrajError):
                raise WriteFailedError(
                    None, f"saving checkpoint {path!r} failed ({exc}); the previous "
                    f"checkpoint (if any) is untouched"
                ) from exc
            raise


@contextmanager
def open_checkpoint(path: str, kind: str) -> Iterator[tuple[h5py.File, dict[str, Any],
                                                            dict[str, Any]]]:
    """The open file, its config and its state, once the file, the format version, the JSON
    and the kind have been checked."""
    try:
        f = h5py.File(path, "r")
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise IntegrityError(f"{path!r} is not a readable replay checkpoint: {exc}") from exc
    with f:
        try:
            version = f.attrs.get("numbatraj_replay")
        except (OSError, RuntimeError, KeyError) as exc:
            raise IntegrityError(f"{path!r}: unreadable attributes: {exc}") from exc
        if version is None:
            raise IntegrityError(f"{path!r} is not a replay checkpoint (no numbatraj_replay attr)")
        if int(version) not in READABLE_VERSIONS:
            raise IntegrityError(
                f"checkpoint {path!r} has format version {int(version)}, this numbatraj reads "
                f"versions {', '.join(map(str, READABLE_VERSIONS))}"
            )
        try:
            cfg_text, state_text = f.attrs["config"], f.attrs["state"]
            digests = json.loads(f.attrs["digests"]) if "digests" in f.attrs else None
            if digests is not None and (
                digests.get("config") != digest_bytes(str(cfg_text).encode())
                or digests.get("state") != digest_bytes(str(state_text).encode())
            ):
                raise IntegrityError(f"checkpoint {path!r}: config/state fail their checksum")
            cfg = json.loads(cfg_text)
            state = json.loads(state_text)
        except IntegrityError:
            raise
        except (KeyError, ValueError, OSError, RuntimeError, AttributeError) as exc:
            raise IntegrityError(f"checkpoint {path!r}: unreadable config/state: {exc}") from exc
        if not isinstance(cfg, dict) or not isinstance(state, dict):
            raise IntegrityError(f"checkpoint {path!r}: unreadable config/state: not objects")
        got = cfg.get("kind", "StoreReplay")
        if got != kind:
            raise IntegrityError(
                f"{path!r} is a {got} checkpoint; load it with that class (host and "
                f"device streams differ)"
            )
        try:
            yield f, cfg, state
        except NumbatrajError:
            raise
        except (KeyError, ValueError, TypeError, IndexError, AttributeError) as exc:
            # config/state entries of the wrong type or missing, met while the replay is
            # rebuilt from them: the file is bad, not the caller
            raise IntegrityError(
                f"checkpoint {path!r}: config/state do not describe a replay "
                f"({type(exc).__name__}: {exc})"
            ) from exc


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
        if cfg.get("n_step") is not None:  # a StoreReplay that keeps n-step targets
            args.update(n_step=int(cfg["n_step"][0]), gamma=float(cfg["n_step"][1]))
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
    out: dict[str, np.ndarray] = {}
    for k in g:
        ds = g[k]
        if not isinstance(ds, h5py.Dataset):
            raise IntegrityError(f"checkpoint {path!r}: side/{k} is not a dataset")
        out[k] = np.empty(ds.shape, ds.dtype)
        read_rows(f, f"side/{k}", out[k], path)  # checked against its digests
    return out


def held_rows(capacity: int, demo_capacity: int, n_demo: int, size: int) -> np.ndarray:
    """bool ``(capacity,)``: the demo rows ``[0, n_demo)`` and ring rows ``[D, D + size)``."""
    held = np.zeros(capacity, dtype=np.bool_)
    held[:n_demo] = True
    held[demo_capacity : demo_capacity + size] = True
    return held


_CHUNK_BYTES = 1 << 20


def _piece_rows(row_bytes: int) -> int:
    return max(1, _CHUNK_BYTES // max(1, row_bytes))


def write_rows(f: h5py.File, key: str, data: np.ndarray, *, checksums: bool = True) -> None:
    """``data`` as dataset ``key``, copied through 1 MiB pieces when its rows are strided;
    ``checksums``: with the digests of its pieces (attribute ``nbh64``)."""
    row_bytes = data[0].nbytes if data.ndim and data.shape[0] else data.nbytes
    step = _piece_rows(row_bytes)
    if data.flags.c_contiguous or not data.size:
        ds = flushed(f.create_dataset(key, data=data))
        if checksums:
            ds.attrs["nbh64"] = digest_chunks(data, step * row_bytes) if data.ndim else \
                digest_chunks(data.reshape(1), max(1, data.nbytes))
        return
    ds = f.create_dataset(key, shape=data.shape, dtype=data.dtype)
    pieces = []
    for a in range(0, data.shape[0], step):
        piece = np.ascontiguousarray(data[a : a + step])
        ds[a : a + step] = piece
        pieces.append(digest_chunks(piece, max(1, piece.nbytes)))
    flushed(ds)
    if checksums:
        ds.attrs["nbh64"] = np.concatenate(pieces) if pieces else np.zeros(0, np.uint64)


def _check_pieces(path: str, key: str, want: np.ndarray | None, first: int,
                  got: np.ndarray) -> None:
    if want is None:
        return
    want = want[first : first + got.size]
    if got.shape != want.shape or (got != want).any():
        bad = int(np.flatnonzero(got != want)[0]) + first if got.shape == want.shape else first
        raise IntegrityError(
            f"checkpoint {path!r}: dataset {key!r} fails its checksum (piece {bad}): the file "
            f"is corrupt"
        )


def read_rows(f: h5py.File, key: str, dest: np.ndarray, path: str) -> None:
    try:
        _read_rows(f, key, dest, path)
    except IntegrityError:
        raise
    except (OSError, RuntimeError, KeyError, ValueError, TypeError) as exc:
        raise IntegrityError(f"checkpoint {path!r}: dataset {key!r} cannot be read: {exc}") from exc


def _read_rows(f: h5py.File, key: str, dest: np.ndarray, path: str) -> None:
    ds = f.get(key)
    if not isinstance(ds, h5py.Dataset) or ds.shape != dest.shape or ds.dtype != dest.dtype:
        got = "missing" if ds is None else (
            f"{ds.dtype} {ds.shape}" if isinstance(ds, h5py.Dataset) else "not a dataset")
        raise IntegrityError(
            f"checkpoint {path!r}: dataset {key!r} is {got}, expected {dest.dtype} {dest.shape}"
        )
    want = np.asarray(ds.attrs["nbh64"], np.uint64) if "nbh64" in ds.attrs else None
    if not dest.size:
        return
    row_bytes = dest[0].nbytes if dest.ndim else dest.nbytes
    step = _piece_rows(row_bytes)
    if dest.flags.c_contiguous:
        ds.read_direct(dest)
        if want is not None:
            _check_pieces(path, key, want, 0, digest_chunks(dest, step * row_bytes)
                          if dest.ndim else digest_chunks(dest.reshape(1), dest.nbytes))
        return
    # a column of the replay's row records: through a small contiguous buffer, so a load
    # never holds a second copy of a column
    buf = np.empty((min(step, dest.shape[0]), *dest.shape[1:]), dtype=dest.dtype)
    for i, a in enumerate(range(0, dest.shape[0], step)):
        n = min(step, dest.shape[0] - a)
        ds.read_direct(buf[:n], source_sel=np.s_[a : a + n])
        if want is not None:
            _check_pieces(path, key, want, i, digest_chunks(buf[:n], max(1, buf[:n].nbytes)))
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
