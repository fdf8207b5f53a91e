"""The prioritized sampler's sum/min tree, one cache line per three levels: the same
binary tree and the same node values, with only every third level stored.

A binary tree over ``P = 2**L`` leaves stored level by level (``sumtree.SumTree``, node
``n`` at index ``n``) puts each level of a path in its own cache line, so past the
cache-resident top every level of a descent or an update is a miss of its own.  Here only
the levels ``L, L - 3, L - 6, ..., r0`` (``r0 = L % 3``) are stored, each contiguous and
in node order: the eight level-``s + 3`` descendants of a node ``a`` at a stored level
``s`` are one aligned 64-byte line, and the two levels between are recomputed from them
when needed, each node as ``fl(left + right)`` of its two children in the order every
update computes it (the minima likewise).  A path from the root to a leaf reads one line
per three levels, for the descent and for the update alike: at ``2**24`` leaves, eight
lines where the level-by-level tree reads 22 (the descent, which already takes its last
three levels from the eight-leaf group) or writes 24 (the update).  Storage is about
``8P / 7`` slots per tree instead of ``2P``.

The min tree stores no leaf level: a leaf's minimum is its sum leaf when the row is present
and ``+inf`` when not (every writer sets both together).  From two bands up it stores not
the band above the leaves either: a node there is recomputed from its group of eight leaves
and the rows' ``present`` flags (8 bytes, not read once every row of every leaf group is
present), and the lowest stored minima cover 64 leaves each.  An update keeps that lowest
stored minimum from the row's old value instead of recomputing it (:func:`_set_leaf`): a
value below it is the new minimum, the row that held it rising sends the node to a
recomputation from its 64 leaves after the batch, any other change leaves it.  So an
update writes no line of a ``P``-slot or ``P / 8``-slot array for the minima; it reads one
line of a ``P / 64``-slot one.  Stop 35 removed the leaf level (4096 updates at ``2**24``
rows, one thread, Intel Xeon VM: 430 -> 355 us); stop 36 the band above it (the update with
warm caches 270 -> 228 us at ``2**24``, 101 -> 96 us at ``2**16``).  The minima take
``P / 56`` slots.

Layout of the sums' float64 array: a 16-slot header holding the levels ``0 .. r0`` (at most
seven nodes, node ``n`` at slot ``n``), then the stored levels ``r0 + 3, r0 + 6, ..., L``, each
starting on a 64-byte line (:func:`level_start`); leaf ``i`` is slot ``level_start(L) + i``,
so the leaves are one contiguous run.  ``(p, r0, nb)`` describe it (:func:`layout`): ``P``,
the header's last level and ``nb = L // 3``, the number of three-level bands below it.  The
minima's array is the same up to their lowest stored band (:func:`min_size` slots);
``present`` (bool, ``P`` entries: the rows past the capacity stay false) holds which leaves
were set.

Every stored value and every recomputed one is bit for bit the node the level-by-level
tree holds, and the descent takes the same path with the same remainders, so draws,
weights and nodes are those of ``_sumtree_kernels`` (:func:`to_binary` gives the
level-by-level arrays; the tests compare them with the NumPy reference).

Kernels take arrays and scalars only, assume valid input (``prioritized.py`` checks),
never raise and never allocate.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from numbatraj._jit import njit_kernel, njit_parallel
from numbatraj.samplers import _gen_runs as R
from numbatraj.samplers._sumtree_kernels import (
    PREFETCH_AHEAD,
    _prefetch,
    _prefetch_write,
    clamp_and_weigh,
    range_masses,
)

__all__ = ["layout", "min_size", "new_tree"]

#: Slots of the header (levels ``0 .. r0``, node ``n`` at slot ``n``).
HEADER = 16


#: generations' intervals marked invalid: the kernels read the dense array
_DENSE = np.zeros(R.LENGTH, dtype=np.int64)


def layout(p: int) -> tuple[int, int, int]:
    """``(r0, nb, size)`` of the tree over ``p`` (a power of two) leaves."""
    levels = p.bit_length() - 1
    r0, nb = levels % 3, levels // 3
    size = HEADER + sum(1 << (r0 + 3 * k) for k in range(1, nb + 1))
    return r0, nb, size


def min_size(p: int) -> int:
    """Slots of the minima's array over ``p`` leaves: the sums' layout up to the minima's
    lowest stored band (the leaves, and with two bands or more the band above them, are not
    stored)."""
    r0, nb, size = layout(p)
    if nb >= 2:
        return int(level_start(nb - 1, r0))
    return size - p


def new_tree(size: int, value: float) -> np.ndarray:
    """A float64 ``(size,)`` array filled with ``value`` whose first slot starts a 64-byte
    cache line, so every eight-node group does."""
    buf = np.empty(size + 8, dtype=np.float64)
    off = (-buf.ctypes.data % 64) // 8
    a = buf[off : off + size]
    a.fill(value)
    return a


@njit_kernel
def level_start(k, r0):  # type: ignore[no-untyped-def]
    """Slot of the first node of stored level ``r0 + 3k`` (``k >= 1``; ``k = 0`` is the
    header, where node ``n`` is at slot ``n``)."""
    return HEADER + (((1 << r0) * ((1 << (3 * k)) - 8)) // 7)


@njit_kernel
def _slot(k, a, r0):  # type: ignore[no-untyped-def]
    """Slot of node ``a`` of stored level ``r0 + 3k``."""
    if k == 0:
        return a
    return level_start(k, r0) + a - (1 << (r0 + 3 * k))


@njit_kernel
def leaf_slot(i, p, r0, nb):  # type: ignore[no-untyped-def]
    """Slot of leaf ``i``."""
    if nb == 0:
        return p + i
    return level_start(nb, r0) + i


@njit_kernel
def _pair(x, y, is_min):  # type: ignore[no-untyped-def]
    """A parent from its two children: ``fl(x + y)``, or the minimum as every kernel
    takes it (``x if x < y else y``: ``-0.0`` and ``0.0`` keep the bits they have)."""
    if is_min:
        return x if x < y else y
    return x + y


@njit_kernel
def _group(t, g, is_min):  # type: ignore[no-untyped-def]
    """The node three levels above the eight-node group at slot ``g``."""
    a = _pair(_pair(t[g], t[g + 1], is_min), _pair(t[g + 2], t[g + 3], is_min), is_min)
    b = _pair(_pair(t[g + 4], t[g + 5], is_min), _pair(t[g + 6], t[g + 7], is_min), is_min)
    return _pair(a, b, is_min)


@njit_kernel
def _leaf_min(sums, present, q, i):  # type: ignore[no-untyped-def]
    """The minimum of leaf ``i`` (sum slot ``q``): its value when present, else ``+inf``."""
    return sums[q] if present[i] else np.inf


@njit_kernel
def _group_leaf_min(sums, present, q, i):  # type: ignore[no-untyped-def]
    """The node three levels above the eight leaves at sum slot ``q`` (rows ``i .. i + 7``)
    in the min tree, from the leaves' values and ``present``: the bits of :func:`_group`
    over the min leaves the level-by-level tree stores (where every row of the group is
    present, that is ``_group(sums, q, True)``)."""
    a = _pair(_pair(_leaf_min(sums, present, q, i), _leaf_min(sums, present, q + 1, i + 1),
                    True),
              _pair(_leaf_min(sums, present, q + 2, i + 2),
                    _leaf_min(sums, present, q + 3, i + 3), True), True)
    b = _pair(_pair(_leaf_min(sums, present, q + 4, i + 4),
                    _leaf_min(sums, present, q + 5, i + 5), True),
              _pair(_leaf_min(sums, present, q + 6, i + 6),
                    _leaf_min(sums, present, q + 7, i + 7), True), True)
    return _pair(a, b, True)


@njit_kernel
def _read(t, sums, present, s, lev, p, levels, is_min):  # type: ignore[no-untyped-def]
    """The value at slot ``s`` of stored level ``lev`` (a slot of the sums' layout): the
    minima's leaf level is read from the sum leaves (slot ``s``, row ``s - leaf slot 0``)
    and ``present``, and their unstored band above it (level ``L - 3``) from the group of
    eight leaves under the node."""
    r0, nb = levels % 3, levels // 3
    if is_min and lev == levels:
        lo = leaf_slot(0, p, r0, nb)
        return _leaf_min(sums, present, s, s - lo)
    if is_min and nb >= 2 and lev == levels - 3:  # the minima's unstored band: 8 leaves
        off = 8 * (s - level_start(nb - 1, r0))
        return _group_leaf_min(sums, present, level_start(nb, r0) + off, off)
    return t[s]


@njit_kernel
def node_value(t, sums, present, n, p, r0, nb, is_min):  # type: ignore[no-untyped-def]
    """Node ``n``'s value (``1 <= n < 2P``) in ``t`` (the sums, or the minima with
    ``is_min``), recomputed from the stored level below it when its own level is not
    stored; a min leaf from the sum leaves and ``present``."""
    levels = r0 + 3 * nb
    lev = 0
    x = n
    while x > 1:
        x >>= 1
        lev += 1
    if lev <= r0:
        if is_min and lev == levels:  # no band: the leaves are in the header
            return _leaf_min(sums, present, n, n - p)
        return t[n]
    j = (lev - r0) % 3  # levels above the next stored one: 0 (stored), 2 or 1
    if j == 0:
        k = (lev - r0) // 3
        return _read(t, sums, present, _slot(k, n, r0), lev, p, levels, is_min)
    k = (lev - r0) // 3 + 1
    below = n << (3 - j)  # the first stored descendant
    s = _slot(k, below, r0)
    lb = lev + 3 - j
    x0 = _read(t, sums, present, s, lb, p, levels, is_min)
    x1 = _read(t, sums, present, s + 1, lb, p, levels, is_min)
    if j == 2:  # one level above the stored one
        return _pair(x0, x1, is_min)
    x2 = _read(t, sums, present, s + 2, lb, p, levels, is_min)
    x3 = _read(t, sums, present, s + 3, lb, p, levels, is_min)
    return _pair(_pair(x0, x1, is_min), _pair(x2, x3, is_min), is_min)


@njit_kernel
def _header(t, r0, is_min):  # type: ignore[no-untyped-def]
    for n in range((1 << r0) - 1, 0, -1):
        t[n] = _pair(t[2 * n], t[2 * n + 1], is_min)


@njit_kernel
def _rebuild_top(t, p, r0, nb, kmax, is_min, sums, present):  # type: ignore[no-untyped-def]
    """Recompute stored levels ``r0 + 3 kmax, ..., r0`` (the level below ``kmax`` final)
    and the header; the minima's lowest stored level (``kmax <= nb - 2``, or ``nb - 1``
    with one band) from the sum leaves and ``present``."""
    for k in range(kmax, -1, -1):
        base = 1 << (r0 + 3 * k)
        src = level_start(k + 1, r0)
        if is_min and k == nb - 1:  # one band (nb == 1): the minima's header over leaves
            for a_off in range(base):
                t[_slot(k, base + a_off, r0)] = _group_leaf_min(sums, present,
                                                                src + 8 * a_off, 8 * a_off)
        elif is_min and k == nb - 2:  # above the unstored band: 64 leaves each
            for a_off in range(base):
                t[_slot(k, base + a_off, r0)] = _min64(sums, present, False, base + a_off,
                                                       p, r0, nb)
        else:  # node base + a_off at slot dst + a_off (the slot taken out of the loop:
            # 4,096 nodes 20 -> 14 us)
            dst = level_start(k, r0) if k > 0 else base
            for a_off in range(base):
                t[dst + a_off] = _group(t, src + 8 * a_off, is_min)
    _header(t, r0, is_min)


@njit_kernel
def build(sums, mins, p, r0, nb, present):  # type: ignore[no-untyped-def]
    """Recompute every stored internal node from the leaves (sums) and the leaves' values
    and ``present`` (minima)."""
    if nb == 0:
        if p == 1:  # the root is the one leaf
            mins[1] = _leaf_min(sums, present, 1, 0)
        for n in range(p - 1, 0, -1):
            sums[n] = sums[2 * n] + sums[2 * n + 1]
            if 2 * n >= p:
                x = _leaf_min(sums, present, 2 * n, 2 * n - p)
                y = _leaf_min(sums, present, 2 * n + 1, 2 * n + 1 - p)
            else:
                x = mins[2 * n]
                y = mins[2 * n + 1]
            mins[n] = x if x < y else y
        return
    _rebuild_top(sums, p, r0, nb, nb - 1, False, sums, present)
    _rebuild_top(mins, p, r0, nb, _min_top(nb), True, sums, present)


@njit_kernel
def _min_top(nb):  # type: ignore[no-untyped-def]
    """The minima's lowest stored band: ``nb - 2`` (with two bands or more the band above
    the leaves is not stored either), ``nb - 1`` with one band, ``-1`` (the header alone)
    with none."""
    return nb - 2 if nb >= 2 else nb - 1


@njit_kernel
def _min64(sums, present, full, a, p, r0, nb):  # type: ignore[no-untyped-def]
    """The minimum of node ``a`` of band ``nb - 2`` (``nb >= 2``) from its 64 leaves, in
    the order of the level-by-level tree: the eight groups' minima as :func:`_group` takes
    them from the eight leaves each, then paired as :func:`_group` pairs eight nodes.
    ``full`` (every row of every eight-row group present) spares the ``present`` reads only
    where the node's last row is present too: a capacity that is a multiple of 8 but not
    of 64 leaves absent padding rows in its last 64-row node."""
    i0 = (a << 6) - p  # the node's first row
    q0 = level_start(nb, r0) + i0
    if full and present[i0 + 63]:
        v0 = _group(sums, q0, True)
        v1 = _group(sums, q0 + 8, True)
        v2 = _group(sums, q0 + 16, True)
        v3 = _group(sums, q0 + 24, True)
        v4 = _group(sums, q0 + 32, True)
        v5 = _group(sums, q0 + 40, True)
        v6 = _group(sums, q0 + 48, True)
        v7 = _group(sums, q0 + 56, True)
    else:
        v0 = _group_leaf_min(sums, present, q0, i0)
        v1 = _group_leaf_min(sums, present, q0 + 8, i0 + 8)
        v2 = _group_leaf_min(sums, present, q0 + 16, i0 + 16)
        v3 = _group_leaf_min(sums, present, q0 + 24, i0 + 24)
        v4 = _group_leaf_min(sums, present, q0 + 32, i0 + 32)
        v5 = _group_leaf_min(sums, present, q0 + 40, i0 + 40)
        v6 = _group_leaf_min(sums, present, q0 + 48, i0 + 48)
        v7 = _group_leaf_min(sums, present, q0 + 56, i0 + 56)
    x = _pair(_pair(v0, v1, True), _pair(v2, v3, True), True)
    y = _pair(_pair(v4, v5, True), _pair(v6, v7, True), True)
    return _pair(x, y, True)


@njit_kernel
def _set_leaf(sums, mins, slo, mlo, lo, r, v, o):  # type: ignore[no-untyped-def]
    """Leaf ``r`` (slot ``lo + r``, ``nb >= 2``) becomes ``v``; ``o`` is its old minimum
    leaf (its old value, ``+inf`` if it was absent).  Its band ``nb - 1`` sum (slot
    ``slo + r // 8``) follows, and its band ``nb - 2`` minimum (slot ``mlo + r // 64``)
    where that is known without the other leaves.  Returns 0 when the minimum stays, 1 when
    it moved, 2 when it must be recomputed from the node's 64 leaves once the batch's
    leaves are written (:func:`_recompute_deferred`).

    The group's sum is taken from the eight leaves read before the write, ``v`` in place of
    the old value (the bits of :func:`_group` after it; a wide load of a line just written
    waited for the store).  With ``M`` the node's minimum, a value below ``M`` is the new
    minimum; a row that held ``M`` and changed needs the other leaves; any other change
    leaves ``M``.  Where a zero is involved the bits of a minimum depend on the order of the
    pairs (``0.0 == -0.0``), so the node is recomputed.  Until a deferred node is
    recomputed its stored minimum may be too small, never too large: a later row of the
    batch that lowers it writes a value below every other leaf, and the recomputation finds
    the node's value from the final leaves either way."""
    g = lo + 8 * (r >> 3)
    i = r & 7
    x0 = v if i == 0 else sums[g]
    x1 = v if i == 1 else sums[g + 1]
    x2 = v if i == 2 else sums[g + 2]
    x3 = v if i == 3 else sums[g + 3]
    x4 = v if i == 4 else sums[g + 4]
    x5 = v if i == 5 else sums[g + 5]
    x6 = v if i == 6 else sums[g + 6]
    x7 = v if i == 7 else sums[g + 7]
    sums[lo + r] = v
    sums[slo + (r >> 3)] = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7))
    ms = mlo + (r >> 6)
    big = mins[ms]
    if (v == 0.0) | (o == 0.0) | (big == 0.0):
        return 2
    if v < big:
        mins[ms] = v
        return 1
    if (o == big) & (v != o):
        return 2
    return 0


