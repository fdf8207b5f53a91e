"""Philox4x32-10 and its mapping to bounded row indices: one Python body per function.

The plain Python functions ending in ``_py`` are the single source of truth.  This module
compiles them for the host with the ``njit`` preset; ``_uniform_cuda.py`` (and the device
replay, through the public ``kernels.py``) compiles the very
same bodies as CUDA device functions (rebinding the names they call to the device
versions), so host and device agree bit for bit by construction.

Arithmetic is done on ``uint64`` values that hold 32-bit words, with explicit masks: the
product of two 32-bit words fits in 64 bits, and no step relies on wrap-around, so the
bodies mean the same thing compiled by Numba (host or device) and run as plain Python with
numpy scalars (the CUDA simulator).

Counter convention (the cuRAND one): counter words ``(c0, c1)`` hold the draw number (low,
high), ``(c2, c3)`` hold the lane (low, high); the key ``(k0, k1)`` is the 64-bit seed
(low, high).  A bounded index takes the 64-bit word ``x0 | x1 << 32`` of the output block and
returns ``floor(word * n / 2**64)`` (multiply-high), whose bias is below ``n / 2**64``.

Kernels here take arrays and scalars only, assume valid input, never raise and never
allocate.
"""

from __future__ import annotations

import numpy as np

from numbatraj._jit import njit_kernel

M32 = np.uint64(0xFFFFFFFF)
SH32 = np.uint64(32)
PHILOX_M0 = np.uint64(0xD2511F53)
PHILOX_M1 = np.uint64(0xCD9E8D57)
PHILOX_W0 = np.uint64(0x9E3779B9)
PHILOX_W1 = np.uint64(0xBB67AE85)
_SH11 = np.uint64(11)
_TWO_M53 = 1.0 / 9007199254740992.0


# --------------------------------------------------------------------------- bodies
def philox4x32_10_py(c0, c1, c2, c3, k0, k1):  # type: ignore[no-untyped-def]
    """Philox4x32 with 10 rounds on one counter block; words are uint64 holding 32 bits."""
    c0 = np.uint64(c0) & M32
    c1 = np.uint64(c1) & M32
    c2 = np.uint64(c2) & M32
    c3 = np.uint64(c3) & M32
    k0 = np.uint64(k0) & M32
    k1 = np.uint64(k1) & M32
    for r in range(10):
        if r > 0:
            k0 = (k0 + PHILOX_W0) & M32
            k1 = (k1 + PHILOX_W1) & M32
        p0 = PHILOX_M0 * c0
        p1 = PHILOX_M1 * c2
        hi0 = p0 >> SH32
        lo0 = p0 & M32
        hi1 = p1 >> SH32
        lo1 = p1 & M32
        c0 = hi1 ^ c1 ^ k0
        c1 = lo1
        c2 = hi0 ^ c3 ^ k1
        c3 = lo0
    return c0, c1, c2, c3


def mulhi64_py(a, b):  # type: ignore[no-untyped-def]
    """High 64 bits of the 128-bit product of two uint64 values, from 32-bit halves."""
    a = np.uint64(a)
    b = np.uint64(b)
    ah = a >> SH32
    al = a & M32
    bh = b >> SH32
    bl = b & M32
    if bh == 0:
        # b < 2**32 (every realistic row count): two products, exact, none overflows
        return (ah * bl + ((al * bl) >> SH32)) >> SH32
    ll = al * bl
    lh = al * bh
    hl = ah * bl
    hh = ah * bh
    mid = (ll >> SH32) + (lh & M32) + (hl & M32)
    return hh + (lh >> SH32) + (hl >> SH32) + (mid >> SH32)


def philox_index_py(draw, lane, k0, k1, n):  # type: ignore[no-untyped-def]
    """Row index in ``[0, n)`` for ``(draw, lane)`` of the stream keyed by ``(k0, k1)``."""
    draw = np.uint64(draw)
    lane = np.uint64(lane)
    x0, x1, x2, x3 = philox4x32(draw & M32, draw >> SH32, lane & M32, lane >> SH32, k0, k1)
    return mulhi64((x1 << SH32) | x0, n)


def philox_uniform_py(draw, lane, k0, k1):  # type: ignore[no-untyped-def]
    """float64 in [0, 1) for ``(draw, lane)`` of the Philox stream keyed ``(k0, k1)``: the top
    53 bits of the block's first 64-bit word (the counter layout above)."""
    d = np.uint64(draw)
    ln = np.uint64(lane)
    x0, x1, x2, x3 = philox4x32(d & M32, d >> SH32, ln & M32, ln >> SH32, k0, k1)
    w = (x1 << SH32) | x0
    return np.float64(w >> _SH11) * _TWO_M53


# --------------------------------------------------------------------------- host compiles
philox4x32 = njit_kernel(philox4x32_10_py)
mulhi64 = njit_kernel(mulhi64_py)
philox_index = njit_kernel(philox_index_py)
philox_uniform = njit_kernel(philox_uniform_py)


@njit_kernel
def _philox_blocks_cpu(counters, keys, out):  # type: ignore[no-untyped-def]
    """``out[i] = philox4x32_10(counters[i], keys[i])``; uint64 (N, 4), (N, 2), (N, 4)."""
    for i in range(counters.shape[0]):
        y0, y1, y2, y3 = philox4x32(
            counters[i, 0], counters[i, 1], counters[i, 2], counters[i, 3], keys[i, 0], keys[i, 1]
        )
        out[i, 0] = y0
        out[i, 1] = y1
        out[i, 2] = y2
        out[i, 3] = y3


@njit_kernel
def _philox_rows_cpu(state, out, k0, k1):  # type: ignore[no-untyped-def]
    """Host twin of the device sampling kernel.

    ``state`` is uint64 ``[draw, blocks_done, n_rows]``; fills ``out`` (int64, lanes) with
    the indices of draw ``state[0]`` and advances the draw counter by one.
    """
    d = state[0]
    n = state[2]
    for i in range(out.shape[0]):
        out[i] = np.int64(philox_index(d, np.uint64(i), k0, k1, n))
    state[0] = d + np.uint64(1)


@njit_kernel
def _bounded_rows_cpu(raw, lo, n, out):  # type: ignore[no-untyped-def]
    """``out[i] = lo + mulhi64(raw[i], n)``: rows in ``[lo, lo + n)`` from 64 random bits.

    ``raw`` uint64 (B,), ``out`` int64 (B,).
    """
    nn = np.uint64(n)
    for i in range(raw.shape[0]):
        out[i] = lo + np.int64(mulhi64(raw[i], nn))
