"""PrioritizedSampler: model-checked bookkeeping, sampling distribution, IS weights, stamps."""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj.data import IndexBatch
from numbatraj.errors import RowIndexError, SamplerError
from numbatraj.samplers import PrioritizedSampler
from tests.reference import PrioritizedModel, per_weights_ref, sumtree_nodes_ref


def _filled(capacity=16, seed=42, **kw):
    s = PrioritizedSampler(capacity, seed=seed, **kw)
    s.note_added(np.arange(capacity))
    return s


def test_golden_first_draws():
    s = _filled(16, alpha=0.6, beta=0.4)
    s.update_priorities(np.arange(16), np.arange(1, 17) / 4.0)
    b = s.sample(8)
    assert b.indices.tolist() == [3, 5, 8, 9, 10, 13, 14, 15]
    np.testing.assert_allclose(
        b.weights,
        [0.716978, 0.650495, 0.590177, 0.575440, 0.562427, 0.530798, 0.522082, 0.514057],
        rtol=1e-5,
    )
    assert b.stamps.tolist() == [1] * 8
    assert b.weights.dtype == np.float32 and b.stamps.dtype == np.int64


def test_matches_model_under_random_operations(rng):
    cap, alpha, eps = 23, 0.7, 1e-3
    s = PrioritizedSampler(cap, alpha=alpha, eps=eps, seed=1)
    m = PrioritizedModel(cap, alpha, eps)
    for _ in range(60):
        op = rng.integers(0, 3)
        if op == 0 or not m.leaf:
            rows = rng.integers(0, cap, size=int(rng.integers(1, 8)))
            s.note_added(rows)
            m.note_added(rows.tolist())
        else:
            live = np.array(sorted(m.leaf))
            rows = rng.choice(live, size=int(rng.integers(1, 12)))
            prios = rng.random(rows.shape[0]) * 5
            stamps = None
            if op == 2:
                stamps = s.generation(rows)
                stale = rng.random(rows.shape[0]) < 0.3
                stamps[stale] -= 1
            got = s.update_priorities(rows, prios, stamps)
            want = m.update(rows.tolist(), prios.tolist(), None if stamps is None else stamps.tolist())
            assert got == want
        leaves, present = m.leaves()
        np.testing.assert_allclose(s.tree.leaves, leaves, rtol=1e-12)
        sums, mins = sumtree_nodes_ref(np.asarray(s.tree.leaves), present, s.tree.n_leaves_padded)
        np.testing.assert_array_equal(s.tree.sums, sums)
        np.testing.assert_array_equal(s.tree.mins, mins)
        assert s.n_rows == int(present.sum())
        assert s.max_priority == pytest.approx(m.max_p)


def test_sampled_frequencies_follow_p_alpha():
    """One seeded chi-square test: counts over 200k draws against P(i) = p_i**a / sum p**a."""
    cap, alpha = 40, 0.6
    s = _filled(cap, seed=123, alpha=alpha, eps=1e-9)
    prios = np.linspace(0.1, 8.0, cap)
    s.update_priorities(np.arange(cap), prios)
    counts = np.zeros(cap)
    for _ in range(50):
        counts += np.bincount(s.sample(4000).indices, minlength=cap)
    expected = (prios + 1e-9) ** alpha
    expected = expected / expected.sum() * counts.sum()
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 72.05  # chi-square, 39 dof, p = 0.001
    np.testing.assert_allclose(s.probabilities(), expected / counts.sum(), rtol=1e-12)


def test_stratified_draws_cover_every_segment():
    """Equal priorities and B = N: each segment holds exactly one row, so every row is drawn
    exactly once."""
    s = _filled(64, seed=5)
    assert sorted(s.sample(64).indices.tolist()) == list(range(64))


def test_is_weights_equal_reference(rng):
    cap = 50
    s = PrioritizedSampler(cap, alpha=0.5, beta=0.7, seed=9)
    rows = np.arange(0, 45)  # rows 45.. are never added: not part of N
    s.note_added(rows)
    s.update_priorities(rows, rng.random(45) * 3)
    b = s.sample(256)
    present = np.zeros(cap, dtype=bool)
    present[rows] = True
    want = per_weights_ref(np.asarray(s.tree.leaves), present, b.indices, beta=0.7)
    np.testing.assert_allclose(b.weights, want, rtol=2e-7)
    assert b.weights.max() <= 1.0
    s.beta = 1.0
    b = s.sample(64)
    np.testing.assert_allclose(b.weights, per_weights_ref(np.asarray(s.tree.leaves), present, b.indices, 1.0), rtol=2e-7)
    s.beta = 0.0
    assert (s.sample(16).weights == 1.0).all()