@njit_kernel
def _band_starts(p, r0, nb):  # type: ignore[no-untyped-def]
    """``(lo, slo, mlo)`` for ``nb >= 2``: the slots of leaf 0, of the first band-``nb - 1``
    sum and of the first band-``nb - 2`` minimum (so leaf ``r``'s are ``lo + r``,
    ``slo + r // 8`` and ``mlo + r // 64``)."""
    mlo = level_start(nb - 2, r0) if nb >= 3 else 1 << r0  # band 0 is the header
    return level_start(nb, r0), level_start(nb - 1, r0), mlo


@njit_kernel
def _prefetch_row(gen, pf_gen, sums, mins, lo, slo, mlo, r):  # type: ignore[no-untyped-def]
    """Prefetch what :func:`update_rows` reads and writes for row ``r``: its generation
    (with ``pf_gen``), its leaf, its band ``nb - 1`` sum (both for writing) and its band
    ``nb - 2`` minimum."""
    if pf_gen:
        _prefetch(gen, r)
    _prefetch_write(sums, lo + r)
    _prefetch_write(sums, slo + (r >> 3))
    _prefetch(mins, mlo + (r >> 6))


@njit_kernel
def _recompute_deferred(sums, mins, p, r0, nb, present, full, rows, idx, c):  # type: ignore[no-untyped-def]
    """Among the positions ``idx[:c]`` that :func:`_set_leaf` answered for, the deferred
    ones are kept as ``-1 - j``: recompute the band ``nb - 2`` minimum above each such row
    ``rows[j]`` from its 64 leaves (the batch's leaves all written) and put ``j`` back, so
    that ``idx[:c]`` are the positions whose minimum may have moved."""
    for t in range(c):
        if idx[t] < 0:
            j = -1 - idx[t]
            a = (p + rows[j]) >> 6
            mins[_slot(nb - 2, a, r0)] = _min64(sums, present, full, a, p, r0, nb)
            idx[t] = j


