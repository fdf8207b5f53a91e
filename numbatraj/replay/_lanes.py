"""One minibatch lane of the device replay: which physical row lane ``i`` draws.

The device replay draws every lane independently from the ring state held in device memory
(``istate`` int64: cursor, size, n_demo, draw, (unused), skipped, ere_k, ere_K), so a
sampling launch needs no host value that changes between calls.  The bodies ending in
``_py`` (here, in ``_split.py`` and in ``samplers/kernels.py``) are compiled here for the
host (the *host twin*, which the tests run against the device) and in ``_ring_cuda.py`` /
``_sumtree_cuda.py`` as CUDA device functions.

Uniform lanes take ``philox_index(draw, lane)`` (``samplers/kernels.py``); prioritized lanes
take ``philox_uniform(draw, lane)`` as the offset inside their stratum.  Lanes ``[0, m)``
draw demo rows and lanes ``[m, B)`` online rows when a demo fraction or ERE splits the batch
(``m = -1``: one joint population), exactly as ``StoreReplay`` splits it.
"""

from __future__ import annotations

import numpy as np

from numbatraj._jit import njit_kernel
from numbatraj.replay._ring_kernels import physical_row
from numbatraj.replay._split import ere_size_py, split_lanes_py, window_ranges_py, window_start_py
from numbatraj.samplers.kernels import descend, philox_index, philox_uniform, prefix_mass, range_min

__all__ = [
    "CURSOR", "SIZE", "N_DEMO", "DRAW", "SKIPPED", "ERE_K", "ERE_BIGK", "N_STATE",
    "MAXP", "BETA", "N_FSTATE",
    "demo_lanes", "ere_size", "window_start", "window_ranges", "window", "window_py",
    "uniform_lane", "uniform_lane_py", "per_lane", "per_lane_py", "uniform_lanes_cpu",
    "per_lanes_cpu",
]

# slots of the int64 device state
CURSOR, SIZE, N_DEMO, DRAW, _UNUSED, SKIPPED, ERE_K, ERE_BIGK = range(8)
N_STATE = 8
# slots of the float64 device state
MAXP, BETA = 0, 1
N_FSTATE = 2


# --------------------------------------------------------------------------- bodies
# the split and the window are ``_split.py``'s bodies (the host replay's arithmetic)
demo_lanes = njit_kernel(split_lanes_py)
ere_size = njit_kernel(ere_size_py)
window_start = njit_kernel(window_start_py)
window_ranges = njit_kernel(window_ranges_py)


def uniform_lane_py(i, m, draw, k0, k1, n_demo, ring_base, ring_cap, size, cursor, c):  # type: ignore[no-untyped-def]
    """Physical row drawn by lane ``i`` (``m`` demo lanes, ``c`` rows in the online window)."""
    ii = np.uint64(i)
    if m < 0:
        n = n_demo + size
        j = np.int64(philox_index(draw, ii, k0, k1, np.uint64(n)))
        return physical_row(j, n_demo, ring_base, ring_cap, window_start(cursor, size, ring_cap))
    if i < m:
        return np.int64(philox_index(draw, ii, k0, k1, np.uint64(n_demo)))
    j = np.int64(philox_index(draw, ii, k0, k1, np.uint64(c)))
    return physical_row(j, 0, ring_base, ring_cap, window_start(cursor, c, ring_cap))


