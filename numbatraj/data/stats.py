"""Per-column statistics (mean, std, min, max, q01, q99, count) and their place in a store.

Layout on disk: one group per column, one dataset per statistic::

    stats/<column>/mean    float64, the column's row shape
    stats/<column>/std     float64 (population std, ddof=0, as LeRobot computes it)
    stats/<column>/min     float64
    stats/<column>/max     float64
    stats/<column>/q01     float64 (1st percentile, linear interpolation)
    stats/<column>/q99     float64
    stats/<column>/count   int64 scalar: rows the statistics were computed over

Statistics are per element of a row (an action of shape ``(14,)`` has 14 means).  They are
computed in float64; the loader casts to float32 where it normalises.  Write them with
:func:`stats_datasets` through the store writer (``close(datasets=...)``), read them with
:meth:`numbatraj.TrajectoryStore.stats`.  The LeRobot import's ``norm_*`` datasets (ACT's
floored std) are separate and unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from numbatraj.errors import SchemaError

__all__ = ["STAT_NAMES", "STATS_GROUP", "compute_stats", "stats_datasets"]

#: Every statistic a store records per column, in this order.
STAT_NAMES: tuple[str, ...] = ("mean", "std", "min", "max", "q01", "q99", "count")

#: The HDF5 group holding one sub-group per column.
STATS_GROUP = "stats"

_SLAB_ROWS = 1 << 16


def compute_stats(column: Any) -> dict[str, np.ndarray]:
    """Statistics of a column over its rows.

    Parameters
    ----------
    column : array ``(n_rows, *row_shape)``, bool/int/float, ``n_rows >= 1``

    Returns
    -------
    dict
        ``mean``, ``std``, ``min``, ``max``, ``q01``, ``q99`` as float64 ``row_shape`` arrays
        and ``count`` as an int64 scalar array.

    Raises
    ------
    SchemaError
        An empty column, or a dtype that is not numeric.
    """
    arr = np.asarray(column)
    if arr.ndim < 1 or arr.shape[0] == 0:
        raise SchemaError(f"compute_stats: need at least one row, got shape {arr.shape}")
    if arr.dtype.kind not in "biuf":
        raise SchemaError(f"compute_stats: dtype {arr.dtype} is not numeric")
    if arr.dtype.kind == "b":  # a flag column: statistics of 0/1 (mean = fraction true)
        arr = np.ascontiguousarray(arr).view(np.uint8)
    n = arr.shape[0]
    total = np.zeros(arr.shape[1:], np.float64)
    for lo in range(0, n, _SLAB_ROWS):  # slabs: a float64 copy of a slab, never the column
        total += arr[lo : lo + _SLAB_ROWS].astype(np.float64).sum(axis=0)
    mean = total / n
    sq = np.zeros_like(mean)
    for lo in range(0, n, _SLAB_ROWS):
        d = arr[lo : lo + _SLAB_ROWS].astype(np.float64) - mean
        sq += (d * d).sum(axis=0)
    q01, q99 = np.quantile(arr, [0.01, 0.99], axis=0)
    return {
        "mean": mean,
        "std": np.sqrt(sq / n),
        "min": arr.min(axis=0).astype(np.float64),
        "max": arr.max(axis=0).astype(np.float64),
        "q01": np.asarray(q01, np.float64),
        "q99": np.asarray(q99, np.float64),
        "count": np.asarray(n, np.int64),
    }


def stats_datasets(stats: Mapping[str, Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """``{column: {stat: value}}`` as ``{"stats/<column>/<stat>": array}`` for the writer.

    Every column needs all of :data:`STAT_NAMES`; values are stored as float64 (``count`` as
    int64).
    """
    out: dict[str, np.ndarray] = {}
    for column, values in stats.items():
        missing = [s for s in STAT_NAMES if s not in values]
        if missing:
            raise SchemaError(f"stats for column {column!r} lack {', '.join(missing)}")
        for name in STAT_NAMES:
            dtype = np.int64 if name == "count" else np.float64
            out[f"{STATS_GROUP}/{column}/{name}"] = np.asarray(values[name], dtype=dtype)
    return out