@njit_kernel
def _min_band_rows(sums, mins, p, r0, nb, present, full, rows, idx, c, k):  # type: ignore[no-untyped-def]
    """Recompute the band-``k`` minima above ``rows[idx[:c]]`` (band ``k + 1`` final),
    each node's line prefetched for writing ``PREFETCH_AHEAD`` updates ahead; keep in
    ``idx`` the positions whose minimum moved (a zero always counts as moved: ``0.0 ==
    -0.0`` while their bits differ) and return how many."""
    d = PREFETCH_AHEAD
    base = 1 << (r0 + 3 * k)
    sh = r0 + 3 * nb - (r0 + 3 * k)
    src = level_start(k + 1, r0)
    dst = level_start(k, r0) - base if k > 0 else 0
    for j in range(min(d, c)):
        _prefetch_write(mins, dst + ((p + rows[idx[j]]) >> sh))
    live = 0
    for j in range(c):
        if j + d < c:
            _prefetch_write(mins, dst + ((p + rows[idx[j + d]]) >> sh))
        a = (p + rows[idx[j]]) >> sh
        if k == nb - 2:  # above the unstored band: from the 64 leaves
            m = _min64(sums, present, full, a, p, r0, nb)
        else:
            m = _group(mins, src + 8 * (a - base), True)
        old = mins[dst + a]
        mins[dst + a] = m
        idx[live] = idx[j]
        live += (m != old) | (m == 0.0)
    return live


