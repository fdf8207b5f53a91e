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

from numbatraj._jit import device_twin
from numbatraj.replay import _lanes
from numbatraj.replay import _stream_kernels as _sk
from numbatraj.replay._ring_cuda import dev as _ring
from numbatraj.samplers import kernels

__all__ = ["PTX_SIGNATURES"]

_j = cuda.jit(device=True)


class _Dev:
    """Device compiles of the stream bodies."""

    neighbour = _j(_sk.neighbour_py)
    nstep_row = _j(device_twin(_sk.nstep_row_py, neighbour=neighbour))
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
