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

Kernels take arrays and scalars only, assume valid input (the wrappers in ``sumtree.py`` and
``prioritized.py`` check), never raise and never allocate.
"""

from __future__ import annotations

import numpy as np

from numbatraj._jit import njit_kernel


@njit_kernel
def _sumtree_build_cpu(sums, mins, p):  # type: ignore[no-untyped-def]
    """Recompute every internal node from the leaves ``sums[p:]`` and ``mins[p:]``."""
    for n in range(p - 1, 0, -1):
        sums[n] = sums[2 * n] + sums[2 * n + 1]
        a = mins[2 * n]
        b = mins[2 * n + 1]
        mins[n] = a if a < b else b


@njit_kernel
def _recompute_ancestors_cpu(sums, mins, p, nodes):  # type: ignore[no-untyped-def]
    """Recompute the ancestors of leaf nodes ``nodes`` (0 entries are skipped).

    All leaves must already hold their final values.  ``nodes`` (int64) is scratch.  While
    a level is wider than the number of updates ``k``, every update moves up one level at a
    time (their loads overlap); once a level holds at most ``k`` nodes, the whole top of the
    tree above it is rebuilt in index order, which costs fewer than ``2k`` node updates
    instead of ``k`` per remaining level.
    """
    k = nodes.shape[0]
    width = p
    while width > 1 and width > k:
        for j in range(k):
            n = nodes[j] >> 1
            nodes[j] = n
            if n >= 1:
                sums[n] = sums[2 * n] + sums[2 * n + 1]
                a = mins[2 * n]
                b = mins[2 * n + 1]
                mins[n] = a if a < b else b
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
    _recompute_ancestors_cpu(sums, mins, p, nodes)


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
    """
    b = masses.shape[0]
    one = np.uint64(1)  # node numbers are unsigned: no negative-index wraparound per load
    for i in range(b):
        out[i] = 1
        leafvals[i] = sums[1]
    stop = p >> 3 if p >= 8 else p
    width = 1
    while width < stop:
        for i in range(b):
            n = np.uint64(out[i]) << one
            left = sums[n]
            right = sums[n + one]
            m = masses[i]
            go_right = (m >= left) & (right > 0.0)
            out[i] = np.int64(n + np.uint64(go_right))
            masses[i] = m - left if go_right else m
        width *= 2
    if stop < p:  # node n at this level holds leaves at nodes 8n .. 8n + 7
        for i in range(b):
            q = np.uint64(out[i]) << np.uint64(3)
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
    for i in range(b):  # a short loop of independent loads: many misses in flight
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
    _recompute_ancestors_cpu(sums, mins, p, nodes)
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
    for j in range(rows.shape[0]):
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
    for j in range(rows.shape[0]):  # the min leaves, in a loop of their own: ``pow`` is a
        n = nodes[j]  # library call, and between calls few of these (cold) stores overlap
        if n > 0:
            mins[n] = sums[n]
    _recompute_ancestors_cpu(sums, mins, p, nodes)
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
    b = u.shape[0]
    seg = (m0 + m1) / b
    mass = masses[0]
    for i in range(b):
        x = (i + u[i]) * seg
        mass[i] = a0 + x if (x < m0 or m1 <= 0.0) else a1 + (x - m0)
    _sumtree_find_cpu(sums, p, mass, out, masses[1])
    for i in range(b):
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
        weights[i] = np.float32((sums[p + leaf] / lo) ** (-beta))