@njit_kernel
def _climb(sums, mins, p, r0, nb, present, full, rows, idx, c, ks, km):  # type: ignore[no-untyped-def]
    """Recompute the stored sums of bands ``ks, ks - 1, ..., 0`` above ``rows`` and the
    stored minima of bands ``km, ..., 0`` above ``rows[idx[:c]]`` (``km <= ks``), each band
    once the band below it is final; see :func:`ancestors`."""
    k_up = rows.shape[0]
    d = PREFETCH_AHEAD
    levels = r0 + 3 * nb
    k = ks
    while k >= 0 and (1 << (r0 + 3 * k)) > k_up:
        base = 1 << (r0 + 3 * k)
        sh = levels - (r0 + 3 * k)  # row -> its ancestor at this level: (p + row) >> sh
        src = level_start(k + 1, r0)
        dst = level_start(k, r0) - base if k > 0 else 0
        for j in range(min(d, k_up)):
            _prefetch_write(sums, dst + ((p + rows[j]) >> sh))
        for j in range(k_up):
            if j + d < k_up:
                _prefetch_write(sums, dst + ((p + rows[j + d]) >> sh))
            a = (p + rows[j]) >> sh
            sums[dst + a] = _group(sums, src + 8 * (a - base), False)
        if k <= km:
            c = _min_band_rows(sums, mins, p, r0, nb, present, full, rows, idx, c, k)
        k -= 1
    if k >= 0:
        _rebuild_top(sums, p, r0, nb, k, False, sums, present)
    else:
        _header(sums, r0, False)
    # the minima go on row by row while fewer of them moved than the band has nodes, and
    # stop where none moved: nothing above changes then (at 2**24 rows the minima's top,
    # 4,096 nodes rebuilt on every update, took 20 us where a few moved minima take 1)
    k = min(k, km)
    while k >= 0 and c > 0 and c < (1 << (r0 + 3 * k)):
        c = _min_band_rows(sums, mins, p, r0, nb, present, full, rows, idx, c, k)
        k -= 1
    if c == 0:
        return
    if k >= 0:
        _rebuild_top(mins, p, r0, nb, k, True, sums, present)
    else:
        _header(mins, r0, True)


