"""SumTree: prefix search against searchsorted, invariants, long-run exactness."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numbatraj.errors import RowIndexError, SamplerError
from numbatraj.samplers import SumTree
from numbatraj.samplers import _sumtree_kernels as K
from tests.reference import sumtree_find_ref, sumtree_nodes_ref


def _tree_from(leaves: np.ndarray) -> SumTree:
    t = SumTree(len(leaves))
    t.update(np.arange(len(leaves)), leaves)
    return t


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(0, 64), min_size=1, max_size=70).filter(lambda p: sum(p) > 0),
    st.lists(st.integers(0, 10**6), min_size=1, max_size=40),
)
def test_find_equals_searchsorted(ints, fractions):
    """Dyadic leaves (integers / 8) make every partial sum exact, so the descent and
    ``searchsorted(cumsum)`` must agree exactly, boundaries included."""
    leaves = np.array(ints, dtype=np.float64) / 8.0
    total = leaves.sum()
    cum = np.cumsum(leaves)
    masses = [total * f / 10**6 for f in fractions]
    masses += [c for c in cum if c < total]  # masses exactly on a boundary
    masses = np.array([m for m in masses if m < total] + [0.0])
    t = _tree_from(leaves)
    got = t.find(masses)
    assert got.tolist() == sumtree_find_ref(leaves, masses).tolist()
    assert (leaves[got] > 0).all()


def test_find_past_the_end_lands_on_last_positive_leaf():
    leaves = np.array([0.0, 2.0, 0.0, 1.0, 0.0, 0.0])
    t = _tree_from(leaves)
    assert t.find([3.0, 3.5, 1e9]).tolist() == [3, 3, 3]
    assert t.find([0.0, 1.999, 2.0]).tolist() == [1, 1, 3]


def test_capacity_one_and_non_power_of_two():
    t = SumTree(1)
    t.update([0], [2.5])
    assert t.total == 2.5 and t.min == 2.5 and t.find([0.0, 2.4]).tolist() == [0, 0]
    t = SumTree(5)
    assert t.n_leaves_padded == 8
    t.update([4, 0], [1.0, 3.0])
    assert t.total == 4.0 and t.min == 1.0
    assert t.find([2.9, 3.0]).tolist() == [0, 4]


def test_invariants_after_random_batched_updates(rng):
    cap = 37
    t = SumTree(cap)
    model = np.zeros(cap)
    present = np.zeros(cap, dtype=bool)
    for _ in range(40):
        k = int(rng.integers(1, 60))
        rows = rng.integers(0, cap, size=k)
        vals = rng.random(k) * 10.0 ** rng.integers(-3, 4)
        t.update(rows, vals)
        for r, v in zip(rows, vals):  # duplicates: the last one wins
            model[r] = v
            present[r] = True
        sums, mins = sumtree_nodes_ref(model, present, t.n_leaves_padded)
        np.testing.assert_array_equal(t.sums, sums)
        np.testing.assert_array_equal(t.mins, mins)
        np.testing.assert_array_equal(t.leaves, model)


def test_duplicates_last_wins():
    t = SumTree(4)
    t.update([2, 2, 1, 2], [5.0, 7.0, 1.0, 3.0])
    assert t.leaves.tolist() == [0.0, 1.0, 3.0, 0.0]
    assert t.total == 4.0 and t.min == 1.0


def test_millions_of_updates_stay_exact(rng):
    """Internal nodes are recomputed from their children on every update, never adjusted by
    deltas: after 2**21 updates of widely ranging priorities the tree is bit-identical to a
    rebuild from its leaves, and the root is the leaves' sum to within float64 summation
    error (no drift).  One kernel call per batch of 1024 updates."""
    cap = 2**16
    t = SumTree(cap)
    t.update(np.arange(cap), rng.random(cap))
    n_batches, k = 2048, 1024
    rows = rng.integers(0, cap, size=(n_batches, k))
    vals = rng.random((n_batches, k)) * 10.0 ** rng.integers(-6, 7, size=(n_batches, k))
    nodes = np.empty(k, dtype=np.int64)
    p = t.n_leaves_padded
    for b in range(n_batches):
        K._sumtree_update_cpu(t.sums, t.mins, p, rows[b], vals[b], nodes)
    sums, mins = t.sums.copy(), t.mins.copy()
    t.rebuild()
    np.testing.assert_array_equal(t.sums, sums)
    np.testing.assert_array_equal(t.mins, mins)
    exact = math.fsum(t.leaves.tolist())
    assert abs(t.total - exact) <= 1e-12 * exact
    assert t.min == t.leaves.min()


def test_bad_inputs():
    t = SumTree(4)
    with pytest.raises(SamplerError, match="empty sum-tree"):
        t.find([0.0])
    with pytest.raises(RowIndexError, match=r"leaves\[1\] = 4 is outside \[0, 4\)"):
        t.update([0, 4], [1.0, 1.0])
    with pytest.raises(RowIndexError, match=r"leaves\[0\] = -1"):
        t.update([-1], [1.0])
    for bad, pos in ((np.nan, 1), (-1.0, 1), (np.inf, 1)):
        with pytest.raises(SamplerError, match=rf"values\[{pos}\] = {bad!r}"):
            t.update([0, 1], [1.0, bad])
    with pytest.raises(SamplerError, match=r"values must have shape \(2,\)"):
        t.update([0, 1], [1.0])
    with pytest.raises(SamplerError, match="leaves must be integers"):
        t.update([0.5], [1.0])
    with pytest.raises(SamplerError, match="capacity must be >= 1"):
        SumTree(0)
    t.update([0], [1.0])
    with pytest.raises(SamplerError, match=r"masses\[1\] = nan"):
        t.find([0.1, np.nan])
    with pytest.raises(SamplerError, match=r"masses\[0\] = -0.5"):
        t.find([-0.5])
    assert t.leaves.flags.writeable is False


@pytest.mark.parametrize("capacity", [1, 2, 3, 5, 8, 9, 16, 17, 100, 1000])
def test_batched_find_takes_the_per_draw_descent_path(capacity, rng):
    # the batched descent finishes inside groups of eight leaves, recomputing the two levels
    # above them: the leaves and remainders are bit for bit those of the node-by-node body
    # the device runs per lane (samplers.kernels.descend)
    from numbatraj.samplers.kernels import descend

    for trial in range(20):
        v = rng.random(capacity) ** 3 * 10
        v[rng.random(capacity) < 0.3] = 0.0
        if trial % 3 == 0:
            v = rng.integers(0, 3, capacity).astype(np.float64)
        if v.sum() == 0:
            v[-1] = 1.0
        t = _tree_from(v)
        p = t.n_leaves_padded
        m = rng.random(300) * t.total * 1.02
        m[:3] = t.total
        m[3] = np.nextafter(t.total, 0)
        m[4] = 0.0
        m[5:40] = np.cumsum(v)[rng.integers(0, capacity, 35)]  # exactly on boundaries
        out = np.empty(m.shape[0], dtype=np.int64)
        rem = m.copy()
        leafvals = np.empty(m.shape[0])
        K._sumtree_find_cpu(t.sums, p, rem, out, leafvals)
        expect = np.array([descend(t.sums, p, x) for x in m])
        np.testing.assert_array_equal(out, expect)
        np.testing.assert_array_equal(leafvals, t.sums[p + out])


def test_prefetching_paths_are_exact_past_the_prefetch_distance(rng):
    # batches several times PREFETCH_AHEAD, on a tree whose lower levels take the prefetching
    # loops: the descent still equals the per-draw body and searchsorted, and updates (with
    # duplicates) still give the nodes of a rebuild from the reference leaves
    from numbatraj.samplers.kernels import descend

    cap = 3 * 2**13 + 5
    b = 4 * K.PREFETCH_AHEAD + 3
    v = rng.random(cap) ** 3
    v[rng.random(cap) < 0.2] = 0.0
    t = _tree_from(v)
    p = t.n_leaves_padded
    m = np.sort(rng.random(b)) * t.total
    out = np.empty(b, dtype=np.int64)
    K._sumtree_find_cpu(t.sums, p, m.copy(), out, np.empty(b))
    np.testing.assert_array_equal(out, [descend(t.sums, p, x) for x in m])
    rows = rng.integers(0, cap, size=b)
    rows[-40:] = rows[:40]  # repeated rows: the last value wins
    vals = rng.random(b)
    t.update(rows, vals)
    v[rows] = vals  # numpy fancy assignment: the last duplicate wins too
    sums, mins = sumtree_nodes_ref(v, np.ones(cap, dtype=bool), p)
    np.testing.assert_array_equal(t.sums, sums)
    np.testing.assert_array_equal(t.mins, mins)


def test_minima_stop_early_yet_match_a_rebuild_bit_for_bit(rng):
    # an update stops carrying the min-tree up once a minimum stays put; signed zeros (equal
    # as floats, different bits), duplicates and unchanged values must still leave every
    # node's bits those of a rebuild from the leaves
    cap = 2**12 + 3
    t = SumTree(cap)
    t.update(np.arange(cap), rng.random(cap))
    for _ in range(30):
        k = int(rng.integers(1, 3 * K.PREFETCH_AHEAD))
        rows = rng.integers(0, cap, size=k)
        vals = rng.choice([0.0, -0.0, 0.5, 1.0, 2.0], size=k) * rng.integers(0, 2, size=k)
        vals = np.where(rng.random(k) < 0.5, vals, rng.random(k))
        rows[: k // 4] = rows[k - k // 4 :][::-1] if k >= 4 else rows[: k // 4]
        t.update(rows, vals)
        sums, mins = t.sums.copy(), t.mins.copy()
        t.rebuild()
        np.testing.assert_array_equal(sums.view(np.int64), t.sums.view(np.int64))
        np.testing.assert_array_equal(mins.view(np.int64), t.mins.view(np.int64))
