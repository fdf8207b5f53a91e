"""Device side of the Philox uniform sampler: the host bodies of ``_philox.py`` compiled as
CUDA device functions, and the sampling kernel that advances its own draw counter.

Imported lazily (``device.py`` imports it on first device use): importing this module
imports ``numba.cuda``.

The device functions are the same Python function objects' code as the host kernels; only
the global names they call (``philox4x32``, ``mulhi64``) are rebound to the device
compiles, so host and device agree bit for bit by construction.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from numbatraj._jit import device_twin
from numbatraj.samplers import _philox

__all__ = [
    "PTX_SIGNATURES",
    "THREADS_PER_BLOCK",
    "mulhi64_dev",
    "philox4x32_dev",
    "philox_index_dev",
    "philox_uniform_dev",
]

THREADS_PER_BLOCK = 256


philox4x32_dev = cuda.jit(device=True)(_philox.philox4x32_10_py)
mulhi64_dev = cuda.jit(device=True)(_philox.mulhi64_py)
philox_index_dev = cuda.jit(device=True)(
    device_twin(_philox.philox_index_py, philox4x32=philox4x32_dev, mulhi64=mulhi64_dev)
)
philox_uniform_dev = cuda.jit(device=True)(
    device_twin(_philox.philox_uniform_py, philox4x32=philox4x32_dev)
)


@cuda.jit
def _philox_blocks_cuda(counters, keys, out):  # type: ignore[no-untyped-def]
    """Device twin of ``_philox._philox_blocks_cpu``: one thread per counter block."""
    i = cuda.grid(1)  # type: ignore[call-arg,var-annotated]  # (stub lacks defaults)
    if i < counters.shape[0]:
        y0, y1, y2, y3 = philox4x32_dev(
            counters[i, 0], counters[i, 1], counters[i, 2], counters[i, 3], keys[i, 0], keys[i, 1]
        )
        out[i, 0] = y0
        out[i, 1] = y1
        out[i, 2] = y2
        out[i, 3] = y3


@cuda.jit
def _philox_rows_cuda(state, out, k0, k1):  # type: ignore[no-untyped-def]
    """Fill ``out`` (int64, one lane per thread) with draw ``state[0]``; advance the counter.

    ``state`` is uint64 ``[draw, blocks_done, n_rows]`` in device memory.  Every thread reads
    the draw number first; each block then reports completion with an atomic, and the last
    block to finish resets ``blocks_done`` and increments ``draw``.  No host argument changes
    between calls, so a captured launch (CUDA graph) draws fresh indices on every replay.
    """
    i = cuda.grid(1)  # type: ignore[call-arg,var-annotated]  # (stub lacks defaults)
    d = state[0]
    n = state[2]
    if i < out.shape[0]:
        out[i] = np.int64(philox_index_dev(d, np.uint64(i), k0, k1, n))
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        cuda.threadfence()
        prev = cuda.atomic.add(state, 1, np.uint64(1))
        if prev == np.uint64(cuda.gridDim.x - 1):
            state[1] = np.uint64(0)
            state[0] = d + np.uint64(1)
            cuda.threadfence()


PTX_SIGNATURES = [
    (_philox_blocks_cuda, "void(uint64[:, ::1], uint64[:, ::1], uint64[:, ::1])"),
    (_philox_rows_cuda, "void(uint64[::1], int64[::1], uint64, uint64)"),
]
