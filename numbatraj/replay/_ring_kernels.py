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

from typing import Any

import numba
import numpy as np
from numba import prange, types
from numba.extending import overload

from numbatraj._jit import njit_kernel, njit_parallel
from numbatraj._memops import STREAM_STORES
from numbatraj._memops import address as _address
from numbatraj._memops import copy_bytes as _copy_bytes
from numbatraj._memops import copy_line as _copy_line
from numbatraj._memops import copy_line_nt as _copy_line_nt
from numbatraj._memops import move1 as _move1
from numbatraj._memops import move2 as _move2
from numbatraj._memops import move4 as _move4
from numbatraj._memops import move8 as _move8
from numbatraj._memops import move16 as _move16
from numbatraj._memops import move32 as _move32
from numbatraj._memops import move64 as _move64
from numbatraj._memops import prefetch as _prefetch
from numbatraj._memops import prefetch_wide as _prefetch_wide
from numbatraj._memops import store_fence as _store_fence

__all__ = [
    "word_dtype",
    "gather_rows_cpu",
    "gather_wide_rows_cpu",
    "gather_wide_pair_cpu",
    "gather_wide_pair_par_cpu",
    "ring_slot",
    "ring_put_cpu",
    "copy_rows_cpu",
    "stage_put_cpu",
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




#: Rows whose lines :func:`gather_rows_cpu` prefetches ahead of the row it copies.
#: Measured (4096 random rows of 10^6 168-byte records, one thread, load 2, one run):
#: shipped block-touch loop 169 us; 8 ahead 74 us, 16: 48, 24: 37, 32: 33, 48: 30, 64: 32,
#: 96: 32; a 68-byte strided column of the same records: 162 us; 16: 51, 32-128: 34-36.
GATHER_AHEAD = 48


@njit_kernel
def gather_rows_cpu(src, idx, out):  # type: ignore[no-untyped-def]
    """``out[i, :] = src[idx[i], :]`` over word views (``(capacity, w)``, any row stride,
    e.g. one column of the records, and ``(B, w)``).

    Serial on purpose: a 4096-row minibatch is bound by memory latency, and a parallel
    region measured 10-100x slower than this loop on a loaded 2-core machine.  While row
    ``i`` is copied, every cache line of row ``idx[i + GATHER_AHEAD]`` is prefetched (one
    hint per 64 bytes of its span, and its last byte), so dozens of rows' misses are in
    flight during the copies: 4096 rows of 168-byte records 5.6x faster than touching the
    lines per block of 64 rows first (see :data:`GATHER_AHEAD`).  Returns 0.
    """
    w = src.shape[1]
    b = idx.shape[0]
    if w == 0 or b == 0:
        return src.dtype.type(0)
    s0 = src.strides[0]
    span = (w - 1) * src.strides[1] + src.itemsize  # bytes from a row's first word to its end
    for i in range(-GATHER_AHEAD, b):
        j = i + GATHER_AHEAD
        if j < b:  # a prefetch never faults: no bounds to check
            o = idx[j] * s0
            for k in range(0, span, 64):
                _prefetch(src, o + k)
            _prefetch(src, o + span - 1)
        if i < 0:
            continue
        r = idx[i]
        for k in range(w):
            out[i, k] = src[r, k]
    return src.dtype.type(0)



# --------------------------------------------------------------------------- wide rows
#: Bytes of rows prefetched ahead of the row being copied (at least one row).
WIDE_AHEAD_BYTES = 8192


@njit_kernel
def _copy_wide_row(src, s, out, d, p, rb, dbase):  # type: ignore[no-untyped-def]
    """Bytes ``[s, s + rb)`` of ``src`` to ``[d, d + rb)`` of ``out`` (``dbase`` is
    ``out``'s address), prefetching ``[p, p + rb)`` of ``src``, one line per line copied."""
    h = (-(dbase + d)) & 63  # bytes before the first 64-byte aligned line of the output
    if h > rb:
        h = rb
    if h:
        _copy_bytes(out, d, src, s, h)
    n = (rb - h) >> 6
    for k in range(n):
        o = h + (k << 6)
        _prefetch_wide(src, p + o)
        _copy_line(out, d + o, src, s + o)
    _prefetch_wide(src, p)
    _prefetch_wide(src, p + rb - 1)
    t = h + (n << 6)
    if t < rb:
        _copy_bytes(out, d + t, src, s + t, rb - t)


@njit_kernel
def gather_wide_rows_cpu(src, idx, out):  # type: ignore[no-untyped-def]
    """``out[i, :] = src[idx[i], :]`` for wide rows (a column stored apart: hundreds of
    words per row, ``(capacity, w)`` and ``(B, w)`` C-contiguous word views).

    Each row is copied as 64-byte lines (a vector load, then an aligned vector store: the
    output's lines are never split), and with each line copied the same line of the row
    :data:`WIDE_AHEAD_BYTES` ahead is prefetched, so the next row's misses (every one of its
    lines, across its page boundaries, where the hardware prefetcher stops) overlap this
    row's copy.  Measured (512 random 3x84x84 uint8 rows of 847 MB, one thread, load 3):
    685 us with a word loop and only the next row's first line touched, 629 us with one
    ``memcpy`` per row, 538 us this way.  Serial: see :func:`gather_rows_cpu`.  Returns 0.
    """
    gather_wide_pair_cpu(src, idx, out, src, idx[:0], out[:0])
    return src.dtype.type(0)


@njit_kernel
def gather_wide_pair_cpu(src_a, idx_a, out_a, src_b, idx_b, out_b):  # type: ignore[no-untyped-def]
    """Two wide gathers in one pass: ``out_a[i] = src_a[idx_a[i]]`` then
    ``out_b[i] = src_b[idx_b[i]]`` for each ``i`` (``idx_b`` empty, or as long as ``idx_a``;
    both sources of one word type and row length).

    For ``next_of`` (one column as both sources, ``idx_b[i] = idx_a[i] + 1`` but at a
    stream's end) the two rows of a lane are adjacent in memory, so each lane is one
    contiguous read of two rows instead of two scattered ones.  See
    :func:`gather_wide_rows_cpu` for the copy and the prefetch.
    """
    b = idx_a.shape[0]
    w = src_a.shape[1]
    rb = w * src_a.itemsize
    if b == 0 or rb == 0:
        return
    two = idx_b.shape[0] > 0
    ahead = max(1, WIDE_AHEAD_BYTES // (rb * (2 if two else 1)))
    sa = src_a.reshape(src_a.shape[0] * w)
    sb = src_b.reshape(src_b.shape[0] * w)
    oa = out_a.reshape(out_a.shape[0] * w)
    aaddr = _address(oa)
    if two:
        ob = out_b.reshape(out_b.shape[0] * w)
        baddr = _address(ob)
    else:
        ob = oa
        baddr = aaddr
    for i in range(b):
        j = i + ahead if i + ahead < b else i
        _copy_wide_row(sa, idx_a[i] * rb, oa, i * rb, idx_a[j] * rb, rb, aaddr)
        if two:
            _copy_wide_row(sb, idx_b[i] * rb, ob, i * rb, idx_b[j] * rb, rb, baddr)


@njit_parallel
def gather_wide_pair_par_cpu(src_a, idx_a, out_a, src_b, idx_b, out_b,  # type: ignore[no-untyped-def]
                             n_parts):
    """:func:`gather_wide_pair_cpu` split into ``n_parts`` contiguous runs of lanes, one per
    thread of a parallel region (each run prefetching ahead on its own).  Only when the
    caller said the cores are free (``numbatraj.set_num_threads(n > 1)``): a wide gather
    is bound by the misses one core keeps in flight, and a second core doubles them.
    Measured (512 random 3x84x84 uint8 rows, next_of pairs, Intel Xeon KVM, idle): 848-870
    us on two threads against 1,550-1,590 us on one.  Returns 0."""
    b = idx_a.shape[0]
    two = idx_b.shape[0] > 0
    for p0 in prange(n_parts):
        p = np.int64(p0)
        lo = b * p // n_parts
        hi = b * (p + 1) // n_parts
        if two:
            gather_wide_pair_cpu(src_a, idx_a[lo:hi], out_a[lo:hi], src_b, idx_b[lo:hi],
                                 out_b[lo:hi])
        else:
            gather_wide_pair_cpu(src_a, idx_a[lo:hi], out_a[lo:hi], src_b, idx_b, out_b[:0])
    return 0


# --------------------------------------------------------------------------- batch adds
@numba.njit(cache=True, nogil=True, inline="always")
def _copy_span(dst, d, src, s, w):  # type: ignore[no-untyped-def]
    """``w`` bytes from byte ``s`` of ``src`` to byte ``d`` of ``dst`` as at most two
    overlapping moves of the largest power of two not above ``w`` (runs of 64 beyond),
    the way a libc ``memcpy`` copies small spans, without its call."""
    if w >= 64:
        k = 0
        while k + 64 <= w:
            _move64(dst, d + k, src, s + k)
            k += 64
        if k < w:
            _move64(dst, d + w - 64, src, s + w - 64)
    elif w >= 32:
        _move32(dst, d, src, s)
        _move32(dst, d + w - 32, src, s + w - 32)
    elif w >= 16:
        _move16(dst, d, src, s)
        _move16(dst, d + w - 16, src, s + w - 16)
    elif w >= 8:
        _move8(dst, d, src, s)
        _move8(dst, d + w - 8, src, s + w - 8)
    elif w >= 4:
        _move4(dst, d, src, s)
        _move4(dst, d + w - 4, src, s + w - 4)
    elif w >= 2:
        _move2(dst, d, src, s)
        _move2(dst, d + w - 2, src, s + w - 2)
    elif w == 1:
        _move1(dst, d, src, s)


@njit_kernel
def _stream_copy(dst, d, src, s, n):  # type: ignore[no-untyped-def]
    """``n`` bytes from byte ``s`` of ``src`` to byte ``d`` of ``dst``: the 64-byte aligned
    lines of the destination with streaming stores, the edges with ordinary copies (x86-64
    only: see :data:`STREAM_STORES`).  No fence: the caller issues one
    (:func:`_store_fence`) after its last streaming copy, before it returns."""
    h = (-(_address(dst) + d)) & 63
    if h > n:
        h = n
    if h:
        _copy_bytes(dst, d, src, s, h)
    k = h
    while k + 64 <= n:
        _copy_line_nt(dst, d + k, src, s + k)
        k += 64
    if k < n:
        _copy_bytes(dst, d + k, src, s + k, n - k)


def _rows_of_moves(k: int, j: int):  # type: ignore[no-untyped-def]
    """``rows2(dst, d, step, src, s, w, m)``: for ``r < m``, a ``k``-byte move from byte
    ``s + r*w`` of ``src`` to byte ``d + r*step`` of ``dst``, then (``j > 0``) a ``j``-byte
    move of the row's last ``j`` bytes; ``w`` is the row width (``k + j >= w``, the two may
    overlap).  One loop whose moves are fixed at compile time: the width's case is chosen
    once per column instead of once per row."""
    mk = {1: _move1, 2: _move2, 4: _move4, 8: _move8, 16: _move16, 32: _move32, 64: _move64}
    first, last = mk[k], mk.get(j)

    # inlined into the cached kernels that call them; closures are not cached on their own
    if last is None:
        @numba.njit(nogil=True, inline="always")
        def rows1(dst, d, step, src, s, w, m):  # type: ignore[no-untyped-def]
            for r in range(m):
                first(dst, d + r * step, src, s + r * w)
        return rows1

    @numba.njit(nogil=True, inline="always")
    def rows2(dst, d, step, src, s, w, m):  # type: ignore[no-untyped-def]
        t = w - j
        for r in range(m):
            a = d + r * step
            b = s + r * w
            first(dst, a, src, b)
            last(dst, a + t, src, b + t)
    return rows2


_rows_64, _rows_32, _rows_16, _rows_8, _rows_4, _rows_2, _rows_1 = (
    _rows_of_moves(k, 0) for k in (64, 32, 16, 8, 4, 2, 1))
_rows_64_4, _rows_64_8, _rows_64_16, _rows_64_32, _rows_64_64 = (
    _rows_of_moves(64, j) for j in (4, 8, 16, 32, 64))
_rows_32_32, _rows_16_16, _rows_8_8, _rows_4_4, _rows_2_2 = (
    _rows_of_moves(k, k) for k in (32, 16, 8, 4, 2))


@numba.njit(cache=True, nogil=True, inline="always")
def _stage_column(dst, d, step, src, s, w, m):  # type: ignore[no-untyped-def]
    """``m`` rows of ``w`` bytes, ``w`` apart from byte ``s`` of ``src``, to ``step`` apart
    from byte ``d`` of ``dst``: the moves of :func:`_copy_span` chosen once for the column
    (one move where ``w`` is a power of two, a 64-byte move and the smallest move that
    covers the rest from 65 to 128 bytes).  The staging of 1,000 168-byte rows (widths 68,
    24, 4, 68 and 1) took 0.68x the time of choosing the moves per row (AMD EPYC VM,
    interleaved, three blocks of 301 rounds: 7.8-8.0 against 11.5-11.8 us)."""
    if w > 128:
        for r in range(m):
            _copy_span(dst, d + r * step, src, s + r * w, w)
    elif w > 64:
        t = w - 64
        if t <= 4:
            _rows_64_4(dst, d, step, src, s, w, m)
        elif t <= 8:
            _rows_64_8(dst, d, step, src, s, w, m)
        elif t <= 16:
            _rows_64_16(dst, d, step, src, s, w, m)
        elif t <= 32:
            _rows_64_32(dst, d, step, src, s, w, m)
        else:
            _rows_64_64(dst, d, step, src, s, w, m)
    elif w == 64:
        _rows_64(dst, d, step, src, s, w, m)
    elif w > 32:
        _rows_32_32(dst, d, step, src, s, w, m)
    elif w == 32:
        _rows_32(dst, d, step, src, s, w, m)
    elif w > 16:
        _rows_16_16(dst, d, step, src, s, w, m)
    elif w == 16:
        _rows_16(dst, d, step, src, s, w, m)
    elif w > 8:
        _rows_8_8(dst, d, step, src, s, w, m)
    elif w == 8:
        _rows_8(dst, d, step, src, s, w, m)
    elif w > 4:
        _rows_4_4(dst, d, step, src, s, w, m)
    elif w == 4:
        _rows_4(dst, d, step, src, s, w, m)
    elif w == 3:
        _rows_2_2(dst, d, step, src, s, w, m)
    elif w == 2:
        _rows_2(dst, d, step, src, s, w, m)
    elif w == 1:
        _rows_1(dst, d, step, src, s, w, m)


@numba.njit(cache=True, nogil=True, inline="always")
def _stage_records(row_bytes, srcs, offs, widths, r0, n, scratch):  # type: ignore[no-untyped-def]
    """Rows ``[r0, r0 + n)`` of each column into the first ``n`` records of ``scratch``
    (column by column, :func:`_stage_column`)."""
    for c in range(len(srcs)):
        w = widths[c]
        _stage_column(scratch, offs[c], row_bytes, srcs[c], r0 * w, w, n)


def _byte_views(srcs):  # type: ignore[no-untyped-def]
    """A tuple of the C-order bytes (uint8, 1-D) of each array of ``srcs`` (any dtypes and
    shapes; a strided one copied first).  Called in Python it makes them with NumPy; in a
    kernel :func:`_byte_views_ov` compiles the same views (the tests compare the two)."""
    return tuple(np.ascontiguousarray(s).reshape(-1).view(np.uint8) for s in srcs)


@overload(_byte_views)
def _byte_views_ov(srcs):  # type: ignore[no-untyped-def]
    # one getitem per element (constant indices type a tuple of mixed arrays) makes a
    # tuple of one type, which the staging loop indexes at run time
    if not isinstance(srcs, types.BaseTuple):
        return None
    elems: Any = srcs  # the element types, in order
    views = ", ".join(
        f"srcs[{i}].reshape(-1).view(np.uint8)" if t.layout == "C"
        else f"np.ascontiguousarray(srcs[{i}]).reshape(-1).view(np.uint8)"
        for i, t in enumerate(elems))
    ns: dict[str, Any] = {"np": np}
    exec(f"def impl(srcs):\n    return ({views},)\n", ns)  # noqa: S102 - fixed template
    return ns["impl"]


#: Bytes of records assembled at a time before they go to the ring: a piece that stays in
#: L1 between being staged and being copied (1,000 168-byte rows, Intel Xeon VM, one
#: process, interleaved: 33.6 / 31.9 us in one piece, 27.6 / 24.7 us in pieces of 128 rows).
STAGE_PIECE_BYTES = 16384


# two kernels, not one with a flag: the streaming one holds x86-64-only intrinsics, which
# the plain one must not compile elsewhere (:data:`STREAM_STORES`)
@njit_kernel
def _stage_put_plain(ring, d, row_bytes, srcs, offs, widths, n,  # type: ignore[no-untyped-def]
                     scratch):
    b = _byte_views(srcs)
    piece = max(1, STAGE_PIECE_BYTES // row_bytes)
    r0 = 0
    while r0 < n:
        m = min(piece, n - r0)
        _stage_records(row_bytes, b, offs, widths, r0, m, scratch)
        _copy_bytes(ring, d + r0 * row_bytes, scratch, 0, m * row_bytes)
        r0 += m
    return 0


@njit_kernel
def _stage_put_stream(ring, d, row_bytes, srcs, offs, widths, n,  # type: ignore[no-untyped-def]
                      scratch):
    b = _byte_views(srcs)
    piece = max(1, STAGE_PIECE_BYTES // row_bytes)
    r0 = 0
    while r0 < n:
        m = min(piece, n - r0)
        _stage_records(row_bytes, b, offs, widths, r0, m, scratch)
        _stream_copy(ring, d + r0 * row_bytes, scratch, 0, m * row_bytes)
        r0 += m
    # one fence for the whole add: a fence after each piece waited for that piece's lines
    # to drain (AMD EPYC VM, 1,000 168-byte rows, interleaved with cpprb and a numpy copy,
    # medians of six probe runs of 301 rounds: 18.0-21.0 against 19.0-21.8 us)
    _store_fence()
    return 0


def stage_put_cpu(ring, d, row_bytes, srcs, offs, widths, n,  # type: ignore[no-untyped-def]
                  scratch, stream):
    """Rows ``[0, n)`` of each column into ``n`` consecutive records of the ring at byte
    ``d`` of ``ring`` (uint8, the records' bytes): column ``c``'s rows (``srcs[c]``, an
    array of any dtype and shape read as its C-order bytes, ``widths[c]`` per row) go to
    byte ``offs[c]`` of each record of
    ``scratch`` (uint8, at least ``n * row_bytes``, padding zeroed once and never
    written), then the scratch goes into the ring, :data:`STAGE_PIECE_BYTES` of records at
    a time (each piece staged, then copied, while it is in L1).

    Why: the records' lines in the ring are cold; item writes straight into them read
    each line first (write-allocate).  Assembled in a cache-resident scratch with two
    vector moves per small span, then written to the ring with streaming stores (x86-64:
    the lines go to memory without being read), 1,000 168-byte rows took 11.6 us instead
    of 13.1 with numpy item copies and a ``memcpy`` (one process, interleaved, load 0.2).
    The caller streams only into rings far larger than a cache (a small ring's fresh rows
    would otherwise be read back from memory by the next draw).  The columns come as they
    are and their byte views are made in the kernel (:func:`_byte_views`): one
    ``ravel().view(uint8)`` per column made by the caller cost 2 us of a 24 us add of
    1,000 rows (AMD EPYC VM).  Returns 0.
    """
    if stream and STREAM_STORES:
        return _stage_put_stream(ring, d, row_bytes, srcs, offs, widths, n, scratch)
    return _stage_put_plain(ring, d, row_bytes, srcs, offs, widths, n, scratch)
