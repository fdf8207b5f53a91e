"""Host kernels of the row gather: ``out[i, :] = src[idx[i] - base, :]``.

Rows are gathered as raw machine words, not as typed values: the wrapper
(:mod:`numbatraj.data.resident`) views every column as a 2-D array of the widest unsigned word
that divides the row's byte length (uint64, uint32, uint16 or uint8), so one kernel per word
type serves every dtype and row shape, NaN payloads survive bit for bit, and only four
specializations are ever compiled.

Kernels take arrays and scalars only, assume valid input (indices already checked by
:func:`first_outside_cpu`), never allocate and never raise.  They compile lazily on first
call with ``cache=True`` (see :mod:`numbatraj._jit`).
"""

from __future__ import annotations

import numba
from numba import prange

from numbatraj._jit import njit_kernel, njit_parallel

__all__ = [
    "CHECK_BLOCK",
    "first_outside_cpu",
    "gather_rows_cpu",
    "gather_rows_serial_cpu",
    "threads",
]

#: Indices checked per block before the early-exit scan (the block test vectorizes).
CHECK_BLOCK = 256


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


@njit_parallel
def gather_rows_cpu(src, idx, base, out):  # type: ignore[no-untyped-def]
    """``out[i, :] = src[idx[i] - base, :]`` with rows split across threads.

    ``src`` is ``(n_rows, w)`` and ``out`` is ``(len(idx), w)``, both C-contiguous of the same
    word type; each thread writes a disjoint block of ``out`` rows.
    """
    w = src.shape[1]
    for i in prange(idx.shape[0]):
        r = idx[i] - base
        for j in range(w):
            out[i, j] = src[r, j]


@njit_kernel
def gather_rows_serial_cpu(src, idx, base, out):  # type: ignore[no-untyped-def]
    """Serial twin of :func:`gather_rows_cpu` for batches too small to split."""
    w = src.shape[1]
    for i in range(idx.shape[0]):
        r = idx[i] - base
        for j in range(w):
            out[i, j] = src[r, j]


def threads() -> int:
    """Numba's thread count for this thread (``NUMBA_NUM_THREADS``, ``numba.set_num_threads``).

    With one thread the wrapper runs the serial kernel: a parallel region would add its
    fork/join for nothing.
    """
    return int(numba.get_num_threads())
