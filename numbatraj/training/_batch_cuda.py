"""Device twins of :mod:`._batch_kernels` (``@cuda.jit``), from the same Python bodies.

:func:`~._batch_kernels.window_one` and :func:`~._batch_kernels.affine_one` are compiled
here as CUDA device functions, so the device window and the device normalisation are the
host's arithmetic by construction.  Imported only when ``device="cuda"`` is asked for.
Grid-stride loops: any launch size is correct.  ``PTX_SIGNATURES`` lists every kernel for
tests/test_ptx_compile.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from numbatraj._cuda import is_simulator
from numbatraj.training._batch_kernels import affine_one, window_one

__all__ = ["PTX_SIGNATURES", "gather_affine", "gather_rows", "gather_unit", "window_rows"]

_THREADS = 128
_SIM_MAX_BLOCKS = 2
_MAX_BLOCKS = 1024

_window_one_dev = cuda.jit(device=True)(window_one)
_affine_one_dev = cuda.jit(device=True)(affine_one)


@cuda.jit
def _window_rows_cuda(cur, offsets, lengths, deltas, rows, pad, ep):  # type: ignore[no-untyped-def]
    start = cuda.grid(1)  # type: ignore[call-arg,var-annotated]
    stride = cuda.gridsize(1)
    for b in range(start, cur.shape[0], stride):
        _window_one_dev(b, cur, offsets, lengths, deltas, rows, pad, ep)


@cuda.jit
def _gather_rows_cuda(src, rows, out):  # type: ignore[no-untyped-def]
    start = cuda.grid(1)  # type: ignore[call-arg,var-annotated]
    stride = cuda.gridsize(1)
    w = out.shape[1]
    for k in range(start, out.shape[0] * w, stride):
        i = k // w
        j = k - i * w
        out[i, j] = src[rows[i], j]


@cuda.jit
def _gather_affine_cuda(src, rows, a, s, c, d, out):  # type: ignore[no-untyped-def]
    start = cuda.grid(1)  # type: ignore[call-arg,var-annotated]
    stride = cuda.gridsize(1)
    w = out.shape[1]
    for k in range(start, out.shape[0] * w, stride):
        i = k // w
        j = k - i * w
        out[i, j] = _affine_one_dev(src[rows[i], j], a[j], s[j], c[j], d[j])


@cuda.jit
def _gather_unit_cuda(src, rows, scale, out):  # type: ignore[no-untyped-def]
    start = cuda.grid(1)  # type: ignore[call-arg,var-annotated]
    stride = cuda.gridsize(1)
    w = out.shape[1]
    for k in range(start, out.shape[0] * w, stride):
        i = k // w
        j = k - i * w
        out[i, j] = np.float32(src[rows[i], j]) / scale


_I1 = "int64[::1]"
_WORDS = ("uint64", "uint32", "uint16", "uint8")
_NUMERIC = ("float32", "float64", "int32", "int64", "uint8")

#: ``(kernel, signature)`` pairs compiled to PTX by tests/test_ptx_compile.py.
PTX_SIGNATURES: list[tuple[Any, str]] = [
    (
        _window_rows_cuda,
        f"void({_I1}, {_I1}, {_I1}, {_I1}, int64[:, ::1], boolean[:, ::1], {_I1})",
    ),
    (_gather_unit_cuda, "void(uint8[:, :], int64[::1], float32, float32[:, ::1])"),
] + [
    (_gather_rows_cuda, f"void({w}[:, :], int64[::1], {w}[:, ::1])") for w in _WORDS
] + [
    (
        _gather_affine_cuda,
        f"void({t}[:, :], int64[::1], float32[::1], float32[::1], float32[::1], "
        f"float32[::1], float32[:, ::1])",
    )
    for t in _NUMERIC
]


def _blocks(n: int) -> int:
    cap = _SIM_MAX_BLOCKS if is_simulator() else _MAX_BLOCKS
    return max(1, min(cap, (n + _THREADS - 1) // _THREADS))


def window_rows(cur: Any, offsets: Any, lengths: Any, deltas: Any, rows: Any, pad: Any,
                ep: Any, stream: Any = 0) -> None:
    n = int(cur.shape[0])
    if n:
        _window_rows_cuda[_blocks(n), _THREADS, stream](cur, offsets, lengths, deltas, rows,
                                                        pad, ep)


def gather_rows(src: Any, rows: Any, out: Any, stream: Any = 0) -> None:
    total = int(out.shape[0]) * int(out.shape[1])
    if total:
        _gather_rows_cuda[_blocks(total), _THREADS, stream](src, rows, out)


def gather_affine(src: Any, rows: Any, a: Any, s: Any, c: Any, d: Any, out: Any,
                  stream: Any = 0) -> None:
    total = int(out.shape[0]) * int(out.shape[1])
    if total:
        _gather_affine_cuda[_blocks(total), _THREADS, stream](src, rows, a, s, c, d, out)


def gather_unit(src: Any, rows: Any, scale: float, out: Any, stream: Any = 0) -> None:
    total = int(out.shape[0]) * int(out.shape[1])
    if total:
        _gather_unit_cuda[_blocks(total), _THREADS, stream](src, rows, np.float32(scale), out)
