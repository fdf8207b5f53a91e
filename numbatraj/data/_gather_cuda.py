"""Device kernels of the row gather (``@cuda.jit``), twins of :mod:`._gather_kernels`.

Imported only when device code is first asked for (``numbatraj._cuda.get_cuda`` succeeded),
never by ``import numbatraj``.  Rows move as raw unsigned words, exactly as on the host, so
device and host gathers agree bit for bit.  Kernels take arrays and scalars only, use
grid-stride loops (any launch size is correct), never allocate and never raise.

``PTX_SIGNATURES`` lists every kernel with the signatures the package launches it with;
``tests/test_ptx_compile.py`` compiles each one to PTX (no GPU needed), catching code the
simulator accepts but a real device would reject.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from numbatraj._cuda import is_simulator

__all__ = ["PTX_SIGNATURES", "first_outside", "gather_rows"]

_THREADS = 128
# The simulator runs every thread as a Python thread: keep its launches near a thousand.
_SIM_MAX_BLOCKS = 2
_MAX_BLOCKS = 1024


@cuda.jit
def _first_outside_cuda(idx, lo, hi, first):  # type: ignore[no-untyped-def]
    """``first[0] = min(first[0], k)`` over every ``k`` with ``idx[k]`` outside ``[lo, hi)``."""
    start = cuda.grid(1)  # type: ignore[call-arg,var-annotated]  # (stub lacks defaults)
    stride = cuda.gridsize(1)
    for k in range(start, idx.shape[0], stride):
        v = idx[k]
        if v < lo or v >= hi:
            cuda.atomic.min(first, 0, k)


@cuda.jit
def _gather_rows_cuda(src, idx, base, out):  # type: ignore[no-untyped-def]
    """``out[i, j] = src[idx[i] - base, j]``, one output word per thread (grid-stride)."""
    start = cuda.grid(1)  # type: ignore[call-arg,var-annotated]  # (stub lacks defaults)
    stride = cuda.gridsize(1)
    w = out.shape[1]
    total = out.shape[0] * w
    for k in range(start, total, stride):
        i = k // w
        j = k - i * w
        out[i, j] = src[idx[i] - base, j]


_WORDS = ("uint64", "uint32", "uint16", "uint8")

#: ``(kernel, signature)`` pairs compiled to PTX by tests/test_ptx_compile.py.
PTX_SIGNATURES: list[tuple[Any, str]] = [
    (_first_outside_cuda, "void(int64[::1], int64, int64, int64[::1])"),
] + [
    (_gather_rows_cuda, f"void({w}[:, ::1], int64[::1], int64, {w}[:, ::1])") for w in _WORDS
]


def _blocks(n: int) -> int:
    cap = _SIM_MAX_BLOCKS if is_simulator() else _MAX_BLOCKS
    return max(1, min(cap, (n + _THREADS - 1) // _THREADS))


def first_outside(idx: Any, lo: int, hi: int, stream: Any = 0) -> int:
    """Flat position of the first device index outside ``[lo, hi)``, or -1 (one 8-byte copy)."""
    n = int(idx.shape[0])
    flag = cuda.to_device(np.array([n], dtype=np.int64), stream=stream)
    _first_outside_cuda[_blocks(n), _THREADS, stream](idx, np.int64(lo), np.int64(hi), flag)
    host = flag.copy_to_host(stream=stream)
    if stream:
        stream.synchronize()  # a copy on a non-default stream is asynchronous
    pos = int(host[0])
    return -1 if pos == n else pos


def gather_rows(src: Any, idx: Any, base: int, out: Any, stream: Any = 0) -> None:
    """Launch :func:`_gather_rows_cuda` over every word of ``out`` (indices already checked)."""
    total = int(out.shape[0]) * int(out.shape[1])
    if total:
        _gather_rows_cuda[_blocks(total), _THREADS, stream](src, idx, np.int64(base), out)
