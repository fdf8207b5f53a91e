"""uint8 quantisation of float columns: ``[low, high]`` mapped onto the 256 codes 0..255.

``q(x) = floor((clip(x, low, high) - low) * scale + 0.5)`` with ``scale = 255 / (high - low)``,
and ``deq(q) = low + q * step`` with ``step = (high - low) / 255``.  For ``x`` inside
``[low, high]`` the round trip is off by at most half a step, ``(high - low) / 510``, plus the
float32 rounding of ``deq`` (a few ulp of ``max(|low|, |high|)``); values outside are clipped
to the range first; NaN is stored as code 0 (``low``).

The scalar bodies ending in ``_py`` are compiled here for the host and in ``_ring_cuda.py``
for the device.  Kernels take arrays and scalars only, never allocate and never raise.
"""

from __future__ import annotations

import numpy as np

from numbatraj._jit import njit_kernel
from numbatraj.replay._ring_kernels import ring_skip, ring_slot

__all__ = [
    "quantize_cpu",
    "dequantize_cpu",
    "ring_put_quantize_cpu",
    "gather_dequantize_cpu",
]


# --------------------------------------------------------------------------- bodies
def quantize_py(x, low, high, scale):  # type: ignore[no-untyped-def]
    """Code in 0..255 (as uint8) of one float ``x``."""
    if not x > low:  # below the range, or NaN
        return np.uint8(0)
    if x >= high:
        return np.uint8(255)
    return np.uint8(np.int32((x - low) * scale + 0.5))


def dequantize_py(q, low, step):  # type: ignore[no-untyped-def]
    """float32 value of code ``q``."""
    return np.float32(low + np.float64(q) * step)


quantize = njit_kernel(quantize_py)
dequantize = njit_kernel(dequantize_py)


# --------------------------------------------------------------------------- host kernels
@njit_kernel
def quantize_cpu(src, low, high, scale, out):  # type: ignore[no-untyped-def]
    """``out[i] = q(src[i])`` over flat arrays (any float dtype in, uint8 out)."""
    for i in range(src.shape[0]):
        out[i] = quantize(src[i], low, high, scale)


@njit_kernel
def dequantize_cpu(src, low, step, out):  # type: ignore[no-untyped-def]
    """``out[i] = deq(src[i])`` over flat arrays (uint8 in, float32 out)."""
    for i in range(src.shape[0]):
        out[i] = dequantize(src[i], low, step)


@njit_kernel
def ring_put_quantize_cpu(dst, src, ring_base, ring_cap, cursor, low, high, scale):  # type: ignore[no-untyped-def]
    """Quantise the flat ``(n * e,)`` float rows of ``src`` into ``dst`` (capacity, e) uint8
    as a ring write at ``cursor`` (the slots of ``ring_put_cpu``)."""
    e = dst.shape[1]
    n = src.shape[0] // e
    skip = ring_skip(n, ring_cap)
    for i in range(skip, n):
        r = ring_base + ring_slot(cursor, i, ring_cap)
        k = i * e
        for j in range(e):
            dst[r, j] = quantize(src[k + j], low, high, scale)


@njit_kernel
def gather_dequantize_cpu(src, idx, low, step, out):  # type: ignore[no-untyped-def]
    """``out[i, :] = deq(src[idx[i], :])``: uint8 (capacity, e) rows to float32 (B, e)."""
    e = src.shape[1]
    for i in range(idx.shape[0]):
        r = idx[i]
        for j in range(e):
            out[i, j] = dequantize(src[r, j], low, step)
