"""The prioritized sampler's tree with one cache line per three levels
(``_blocked_kernels``): every node, path, remainder, prefix and range minimum against the
NumPy reference and the level-by-level kernels, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numbatraj.samplers import PrioritizedSampler, SumTree
from numbatraj.samplers import _blocked_kernels as B
from numbatraj.samplers import _sumtree_kernels as K
from tests.reference import sumtree_find_ref, sumtree_nodes_ref

# every header depth (r0 = 0, 1, 2), no band, one band, several; powers of two and around
CAPS = [1, 2, 3, 4, 5, 8, 9, 16, 17, 31, 33, 64, 100, 512, 513, 1000, 4097, 70000]


class _Tree:
    """A blocked tree and the level-by-level SumTree over the same leaves, updated alike."""

    def __init__(self, cap: int) -> None:
        self.ref = SumTree(cap)
        self.p = p = self.ref.n_leaves_padded
        self.r0, self.nb, size = B.layout(p)
        self.sums = B.new_tree(size, 0.0)
        self.mins = B.new_tree(B.min_size(p), np.inf)  # no leaf level, nor the band above
        self.leaves = np.zeros(cap)
        self.present_p = np.zeros(p, dtype=bool)
        self.present = self.present_p[:cap]

    def set(self, rows: np.ndarray, vals: np.ndarray) -> None:
        for r, v in zip(rows.tolist(), vals.tolist()):
            q = B.leaf_slot(r, self.p, self.r0, self.nb)
            self.sums[q] = v
            self.leaves[r] = v
            self.present[r] = True
        B.ancestors(self.sums, self.mins, self.p, self.r0, self.nb, self.present_p, False,
                    rows, np.arange(rows.shape[0], dtype=np.int64), rows.shape[0])
        self.ref.update(rows, vals)

    def binary(self) -> tuple[np.ndarray, np.ndarray]:
        s = np.zeros(2 * self.p)
        m = np.full(2 * self.p, np.inf)
        B.to_binary(self.sums, self.mins, self.p, self.r0, self.nb, self.present_p, False, s)
        B.to_binary(self.sums, self.mins, self.p, self.r0, self.nb, self.present_p, True, m)
        return s, m


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.int64)


def test_layout_sizes_and_alignment():
    for k in range(0, 25):
        p = 1 << k
        r0, nb, size = B.layout(p)
        assert r0 + 3 * nb == k
        assert size == 16 + sum(1 << (r0 + 3 * j) for j in range(1, nb + 1))
        assert size <= 16 + (8 * p) // 7 + 1
        if nb:  # the leaves are the last stored level, one contiguous run
            assert B.leaf_slot(0, p, r0, nb) == size - p
            assert B.level_start(nb, r0) % 8 == 0
    t = B.new_tree(1000, 0.0)
    assert t.ctypes.data % 64 == 0 and t.shape == (1000,)


@pytest.mark.parametrize("cap", CAPS)
def test_nodes_paths_prefixes_and_minima_match(cap):
    rng = np.random.default_rng(cap)
    t = _Tree(cap)
    for it in range(16):
        # few updates take the path of each (the bands wider than the batch), many rebuild
        # the top of the tree in order
        k = int(rng.integers(1, 9)) if it % 3 else int(rng.integers(1, 2 * cap + 2))
        rows = rng.integers(0, cap, k)  # repeated rows: the last value wins
        if it % 2:  # dyadic leaves: every prefix sum exact, masses on the boundaries
            rows = np.concatenate([np.arange(cap), rows])  # every leaf dyadic
            k = rows.shape[0]
            vals = rng.integers(0, 64, k) / 8.0
        else:
            vals = rng.random(k) * (rng.random(k) < 0.8)
        if it % 4 >= 2:  # zeros of both signs: minima equal as numbers, not as bits
            vals[rng.random(k) < 0.7] = 0.0
            vals[rng.random(k) < 0.5] = -0.0
        t.set(rows, vals)
        s, m = t.binary()
        ref_s, ref_m = sumtree_nodes_ref(t.leaves, t.present, t.p)
        np.testing.assert_array_equal(_bits(s[1:]), _bits(ref_s[1:]))
        np.testing.assert_array_equal(_bits(m[1:]), _bits(t.ref.mins[1:]))
        np.testing.assert_array_equal(m[1:], ref_m[1:])
        np.testing.assert_array_equal(_bits(s[1:]), _bits(t.ref.sums[1:]))
        if s[1] > 0:
            edges = np.cumsum(t.leaves)[rng.integers(0, cap, 32)]  # exact prefix sums
            masses = np.sort(np.concatenate([rng.random(32) * s[1] * 1.02, edges]))
            o_b, o_k = np.empty(64, np.int64), np.empty(64, np.int64)
            l_b, l_k = np.empty(64), np.empty(64)
            r_b, r_k = masses.copy(), masses.copy()
            B.find(t.sums, t.p, t.r0, t.nb, r_b, o_b, l_b)
            K._sumtree_find_cpu(t.ref.sums, t.p, r_k, o_k, l_k)
            np.testing.assert_array_equal(o_b, o_k)
            np.testing.assert_array_equal(_bits(r_b), _bits(r_k))
            np.testing.assert_array_equal(l_b, t.leaves[o_b])
            if it % 2:  # exact sums: the leaf is searchsorted's (cumsum, side="right")
                inside = masses < s[1]
                np.testing.assert_array_equal(o_b[inside],
                                              sumtree_find_ref(t.leaves, masses[inside]))
        for lo in range(0, cap, max(1, cap // 6)):
            for hi in range(lo, cap + 1, max(1, cap // 4)):
                assert B.prefix_mass(t.sums, t.p, t.r0, t.nb, hi) == K.prefix_mass(t.ref.sums, t.p, hi)
                got = B.range_min(t.sums, t.mins, t.p, t.r0, t.nb, t.present_p, lo, hi)
                want = t.leaves[lo:hi][t.present[lo:hi]].min() if t.present[lo:hi].any() else np.inf
                assert got == want


@pytest.mark.parametrize("cap", [5, 100, 70000])
def test_build_from_leaves_gives_the_same_bits(cap):
    rng = np.random.default_rng(1)
    t = _Tree(cap)
    t.set(rng.integers(0, cap, 3 * cap), rng.random(3 * cap))
    s2, m2 = B.new_tree(t.sums.shape[0], 0.0), B.new_tree(t.mins.shape[0], np.inf)
    lo = B.leaf_slot(0, t.p, t.r0, t.nb)
    s2[lo : lo + cap] = t.sums[lo : lo + cap]
    B.build(s2, m2, t.p, t.r0, t.nb, t.present_p)
    np.testing.assert_array_equal(_bits(s2[1:]), _bits(t.sums[1:]))
    np.testing.assert_array_equal(_bits(m2[1:]), _bits(t.mins[1:]))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 300), st.integers(0, 2**32 - 1))
def test_sampler_draws_equal_the_level_by_level_kernels(cap, seed):
    """The sampler's draws, stamps and weights are those of the level-by-level kernels on a
    SumTree holding the same leaves (sample, update with stale stamps, restricted draws)."""
    rng = np.random.default_rng(seed)
    s = PrioritizedSampler(cap, alpha=0.7, beta=0.5, seed=seed % 1000)
    s.note_added(np.arange(cap))
    rows = rng.integers(0, cap, 2 * cap)
    s.update_priorities(rows, rng.random(2 * cap) * (rng.random(2 * cap) < 0.9))
    ref = s.tree.snapshot()
    b = int(rng.integers(1, 40))
    state = s._gen.bit_generator.state
    got = s.sample(b)
    g = np.random.Generator(type(s._gen.bit_generator)())
    g.bit_generator.state = state
    u = g.random(b)
    out, stamps, scratch = np.empty(b, np.int64), np.empty(b, np.int64), np.empty((2, b))
    K._sample_prioritized_cpu(ref.sums, ref.n_leaves_padded, s._stamps, u, out, stamps, scratch)
    np.testing.assert_array_equal(got.indices, out)
    np.testing.assert_array_equal(got.stamps, stamps)
    w = ((scratch[1] / ref.mins[1]) ** -0.5).astype(np.float32)
    np.testing.assert_array_equal(got.weights, w)
    lo0 = int(rng.integers(0, cap))
    hi0 = int(rng.integers(lo0 + 1, cap + 1))
    idx, ww, st_ = np.empty(b, np.int64), np.empty(b, np.float32), np.empty(b, np.int64)
    rstate = s._range_gen.bit_generator.state
    s.sample_ranges_into(idx, ww, st_, lo0, hi0)
    g.bit_generator.state = rstate
    u = g.random(b)
    out2, w2 = np.empty(b, np.int64), np.empty(b, np.float32)
    K._sample_ranges_cpu(ref.sums, ref.mins, ref.n_leaves_padded, u, 0.5, lo0, hi0, 0, 0,
                         out2, w2, np.empty((2, b)))
    np.testing.assert_array_equal(idx, out2)
    np.testing.assert_array_equal(ww, w2)


def test_tree_view_reads_live_and_copies_the_level_by_level_arrays():
    s = PrioritizedSampler(10, alpha=1.0, eps=1e-9)
    s.note_added(np.arange(10))
    s.update_priorities(np.arange(10), np.arange(10, dtype=float))
    t = s.tree
    assert t.capacity == 10 and t.n_leaves_padded == 16
    assert t.total == pytest.approx(45.0) and t.min == pytest.approx(1e-9)
    leaves = t.leaves
    assert leaves.flags.writeable is False
    s.update_priorities([3], [100.0])
    assert leaves[3] == pytest.approx(100.0)  # a live view
    snap = t.snapshot()
    snap.update([0], [5.0])  # a copy: the sampler does not see it
    assert s.tree.leaves[0] == pytest.approx(1e-9)
    assert s.tree.sums[1] == pytest.approx(t.total)
    assert "PrioritizedTree(capacity=10" in repr(t)


@pytest.mark.parametrize("cap", [5, 13, 64, 100, 1000, 4097, 4104, 70001])
def test_full_sampler_minima_match_the_reference(cap):
    """Once every row is present the update reads no ``present`` flag where every row of
    every eight-row leaf group is present; a capacity that is no multiple of 8 leaves
    absent padding rows in its last group, which must still count +inf in the minima, and
    one that is a multiple of 8 but not of 64 (1000, 4104) leaves them in its last group of
    64 rows, which a recomputed 64-leaf minimum must count +inf as well."""
    rng = np.random.default_rng(cap)
    s = PrioritizedSampler(cap, alpha=1.0, eps=1e-9)
    s.note_added(np.arange(cap))
    for _ in range(3):
        rows = np.concatenate([rng.integers(0, cap, 40), [cap - 1]])
        vals = rng.random(rows.shape[0]) + 0.5
        vals[-1] = 1e-3  # the last row, in the padded group, becomes the minimum
        s.update_priorities(rows, vals)
        leaves = np.array(s.tree.leaves)
        ref_s, ref_m = sumtree_nodes_ref(leaves, np.ones(cap, bool), s.tree.n_leaves_padded)
        np.testing.assert_array_equal(_bits(s.tree.mins[1:]), _bits(ref_m[1:]))
        np.testing.assert_array_equal(_bits(s.tree.sums[1:]), _bits(ref_s[1:]))
        s.update_priorities([cap - 1], [2.0])  # and no longer: the min moves back up
        leaves = np.array(s.tree.leaves)
        _, ref_m = sumtree_nodes_ref(leaves, np.ones(cap, bool), s.tree.n_leaves_padded)
        assert s.tree.min == ref_m[1] == leaves.min()


@pytest.mark.parametrize("cap", [64, 100, 512, 513, 1000, 4097, 4104, 70000])
def test_updates_and_adds_keep_the_minima_from_the_old_leaves(cap):
    """``update_rows`` and ``add_rows`` keep the minima's lowest stored band (64 leaves per
    node) from each row's old value: a value below the node's minimum becomes it, the row
    that held the minimum rising (or any zero) sends the node to a recomputation after the
    batch's leaves are written, any other change leaves it.  Every node, after every batch,
    equals the reference bit for bit; the batches raise group minima, lower other rows of
    the same group later in the same batch, repeat rows, tie, write zeros of both signs
    (``add_rows`` writes its value as given), skip stale stamps and add over absent and
    present rows."""
    rng = np.random.default_rng(cap)
    p = 1 << max(0, (cap - 1).bit_length())
    r0, nb, size = B.layout(p)
    sums, mins = B.new_tree(size, 0.0), B.new_tree(B.min_size(p), np.inf)
    present_p = np.zeros(p, bool)
    gen = np.zeros(cap, np.int64)
    leaves, present = np.zeros(cap), np.zeros(cap, bool)
    maxp = np.ones(1)
    ref = SumTree(cap)  # the level-by-level kernels: the same pairs, so the same zero bits

    def check() -> None:
        s, m = np.zeros(2 * p), np.full(2 * p, np.inf)
        B.to_binary(sums, mins, p, r0, nb, present_p, False, s)
        B.to_binary(sums, mins, p, r0, nb, present_p, True, m)
        np.testing.assert_array_equal(_bits(s[1:]), _bits(ref.sums[1:]))
        np.testing.assert_array_equal(_bits(m[1:]), _bits(ref.mins[1:]))
        ref_s, ref_m = sumtree_nodes_ref(leaves, present, p)  # Python's min: ties differ
        np.testing.assert_array_equal(s[1:], ref_s[1:])
        np.testing.assert_array_equal(m[1:], ref_m[1:])

    for it in range(14):
        k = int(rng.integers(1, 3 * cap // 2 + 2)) if it % 3 == 0 else int(rng.integers(1, 40))
        k = cap if it == 4 else k
        rows = rng.integers(0, cap, k) if it != 4 else np.arange(cap)  # then all present
        value = float(rng.choice([0.0, -0.0, 0.25, 1.0, rng.random()]))
        B.add_rows(sums, mins, p, r0, nb, gen, present_p, rows, value, np.empty(k, np.int64))
        gen_ref = gen.copy()
        leaves[rows], present[rows] = value, True
        ref.update(rows, np.full(k, value))
        check()
        have = np.flatnonzero(present)
        # the rows holding their 64-leaf group's minimum, raised; then rows of those groups
        # lowered, some below the old minimum; then any rows
        groups = have // 64
        holders = np.array([have[groups == g][np.argmin(leaves[have[groups == g]])]
                            for g in np.unique(groups)[:20]])
        mates = have[np.isin(groups, holders // 64)]
        rows = np.concatenate([holders, rng.choice(mates, 10), rng.choice(have, 30),
                               holders[:3]])
        pr = np.concatenate([leaves[holders] + rng.choice([0.0, 0.5, 2.0], holders.size),
                             rng.choice([0.0, 0.125, 0.25, 1.0], 10) * (it % 2),
                             rng.choice([0.0, 0.25, 0.5, rng.random()], 30),
                             np.full(holders[:3].size, 0.0 if it % 4 == 1 else 3.0)])
        stamps = gen[rows].copy()
        stale = rng.random(rows.size) < 0.1
        stamps[stale] -= 1
        full = bool(present.all()) and cap % 8 == 0  # as the sampler passes it
        skipped = B.update_rows(sums, mins, p, r0, nb, present_p, full, gen, rows, pr, 0.0,
                                1.0, stamps, True, np.empty(rows.size, np.int64), maxp)
        assert skipped == int(stale.sum())
        for r, v, bad in zip(rows.tolist(), pr.tolist(), stale.tolist()):
            if not bad:
                leaves[r] = v  # alpha 1, eps 0: the leaf is the priority
        ref.update(rows[~stale], pr[~stale])
        np.testing.assert_array_equal(gen, gen_ref)
        check()


@pytest.mark.parametrize("cap", [1, 9, 64, 100, 513, 4097, 70000, 1 << 18])
@pytest.mark.parametrize("n", [1, 7, 64, 4096, 20000])
def test_find_sorted_takes_the_paths_of_the_level_by_level_descent(cap, n):
    """``find_sorted`` (the bands with many sorted draws per node descended run by run)
    against the level-by-level kernel and ``find`` on the same sorted masses: leaves,
    remainders and leaf values bit for bit.  The masses hold exact prefix sums (a draw on
    the boundary between two subtrees), repeats, zero and past-the-total masses, and the
    trees hold zero leaves, whole zero subtrees and dyadic values (exact sums)."""
    rng = np.random.default_rng(cap * 31 + n)
    t = _Tree(cap)
    for it in range(3):
        if it == 0:
            vals = rng.integers(0, 64, cap) / 8.0  # dyadic: the prefix sums are exact
        else:
            vals = rng.random(cap) * (rng.random(cap) < 0.7)
        if it == 2 and cap >= 64:  # a zero run: whole subtrees with no mass
            z = rng.integers(0, cap - cap // 4)
            vals[z:z + cap // 4] = 0.0
        t.set(np.arange(cap), vals)
        total = t.sums[1]
        if not total > 0:
            continue
        edges = np.cumsum(t.leaves)[rng.integers(0, cap, max(1, n // 8))]
        masses = np.concatenate([rng.random(n) * total, edges,
                                 np.repeat(rng.random(3) * total, 5), [0.0, total, total * 1.5]])
        masses = np.sort(masses)
        strat = (np.arange(n) + rng.random(n)) * (total / n)  # what the sampler draws
        for m in (masses, strat):
            k = m.shape[0]
            o_s, o_f, o_k = (np.empty(k, np.int64) for _ in range(3))
            l_s, l_f, l_k = np.empty(k), np.empty(k), np.empty(k)
            r_s, r_f, r_k = m.copy(), m.copy(), m.copy()
            B.find_sorted(t.sums, t.p, t.r0, t.nb, r_s, o_s, l_s)
            B.find(t.sums, t.p, t.r0, t.nb, r_f, o_f, l_f)
            K._sumtree_find_cpu(t.ref.sums, t.p, r_k, o_k, l_k)
            for got in ((o_s, r_s, l_s), (o_f, r_f, l_f)):
                np.testing.assert_array_equal(got[0], o_k)
                np.testing.assert_array_equal(_bits(got[1]), _bits(r_k))
                np.testing.assert_array_equal(_bits(got[2]), _bits(l_k))
