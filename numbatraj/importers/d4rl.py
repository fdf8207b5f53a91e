"""D4RL-style flat offline-RL HDF5 (``observations``, ``actions``, ``rewards``, ``terminals``,
``timeouts`` ...) -> a trajectory store.

D4RL files concatenate every episode with no episode index; an episode ends at each row where
``terminals | timeouts`` is true.  Rows after the last such row form an incomplete episode,
kept by default (``drop_tail=True`` drops it, as robomimic's converter does).  See
docs/importers.md, "D4RL".
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import h5py
import numpy as np

from numbatraj.data.column import ColumnSpec
from numbatraj.importers._common import (
    SourceAccount,
    SourceFormatError,
    attr_text,
    column_name,
    default_out,
    h5_dataset,
    open_source,
    open_writer,
    progress,
    scalar_attrs,
    source_attrs,
    source_errors,
)

__all__ = ["IMPORTER_VERSION", "SourceFormatError", "d4rl_episode_bounds", "import_d4rl"]

IMPORTER_VERSION = "1"

#: Consecutive short episodes are read together up to this many bytes (one long episode is
#: always read whole): peak memory is about max(one episode, this block).
_BLOCK_BYTES = 8 << 20

# source dataset -> store column, for the datasets with a fixed meaning
_MAIN = {
    "observations": "obs",
    "actions": "action",
    "rewards": "reward",
    "terminals": "done",
    "timeouts": "truncated",
    "next_observations": "next_obs",
}
_REQUIRED = ("observations", "actions", "rewards", "terminals")


def d4rl_episode_bounds(
    terminals: np.ndarray, timeouts: np.ndarray | None, *, drop_tail: bool = False
) -> list[tuple[int, int]]:
    """``[start, stop)`` row ranges of the episodes cut at ``terminals | timeouts``."""
    ends = np.asarray(terminals, dtype=bool).copy()
    if timeouts is not None:
        ends |= np.asarray(timeouts, dtype=bool)
    stops = (np.flatnonzero(ends) + 1).tolist()
    n = len(ends)
    if (not stops or stops[-1] != n) and not drop_tail and n:
        stops.append(n)
    starts = [0, *stops[:-1]]
    return list(zip(starts, stops))


def _flags(f: h5py.File, key: str, n: int, where: str) -> np.ndarray:
    ds = h5_dataset(f, key, where)
    a = np.asarray(ds[()])
    if a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    if a.shape != (n,):
        raise SourceFormatError(f"{where}: {key!r} has shape {a.shape}, expected ({n},)")
    return a != 0


def _columns(f: h5py.File, path: str) -> tuple[dict[str, str], list[ColumnSpec], list[str]]:
    """Source dataset path -> column name, the column specs, and the infos left out."""
    for key in _REQUIRED:
        h5_dataset(f, key, path)
    n = f["observations"].shape[0]
    if n == 0:
        raise SourceFormatError(f"{path}: 'observations' has no rows")
    sources: dict[str, str] = {k: c for k, c in _MAIN.items() if k in f}
    skipped: list[str] = []

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset) and name.startswith("infos/"):
            if obj.ndim >= 1 and obj.dtype.kind in "biuf":  # its length is checked below
                sources[name] = column_name("info", name[len("infos/"):])
            else:
                skipped.append(name)

    f.visititems(visit)
    specs = []
    for key, col in sources.items():
        ds = f[key]
        if not isinstance(ds, h5py.Dataset):
            raise SourceFormatError(f"{path}: {key!r} is a group, expected a dataset")
        if ds.ndim == 0 or ds.shape[0] != n:
            raise SourceFormatError(
                f"{path}: {key!r} has shape {ds.shape} but 'observations' has {n} rows; "
                f"every per-step dataset must have {n} rows"
            )
        row = ds.shape[1:]
        dt = ds.dtype
        if key in ("rewards", "terminals", "timeouts") and row == (1,):
            row = ()
        if key == "rewards" and dt.kind in "biu":
            dt = np.dtype(np.float32)
        if dt.kind not in "biuf":
            raise SourceFormatError(f"{path}: {key!r} has dtype {dt}, expected a numeric dataset")
        if key in ("terminals", "timeouts"):
            dt = np.dtype(np.bool_)
        if key in ("rewards", "terminals", "timeouts") and row != ():
            raise SourceFormatError(
                f"{path}: {key!r} has shape {ds.shape}, expected one value per row "
                f"(({n},) or ({n}, 1))"
            )
        if key not in ("rewards", "terminals", "timeouts") and row != ds.shape[1:]:
            raise SourceFormatError(f"{path}: {key!r} has an unexpected shape {ds.shape}")
        specs.append(ColumnSpec(col, dt, row))
    return sources, specs, skipped


def _blocks(bounds: list[tuple[int, int]], row_bytes: int) -> Iterator[list[tuple[int, int]]]:
    block: list[tuple[int, int]] = []
    for b in bounds:
        if block and (b[1] - block[0][0]) * row_bytes > _BLOCK_BYTES:
            yield block
            block = []
        block.append(b)
    if block:
        yield block


def import_d4rl(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    drop_tail: bool = False,
    overwrite: bool = False,
    show_progress: bool | None = None,
) -> str:
    """Import a flat D4RL-style HDF5 file, cutting episodes at ``terminals | timeouts``.

    Parameters
    ----------
    path : path-like
        The ``.hdf5`` file (e.g. ``~/.d4rl/datasets/hopper_medium-v2.hdf5``).
    out : path-like, optional
        Destination store; default ``<file stem>.h5`` in the current directory.
    drop_tail : bool
        Drop the rows after the last terminal/timeout instead of keeping them as a final,
        incomplete episode.
    overwrite : bool
        Replace an existing store at ``out``.
    show_progress : bool, optional
        Progress bar; by default shown when stderr is a terminal.

    Returns
    -------
    str
        The written store.  Columns: ``obs``, ``action``, ``reward`` (``(N, 1)`` squeezed),
        ``done`` (bool, = ``terminals``), ``truncated`` (bool, = ``timeouts``, when present),
        ``next_obs`` (when present), ``info.<key>`` for each per-step ``infos/<key>``; source
        dtypes are kept.

    Raises
    ------
    SourceFormatError
        A required dataset is missing, a per-step dataset has the wrong number of rows.
    """
    path = os.fspath(path)
    out = default_out(path) if out is None else out
    with source_errors(path), open_source(path) as f:
        sources, specs, _ = _columns(f, path)  # infos left out: in the account below
        n = f["observations"].shape[0]
        terminals = _flags(f, "terminals", n, path)
        timeouts = _flags(f, "timeouts", n, path) if "timeouts" in f else None
        bounds = d4rl_episode_bounds(terminals, timeouts, drop_tail=drop_tail)
        if not bounds:
            raise SourceFormatError(
                f"{path}: no complete episode (no terminal or timeout) and drop_tail=True"
            )
        cut = np.flatnonzero(terminals if timeouts is None else terminals | timeouts)
        last_end = int(cut[-1]) + 1 if cut.size else 0
        attrs = source_attrs("d4rl", path, IMPORTER_VERSION)
        attrs.update({
            "obs_alignment": "obs[t] before action[t]; next_obs[t] after it (when recorded)",
            "done_source": "terminals",
            "truncated_source": "timeouts" if timeouts is not None else "absent in the source",
            "episode_cut": "terminals | timeouts",
            "tail_rows": n - last_end,
            "tail": "dropped" if drop_tail else "kept as the last episode",
            "columns_from": ",".join(f"{c}={k}" for k, c in sources.items()),
        })
        account = SourceAccount(f)
        for key in sources:
            account.use(key)
        if isinstance(f.get("metadata"), h5py.Group):
            for key, obj in f["metadata"].items():
                if isinstance(obj, h5py.Dataset) and obj.size <= 16:
                    attrs[f"source.metadata.{key}"] = attr_text(obj[()])
                    account.use(f"metadata/{key}")
        kept: list[str] = []
        attrs.update(scalar_attrs(f.attrs, "source.attrs.", recorded=kept))
        account.use("", *kept)
        # what is left: non-numeric infos, large or nested metadata (policy weights), other
        # datasets and the datasets' attributes
        account.record(attrs)
        row_bytes = sum(s.row_bytes for s in specs)
        by_name = {s.name: s for s in specs}
        stem = os.path.basename(path).rsplit(".", 1)[0]
        with open_writer(out, specs, env_id=stem, attrs=attrs, overwrite=overwrite) as w:
            for block in progress(list(_blocks(bounds, row_bytes)), "d4rl", show_progress):
                lo, hi = block[0][0], block[-1][1]
                rows = {}
                for key, col in sources.items():
                    spec = by_name[col]
                    a = f[key][lo:hi]
                    if key in ("terminals", "timeouts"):
                        rows[col] = a.reshape(hi - lo) != 0
                    else:
                        rows[col] = a.reshape((hi - lo, *spec.shape)).astype(spec.dtype, copy=False)
                for start, stop in block:
                    w.append_rows({c: v[start - lo: stop - lo] for c, v in rows.items()})
                    w.end_episode()
    return os.fspath(out)
