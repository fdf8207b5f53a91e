"""Device kernels of the ring replay: insert with wrap, gathers, ring state, uniform draws.

Imported lazily by ``gpu.py`` (importing it imports ``numba.cuda``).  The scalar bodies of
``_ring_kernels.py``, ``_quantize_kernels.py``, ``_split.py``, ``_lanes.py`` and
``samplers/kernels.py`` are compiled here as device functions, with the names they call
rebound to device compiles (``numbatraj._jit.device_twin``), so the device and its host
twin agree bit for bit by construction.  Kernels take arrays and scalars only, never
allocate, never raise.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from numbatraj._cuda import is_simulator
from numbatraj._jit import device_twin
from numbatraj.replay import _lanes, _quantize_kernels, _ring_kernels, _split
from numbatraj.samplers import kernels

__all__ = ["PTX_SIGNATURES", "THREADS_PER_BLOCK", "dev"]

#: 256 on a GPU; 32 under the simulator (one Python thread per CUDA thread), which also
#: makes small test batches span several blocks.  Results do not depend on it.
THREADS_PER_BLOCK = 32 if is_simulator() else 256

_j = cuda.jit(device=True)


class _Dev:
    """Device compiles of the shared bodies (one namespace, so rebinding is explicit)."""

    ring_skip = _j(_ring_kernels.ring_skip_py)
    ring_slot = _j(_ring_kernels.ring_slot_py)
    physical_row = _j(_ring_kernels.physical_row_py)
    quantize = _j(_quantize_kernels.quantize_py)
    dequantize = _j(_quantize_kernels.dequantize_py)
    descend = _j(kernels.descend_py)
    prefix_mass = _j(kernels.prefix_mass_py)
    range_min = _j(kernels.range_min_py)
    philox_uniform = kernels.philox_uniform_dev
    demo_lanes = _j(_split.split_lanes_py)
    ere_size = _j(_split.ere_size_py)
    window_start = _j(_split.window_start_py)
    window_ranges = _j(_split.window_ranges_py)
    uniform_lane = _j(
        device_twin(_lanes.uniform_lane_py, philox_index=kernels.philox_index_dev,
                    physical_row=physical_row, window_start=window_start)
    )
    per_lane = _j(
        device_twin(_lanes.per_lane_py, descend=descend, prefix_mass=prefix_mass,
                    range_min=range_min, window_ranges=window_ranges)
    )
    window = _j(device_twin(_lanes.window_py, ere_size=ere_size))


dev = _Dev
ring_skip_dev = _Dev.ring_skip
ring_slot_dev = _Dev.ring_slot
quantize_dev = _Dev.quantize
dequantize_dev = _Dev.dequantize
demo_lanes_dev = _Dev.demo_lanes
window_dev = _Dev.window
uniform_lane_dev = _Dev.uniform_lane

_CURSOR, _SIZE, _N_DEMO, _DRAW = _lanes.CURSOR, _lanes.SIZE, _lanes.N_DEMO, _lanes.DRAW
_ERE_K, _ERE_BIGK = _lanes.ERE_K, _lanes.ERE_BIGK


# --------------------------------------------------------------------------- writes
@cuda.jit
def _ring_put_cuda(dst, src, ring_base, ring_cap, cursor):  # type: ignore[no-untyped-def]
    """Device twin of ``ring_put_cpu``: one thread per element of the rows actually written."""
    e = dst.shape[1]
    n = src.shape[0] // e
    skip = ring_skip_dev(n, ring_cap)
    k = cuda.grid(1) + skip * e  # type: ignore[call-arg]
    if k < n * e:
        i = k // e
        dst[ring_base + ring_slot_dev(cursor, i, ring_cap), k - i * e] = src[k]


@cuda.jit
def _ring_put_quantize_cuda(dst, src, ring_base, ring_cap, cursor, low, high, scale):  # type: ignore[no-untyped-def]
    """Device twin of ``ring_put_quantize_cpu``."""
    e = dst.shape[1]
    n = src.shape[0] // e
    skip = ring_skip_dev(n, ring_cap)
    k = cuda.grid(1) + skip * e  # type: ignore[call-arg]
    if k < n * e:
        i = k // e
        r = ring_base + ring_slot_dev(cursor, i, ring_cap)
        dst[r, k - i * e] = quantize_dev(src[k], low, high, scale)


@cuda.jit
def _set_state_cuda(istate, cursor, size, n_demo):  # type: ignore[no-untyped-def]
    """Ring state after an add (one thread)."""
    if cuda.grid(1) == 0:  # type: ignore[call-arg]
        istate[_CURSOR] = cursor
        istate[_SIZE] = size
        istate[_N_DEMO] = n_demo


@cuda.jit
def _set_ere_step_cuda(istate, k, big_k):  # type: ignore[no-untyped-def]
    """ERE's update ``k`` of ``K`` (one thread)."""
    if cuda.grid(1) == 0:  # type: ignore[call-arg]
        istate[_ERE_K] = k
        istate[_ERE_BIGK] = big_k