def per_lane_py(i, b, m, u, sums, mins, p, beta, n_demo, ring_base, ring_cap, cursor, c):  # type: ignore[no-untyped-def]
    """(leaf, weight) of prioritized lane ``i`` for uniform ``u`` in [0, 1).

    Joint population (``m < 0``): the whole tree, stratum ``i`` of ``b``.  Demo lanes: leaves
    ``[0, n_demo)``, stratum ``i`` of ``m``.  Online lanes: the ``c`` most recent ring rows
    (two leaf ranges when they wrap), stratum ``i - m`` of ``b - m``.  Weights are
    ``(leaf / min leaf of the ranges) ** -beta`` as in ``sample_ranges_cpu``.
    """
    lo1 = 0
    hi1 = 0
    if m < 0:
        lo0 = 0
        hi0 = p
        s = i
        nb = b
    elif i < m:
        lo0 = 0
        hi0 = n_demo
        s = i
        nb = m
    else:
        lo0, hi0, lo1, hi1 = window_ranges(ring_base, ring_cap, cursor, c)
        s = i - m
        nb = b - m
    a0 = prefix_mass(sums, p, lo0)
    m0 = prefix_mass(sums, p, hi0) - a0
    a1 = 0.0
    m1 = 0.0
    lo = range_min(mins, p, lo0, hi0)
    if hi1 > lo1:
        a1 = prefix_mass(sums, p, lo1)
        m1 = prefix_mass(sums, p, hi1) - a1
        lm = range_min(mins, p, lo1, hi1)
        if lm < lo:
            lo = lm
    x = (s + u) * ((m0 + m1) / nb)
    if x < m0 or m1 <= 0.0:
        leaf = descend(sums, p, a0 + x)
        if leaf < lo0:
            leaf = lo0
        elif leaf >= hi0:
            leaf = hi0 - 1
    else:
        leaf = descend(sums, p, a1 + (x - m0))
        if leaf < lo1:
            leaf = lo1
        elif leaf >= hi1:
            leaf = hi1 - 1
    return leaf, np.float32((sums[p + leaf] / lo) ** (-beta))


uniform_lane = njit_kernel(uniform_lane_py)
per_lane = njit_kernel(per_lane_py)


def window_py(istate, ere, eta, c_min):  # type: ignore[no-untyped-def]
    """Rows in the online window: ERE's ``c_k`` for the ``k``, ``K`` in ``istate``, else all."""
    size = istate[SIZE]
    if ere:
        return ere_size(size, istate[ERE_K], istate[ERE_BIGK], eta, c_min)
    return size


window = njit_kernel(window_py)


# --------------------------------------------------------------------------- host twins
@njit_kernel
def uniform_lanes_cpu(istate, k0, k1, ring_base, ring_cap, fraction, ere, eta, c_min, out):  # type: ignore[no-untyped-def]
    """Host twin of ``_uniform_draw_cuda``: every lane of draw ``istate[DRAW]``; advances it."""
    b = out.shape[0]
    size = istate[SIZE]
    n_demo = istate[N_DEMO]
    m = demo_lanes(b, n_demo, size, fraction, ere)
    c = window(istate, ere, eta, c_min)
    d = np.uint64(istate[DRAW])
    for i in range(b):
        out[i] = uniform_lane(i, m, d, k0, k1, n_demo, ring_base, ring_cap, size, istate[CURSOR], c)
    istate[DRAW] += 1


@njit_kernel
def per_lanes_cpu(  # type: ignore[no-untyped-def]
    istate, fstate, sums, mins, p, gen, k0, k1, ring_base, ring_cap, fraction, ere, eta, c_min,
    out, weights, stamps,
):
    """Host twin of ``_per_draw_cuda``: every prioritized lane of draw ``istate[DRAW]``."""
    b = out.shape[0]
    size = istate[SIZE]
    n_demo = istate[N_DEMO]
    m = demo_lanes(b, n_demo, size, fraction, ere)
    c = window(istate, ere, eta, c_min)
    d = np.uint64(istate[DRAW])
    for i in range(b):
        u = philox_uniform(d, np.uint64(i), k0, k1)
        leaf, w = per_lane(i, b, m, u, sums, mins, p, fstate[BETA], n_demo, ring_base, ring_cap,
                           istate[CURSOR], c)
        out[i] = leaf
        weights[i] = w
        stamps[i] = gen[leaf]
    istate[DRAW] += 1
