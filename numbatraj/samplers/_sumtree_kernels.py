"""Sum-tree and min-tree kernels over flat float64 arrays.

Layout: ``sums`` and ``mins`` are separate float64 ``(2P,)`` arrays for ``P`` (a power of
two >= capacity) leaves; ``sums[n]`` is the sum and ``mins[n]`` the minimum of node ``n``'s
subtree.  Node ``n`` has children ``2n`` and ``2n + 1``; the root is node 1 and leaf ``i`` is
node ``P + i``.  An absent leaf holds sum 0 and min +inf.  (Interleaving a node's sum and min
in one ``(2P, 2)`` array was measured: updates got faster, the descent, which reads only
sums, slower by as much, so the arrays stay apart.)

Every loop that calls ``pow`` (a library call) does nothing else that may miss the cache:
a miss inside such a loop is waited for alone, while a short loop of independent loads keeps
many in flight (the stamp gather after a descent took 190 us of a 590 us draw while it shared
the weights' loop).

Every internal node is recomputed from its two children (``fl(left + right)``), never
adjusted by a delta, so internal nodes are a pure function of the leaves: no rounding drift
accumulates however many updates run, and a rebuild from the leaves gives the same bits.

Past the cache-resident top of a large tree every level is a cache miss per draw (at 2**24
leaves, 256 MiB of sums, the descent and the update each meet one at about ten levels).  The
level loops keep :data:`PREFETCH_AHEAD` draws' next loads in flight with software prefetch
(``llvm.prefetch``, as the row gathers in ``data/_gather_kernels.py`` do): the prefetch of
draw ``i + PREFETCH_AHEAD``'s node pair retires at once, where a plain early load would hold
the reorder buffer until it arrives.  Prefetching changes which loads wait, never which
values are read or summed: every path, remainder and node is bit for bit what it was.

Kernels take arrays and scalars only, assume valid input (the wrappers in ``sumtree.py`` and
``prioritized.py`` check), never raise and never allocate.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from numbatraj._jit import njit_kernel

#: Draws (or updates) whose next node is prefetched ahead of the one being processed.
#: Measured on a 2**24-leaf tree, 4096 draws (AMD EPYC, 1 MiB L2): the descent takes 0.44x
#: the time of no prefetch at 64 ahead, 0.41x at 128, flat to 256; at 2**16 and 2**20 leaves
#: (tree in cache) within 2% of no prefetch.
PREFETCH_AHEAD = 128

_I8P = ir.IntType(8).as_pointer()
_I32 = ir.IntType(32)


def _prefetch_typer(write):  # type: ignore[no-untyped-def]
    """Typer of ``prefetch(arr, i)``: a hint to bring the line of ``arr[i]`` (1-D, C
    contiguous, any integer ``i``, not bounds-checked: a prefetch never faults) into every
    cache level, for reading (``write=0``) or for writing (``write=1``, ``prefetchw``)."""

    def typer(typingctx, arr, i):  # type: ignore[no-untyped-def]
        sig = types.void(arr, i)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            ary = context.make_array(signature.args[0])(context, builder, args[0])
            ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), _I8P)
            fnty = ir.FunctionType(ir.VoidType(), [_I8P, _I32, _I32, _I32])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
            builder.call(fn, [ptr, _I32(write), _I32(3), _I32(1)])
            return context.get_dummy_value()

        return sig, codegen

    return typer


_prefetch: Any = intrinsic(_prefetch_typer(0))
_prefetch_write: Any = intrinsic(_prefetch_typer(1))


@njit_kernel
def _sumtree_build_cpu(sums, mins, p):  # type: ignore[no-untyped-def]
    """Recompute every internal node from the leaves ``sums[p:]`` and ``mins[p:]``."""
    for n in range(p - 1, 0, -1):
        sums[n] = sums[2 * n] + sums[2 * n + 1]
        a = mins[2 * n]
        b = mins[2 * n + 1]
        mins[n] = a if a < b else b


@njit_kernel
def _recompute_ancestors_cpu(sums, mins, p, rows, nodes):  # type: ignore[no-untyped-def]
    """Recompute the ancestors of the leaves ``rows`` after their values were written.

    All leaves must already hold their final values.  ``rows`` (int64, leaf numbers) is read
    only; a row whose leaf did not change may be among them (its ancestors come out the
    same).  ``nodes`` (int64, ``rows``' length) holds the leaf nodes ``P + row`` whose
    minimum changed, 0 for entries to skip; it is scratch.  While a level is wider than the
    number of updates ``k``, every update moves up one level at a time (their loads overlap),
    the parent of update ``j + PREFETCH_AHEAD`` prefetched for writing (its children's line
    is the one written a level below, in cache); once a level holds at most ``k`` nodes, the
    whole top of the tree above it is rebuilt in index order, which costs fewer than ``2k``
    node updates instead of ``k`` per remaining level.

    The sums go up every level.  The minima go up only while they change: ``nodes`` is
    compacted each level to the updates whose node's minimum moved (a zero always counts as
    moved: ``0.0 == -0.0`` while their bits differ).  A node's minimum can change only if a
    child's did, and the first update to recompute a changed child sees the change and
    keeps it in the list, so every node whose children changed is still recomputed, after
    them: the min-tree is bit for bit what recomputing every ancestor gives.  A subtree's
    minimum seldom moves past a few levels, so at 2**24 leaves an update touches a few
    lines of the min-tree (which no descent reads: each is a cache miss) instead of one per
    level.  The list is kept by a branch-free compaction, not a test per update: whether a
    minimum moved is a coin flip low in the tree.
    """
    k = rows.shape[0]
    d = PREFETCH_AHEAD
    c = 0
    for j in range(k):
        v = nodes[j]
        nodes[c] = v
        c += v > 0
    width = p
    shift = 0
    while width > 1 and width > k:
        shift += 1
        for j in range(min(d, k)):
            _prefetch_write(sums, (p + rows[j]) >> shift)
        for j in range(k):
            if j + d < k:
                _prefetch_write(sums, (p + rows[j + d]) >> shift)
            n = (p + rows[j]) >> shift
            sums[n] = sums[2 * n] + sums[2 * n + 1]
        for j in range(min(d, c)):
            _prefetch_write(mins, nodes[j] >> 1)
        live = 0
        for j in range(c):
            if j + d < c:
                _prefetch_write(mins, nodes[j + d] >> 1)
            n = nodes[j] >> 1
            a = mins[2 * n]
            b = mins[2 * n + 1]
            m = a if a < b else b
            old = mins[n]
            mins[n] = m
            nodes[live] = n
            live += (m != old) | (m == 0.0)
        c = live
        width >>= 1
    for n in range(width - 1, 0, -1):
        sums[n] = sums[2 * n] + sums[2 * n + 1]
        a = mins[2 * n]
        b = mins[2 * n + 1]
        mins[n] = a if a < b else b


@njit_kernel
def _sumtree_update_cpu(sums, mins, p, leaves, values, nodes):  # type: ignore[no-untyped-def]
    """Set ``leaves[j]`` to ``values[j]`` in order (a repeated leaf: the last wins).

    ``nodes`` is int64 scratch of ``leaves``' length.
    """
    for j in range(leaves.shape[0]):
        n = p + leaves[j]
        sums[n] = values[j]
        mins[n] = values[j]
        nodes[j] = n
    _recompute_ancestors_cpu(sums, mins, p, leaves, nodes)


@njit_kernel
def _sumtree_find_cpu(sums, p, masses, out, leafvals):  # type: ignore[no-untyped-def]
    """Batched descent, level by level: ``out[i]`` is the leaf holding prefix mass ``masses[i]``.

    For ``0 <= m < total`` the leaf is the first ``j`` with ``cumsum(leaves)[j] > m``
    (``searchsorted(..., side="right")``): go left while ``m < sum(left)``, else subtract it
    and go right (written without branches: the direction is a coin flip the CPU cannot
    predict).  A mass that rounding pushed to or past the end of a subtree goes left
    whenever the right subtree is empty, so it lands on the last leaf with positive mass.
    ``masses`` is scratch (overwritten with remainders); ``leafvals[i]`` receives the chosen
    leaf's value.  All draws move down one level together, so their loads overlap.

    The last three levels are taken inside the draw's group of eight leaves (64 bytes, one
    or two cache lines): the two levels of internal nodes above them are recomputed from the
    leaves exactly as every update computes them (``fl(left + right)``), so the path and
    the remainders are bit for bit those of the node-by-node descent
    (:func:`descend`), while the two lowest internal levels, the most
    expensive of a large tree, are not read.  Node numbers are unsigned so that no load
    carries negative-index handling.  Together: about 15% off a cold descent at 2**20 rows.

    Once a level holds at least ``B / 8`` nodes (above it the draws share nodes, which stay
    in cache), each step prefetches the node pair (or leaf group) of draw
    ``i + PREFETCH_AHEAD``: 0.41x the time of the plain loop at 2**24 leaves.
    """
    b = masses.shape[0]
    d = PREFETCH_AHEAD
    one = np.uint64(1)  # node numbers are unsigned: no negative-index wraparound per load
    three = np.uint64(3)
    for i in range(b):
        out[i] = 1
        leafvals[i] = sums[1]
    stop = p >> 3 if p >= 8 else p
    width = 1
    while width < stop:
        ahead = width * 8 >= b
        if ahead:
            for i in range(min(d, b)):
                _prefetch(sums, np.uint64(out[i]) << one)
        for i in range(b):
            if ahead and i + d < b:
                _prefetch(sums, np.uint64(out[i + d]) << one)
            n = np.uint64(out[i]) << one
            left = sums[n]
            right = sums[n + one]
            m = masses[i]
            go_right = (m >= left) & (right > 0.0)
            out[i] = np.int64(n + np.uint64(go_right))
            masses[i] = m - left if go_right else m
        width *= 2
    if stop < p:  # node n at this level holds leaves at nodes 8n .. 8n + 7
        for i in range(min(d, b)):
            q = np.uint64(out[i]) << three
            _prefetch(sums, q)  # the group's first and last leaf: one or two lines
            _prefetch(sums, q + np.uint64(7))
        for i in range(b):
            if i + d < b:
                q = np.uint64(out[i + d]) << three
                _prefetch(sums, q)
                _prefetch(sums, q + np.uint64(7))
            q = np.uint64(out[i]) << three
            a0 = sums[q] + sums[q + one]
            a1 = sums[q + np.uint64(2)] + sums[q + np.uint64(3)]
            a2 = sums[q + np.uint64(4)] + sums[q + np.uint64(5)]
            a3 = sums[q + np.uint64(6)] + sums[q + np.uint64(7)]
            left = a0 + a1
            right = a2 + a3
            m = masses[i]
            go_right = (m >= left) & (right > 0.0)
            m = m - left if go_right else m
            q = q + np.uint64(4) if go_right else q
            left = a2 if go_right else a0
            right = a3 if go_right else a1
            go_right = (m >= left) & (right > 0.0)
            m = m - left if go_right else m
            q = q + np.uint64(2) if go_right else q
            left = sums[q]
            right = sums[q + one]
            go_right = (m >= left) & (right > 0.0)
            masses[i] = m - left if go_right else m
            out[i] = np.int64(q + np.uint64(go_right))
            leafvals[i] = right if go_right else left
    else:  # fewer than eight leaves: the last level was taken node by node
        for i in range(b):
            leafvals[i] = sums[np.uint64(out[i])]
    for i in range(b):
        out[i] -= p


@njit_kernel
def _sample_prioritized_cpu(sums, p, gen, u, out, stamps, scratch):  # type: ignore[no-untyped-def]
    """Stratified proportional draws and their generation stamps.

    ``u`` float64 (B,) uniforms in [0, 1); draw ``i`` takes prefix mass
    ``(i + u[i]) * total / B`` (one uniform per equal-mass segment).  ``out[i]`` is its
    leaf, ``stamps[i] = gen[out[i]]``; ``scratch`` float64 (2, B): row 1 receives the chosen
    leaves' values, row 0 is overwritten.  The IS weights ``(leaf_i / min_leaf) ** -beta``
    are computed by the wrapper with numpy's vectorised ``pow``: three times faster at 4096
    draws than a libm call per draw here, with the same float32 weights (2M random cases).
    """
    b = u.shape[0]
    seg = sums[1] / b
    masses = scratch[0]
    leafvals = scratch[1]
    for i in range(b):
        masses[i] = (i + u[i]) * seg
    _sumtree_find_cpu(sums, p, masses, out, leafvals)
    d = PREFETCH_AHEAD
    for i in range(min(d, b)):  # a short loop of independent, prefetched loads
        _prefetch(gen, out[i])
    for i in range(b):
        if i + d < b:
            _prefetch(gen, out[i + d])
        stamps[i] = gen[out[i]]


@njit_kernel
def _add_rows_cpu(sums, mins, p, gen, present, rows, value, nodes):  # type: ignore[no-untyped-def]
    """New rows: bump each row's generation, mark it present, give it ``value``.

    ``nodes`` is int64 scratch of ``rows``' length.  Returns how many rows were not present
    before (int64).
    """
    fresh = 0
    for j in range(rows.shape[0]):
        r = rows[j]
        gen[r] += 1
        if not present[r]:
            present[r] = True
            fresh += 1
        sums[p + r] = value
        mins[p + r] = value
        nodes[j] = p + r
    _recompute_ancestors_cpu(sums, mins, p, rows, nodes)
    return fresh


@njit_kernel
def _update_rows_cpu(sums, mins, p, gen, rows, priorities, eps, alpha, stamps, check, nodes, maxp):  # type: ignore[no-untyped-def]
    """Priority updates in order (a repeated row: the last wins), skipping stale stamps.

    Row ``rows[j]`` gets leaf value ``(priorities[j] + eps) ** alpha``.  When ``check`` is
    true, a row whose generation ``gen[r]`` differs from ``stamps[j]`` was overwritten after
    it was sampled and is skipped.  ``maxp`` float64 (1,) is raised to the largest
    ``priorities[j] + eps`` applied.  ``nodes`` is int64 scratch of ``rows``' length.  Leaves
    are written first, in order (the sum leaves, then the min leaves from them, so a
    repeated row's last value wins in both), then the ancestors are recomputed level by
    level.  Returns the number skipped (int64).
    """
    skipped = 0
    top = maxp[0]
    k = rows.shape[0]
    d = PREFETCH_AHEAD
    # this loop calls ``pow``: the generation it compares and the sum leaf it writes are
    # prefetched ``d`` updates ahead, so their misses (the rows drawn a minibatch ago, out of
    # cache on a busy machine) overlap instead of waiting one by one between calls
    for j in range(min(d, k)):
        _prefetch(gen, rows[j])
        _prefetch_write(sums, p + rows[j])
    for j in range(k):
        if j + d < k:
            _prefetch(gen, rows[j + d])
            _prefetch_write(sums, p + rows[j + d])
        r = rows[j]
        if check and gen[r] != stamps[j]:
            nodes[j] = 0
            skipped += 1
            continue
        q = priorities[j] + eps
        if q > top:
            top = q
        sums[p + r] = q**alpha
        nodes[j] = p + r
    for j in range(min(d, k)):  # the min leaves, in a loop of their own: ``pow`` is a
        _prefetch_write(mins, nodes[j])  # library call, and between calls few of these
    for j in range(k):  # (cold) stores overlap; prefetched for writing ahead
        if j + d < k:
            _prefetch_write(mins, nodes[j + d])
        n = nodes[j]
        if n > 0:
            mins[n] = sums[n]
    _recompute_ancestors_cpu(sums, mins, p, rows, nodes)
    maxp[0] = top
    return skipped


@njit_kernel
def _first_out_of_range_cpu(rows, n):  # type: ignore[no-untyped-def]
    """Position of the first entry of ``rows`` outside ``[0, n)``, or -1."""
    for j in range(rows.shape[0]):
        if rows[j] < 0 or rows[j] >= n:
            return j
    return -1


@njit_kernel
def _first_bad_value_cpu(values):  # type: ignore[no-untyped-def]
    """Position of the first NaN, infinite or negative entry of ``values``, or -1."""
    for j in range(values.shape[0]):
        v = values[j]
        if not (v >= 0.0 and v < np.inf):
            return j
    return -1


@njit_kernel
def _first_absent_cpu(present, rows):  # type: ignore[no-untyped-def]
    """Position of the first row in ``rows`` with ``present[row]`` false, or -1."""
    for j in range(rows.shape[0]):
        if not present[rows[j]]:
            return j
    return -1


# --------------------------------------------------------------------------- leaf ranges
# Prioritized draws restricted to leaf ranges (the recent window of ERE, one range or two
# when it wraps around a ring; a demonstration prefix; the online rows when a fixed demo
# fraction splits a minibatch).  Within ranges of total mass ``W`` holding ``N`` rows, draw
# ``i`` of ``B`` takes the prefix mass ``(i + u[i]) W / B`` inside the ranges (stratified)
# and the weight ``(leaf / min_leaf_in_ranges) ** -beta`` =
# ``(N P(i))**-beta / max_j (N P(j))**-beta``.  The scalar bodies ending in ``_py`` (one
# descent, one prefix sum, one range minimum) are also compiled as CUDA device functions by
# the device replay (through ``kernels.py``).


def descend_py(sums, p, m):  # type: ignore[no-untyped-def]
    """Leaf holding prefix mass ``m``: left while ``m < sum(left)``, else subtract and go right.

    A mass rounded to or past a subtree's end goes left when the right subtree is empty, so
    it lands on the last leaf with positive mass (as :func:`_sumtree_find_cpu`).
    """
    n = 1
    while n < p:
        left = sums[2 * n]
        right = sums[2 * n + 1]
        if m >= left and right > 0.0:
            m = m - left
            n = 2 * n + 1
        else:
            n = 2 * n
    return n - p


def prefix_mass_py(sums, p, i):  # type: ignore[no-untyped-def]
    """Sum of leaves ``[0, i)``, from the left siblings on the path of leaf ``i``."""
    if i >= p:
        return sums[1]
    s = 0.0
    n = p + i
    while n > 1:
        if n & 1:
            s += sums[n - 1]
        n = n >> 1
    return s


def range_min_py(mins, p, lo, hi):  # type: ignore[no-untyped-def]
    """Minimum of leaves ``[lo, hi)`` (+inf when empty), bottom-up segment-tree query."""
    best = np.inf
    a = lo + p
    b = hi + p
    while a < b:
        if a & 1:
            if mins[a] < best:
                best = mins[a]
            a += 1
        if b & 1:
            b -= 1
            if mins[b] < best:
                best = mins[b]
        a = a >> 1
        b = b >> 1
    return best


descend = njit_kernel(descend_py)
prefix_mass = njit_kernel(prefix_mass_py)
range_min = njit_kernel(range_min_py)


# --------------------------------------------------------------------------- restricted draws
@njit_kernel
def _sample_ranges_cpu(sums, mins, p, u, beta, lo0, hi0, lo1, hi1, out, weights, masses):  # type: ignore[no-untyped-def]
    """Stratified proportional draws inside leaf ranges ``[lo0, hi0)`` and ``[lo1, hi1)``.

    ``u`` float64 (B,) uniforms in [0, 1); ``out`` int64 (B,) leaves; ``weights`` float32 (B,)
    normalised so the smallest leaf in the ranges has weight 1; ``masses`` float64 (2, B)
    scratch.  The second range may be empty (``lo1 == hi1``).  A draw pushed out of its range
    by rounding is clamped into it.  All draws descend the tree together, one level at a time
    (``_sumtree_find_cpu``), so their memory loads overlap: five
    times faster at a million rows than descending draw by draw (:func:`descend`, the body
    the device runs per lane; both take the same path).
    """
    a0 = prefix_mass(sums, p, lo0)
    m0 = prefix_mass(sums, p, hi0) - a0
    a1 = 0.0
    m1 = 0.0
    lo = range_min(mins, p, lo0, hi0)
    if hi1 > lo1:
        a1 = prefix_mass(sums, p, lo1)
        m1 = prefix_mass(sums, p, hi1) - a1
        lo1min = range_min(mins, p, lo1, hi1)
        if lo1min < lo:
            lo = lo1min
    seg = range_masses(u, a0, m0, a1, m1, masses[0])
    _sumtree_find_cpu(sums, p, masses[0], out, masses[1])
    clamp_and_weigh(sums, p, u, seg, m0, m1, lo0, hi0, lo1, hi1, lo, beta, out, weights)


@njit_kernel
def range_masses(u, a0, m0, a1, m1, mass):  # type: ignore[no-untyped-def]
    """The prefix masses of stratified draws over two ranges of masses ``m0`` and ``m1``
    starting at prefix ``a0`` and ``a1``: draw ``i`` of ``B`` takes ``x = (i + u[i]) *
    (m0 + m1) / B``, in the first range while ``x < m0``.  Returns the segment ``(m0 + m1)
    / B``.  Shared by both tree layouts' restricted draws."""
    b = u.shape[0]
    seg = (m0 + m1) / b
    for i in range(b):
        x = (i + u[i]) * seg
        mass[i] = a0 + x if (x < m0 or m1 <= 0.0) else a1 + (x - m0)
    return seg


@njit_kernel
def clamp_and_weigh(sums, leaf_off, u, seg, m0, m1, lo0, hi0, lo1, hi1, lo, beta, out, weights):  # type: ignore[no-untyped-def]
    """After the descent of :func:`range_masses`' draws: each leaf pushed out of its range
    by rounding clamped into it, and its weight ``(leaf / lo) ** -beta`` (leaf ``i`` at
    ``sums[leaf_off + i]``: ``P`` level by level, the leaves' first slot in the blocked
    layout).  Shared by both tree layouts' restricted draws."""
    for i in range(u.shape[0]):
        x = (i + u[i]) * seg
        leaf = out[i]
        if x < m0 or m1 <= 0.0:
            if leaf < lo0:
                leaf = lo0
            elif leaf >= hi0:
                leaf = hi0 - 1
        else:
            if leaf < lo1:
                leaf = lo1
            elif leaf >= hi1:
                leaf = hi1 - 1
        out[i] = leaf
        weights[i] = np.float32((sums[leaf_off + leaf] / lo) ** (-beta))
