"""Ring-buffer kernels of the replay: insert with wrap, logical-to-physical rows, time order.

Physical layout of every column: rows ``[0, D)`` are the pinned demonstration prefix, rows
``[D, D + R)`` the ring (``R = capacity - D``).  The ring holds ``size <= R`` rows; the next
write goes to ring slot ``cursor``; the oldest ring row is at slot ``(cursor - size) mod R``.
:class:`~numbatraj.replay.StoreReplay` keeps each physical row as one record of all its
columns, so these kernels also see strided columns (record views) and whole records.

Rows are moved as raw machine words (the word views of ``data/_gather_kernels.py``), so one
specialization per word type serves every dtype and row shape and NaN payloads survive.

The scalar bodies ending in ``_py`` are compiled here for the host and in ``_ring_cuda.py``
as CUDA device functions, so host and device compute the same slots by construction.
Kernels take arrays and scalars only, assume valid input, never allocate and never raise.
"""

from __future__ import annotations

import numpy as np

from numbatraj._jit import njit_kernel

__all__ = [
    "word_dtype",
    "gather_rows_cpu",
    "gather_wide_rows_cpu",
    "ring_slot",
    "ring_put_cpu",
    "copy_rows_cpu",
    "ring_slots_cpu",
    "ring_physical_cpu",
    "time_order_cpu",
]


def word_dtype(row_bytes: int) -> np.dtype:
    """The widest unsigned word (8, 4, 2 or 1 bytes) that divides ``row_bytes``."""
    for size, dt in ((8, np.uint64), (4, np.uint32), (2, np.uint16)):
        if row_bytes % size == 0:
            return np.dtype(dt)
    return np.dtype(np.uint8)


# --------------------------------------------------------------------------- bodies
def ring_skip_py(n, ring_cap):  # type: ignore[no-untyped-def]
    """Rows of an ``n``-row batch that are overwritten inside the batch itself (the oldest)."""
    return n - ring_cap if n > ring_cap else 0


def ring_slot_py(cursor, i, ring_cap):  # type: ignore[no-untyped-def]
    """Ring slot of row ``i`` of a batch written at ``cursor``: ``(cursor + i) mod R``."""
    return (cursor + i) % ring_cap


def physical_row_py(j, n_demo, ring_base, ring_cap, start):  # type: ignore[no-untyped-def]
    """Physical row of logical row ``j``: demo row ``j`` while ``j < n_demo``, else ring row
    ``j - n_demo`` counted from ring slot ``start`` (``start`` is in ``[0, R)``)."""
    if j < n_demo:
        return j
    s = start + (j - n_demo)
    if s >= ring_cap:
        s -= ring_cap
    return ring_base + s


ring_skip = njit_kernel(ring_skip_py)
ring_slot = njit_kernel(ring_slot_py)
physical_row = njit_kernel(physical_row_py)


# --------------------------------------------------------------------------- host kernels
@njit_kernel
def ring_put_cpu(dst, src, ring_base, ring_cap, cursor):  # type: ignore[no-untyped-def]
    """Write the rows of ``src`` into the ring of ``dst`` starting at slot ``cursor``.

    ``dst`` is C-contiguous ``(capacity, e)`` and ``src`` the flat ``(n * e,)`` elements of
    ``n`` rows, of the same dtype.  Row ``i`` goes to physical row ``ring_base + (cursor + i)
    mod ring_cap``; when ``n > ring_cap`` only the newest ``ring_cap`` rows are written (the
    older ones would be overwritten by the same batch anyway).  The rows go as at most two
    contiguous runs (before and after the wrap), each a flat copy the compiler vectorizes.
    """
    e = dst.shape[1]
    n = src.shape[0] // e
    flat = dst.reshape(dst.shape[0] * e)
    i = ring_skip(n, ring_cap)
    pos = ring_slot(cursor, i, ring_cap)
    while i < n:
        run = min(n - i, ring_cap - pos)
        m = run * e
        d = flat[(ring_base + pos) * e : (ring_base + pos) * e + m]  # views: LLVM then
        s = src[i * e : i * e + m]  # vectorizes the copy (indexing the parents does not)
        for k in range(m):
            d[k] = s[k]
        i += run
        pos = 0


@njit_kernel
def copy_rows_cpu(src, out):  # type: ignore[no-untyped-def]
    """``out[i, :] = src[i, :]`` (``(B, w)`` each, any strides): a column out of gathered
    row records."""
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = src[i, j]


