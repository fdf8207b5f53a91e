"""Host kernels of a window batch: LeRobot's window index math and the gathers.

The two per-item bodies, :func:`window_one` (one current frame -> its clamped window rows,
pad flags and episode ordinal) and :func:`affine_one` (one element, normalised), are plain
Python: this module compiles them with ``@njit`` and :mod:`._batch_cuda` compiles the very
same functions as CUDA device functions, so host and device agree bit for bit.

Kernels take arrays and scalars only, assume valid input (the wrapper in :mod:`._gather`
checked it), never allocate and never raise.  Each gather has a serial and a ``prange``
twin (separate functions: one Python function compiled twice would share a cache entry).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from numbatraj._jit import njit_kernel, njit_parallel

__all__ = [
    "affine_one",
    "gather_affine_cpu",
    "gather_affine_serial_cpu",
    "gather_rows_cpu",
    "gather_rows_serial_cpu",
    "gather_unit_cpu",
    "gather_unit_serial_cpu",
    "window_one",
    "window_rows_cpu",
]


def window_one(b, cur, offsets, lengths, deltas, rows, pad, ep):  # type: ignore[no-untyped-def]
    """Window of item ``b``: LeRobot's clamp-and-flag rule.

    ``cur[b]`` is a store row; its episode ``k`` (``offsets[k] <= cur[b]``, binary search) is
    written to ``ep[b]``.  For each offset ``deltas[t]`` the query row ``q = cur[b] +
    deltas[t]`` is flagged ``pad[b, t] = q < start or q >= end`` and clamped into
    ``[start, end - 1]`` before it is written to ``rows[b, t]``.
    """
    r = cur[b]
    lo = 0
    hi = offsets.shape[0] - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if offsets[mid] <= r:
            lo = mid
        else:
            hi = mid - 1
    ep[b] = lo
    start = offsets[lo]
    end = start + lengths[lo]
    for t in range(deltas.shape[0]):
        q = r + deltas[t]
        if q < start:
            pad[b, t] = True
            q = start
        elif q >= end:
            pad[b, t] = True
            q = end - 1
        else:
            pad[b, t] = False
        rows[b, t] = q


def affine_one(x, a, s, c, d):  # type: ignore[no-untyped-def]
    """``((float32(x) - a) / s) * c + d`` in float32 (mean_std: c=1, d=0; min_max: c=2, d=-1)."""
    return ((np.float32(x) - a) / s) * c + d


_window_one = njit_kernel(window_one)
_affine_one = njit_kernel(affine_one)


@njit_kernel
def window_rows_cpu(cur, offsets, lengths, deltas, rows, pad, ep):  # type: ignore[no-untyped-def]
    """:func:`window_one` for every item: ``rows``/``pad`` are ``(B, T)``, ``ep`` is ``(B,)``."""
    for b in range(cur.shape[0]):
        _window_one(b, cur, offsets, lengths, deltas, rows, pad, ep)


@njit_kernel
def gather_rows_serial_cpu(src, rows, out):  # type: ignore[no-untyped-def]
    """``out[i, :] = src[rows[i], :]``; ``src`` may be a strided view (a camera slot)."""
    w = out.shape[1]
    for i in range(rows.shape[0]):
        r = rows[i]
        for j in range(w):
            out[i, j] = src[r, j]


@njit_parallel
def gather_rows_cpu(src, rows, out):  # type: ignore[no-untyped-def]
    """Parallel twin of :func:`gather_rows_serial_cpu` (disjoint ``out`` rows per thread)."""
    w = out.shape[1]
    for i in prange(rows.shape[0]):
        r = rows[i]
        for j in range(w):
            out[i, j] = src[r, j]


@njit_kernel
def gather_affine_serial_cpu(src, rows, a, s, c, d, out):  # type: ignore[no-untyped-def]
    """``out[i, j] = affine_one(src[rows[i], j], a[j], s[j], c[j], d[j])``, float32 out."""
    w = out.shape[1]
    for i in range(rows.shape[0]):
        r = rows[i]
        for j in range(w):
            out[i, j] = _affine_one(src[r, j], a[j], s[j], c[j], d[j])


@njit_parallel
def gather_affine_cpu(src, rows, a, s, c, d, out):  # type: ignore[no-untyped-def]
    """Parallel twin of :func:`gather_affine_serial_cpu`."""
    w = out.shape[1]
    for i in prange(rows.shape[0]):
        r = rows[i]
        for j in range(w):
            out[i, j] = _affine_one(src[r, j], a[j], s[j], c[j], d[j])


@njit_kernel
def gather_unit_serial_cpu(src, rows, scale, out):  # type: ignore[no-untyped-def]
    """``out[i, j] = float32(src[rows[i], j]) / scale``: uint8 images to float32 in [0, 1]."""
    w = out.shape[1]
    for i in range(rows.shape[0]):
        r = rows[i]
        for j in range(w):
            out[i, j] = np.float32(src[r, j]) / scale


@njit_parallel
def gather_unit_cpu(src, rows, scale, out):  # type: ignore[no-untyped-def]
    """Parallel twin of :func:`gather_unit_serial_cpu`."""
    w = out.shape[1]
    for i in prange(rows.shape[0]):
        r = rows[i]
        for j in range(w):
            out[i, j] = np.float32(src[r, j]) / scale