def test_stale_updates_are_skipped():
    s = _filled(8, seed=0)
    batch = s.sample(8)
    overwritten = np.unique(batch.indices)[:2]
    s.note_added(overwritten)  # rows rewritten after they were sampled
    before = s.tree.leaves.copy()
    skipped = s.update_priorities(batch, np.full(8, 3.0))
    n_stale = int(np.isin(batch.indices, overwritten).sum())
    assert skipped == n_stale >= 2
    for r in overwritten:
        assert s.tree.leaves[r] == before[r]  # still the max-priority value of a new row
    fresh = np.setdiff1d(batch.indices, overwritten)
    np.testing.assert_allclose(s.tree.leaves[fresh], (3.0 + s.eps) ** s.alpha)
    # without stamps everything is applied
    assert s.update_priorities(batch.indices, np.full(8, 2.0)) == 0


def test_new_rows_get_max_priority_and_duplicates_last_win():
    s = PrioritizedSampler(6, alpha=1.0, eps=0.5, seed=0)
    s.note_added([0, 1])
    assert s.tree.leaves[:2].tolist() == [1.0, 1.0]
    s.update_priorities([0, 1, 0], [9.0, 2.0, 4.0])  # row 0: the last value wins
    assert s.tree.leaves[:2].tolist() == [4.5, 2.5]
    assert s.max_priority == 9.5  # the max seen so far, even though overwritten
    s.note_added([2])
    assert s.tree.leaves[2] == 9.5


def test_capacity_one():
    s = _filled(1, seed=0)
    b = s.sample(5)
    assert b.indices.tolist() == [0] * 5 and (b.weights == 1.0).all()
    assert s.update_priorities(b, np.ones(5)) == 0


def test_state_dict_resumes_exactly():
    s = _filled(32, seed=8, alpha=0.8, beta=0.3)
    s.update_priorities(np.arange(32), np.arange(32) % 7 + 0.25)
    s.sample(10)
    state = s.state_dict()
    a = s.sample(20)
    t = PrioritizedSampler(32, seed=1)
    t.load_state_dict(state)
    b = t.sample(20)
    assert a.indices.tolist() == b.indices.tolist()
    np.testing.assert_array_equal(a.weights, b.weights)
    np.testing.assert_array_equal(s.tree.sums, t.tree.sums)
    np.testing.assert_array_equal(s.tree.mins, t.tree.mins)
    assert (t.alpha, t.beta, t.n_rows) == (0.8, 0.3, 32)
    with pytest.raises(SamplerError, match="state has capacity 32, this sampler has 4"):
        PrioritizedSampler(4).load_state_dict(state)


def test_bad_inputs():
    s = PrioritizedSampler(10, seed=0)
    with pytest.raises(SamplerError, match="no row has been added"):
        s.sample(4)
    s.note_added(np.arange(5))
    for bad, text in ((np.nan, "nan"), (-1.0, "-1.0"), (np.inf, "inf")):
        with pytest.raises(SamplerError, match=rf"priorities\[2\] = {text}"):
            s.update_priorities([0, 1, 2], [1.0, 1.0, bad])
    with pytest.raises(RowIndexError, match=r"indices\[1\] = 7 was never added"):
        s.update_priorities([0, 7], [1.0, 1.0])
    with pytest.raises(RowIndexError, match=r"indices\[0\] = 10 is outside \[0, 10\)"):
        s.update_priorities([10], [1.0])
    with pytest.raises(RowIndexError, match=r"indices\[1\] = -2 is outside"):
        s.note_added([3, -2])
    with pytest.raises(SamplerError, match=r"priorities must have shape \(2,\)"):
        s.update_priorities([0, 1], [1.0])
    with pytest.raises(SamplerError, match="stamps must be integers of shape"):
        s.update_priorities([0, 1], [1.0, 1.0], stamps=[1])
    for _name, kw, match in (
        ("alpha", {"alpha": -0.1}, r"alpha must be in \[0, inf\)"),
        ("beta", {"beta": np.nan}, r"beta must be in \[0, inf\)"),
        ("eps", {"eps": 0.0}, r"eps must be in \(0, inf\)"),
        ("alpha", {"alpha": "x"}, "alpha must be a real number"),
    ):
        with pytest.raises(SamplerError, match=match):
            PrioritizedSampler(4, **kw)
    with pytest.raises(SamplerError, match=r"beta must be in \[0, inf\), got -1"):
        s.beta = -1
    with pytest.raises(SamplerError, match="capacity must be >= 1"):
        PrioritizedSampler(0)
    # a failed update leaves the tree untouched
    before = s.tree.sums.copy()
    with pytest.raises(SamplerError):
        s.update_priorities([0, 1], [5.0, np.nan])
    np.testing.assert_array_equal(s.tree.sums, before)