@njit_kernel
def ring_slots_cpu(ring_base, ring_cap, cursor, n, out):  # type: ignore[no-untyped-def]
    """Physical rows a batch of ``n`` rows written at ``cursor`` lands in, oldest first.

    ``out`` int64 has ``min(n, ring_cap)`` entries (the rows actually written).
    """
    skip = ring_skip(n, ring_cap)
    for i in range(skip, n):
        out[i - skip] = ring_base + ring_slot(cursor, i, ring_cap)


@njit_kernel
def ring_physical_cpu(idx, n_demo, ring_base, ring_cap, start, out):  # type: ignore[no-untyped-def]
    """``out[i] = physical_row(idx[i], ...)`` for logical rows ``idx`` (int64); ``out`` may
    alias ``idx``."""
    for i in range(idx.shape[0]):
        out[i] = physical_row(idx[i], n_demo, ring_base, ring_cap, start)


@njit_kernel
def time_order_cpu(n_demo, ring_base, ring_cap, size, cursor, out):  # type: ignore[no-untyped-def]
    """Every filled physical row in time order: the demo rows, then the ring oldest first.

    ``out`` int64 has ``n_demo + size`` entries.
    """
    start = cursor - size
    if start < 0:
        start += ring_cap
    for j in range(n_demo + size):
        out[j] = physical_row(j, n_demo, ring_base, ring_cap, start)


_TOUCH_BLOCK = 64


@njit_kernel
def gather_rows_cpu(src, idx, out):  # type: ignore[no-untyped-def]
    """``out[i, :] = src[idx[i], :]`` over word views (``(capacity, w)`` and ``(B, w)``).

    Serial on purpose: a 4096-row minibatch is bound by memory latency, and a parallel
    region measured 10-100x slower than this loop on a loaded 2-core machine.  Rows go in
    blocks of 64: a short loop first loads one word per cache line of each row of the block
    (and the last word), then the block is copied from cache.  The short loop keeps dozens of misses
    in flight where the copy loop, long per row, keeps a few: the gather measured 20-25%
    faster at a million rows.  Returns a checksum of the touched words (unused; it keeps the
    loads alive).
    """
    w = src.shape[1]
    b = idx.shape[0]
    acc = src.dtype.type(0)
    if w == 0:
        return acc
    if w == 1:  # one word per row: the copy loop is as short as a touch loop would be
        for i in range(b):
            out[i, 0] = src[idx[i], 0]
        return acc
    line = max(1, 64 // src.itemsize)  # words per cache line
    for s in range(0, b, _TOUCH_BLOCK):
        e = min(b, s + _TOUCH_BLOCK)
        for i in range(s, e):
            r = idx[i]
            for j in range(0, w, line):  # one word in every line the row spans
                acc ^= src[r, j]
            acc ^= src[r, w - 1]
        for i in range(s, e):
            r = idx[i]
            for j in range(w):
                out[i, j] = src[r, j]
    return acc


@njit_kernel
def gather_wide_rows_cpu(src, idx, out):  # type: ignore[no-untyped-def]
    """``out[i, :] = src[idx[i], :]`` for wide rows (a column stored apart: hundreds of
    words per row, ``(capacity, w)`` and ``(B, w)`` C-contiguous word views).

    NOTE (issue 14): the per-core gather work in ``data/_gather_kernels.py`` is another
    engineer's; when it lands a serial row gather at least as fast as this one and
    :func:`gather_rows_cpu`, the replay should call it instead of keeping its own copies
    (measured at 3x84x84 uint8 and at 168-byte records before switching).

    Each row is one long contiguous copy (the row slices let LLVM emit a vectorized copy),
    and the hardware prefetcher streams it; the touch loop of :func:`gather_rows_cpu` would
    only evict the block it prefetches.  The first line of the next row is loaded before the
    current one is copied, so its miss overlaps the copy.  Serial: see
    :func:`gather_rows_cpu`.  Returns a checksum of the touched words (unused).
    """
    b = idx.shape[0]
    w = src.shape[1]
    acc = src.dtype.type(0)
    if w == 0 or b == 0:
        return acc
    for i in range(b):
        if i + 1 < b:
            acc ^= src[idx[i + 1], 0]
        d = out[i]
        s = src[idx[i]]
        for j in range(w):
            d[j] = s[j]
    return acc