@njit_kernel
def ancestors(sums, mins, p, r0, nb, present, full, rows, idx, c):  # type: ignore[no-untyped-def]
    """Recompute the stored ancestors of leaves ``rows`` after their values (and
    ``present`` flags) were written; ``full``: every row of every eight-row leaf group is
    present (then ``present`` is not read).

    ``idx[:c]`` (int64, ``rows``' length) are the positions ``j`` in ``rows`` whose minimum
    may have changed; it is overwritten.  A row whose leaf did not change may be among
    ``rows`` (its ancestors come out the same).  Band by band from the leaves, each update
    reads the eight-node group under its ancestor (the line the band below just wrote, in
    cache) and writes that ancestor, whose line is prefetched for writing
    ``PREFETCH_AHEAD`` updates ahead; once a stored level holds no more nodes than there
    are updates (for the minima: than there are moved minima), it and every level above
    are recomputed in order instead.  The minima go up only while they move, and stop
    where none did (a zero always counts as moved: ``0.0 == -0.0`` while their
    bits differ), as in ``_sumtree_kernels._recompute_ancestors_cpu``: a node's minimum can
    change only if a child's did, and the first update to recompute a changed group sees
    every change below it.  The values are those of recomputing every ancestor.

    Without the leaves' old values the minima's lowest stored band is recomputed from 64
    leaves per update; :func:`add_rows` and :func:`update_rows` keep it from the old
    values instead (:func:`_set_leaf`).
    """
    if nb < 2:  # at most 32 leaves: rebuild
        build(sums, mins, p, r0, nb, present)
        return
    _climb(sums, mins, p, r0, nb, present, full, rows, idx, c, nb - 1, nb - 2)


#: A band is descended run by run (:func:`_band_runs`) while its parent level has at most
#: one node per ``RUN_DRAWS`` sorted draws, draw by draw below.  Measured (4096 stratified
#: draws, old per-draw descent against run by run above 1, 2, 4, 8, 16, 32, 64 draws per node,
#: interleaved rounds, AMD EPYC VM): 16 and 32 the fastest, at 2**16 leaves 88 us against
#: 139 us, at 2**20 133 against 193, at 2**24 165 against 233.
RUN_DRAWS = 16

_U1 = np.uint64(1)
_U2 = np.uint64(2)
_U4 = np.uint64(4)
_U8 = np.uint64(8)


@njit_kernel
def _header_each(sums, r0, masses, out):  # type: ignore[no-untyped-def]
    """The header's ``r0`` levels (node ``n`` at slot ``n``) draw by draw: ``out[i]`` the
    node each draw reaches, ``masses[i]`` its remainder."""
    for i in range(masses.shape[0]):
        n = 1
        m = masses[i]
        for _ in range(r0):
            left = sums[2 * n]
            right = sums[2 * n + 1]
            go_right = (m >= left) & (right > 0.0)
            n = 2 * n + go_right
            m = m - left if go_right else m
        out[i] = n
        masses[i] = m


@njit_kernel
def _band_each(sums, src0, ahead, masses, out, leafvals):  # type: ignore[no-untyped-def]
    """One band (three levels, one line) draw by draw: each draw at node ``out[i]`` (whose
    group of eight starts at slot ``src0 + 8 * out[i]``) moves to its descendant three
    levels down.  With ``ahead`` each step prefetches the group of the draw
    ``PREFETCH_AHEAD`` further on.  Node numbers are read as unsigned: no negative-index
    wraparound per load (11-16 % of the descent)."""
    b = masses.shape[0]
    d = PREFETCH_AHEAD
    src = np.uint64(src0)
    if ahead:
        for i in range(min(d, b)):
            _prefetch(sums, src + _U8 * np.uint64(out[i]))
    for i in range(b):
        if ahead and i + d < b:
            _prefetch(sums, src + _U8 * np.uint64(out[i + d]))
        a = np.uint64(out[i])
        q = src + _U8 * a
        a0 = sums[q] + sums[q + _U1]
        a1 = sums[q + _U2] + sums[q + np.uint64(3)]
        a2 = sums[q + _U4] + sums[q + np.uint64(5)]
        a3 = sums[q + np.uint64(6)] + sums[q + np.uint64(7)]
        m = masses[i]
        left = a0 + a1
        right = a2 + a3
        c1 = (m >= left) & (right > 0.0)
        m = m - left if c1 else m
        left = a2 if c1 else a0
        right = a3 if c1 else a1
        c2 = (m >= left) & (right > 0.0)
        m = m - left if c2 else m
        g = _U4 * np.uint64(c1) + _U2 * np.uint64(c2)
        s = q + g
        left = sums[s]
        right = sums[s + _U1]
        c3 = (m >= left) & (right > 0.0)
        masses[i] = m - left if c3 else m
        out[i] = np.int64(_U8 * a + g + np.uint64(c3))
        leafvals[i] = right if c3 else left


@njit_kernel
def _split(masses, lo, hi, left, right):  # type: ignore[no-untyped-def]
    """Draws ``lo .. hi - 1`` at one node whose children hold ``left`` and ``right``,
    remainders non-decreasing: those going right (``m >= left`` and ``right > 0``, a suffix)
    get ``m - left``.  Returns where that suffix starts (``hi``: none)."""
    if lo >= hi or not right > 0.0:
        return hi
    a = lo
    z = hi
    while a < z:
        mid = (a + z) >> 1
        if masses[mid] >= left:
            z = mid
        else:
            a = mid + 1
    for t in range(a, hi):
        masses[t] = masses[t] - left
    return a


@njit_kernel
def _fill(out, lo, hi, v):  # type: ignore[no-untyped-def]
    for t in range(lo, hi):
        out[t] = v


