"""Statistics of what a :class:`~numbatraj.data.writer.TrajectoryStoreWriter` has written,
stored through its ``close(datasets=...)``: the one place importers, the LeRobot import and
``StoreReplay.dump`` compute them (layout and formulas: :mod:`numbatraj.data.stats`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from numbatraj.data.column import ColumnSpec
from numbatraj.data.stats import compute_stats, stats_datasets
from numbatraj.data.writer import TrajectoryStoreWriter

__all__ = ["close_with_stats", "stats_columns", "store_stats"]


def stats_columns(columns: Mapping[str, ColumnSpec]) -> list[str]:
    """The columns that get statistics: numeric (bool/int/float), not images.

    Image columns -- ``uint8`` with a row of two or more dimensions (``images``, ``pixels``,
    camera columns such as ``obs.agentview_image``) -- are skipped: their per-pixel moments
    are not what a policy normalises with.  Bool columns are included (their statistics are
    those of the column as ``uint8``: ``mean`` is the fraction of true rows).
    """
    out = []
    for name, spec in columns.items():
        dt = np.dtype(spec.dtype)
        if dt.kind not in "biuf":
            continue
        if dt == np.uint8 and len(spec.shape) >= 2:
            continue
        out.append(name)
    return out


#: Memory the statistics of one column may use at close: the column is read back in row
#: slabs and its elements in groups so that the float64 copies stay near this bound.
_STATS_BYTES = 64 << 20


def _column_stats(writer: TrajectoryStoreWriter, name: str, n: int) -> dict[str, np.ndarray]:
    spec = writer.columns[name]
    shape = tuple(spec.shape)
    size = int(np.prod(shape, dtype=np.int64)) if shape else 1
    itemsize = np.dtype(spec.dtype).itemsize
    slab = max(1, _STATS_BYTES // max(1, size * itemsize))
    group = max(1, _STATS_BYTES // (3 * 8 * n))  # compute_stats' float64 copies of a buffer

    def read(lo: int, hi: int) -> np.ndarray:
        col = writer.read_range(name, lo, hi)
        return col.view(np.uint8) if col.dtype == np.bool_ else col

    if group >= size and n <= slab:
        return compute_stats(read(0, n))
    parts: dict[str, list[np.ndarray]] = {}
    count = np.asarray(n, np.int64)
    for g0 in range(0, size, group):
        g1 = min(size, g0 + group)
        buf = np.empty((n, g1 - g0), np.uint8 if spec.dtype == np.bool_ else spec.dtype)
        for lo in range(0, n, slab):
            hi = min(n, lo + slab)
            buf[lo:hi] = read(lo, hi).reshape(hi - lo, size)[:, g0:g1]
        for key, value in compute_stats(buf).items():
            if key != "count":
                parts.setdefault(key, []).append(value)
        del buf
    out = {key: np.concatenate(v).reshape(shape) for key, v in parts.items()}
    out["count"] = count
    return out


def store_stats(writer: TrajectoryStoreWriter) -> dict[str, np.ndarray]:
    """``stats/<column>/<stat>`` datasets for the columns :func:`stats_columns` selects.

    The values of :func:`~numbatraj.data.stats.compute_stats` over the rows written so far,
    read back from the open writer (:meth:`~TrajectoryStoreWriter.read_range`) in bounded
    slabs; columns without rows get none.
    """
    stats = {}
    n = writer.n_rows
    if n:
        for name in stats_columns(writer.columns):
            stats[name] = _column_stats(writer, name, n)
    return stats_datasets(stats)


def close_with_stats(
    writer: TrajectoryStoreWriter, datasets: Mapping[str, Any] | None = None
) -> None:
    """Close (publish) ``writer`` with :func:`store_stats` stored beside the columns, through
    ``close(datasets=...)``: the store is published once, its statistics under the
    manifest's digests like every other dataset."""
    writer.close(datasets={**(datasets or {}), **store_stats(writer)})
