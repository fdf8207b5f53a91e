"""Host kernels of the row gather: ``out[i, :] = src[idx[i] - base, :]``.

Rows are gathered as raw machine words, not as typed values: the wrapper
(:mod:`numbatraj.data.resident`) views every column as a 2-D array of the widest unsigned word
that divides the row's byte length (uint64, uint32, uint16 or uint8), so one kernel per word
type serves every dtype and row shape, NaN payloads survive bit for bit, and only four
specializations are ever compiled.

Per core, a gather of scattered rows is bound by memory latency, not by bytes.  The kernels
keep many misses in flight by prefetching the rows ``dist`` positions ahead (first and last
cache line of each row; :func:`prefetch_distance`), and copy a row of two or more words with
one ``memcpy`` (LLVM's intrinsic, which lowers to libc's wide-word copy) instead of a word
loop; a row of one word is a plain load and store.  No sorting: the output order is the index
order.  Measured on one thread, 4096 random rows: 0.5-0.6x ``np.take``'s time for 26 float32,
0.2-0.3x for 3x84x84 uint8 (docs/residency.md).

Kernels take arrays and scalars only, assume valid input (indices already checked by
:func:`first_outside_cpu`, or checked inside :func:`checked_gather_cpu` before any write),
never allocate and never raise.  They compile lazily on first call with ``cache=True`` (see
:mod:`numbatraj._jit`).
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from numbatraj._jit import STREAM_PREFETCH_LOCALITY, njit_kernel, njit_parallel

__all__ = [
    "CHECK_BLOCK",
    "checked_gather_cpu",
    "first_outside_cpu",
    "gather_rows_cpu",
    "gather_rows_serial_cpu",
    "prefetch_distance",
]

#: Indices checked per block before the early-exit scan (the block test vectorizes).
CHECK_BLOCK = 256

_I8P = ir.IntType(8).as_pointer()
_I32 = ir.IntType(32)


def _row_pointer(builder, ary, row):  # type: ignore[no-untyped-def]
    """``i8*`` to the first byte of row ``row`` of the 2-D C-contiguous array struct ``ary``."""
    stride = builder.extract_value(ary.strides, 0)
    return builder.gep(builder.bitcast(ary.data, _I8P), [builder.mul(row, stride)]), stride


def _prefetch_row_typer(typingctx, arr, row):  # type: ignore[no-untyped-def]
    """Prefetch (for reading, with :data:`numbatraj._jit.STREAM_PREFETCH_LOCALITY`) the first
    and last byte of ``arr[row, :]``."""
    sig = types.void(arr, types.intp)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        p, stride = _row_pointer(builder, ary, args[1])
        fnty = ir.FunctionType(ir.VoidType(), [_I8P, _I32, _I32, _I32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        last = builder.gep(p, [builder.sub(stride, ir.Constant(stride.type, 1))])
        loc = _I32(STREAM_PREFETCH_LOCALITY)
        builder.call(fn, [p, _I32(0), loc, _I32(1)])
        builder.call(fn, [last, _I32(0), loc, _I32(1)])
        return context.get_dummy_value()

    return sig, codegen


_prefetch_row: Any = intrinsic(_prefetch_row_typer)


def _copy_row_typer(typingctx, dst, i, src, r):  # type: ignore[no-untyped-def]
    """``dst[i, :] = src[r, :]`` as one ``llvm.memcpy`` of a row (both 2-D C-contiguous, the
    same row length)."""
    sig = types.void(dst, types.intp, src, types.intp)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        d = context.make_array(signature.args[0])(context, builder, args[0])
        s = context.make_array(signature.args[2])(context, builder, args[2])
        dp, nbytes = _row_pointer(builder, d, args[1])
        sp, _ = _row_pointer(builder, s, args[3])
        cgutils.raw_memcpy(builder, dp, sp, nbytes, 1)
        return context.get_dummy_value()

    return sig, codegen


_copy_row: Any = intrinsic(_copy_row_typer)


@njit_kernel
def prefetch_distance(row_bytes):  # type: ignore[no-untyped-def]
    """Rows to prefetch ahead: about 2.5 KiB of rows in flight, 16 to 128 rows.

    Measured on one thread over 1 GB columns (AMD EPYC): 8-byte rows gain up to 128 rows
    ahead (0.4x ``np.take``'s time), 24-byte rows 48 to 96, 104-byte rows peak at 24 and lose
    again past 32; rows of a KiB or more gain little either way.
    """
    d = 2560 // max(row_bytes, 1)
    return min(max(d, 16), 128)


@njit_kernel
def first_outside_cpu(idx, lo, hi):  # type: ignore[no-untyped-def]
    """Position of the first ``idx[k]`` outside ``[lo, hi)``, or -1 when all are inside.

    The common case (all inside) runs as a branch-free OR over blocks of
    :data:`CHECK_BLOCK`, which LLVM vectorizes; only a block holding a bad index is rescanned
    element by element to find the first one.
    """
    n = idx.shape[0]
    for b0 in range(0, n, CHECK_BLOCK):
        b1 = min(b0 + CHECK_BLOCK, n)
        bad = False
        for k in range(b0, b1):
            v = idx[k]
            bad |= (v < lo) | (v >= hi)
        if bad:
            for k in range(b0, b1):
                v = idx[k]
                if v < lo or v >= hi:
                    return k
    return -1


@njit_kernel
def _gather_span(src, idx, base, out, i0, i1):  # type: ignore[no-untyped-def]
    """Rows ``i0:i1`` of the gather, prefetching :func:`prefetch_distance` rows ahead."""
    w = src.shape[1]
    if w == 0 or i1 <= i0:
        return
    dist = prefetch_distance(w * src.itemsize)
    head = min(i0 + dist, i1)
    for i in range(i0, head):
        _prefetch_row(src, idx[i] - base)
    stop = max(i1 - dist, i0)
    if w == 1:
        for i in range(i0, stop):
            _prefetch_row(src, idx[i + dist] - base)
            out[i, 0] = src[idx[i] - base, 0]
        for i in range(stop, i1):
            out[i, 0] = src[idx[i] - base, 0]
    else:
        for i in range(i0, stop):
            _prefetch_row(src, idx[i + dist] - base)
            _copy_row(out, i, src, idx[i] - base)
        for i in range(stop, i1):
            _copy_row(out, i, src, idx[i] - base)


@njit_kernel
def gather_rows_serial_cpu(src, idx, base, out):  # type: ignore[no-untyped-def]
    """``out[i, :] = src[idx[i] - base, :]`` on the calling thread.

    ``src`` is ``(n_rows, w)`` and ``out`` is ``(len(idx), w)``, both C-contiguous of the same
    word type.
    """
    _gather_span(src, idx, base, out, 0, idx.shape[0])


@njit_kernel
def checked_gather_cpu(src, idx, base, lo, hi, out):  # type: ignore[no-untyped-def]
    """Check then gather in one call: the position of the first index outside ``[lo, hi)``
    (nothing written), or -1 after ``out[i, :] = src[idx[i] - base, :]``.

    One dispatch instead of two: at 32 rows the call overhead is most of the cost.
    """
    pos = first_outside_cpu(idx, lo, hi)
    if pos < 0:
        _gather_span(src, idx, base, out, 0, idx.shape[0])
    return pos


@njit_parallel
def gather_rows_cpu(src, idx, base, out, n_parts):  # type: ignore[no-untyped-def]
    """:func:`gather_rows_serial_cpu` with the rows split into ``n_parts`` contiguous blocks
    (clamped to ``[1, len(idx)]``) run by Numba's threads; each writes its own block of
    ``out``.  The wrapper passes one block per thread it lets the region use."""
    n = idx.shape[0]
    parts = max(min(n_parts, n), 1)
    for p in prange(parts):
        _gather_span(src, idx, base, out, p * n // parts, (p + 1) * n // parts)