def test_sample_returns_an_index_batch_the_update_accepts():
    s = _filled(10, seed=3)
    b = s.sample(6)
    assert isinstance(b, IndexBatch) and b.shape == (6,)
    assert s.update_priorities(b, np.linspace(0, 1, 6)) == 0


def test_sample_into_equals_sample_and_allocates_nothing():
    import tracemalloc

    a, b = _filled(1000, seed=5), _filled(1000, seed=5)
    pr = np.random.default_rng(0).random(1000)
    a.update_priorities(np.arange(1000), pr)
    b.update_priorities(np.arange(1000), pr)
    idx, w, st = np.empty(512, np.int64), np.empty(512, np.float32), np.empty(512, np.int64)
    for _ in range(3):
        a.sample_into(idx, w, st)
        ref = b.sample(512)
        np.testing.assert_array_equal(idx, ref.indices)
        np.testing.assert_array_equal(w, ref.weights)
        np.testing.assert_array_equal(st, ref.stamps)
        assert a.update_priorities(idx, pr[:512], st) == b.update_priorities(ref, pr[:512])
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        for _ in range(5):
            a.sample_into(idx, w, st)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak - base < 512 * 4 // 2  # not even the uniforms are allocated
    with pytest.raises(SamplerError, match="weights must be"):
        a.sample_into(idx, np.empty(512, np.float64), st)
    with pytest.raises(SamplerError, match="stamps must be"):
        a.sample_into(idx, w, st[:5])


def test_restricted_draws_follow_the_reference_and_own_a_second_stream():
    from numbatraj.samplers import kernels
    from tests.reference import sample_ranges_ref

    s = PrioritizedSampler(20, alpha=0.7, beta=0.5, seed=4)
    s.note_added(np.arange(20))
    s.update_priorities(np.arange(20), np.linspace(0.1, 2.0, 20))
    whole = PrioritizedSampler(20, alpha=0.7, beta=0.5, seed=4)
    whole.load_state_dict(s.state_dict())
    idx, w, st = np.empty(6, np.int64), np.empty(6, np.float32), np.empty(6, np.int64)
    s.sample_ranges_into(idx, w, st, 14, 20, 0, 3)
    u = np.random.Generator(np.random.PCG64([4, 1])).random(6)
    t = s.tree
    ref = sample_ranges_ref(np.array(t.leaves), [(14, 20), (0, 3)], u, 0.5)
    np.testing.assert_array_equal(idx, ref[0])
    assert np.all((idx >= 14) | (idx < 3))
    np.testing.assert_array_equal(st, s.generation(idx))
    out, ww = np.empty(6, np.int64), np.empty(6, np.float32)
    kernels.sample_ranges_cpu(t.sums, t.mins, t.n_leaves_padded, u, 0.5, 14, 20, 0, 3, out, ww,
                              np.empty((2, 6)))
    np.testing.assert_array_equal(idx, out)
    np.testing.assert_array_equal(w, ww)
    # restricted draws leave the whole-population stream alone
    np.testing.assert_array_equal(s.sample(8).indices, whole.sample(8).indices)
    with pytest.raises(SamplerError, match="row ranges"):
        s.sample_ranges_into(idx, w, st, 5, 5)
