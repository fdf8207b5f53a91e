"""Plain NumPy / Python references for every kernel.

Tests compare each Numba kernel (host and device) against the function here.  Keep these
obviously correct rather than fast.  Sections are appended per package area.
"""

from __future__ import annotations

import numpy as np

__all__: list[str] = []


# --------------------------------------------------------------------------- store
def episode_offsets_ref(lengths: np.ndarray) -> np.ndarray:
    """Start row of each episode, by a Python loop."""
    out = np.zeros(len(lengths), dtype=np.int64)
    total = 0
    for i, n in enumerate(lengths):
        out[i] = total
        total += int(n)
    return out


# --------------------------------------------------------------------------- residency (gather)
def gather_rows_ref(column: np.ndarray, idx: np.ndarray, base: int = 0) -> np.ndarray:
    """``out[i, ...] = column[idx[i] - base, ...]`` by a Python loop over ``idx`` (any shape)."""
    idx = np.asarray(idx)
    out = np.empty((*idx.shape, *column.shape[1:]), dtype=column.dtype)
    for pos in np.ndindex(*idx.shape):
        out[pos] = column[int(idx[pos]) - base]
    return out


def first_outside_ref(idx: np.ndarray, lo: int, hi: int) -> int:
    """Flat position of the first index outside ``[lo, hi)``, or -1."""
    for k, v in enumerate(np.asarray(idx).ravel().tolist()):
        if not lo <= v < hi:
            return k
    return -1


def windows_ref(n_rows: int, window_rows: int) -> list[tuple[int, int]]:
    """Every ``(start, stop)`` window that seek(0) plus repeated advance() visits."""
    return [(s, min(s + window_rows, n_rows)) for s in range(0, n_rows, window_rows)]