@njit_kernel
def _band_runs(sums, src0, last, masses, out, leafvals):  # type: ignore[no-untyped-def]
    """One band as :func:`_band_each`, for draws whose remainders are non-decreasing within
    each run of draws at one node (sorted draws: every level keeps their order), run by
    run: each level splits a run where its draws start going right (a binary search) and
    subtracts ``left`` from that part, the same subtraction each draw makes alone, so the
    paths and remainders are those of :func:`_band_each` bit for bit.  ``last``: the band
    ends at the leaves, whose values go to ``leafvals``."""
    b = masses.shape[0]
    i = 0
    while i < b:
        a = out[i]
        j = i + 1
        while j < b and out[j] == a:
            j += 1
        q = src0 + 8 * a
        a0 = sums[q] + sums[q + 1]
        a1 = sums[q + 2] + sums[q + 3]
        a2 = sums[q + 4] + sums[q + 5]
        a3 = sums[q + 6] + sums[q + 7]
        h = _split(masses, i, j, a0 + a1, a2 + a3)
        h0 = _split(masses, i, h, a0, a1)
        h1 = _split(masses, h, j, a2, a3)
        e0 = _split(masses, i, h0, sums[q], sums[q + 1])
        e1 = _split(masses, h0, h, sums[q + 2], sums[q + 3])
        e2 = _split(masses, h, h1, sums[q + 4], sums[q + 5])
        e3 = _split(masses, h1, j, sums[q + 6], sums[q + 7])
        c = 8 * a
        _fill(out, i, e0, c)
        _fill(out, e0, h0, c + 1)
        _fill(out, h0, e1, c + 2)
        _fill(out, e1, h, c + 3)
        _fill(out, h, e2, c + 4)
        _fill(out, e2, h1, c + 5)
        _fill(out, h1, e3, c + 6)
        _fill(out, e3, j, c + 7)
        if last:
            for t in range(i, j):
                leafvals[t] = sums[src0 + out[t]]
        i = j


@njit_kernel
def _descend(sums, p, r0, nb, masses, out, leafvals, sorted_):  # type: ignore[no-untyped-def]
    b = masses.shape[0]
    _header_each(sums, r0, masses, out)
    for k in range(nb):
        base = 1 << (r0 + 3 * k)
        src0 = level_start(k + 1, r0) - 8 * base
        if sorted_ and base * RUN_DRAWS <= b:
            _band_runs(sums, src0, k == nb - 1, masses, out, leafvals)
        else:
            _band_each(sums, src0, base * 8 >= b, masses, out, leafvals)
    if nb == 0:
        for i in range(b):
            leafvals[i] = sums[out[i]]
    for i in range(b):
        out[i] -= p


@njit_kernel
def find(sums, p, r0, nb, masses, out, leafvals):  # type: ignore[no-untyped-def]
    """Batched descent: ``out[i]`` is the leaf holding prefix mass ``masses[i]``, with the
    path and remainder of ``_sumtree_kernels._sumtree_find_cpu`` (left while ``m <
    sum(left)``, else subtract and go right; a mass at or past a subtree's end goes left
    when the right subtree is empty).  ``masses`` is scratch (remainders); ``leafvals[i]``
    receives the leaf's value.  All draws move down one band (three levels, one line)
    together, the two levels between recomputed from the group exactly as the updates
    compute them; once a level has at least ``B / 8`` nodes each step prefetches the group
    of draw ``i + PREFETCH_AHEAD``."""
    _descend(sums, p, r0, nb, masses, out, leafvals, False)


@njit_kernel
def find_sorted(sums, p, r0, nb, masses, out, leafvals):  # type: ignore[no-untyped-def]
    """:func:`find` for non-decreasing ``masses`` (a stratified draw's), the same leaves,
    remainders and leaf values bit for bit.  Sorted draws share the top of their paths: a
    band whose parent level has at most one node per ``RUN_DRAWS`` draws is descended run
    by run (:func:`_band_runs`), one line read and three binary searches per node instead
    of one line and three levels per draw; the bands below draw by draw."""
    _descend(sums, p, r0, nb, masses, out, leafvals, True)


@njit_kernel
def _sample_span(sums, p, r0, nb, gen, runs, u, out, stamps, scratch, lo, hi):  # type: ignore[no-untyped-def]
    """Draws ``lo .. hi - 1`` of :func:`draw` (the masses of the whole batch's strata)."""
    seg = sums[1] / u.shape[0]
    masses = scratch[0, lo:hi]
    leaves = out[lo:hi]
    for i in range(lo, hi):
        scratch[0, i] = (i + u[i]) * seg
    # (i + u) * seg does not decrease with i (u in [0, 1)): the draws are sorted
    find_sorted(sums, p, r0, nb, masses, leaves, scratch[1, lo:hi])
    if runs[1] == 1:  # the generations' intervals: no line of ``gen`` read
        R.stamps_of(runs, leaves, stamps[lo:hi])
        return
    n = hi - lo
    d = PREFETCH_AHEAD
    for i in range(min(d, n)):
        _prefetch(gen, leaves[i])
    for i in range(n):
        if i + d < n:
            _prefetch(gen, leaves[i + d])
        stamps[lo + i] = gen[leaves[i]]


@njit_kernel
def stamps_into(gr, rows, stamps):  # type: ignore[no-untyped-def]
    """``stamps[i]`` = the generation of ``rows[i]``, from ``_gen_runs.new_generations``'
    array ``gr``: its intervals while they are valid, else its dense generations."""
    gen, runs = R.parts(gr)
    if runs[1] == 1:
        R.stamps_of(runs, rows, stamps)
        return
    for i in range(rows.shape[0]):
        stamps[i] = gen[rows[i]]


@njit_kernel
def draw(sums, p, r0, nb, gr, u, out, stamps, scratch):  # type: ignore[no-untyped-def]
    """Stratified proportional draws and their generation stamps, as
    ``_sumtree_kernels._sample_prioritized_cpu``: draw ``i`` takes prefix mass
    ``(i + u[i]) * total / B``; ``scratch`` float64 (2, B), row 1 the leaves' values.  ``gr``
    is ``_gen_runs.new_generations``' array: the stamps come from its intervals while they
    are valid, else from its dense generations."""
    gen, runs = R.parts(gr)
    _sample_span(sums, p, r0, nb, gen, runs, u, out, stamps, scratch, 0, u.shape[0])


