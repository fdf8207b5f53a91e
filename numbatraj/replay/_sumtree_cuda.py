"""Device sum-tree of the prioritized device replay: draws, new rows, priority updates.

Same layout as the host :class:`~numbatraj.samplers.SumTree` (``sums``/``mins`` float64
``(2P,)``, root 1, leaf ``i`` at ``P + i``, absent leaves 0 / +inf) and the same rule that
every internal node is recomputed from its two children, so after the same writes the
device tree equals the host tree bit for bit, up to the leaves' ``pow``: a GPU's (libdevice,
within 2 ulp) may round a leaf a few ulp away from the host's (glibc), which the simulator
does not show (an H200 did, by 1 ulp).  Ancestors are recomputed one level per
launch (``_ancestors_cuda``): threads whose leaves share a parent write the same value
from the same, already final, children.

Priority updates keep the host semantics: a stale row (generation stamp changed since the
sample) is skipped and counted; a row repeated in one batch takes its last priority (the
highest lane claims it with an atomic max); the max priority is raised by every applied one.

Imported lazily; kernels take arrays and scalars only, never allocate, never raise.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from numbatraj.replay import _lanes
from numbatraj.replay._ring_cuda import dev

__all__ = ["PTX_SIGNATURES"]

_DRAW, _SIZE, _N_DEMO, _CURSOR, _SKIPPED = (
    _lanes.DRAW, _lanes.SIZE, _lanes.N_DEMO, _lanes.CURSOR, _lanes.SKIPPED
)
_MAXP, _BETA = _lanes.MAXP, _lanes.BETA
demo_lanes_dev = dev.demo_lanes
window_dev = dev.window
per_lane_dev = dev.per_lane
philox_uniform_dev = dev.philox_uniform


@cuda.jit
def _per_draw_cuda(  # type: ignore[no-untyped-def]
    istate, fstate, sums, mins, p, gen, k0, k1, ring_base, ring_cap, fraction, ere, eta, c_min,
    out, weights, stamps,
):
    """Prioritized lanes of draw ``istate[DRAW]`` (device twin of ``_lanes.per_lanes_cpu``,
    followed by ``_next_draw_cuda``)."""
    i = cuda.grid(1)  # type: ignore[call-arg,var-annotated]  # (stub lacks defaults)
    b = out.shape[0]
    d = istate[_DRAW]
    size = istate[_SIZE]
    n_demo = istate[_N_DEMO]
    m = demo_lanes_dev(b, n_demo, size, fraction, ere)
    c = window_dev(istate, ere, eta, c_min)
    if i < b:
        u = philox_uniform_dev(np.uint64(d), np.uint64(i), k0, k1)
        leaf, w = per_lane_dev(i, b, m, u, sums, mins, p, fstate[_BETA], n_demo, ring_base,
                               ring_cap, istate[_CURSOR], c)
        out[i] = leaf
        weights[i] = w
        stamps[i] = gen[leaf]


@cuda.jit
def _add_leaves_cuda(sums, mins, p, gen, rows, fstate, alpha, nodes):  # type: ignore[no-untyped-def]
    """New rows (distinct): bump generation, leaf = max_priority**alpha, note the leaf node."""
    j = cuda.grid(1)  # type: ignore[call-arg,var-annotated]  # (stub lacks defaults)
    if j < rows.shape[0]:
        r = rows[j]
        gen[r] += 1
        v = fstate[_MAXP] ** alpha
        sums[p + r] = v
        mins[p + r] = v
        nodes[j] = p + r


@cuda.jit
def _claim_cuda(istate, fstate, gen, rows, stamps, check, priorities, eps, owner):  # type: ignore[no-untyped-def]
    """Stale lanes are counted; live lanes claim their row (highest lane wins) and raise the
    max priority."""
    j = cuda.grid(1)  # type: ignore[call-arg,var-annotated]  # (stub lacks defaults)
    if j < rows.shape[0]:
        r = rows[j]
        if check and gen[r] != stamps[j]:
            cuda.atomic.add(istate, _SKIPPED, 1)
        else:
            cuda.atomic.max(owner, r, j)
            cuda.atomic.max(fstate, _MAXP, priorities[j] + eps)


@cuda.jit
def _apply_cuda(sums, mins, p, rows, priorities, eps, alpha, owner, nodes):  # type: ignore[no-untyped-def]
    """The claiming lane writes its leaf; every other lane notes no node (0)."""
    j = cuda.grid(1)  # type: ignore[call-arg,var-annotated]  # (stub lacks defaults)
    if j < rows.shape[0]:
        r = rows[j]
        if owner[r] == j:
            v = (priorities[j] + eps) ** alpha
            sums[p + r] = v
            mins[p + r] = v
            nodes[j] = p + r
        else:
            nodes[j] = 0


@cuda.jit
def _release_cuda(rows, owner):  # type: ignore[no-untyped-def]
    """Reset the claims (after ``_apply_cuda`` has completed)."""
    j = cuda.grid(1)  # type: ignore[call-arg,var-annotated]  # (stub lacks defaults)
    if j < rows.shape[0]:
        owner[rows[j]] = -1


@cuda.jit
def _ancestors_cuda(sums, mins, nodes):  # type: ignore[no-untyped-def]
    """Move every noted node up one level and recompute it from its children."""
    j = cuda.grid(1)  # type: ignore[call-arg,var-annotated]  # (stub lacks defaults)
    if j < nodes.shape[0]:
        n = nodes[j] >> 1
        nodes[j] = n
        if n >= 1:
            sums[n] = sums[2 * n] + sums[2 * n + 1]
            a = mins[2 * n]
            c = mins[2 * n + 1]
            mins[n] = a if a < c else c


_PER_SIG = (
    "void(int64[::1], float64[::1], float64[::1], float64[::1], int64, int64[::1], uint64, "
    "uint64, int64, int64, float64, boolean, float64, int64, int64[::1], float32[::1], "
    "int64[::1])"
)

#: ``(kernel, signature)`` pairs compiled to PTX by tests/test_ptx_compile.py.
PTX_SIGNATURES: list[tuple[Any, str]] = [
    (_per_draw_cuda, _PER_SIG),
    (_add_leaves_cuda,
     "void(float64[::1], float64[::1], int64, int64[::1], int64[::1], float64[::1], float64, "
     "int64[::1])"),
    (_claim_cuda,
     "void(int64[::1], float64[::1], int64[::1], int64[::1], int64[::1], boolean, "
     "float64[::1], float64, int64[::1])"),
    (_apply_cuda,
     "void(float64[::1], float64[::1], int64, int64[::1], float64[::1], float64, float64, "
     "int64[::1], int64[::1])"),
    (_release_cuda, "void(int64[::1], int64[::1])"),
    (_ancestors_cuda, "void(float64[::1], float64[::1], int64[::1])"),
]
