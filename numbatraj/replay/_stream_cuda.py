"""Device kernels of the replay's streams: n-step targets, sequence starts and windows.

Imported lazily by ``gpu.py`` (importing it imports ``numba.cuda``).  The per-lane bodies
of ``_stream_kernels.py`` (``nstep_row_py``, ``sequence_start_py``, ``window_row_py``, and
``neighbour_py`` they call) are compiled here as device functions with the names they call
rebound to device compiles (``numbatraj._jit.device_twin``): the host replay runs the same
bodies, so host and device agree bit for bit by construction.  The ring geometry (size,
cursor, n_demo) is read from the device state ``istate``, so a captured graph stays valid as
the ring fills.  Kernels take arrays and scalars only, never allocate, never raise.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from numbatraj._cuda import is_simulator
from numbatraj._jit import device_twin
from numbatraj.replay import _lanes
from numbatraj.replay import _stream_kernels as _sk
from numbatraj.replay._ring_cuda import dev as _ring
from numbatraj.samplers import kernels

__all__ = ["PTX_SIGNATURES"]

_j = cuda.jit(device=True)


def _mul_rn_dev():  # type: ignore[no-untyped-def]
    """The device twin of ``_stream_kernels.mul_rn_py``: libdevice's ``dmul_rn`` (a product
    NVVM never fuses into an fma); the plain body under the simulator (Python floats)."""
    if is_simulator():
        return _j(_sk.mul_rn_py)
    from numba.cuda import libdevice

    def mul_rn(a, b):  # type: ignore[no-untyped-def]
        return libdevice.dmul_rn(a, b)

    return _j(mul_rn)


class _Dev:
    """Device compiles of the stream bodies."""

    neighbour = _j(_sk.neighbour_py)
    nstep_row = _j(device_twin(_sk.nstep_row_py, neighbour=neighbour, mul_rn=_mul_rn_dev()))
    window_row = _j(device_twin(_sk.window_row_py, neighbour=neighbour))
    sequence_start = _j(device_twin(_sk.sequence_start_py,
                                    philox_index=kernels.philox_index_dev,
                                    physical_row=_ring.physical_row))


_CURSOR, _SIZE, _N_DEMO, _DRAW = _lanes.CURSOR, _lanes.SIZE, _lanes.N_DEMO, _lanes.DRAW
_window_start = _ring.window_start
_nstep_row = _Dev.nstep_row
_window_row = _Dev.window_row
_sequence_start = _Dev.sequence_start


@cuda.jit
def _nstep_cuda(istate, idx, n, gamma, reward, done, trunc, ring_base, ring_cap, n_envs,  # type: ignore[no-untyped-def]
                ret, disc, last):
    """Lane ``i``: the n-step target of row ``idx[i]`` (``_stream_kernels.nstep_cpu``)."""
    i = cuda.grid(1)  # type: ignore[call-arg,var-annotated]
    if i < idx.shape[0]:
        size = istate[_SIZE]
        start = _window_start(istate[_CURSOR], size, ring_cap)
        _nstep_row(i, idx[i], n, gamma, reward, done, trunc, ring_base, istate[_N_DEMO],
                   ring_cap, n_envs, start, size, ret, disc, last)


@cuda.jit
def _sequence_starts_cuda(istate, k0, k1, t_len, within, ring_base, ring_cap, n_envs, out):  # type: ignore[no-untyped-def]
    """Lane ``i``: the start row of uniform window ``i`` of draw ``istate[DRAW]``
    (``_stream_kernels.sequence_starts_cpu``); ``_next_draw_cuda`` advances the draw."""
    i = cuda.grid(1)  # type: ignore[call-arg,var-annotated]
    if i < out.shape[0]:
        size = istate[_SIZE]
        start = _window_start(istate[_CURSOR], size, ring_cap)
        out[i] = _sequence_start(i, np.uint64(istate[_DRAW]), k0, k1, t_len, within,
                                 istate[_N_DEMO], size, n_envs, ring_base, ring_cap, start)


@cuda.jit
def _window_rows_cuda(istate, starts, t_len, within, done, trunc, ring_base, ring_cap, n_envs,  # type: ignore[no-untyped-def]
                      cut_first, rows, is_first, is_pad):
    """Lane ``i``: window ``i`` from ``starts[i]`` (``_stream_kernels.window_rows_cpu``)."""
    i = cuda.grid(1)  # type: ignore[call-arg,var-annotated]
    if i < starts.shape[0]:
        size = istate[_SIZE]
        start = _window_start(istate[_CURSOR], size, ring_cap)
        _window_row(i, starts[i], t_len, within, done, trunc, ring_base, istate[_N_DEMO],
                    ring_cap, n_envs, start, size, cut_first, rows, is_first, is_pad)


_FLAGS = "boolean[:], boolean[:]"

#: ``(kernel, signature)`` pairs compiled to PTX by tests/test_ptx_compile.py.
PTX_SIGNATURES: list[tuple[Any, str]] = [
    *[(_nstep_cuda,
       f"void(int64[::1], int64[::1], int64, float64, {r}[:], {_FLAGS}, int64, int64, int64, "
       f"float32[::1], float32[::1], int64[::1])") for r in ("float32", "float64", "uint8")],
    (_sequence_starts_cuda,
     "void(int64[::1], uint64, uint64, int64, boolean, int64, int64, int64, int64[::1])"),
    (_window_rows_cuda,
     f"void(int64[::1], int64[::1], int64, boolean, {_FLAGS}, int64, int64, int64, "
     f"boolean[::1], int64[:, ::1], boolean[:, ::1], boolean[:, ::1])"),
]


# --------------------------------------------------------------------------- frame stacks,
# next_of, prioritized windows (the bodies at the end of ``_stream_kernels.py``)
class _Dev2:
    """Device compiles of the frame-stack, prioritized-window and window-priority bodies."""

    stack_row = _j(device_twin(_sk.stack_row_py, neighbour=_Dev.neighbour))
    per_sequence_start = _j(device_twin(_sk.per_sequence_start_py, per_lane=_ring.per_lane,
                                        window_start=_ring.window_start))
    pw_block = _j(_sk._pw_block_py)
    pw_sum = _j(device_twin(_sk._pw_flat_py, pw_block=pw_block))
    for _k in range(_sk._PW_LEVELS):  # the host's chain of split levels, compiled alike
        pw_sum = _j(device_twin(_sk._pw_split_py, pw_block=pw_block, pw_inner=pw_sum))
    window_priority = _j(device_twin(_sk.window_priority_py, pw_sum=pw_sum))


_stack_row = _Dev2.stack_row
_per_sequence_start = _Dev2.per_sequence_start
_window_priority = _Dev2.window_priority
_philox_uniform = _ring.philox_uniform
_BETA = _lanes.BETA


@cuda.jit
def _stack_rows_cuda(istate, rows, depth, shift, done, trunc, ring_base, ring_cap, n_envs,  # type: ignore[no-untyped-def]
                     out):
    """Lane ``i``: the frame-stack rows of ``rows[i]`` into ``out[i]`` (``(B, depth)``),
    the next stack when ``shift`` (``_stream_kernels.stack_rows_twin_cpu``)."""
    i = cuda.grid(1)  # type: ignore[call-arg,var-annotated]
    if i < rows.shape[0]:
        size = istate[_SIZE]
        start = _window_start(istate[_CURSOR], size, ring_cap)
        _stack_row(i, rows[i], depth, shift, done, trunc, ring_base, istate[_N_DEMO], ring_cap,
                   n_envs, start, size, out)


@cuda.jit
def _side_fill_cuda(slot, pool, rows, depth, out):  # type: ignore[no-untyped-def]
    """next_of side table: where physical row ``rows[i]`` has an entry (``slot >= 0``),
    ``out[i * depth + depth - 1, :] = pool[slot, :]`` (``out`` ``(B * depth, e)``: the
    newest frame of lane ``i``'s next stack, or its one row when ``depth`` is 1).  One
    thread per element, launched after the gather it overrides."""
    k = cuda.grid(1)  # type: ignore[call-arg,var-annotated]
    e = out.shape[1]
    if k < rows.shape[0] * e:
        i = k // e
        s = slot[rows[i]]
        if s >= 0:
            out[i * depth + depth - 1, k - i * e] = pool[s, k - i * e]


@cuda.jit
def _scatter_rows_cuda(dst, idx, src):  # type: ignore[no-untyped-def]
    """``dst[idx[i], j] = src[i, j]`` (distinct ``idx``), one thread per element: the next_of
    side table's slots and values mirrored from the host."""
    k = cuda.grid(1)  # type: ignore[call-arg,var-annotated]
    w = src.shape[1]
    if k < src.shape[0] * w:
        i = k // w
        j = k - i * w
        dst[idx[i], j] = src[i, j]


@cuda.jit
def _per_sequence_starts_cuda(istate, fstate, sums, mins, p, gen, k0, k1, t_len, within,  # type: ignore[no-untyped-def]
                              ring_base, ring_cap, n_envs, out, weights, stamps):
    """Lane ``i``: prioritized window start, weight and stamp of draw ``istate[DRAW]``
    (``_stream_kernels.per_sequence_starts_cpu``; ``_next_draw_cuda`` advances the draw)."""
    i = cuda.grid(1)  # type: ignore[call-arg,var-annotated]
    b = out.shape[0]
    if i < b:
        u = _philox_uniform(np.uint64(istate[_DRAW]), np.uint64(i), k0, k1)
        leaf, w = _per_sequence_start(i, b, u, sums, mins, p, fstate[_BETA], t_len, within,
                                      istate[_N_DEMO], istate[_SIZE], n_envs, ring_base,
                                      ring_cap, istate[_CURSOR])
        out[i] = leaf
        weights[i] = w
        stamps[i] = gen[leaf]


@cuda.jit
def _window_priorities_cuda(td, rows, eta, out, starts):  # type: ignore[no-untyped-def]
    """Lane ``i``: window ``i``'s R2D2 priority (``_stream_kernels.window_priorities_cpu``)
    and its start row ``rows[i, 0]``."""
    i = cuda.grid(1)  # type: ignore[call-arg,var-annotated]
    if i < td.shape[0]:
        out[i] = _window_priority(td, i, eta)
        starts[i] = rows[i, 0]


PTX_SIGNATURES += [
    (_stack_rows_cuda,
     f"void(int64[::1], int64[::1], int64, boolean, {_FLAGS}, int64, int64, int64, "
     f"int64[:, ::1])"),
    *[(_side_fill_cuda, f"void(int32[:], {t}[:, ::1], int64[::1], int64, {t}[:, ::1])")
      for t in ("float32", "float64", "uint8", "int64")],
    *[(_scatter_rows_cuda, f"void({t}[:, ::1], int64[::1], {t}[:, ::1])")
      for t in ("int32", "float32", "float64", "uint8")],
    (_per_sequence_starts_cuda,
     "void(int64[::1], float64[::1], float64[::1], float64[::1], int64, int64[::1], uint64, "
     "uint64, int64, boolean, int64, int64, int64, int64[::1], float32[::1], int64[::1])"),
    *[(_window_priorities_cuda,
       f"void({t}[:, ::1], int64[:, ::1], float64, float64[::1], int64[::1])")
      for t in ("float32", "float64")],
]