@njit_parallel
def _spans_par(sums, p, r0, nb, gen, runs, u, out, stamps, scratch, parts):  # type: ignore[no-untyped-def]
    """The batch cut into ``parts`` runs of draws, each run of :func:`_sample_span`
    descending on its own on Numba's threads (the draws are independent)."""
    b = u.shape[0]
    step = (b + parts - 1) // parts
    for t in prange(parts):
        lo = min(b, t * step)
        hi = min(b, lo + step)
        if lo < hi:
            _sample_span(sums, p, r0, nb, gen, runs, u, out, stamps, scratch, lo, hi)


@njit_kernel
def draw_par(sums, p, r0, nb, gr, u, out, stamps, scratch, parts):  # type: ignore[no-untyped-def]
    """:func:`draw` on Numba's threads, the batch in ``parts`` runs of draws, so the draws,
    stamps and leaf values are those of :func:`draw` bit for bit."""
    gen, runs = R.parts(gr)
    _spans_par(sums, p, r0, nb, gen, runs, u, out, stamps, scratch, parts)


@njit_kernel
def sample(sums, p, r0, nb, gen, u, out, stamps, scratch):  # type: ignore[no-untyped-def]
    """:func:`draw` with the stamps read from the dense generations ``gen``."""
    _sample_span(sums, p, r0, nb, gen, _DENSE, u, out, stamps, scratch, 0, u.shape[0])


@njit_kernel
def sample_par(sums, p, r0, nb, gen, u, out, stamps, scratch, parts):  # type: ignore[no-untyped-def]
    """:func:`draw_par` with the stamps read from the dense generations ``gen``."""
    _spans_par(sums, p, r0, nb, gen, _DENSE, u, out, stamps, scratch, parts)


#: the body of :func:`add_rows`, inlined at the Numba level into its two callers: as a plain
#: call it passes its arrays with a reference count taken and dropped (a one-row
#: :func:`add_rows_runs` took 1.20-1.22 us that way, 1.16 us inlined, timeit)
_inline = numba.njit(cache=True, nogil=True, inline="always")


@njit_kernel
def add_rows(sums, mins, p, r0, nb, gen, present, rows, value, idx):  # type: ignore[no-untyped-def]
    """:func:`add_rows_runs` on a dense generations array ``gen`` alone."""
    return _add_rows(sums, mins, p, r0, nb, gen, present, rows, value, idx)


@_inline
def _add_rows(sums, mins, p, r0, nb, gen, present, rows, value, idx):  # type: ignore[no-untyped-def]
    """New rows: bump each row's generation, mark it present, give it ``value`` (its
    leaf; the minima above follow).  ``present`` has ``P`` entries.  ``idx`` int64 scratch
    of ``rows``' length.  Returns how many rows were not present before."""
    fresh = 0
    k = rows.shape[0]
    if nb < 2:
        for j in range(k):
            r = rows[j]
            gen[r] += 1
            if not present[r]:
                present[r] = True
                fresh += 1
            sums[leaf_slot(r, p, r0, nb)] = value
        build(sums, mins, p, r0, nb, present)
        return fresh
    lo, slo, mlo = _band_starts(p, r0, nb)
    c = 0
    for j in range(k):
        r = rows[j]
        gen[r] += 1
        o = np.inf  # the old minimum leaf
        if present[r]:
            o = sums[lo + r]
        else:
            present[r] = True
            fresh += 1
        moved = _set_leaf(sums, mins, slo, mlo, lo, r, value, o)
        if moved != 0:  # a deferred position is kept as -1 - j
            idx[c] = j if moved == 1 else -1 - j
            c += 1
    _recompute_deferred(sums, mins, p, r0, nb, present, False, rows, idx, c)
    _climb(sums, mins, p, r0, nb, present, False, rows, idx, c, nb - 2, nb - 3)
    return fresh


@njit_kernel
def add_rows_runs(sums, mins, p, r0, nb, gr, present, rows, value, idx):  # type: ignore[no-untyped-def]
    """:func:`add_rows` on ``_gen_runs.new_generations``' array ``gr``: the dense
    generations and their intervals bumped alike."""
    gen, runs = R.parts(gr)
    fresh = _add_rows(sums, mins, p, r0, nb, gen, present, rows, value, idx)
    R.bump(runs, rows)
    return fresh


@njit_kernel
def update_rows(  # type: ignore[no-untyped-def]
    sums, mins, p, r0, nb, present, full, gen, rows, priorities, eps, alpha, stamps, check, idx,
    maxp,
):
    """:func:`update_rows_runs` with the stamps checked against the dense ``gen``."""
    return _update_rows(sums, mins, p, r0, nb, present, full, gen, _DENSE, rows, priorities,
                        eps, alpha, stamps, check, idx, maxp)


@njit_kernel
def update_rows_runs(  # type: ignore[no-untyped-def]
    sums, mins, p, r0, nb, present, full, gr, rows, priorities, eps, alpha, stamps, check, idx,
    maxp,
):
    """:func:`update_rows` on ``_gen_runs.new_generations``' array ``gr``: the stamps
    checked against its intervals while they are valid, else its dense generations."""
    gen, runs = R.parts(gr)
    return _update_rows(sums, mins, p, r0, nb, present, full, gen, runs, rows, priorities,
                        eps, alpha, stamps, check, idx, maxp)