# --------------------------------------------------------------------------- draws
@cuda.jit
def _next_draw_cuda(istate):  # type: ignore[no-untyped-def]
    """Advance the draw counter (one thread), launched after a draw kernel: stream order,
    not block scheduling, guarantees every lane of the draw has read the old value."""
    if cuda.grid(1) == 0:  # type: ignore[call-arg]
        istate[_DRAW] += 1


@cuda.jit
def _uniform_draw_cuda(istate, k0, k1, ring_base, ring_cap, fraction, ere, eta, c_min, out):  # type: ignore[no-untyped-def]
    """Lane ``i`` writes ``out[i]``: the physical row of draw ``istate[DRAW]`` (device twin of
    ``_lanes.uniform_lanes_cpu``, followed by ``_next_draw_cuda``).  Size, cursor and draw
    come from device memory."""
    i = cuda.grid(1)  # type: ignore[call-arg,var-annotated]  # (stub lacks defaults)
    b = out.shape[0]
    d = istate[_DRAW]
    size = istate[_SIZE]
    n_demo = istate[_N_DEMO]
    m = demo_lanes_dev(b, n_demo, size, fraction, ere)
    c = window_dev(istate, ere, eta, c_min)
    if i < b:
        out[i] = uniform_lane_dev(i, m, np.uint64(d), k0, k1, n_demo, ring_base, ring_cap, size,
                                  istate[_CURSOR], c)


# --------------------------------------------------------------------------- gathers
@cuda.jit
def _gather_cuda(src, idx, out):  # type: ignore[no-untyped-def]
    """``out[i, j] = src[idx[i], j]``, one thread per output element."""
    k = cuda.grid(1)  # type: ignore[call-arg,var-annotated]  # (stub lacks defaults)
    w = out.shape[1]
    if k < out.shape[0] * w:
        i = k // w
        j = k - i * w
        out[i, j] = src[idx[i], j]


@cuda.jit
def _gather_dequantize_cuda(src, idx, low, step, out):  # type: ignore[no-untyped-def]
    """``out[i, j] = deq(src[idx[i], j])``: uint8 codes to float32."""
    k = cuda.grid(1)  # type: ignore[call-arg,var-annotated]  # (stub lacks defaults)
    w = out.shape[1]
    if k < out.shape[0] * w:
        i = k // w
        j = k - i * w
        out[i, j] = dequantize_dev(src[idx[i], j], low, step)


# --------------------------------------------------------------------------- PTX
_ELEM = ["float32", "float64", "uint8", "boolean", "int64", "int32", "uint64", "uint32",
         "uint16", "int16", "int8", "float16"]
_DRAW_SIG = (
    "void(int64[::1], uint64, uint64, int64, int64, float64, boolean, float64, int64, int64[::1])"
)

#: ``(kernel, signature)`` pairs compiled to PTX by tests/test_ptx_compile.py.
PTX_SIGNATURES: list[tuple[Any, str]] = [
    *[(_ring_put_cuda, f"void({t}[:, ::1], {t}[::1], int64, int64, int64)") for t in _ELEM],
    *[(_gather_cuda, f"void({t}[:, ::1], int64[::1], {t}[:, ::1])") for t in _ELEM],
    *[
        (_ring_put_quantize_cuda,
         f"void(uint8[:, ::1], {t}[::1], int64, int64, int64, float64, float64, float64)")
        for t in ("float32", "float64")
    ],
    (_gather_dequantize_cuda, "void(uint8[:, ::1], int64[::1], float64, float64, float32[:, ::1])"),
    (_set_state_cuda, "void(int64[::1], int64, int64, int64)"),
    (_set_ere_step_cuda, "void(int64[::1], int64, int64)"),
    (_uniform_draw_cuda, _DRAW_SIG),
    (_next_draw_cuda, "void(int64[::1])"),
]


def blocks(n: int) -> int:
    """Blocks of :data:`THREADS_PER_BLOCK` threads covering ``n`` (at least 1)."""
    return max(1, (n + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK)