@njit_kernel
def _update_rows(  # type: ignore[no-untyped-def]
    sums, mins, p, r0, nb, present, full, gen, runs, rows, priorities, eps, alpha, stamps,
    check, idx, maxp,
):
    """Priority updates in order (a repeated row: the last wins), skipping stale stamps, as
    ``_sumtree_kernels._update_rows_cpu``: row ``rows[j]`` gets leaf value
    ``(priorities[j] + eps) ** alpha``; with ``check``, a row whose generation differs from
    ``stamps[j]`` is skipped (the generation from the intervals ``runs`` while they are
    valid, ``_gen_runs``, else from ``gen``).  ``maxp`` float64 (1,) is raised to the largest
    ``priorities[j] + eps`` applied; ``idx`` int64 scratch; ``present`` (``P`` entries,
    every row of ``rows`` present) and ``full`` (every row of every eight-row leaf group
    present) as :func:`ancestors`.  Returns the number skipped.

    One pass writes each leaf, its band ``nb - 1`` sum (from the leaf's line, in cache) and
    its band ``nb - 2`` minimum (:func:`_set_leaf`), prefetching those lines (and the
    generation, when it is read from ``gen``) ``PREFETCH_AHEAD`` rows ahead; the bands
    above follow as in :func:`ancestors`."""
    skipped = 0
    top = maxp[0]
    k = rows.shape[0]
    d = PREFETCH_AHEAD
    small = nb < 2  # at most 32 leaves: write them, then rebuild
    if small:
        lo, slo, mlo = leaf_slot(0, p, r0, nb), 0, 0
        d = k  # no prefetch
    else:
        lo, slo, mlo = _band_starts(p, r0, nb)
    by_runs = runs[1] == 1
    pf_gen = check and not by_runs
    v = 2 + R.SLOTS
    kr = 0  # the interval of the previous row
    for j in range(0 if small else min(d, k)):
        _prefetch_row(gen, pf_gen, sums, mins, lo, slo, mlo, rows[j])
    c = 0
    for j in range(k):
        if j + d < k:
            _prefetch_row(gen, pf_gen, sums, mins, lo, slo, mlo, rows[j + d])
        r = rows[j]
        if check:
            if by_runs:
                kr = R.find(runs, r, kr)
                g = runs[v + kr]
            else:
                g = gen[r]
            if g != stamps[j]:
                skipped += 1
                continue
        q = priorities[j] + eps
        if q > top:
            top = q
        if small:
            sums[lo + r] = q**alpha
            continue
        moved = _set_leaf(sums, mins, slo, mlo, lo, r, q**alpha, sums[lo + r])
        if moved != 0:  # a deferred position is kept as -1 - j
            idx[c] = j if moved == 1 else -1 - j
            c += 1
    maxp[0] = top
    if small:
        build(sums, mins, p, r0, nb, present)
        return skipped
    _recompute_deferred(sums, mins, p, r0, nb, present, full, rows, idx, c)
    # the sums go up from every row (a skipped row's path comes out the same), the minima
    # from the moved ones
    _climb(sums, mins, p, r0, nb, present, full, rows, idx, c, nb - 2, nb - 3)
    return skipped


@njit_kernel
def prefix_mass(sums, p, r0, nb, i):  # type: ignore[no-untyped-def]
    """Sum of leaves ``[0, i)``: the left siblings on leaf ``i``'s path."""
    if i >= p:
        return sums[1]
    s = 0.0
    n = p + i
    while n > 1:
        if n & 1:
            # the sums: the two leaf-minimum arguments are never read
            s += node_value(sums, sums, sums, n - 1, p, r0, nb, False)
        n = n >> 1
    return s


@njit_kernel
def range_min(sums, mins, p, r0, nb, present, lo, hi):  # type: ignore[no-untyped-def]
    """Minimum of leaves ``[lo, hi)`` (+inf when empty), bottom-up segment-tree query."""
    best = np.inf
    a = lo + p
    b = hi + p
    while a < b:
        if a & 1:
            v = node_value(mins, sums, present, a, p, r0, nb, True)
            if v < best:
                best = v
            a += 1
        if b & 1:
            b -= 1
            v = node_value(mins, sums, present, b, p, r0, nb, True)
            if v < best:
                best = v
        a = a >> 1
        b = b >> 1
    return best


@njit_kernel
def sample_ranges(  # type: ignore[no-untyped-def]
    sums, mins, p, r0, nb, present, u, beta, lo0, hi0, lo1, hi1, out, weights, masses,
):
    """Stratified proportional draws inside leaf ranges ``[lo0, hi0)`` and ``[lo1, hi1)``,
    as ``_sumtree_kernels._sample_ranges_cpu`` (the same draws, weights and clamping)."""
    a0 = prefix_mass(sums, p, r0, nb, lo0)
    m0 = prefix_mass(sums, p, r0, nb, hi0) - a0
    a1 = 0.0
    m1 = 0.0
    lo = range_min(sums, mins, p, r0, nb, present, lo0, hi0)
    if hi1 > lo1:
        a1 = prefix_mass(sums, p, r0, nb, lo1)
        m1 = prefix_mass(sums, p, r0, nb, hi1) - a1
        lo1min = range_min(sums, mins, p, r0, nb, present, lo1, hi1)
        if lo1min < lo:
            lo = lo1min
    seg = range_masses(u, a0, m0, a1, m1, masses[0])
    find(sums, p, r0, nb, masses[0], out, masses[1])
    clamp_and_weigh(sums, leaf_slot(0, p, r0, nb), u, seg, m0, m1, lo0, hi0, lo1, hi1, lo,
                    beta, out, weights)


@njit_kernel
def to_binary(sums, mins, p, r0, nb, present, is_min, out):  # type: ignore[no-untyped-def]
    """The level-by-level array of the sums (or, ``is_min``, the minima): ``out[n]`` node
    ``n``, ``out[0]`` untouched; the stored levels copied, the others recomputed from
    their children, the min leaves from the sum leaves and ``present``."""
    levels = r0 + 3 * nb
    t = mins if is_min else sums
    for i in range(p):
        q = leaf_slot(i, p, r0, nb)
        out[p + i] = _leaf_min(sums, present, q, i) if is_min else sums[q]
    lev = levels - 1
    while lev >= 0:
        first = 1 << lev
        if lev <= r0 or (lev - r0) % 3 == 0:
            for n in range(first, 2 * first):
                out[n] = node_value(t, sums, present, n, p, r0, nb, is_min)
        else:
            for n in range(first, 2 * first):
                out[n] = _pair(out[2 * n], out[2 * n + 1], is_min)
        lev -= 1
