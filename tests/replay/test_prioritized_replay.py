"""Prioritized StoreReplay: frequencies (chi-square), IS weights, stale updates, restricted
draws (ERE window, demo split) against the cumsum/searchsorted reference."""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj.data import ColumnSpec
from numbatraj.errors import SchemaError
from numbatraj.replay import StoreReplay
from numbatraj.samplers import SumTree
from numbatraj.samplers import kernels as pk
from tests.reference import per_weights_ref, sample_ranges_ref
from tests.replay.helpers import row_ids, rows, sac_columns

# 0.999 quantile of chi-square with 15 degrees of freedom
CHI2_15_999 = 37.70


def test_frequencies_follow_priorities_chi_square():
    rep = StoreReplay(sac_columns(), 16, prioritized=True, alpha=0.7, seed=11)
    rep.add(**rows(0, 16))
    _, idx = rep.sample(16)
    prio = np.arange(1, 17, dtype=np.float64)
    rep.update_priorities(np.arange(16), prio)  # plain indices: no stamp check
    p = (prio + rep.sampler.eps) ** 0.7
    p /= p.sum()
    counts = np.zeros(16)
    draws = 0
    for _ in range(40):
        _, idx = rep.sample(1000)
        counts += np.bincount(idx.indices, minlength=16)
        draws += 1000
    chi2 = float((((counts - draws * p) ** 2) / (draws * p)).sum())
    assert chi2 < CHI2_15_999
    # and a wrong model is rejected by the same statistic (the test has teeth)
    u = np.full(16, 1 / 16)
    assert float((((counts - draws * u) ** 2) / (draws * u)).sum()) > 10 * CHI2_15_999


def test_is_weights_match_reference():
    rep = StoreReplay(sac_columns(), 8, prioritized=True, alpha=1.0, beta=0.5, seed=4)
    rep.add(**rows(0, 6))
    rep.update_priorities(np.arange(6), [1.0, 2.0, 4.0, 8.0, 0.5, 3.0])
    _, idx = rep.sample(256)
    leaves = rep.sampler.tree.leaves.copy()
    present = np.zeros(8, bool)
    present[:6] = True
    np.testing.assert_allclose(idx.weights, per_weights_ref(leaves, present, idx.indices, 0.5), rtol=1e-6)
    assert idx.weights.max() <= 1.0
    rep.beta = 1.0
    _, idx = rep.sample(256)
    np.testing.assert_allclose(idx.weights, per_weights_ref(leaves, present, idx.indices, 1.0), rtol=1e-6)


def test_stale_updates_are_skipped_after_overwrite():
    rep = StoreReplay(sac_columns(), 4, prioritized=True, seed=0)
    rep.add(**rows(0, 4))
    _, idx = rep.sample(64)
    rep.add(**rows(4, 2))  # overwrites physical rows 0 and 1
    overwritten = np.isin(idx.indices, [0, 1])
    skipped = rep.update_priorities(idx, np.full(64, 50.0))
    assert skipped == int(overwritten.sum()) and skipped > 0
    leaves = rep.sampler.tree.leaves
    assert leaves[0] == leaves[1] == 1.0  # still the max priority they were added with
    assert leaves[2] == pytest.approx((50.0 + rep.sampler.eps) ** rep.sampler.alpha)
    # an update for the new content of rows 0/1 is applied
    _, idx2 = rep.sample(64)
    assert rep.update_priorities(idx2, np.full(64, 0.1)) == 0


@pytest.mark.parametrize("ranges", [[(0, 7)], [(3, 9)], [(10, 13), (0, 2)], [(5, 6)], [(0, 13)], [(2, 4), (6, 7)]])
@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_sample_ranges_kernel_matches_reference(ranges, beta, rng):
    cap = 13
    tree = SumTree(cap)
    leaves = rng.integers(1, 20, cap).astype(np.float64)  # integers: sums are exact
    tree.update(np.arange(cap), leaves)
    u = rng.random(400)
    out = np.empty(400, np.int64)
    w = np.empty(400, np.float32)
    (lo0, hi0), (lo1, hi1) = ranges[0], (ranges[1] if len(ranges) > 1 else (0, 0))
    pk.sample_ranges_cpu(tree.sums, tree.mins, tree.n_leaves_padded, u, beta, lo0, hi0, lo1, hi1, out, w,
                         np.empty((2, 400)))
    # the per-draw body the device runs takes the same path
    for i in range(0, 400, 37):
        x = (i + u[i]) * (leaves[lo0:hi0].sum() + leaves[lo1:hi1].sum()) / 400
        first = x < leaves[lo0:hi0].sum() or hi1 == lo1
        m = pk.prefix_mass(tree.sums, tree.n_leaves_padded, lo0 if first else lo1) + (
            x if first else x - leaves[lo0:hi0].sum())
        leaf = pk.descend(tree.sums, tree.n_leaves_padded, m)
        assert min(max(leaf, lo0 if first else lo1), (hi0 if first else hi1) - 1) == out[i]
    ref_rows, ref_w = sample_ranges_ref(leaves, ranges, u, beta)
    np.testing.assert_array_equal(out, ref_rows)
    np.testing.assert_allclose(w, ref_w, rtol=1e-6)


@pytest.mark.parametrize("lo, hi", [(0, 1), (0, 13), (3, 9), (12, 13), (5, 5), (0, 16)])
def test_prefix_and_range_min_bodies(lo, hi, rng):
    tree = SumTree(13)
    leaves = rng.integers(1, 50, 13).astype(np.float64)
    tree.update(np.arange(13), leaves)
    p = tree.n_leaves_padded
    assert pk.prefix_mass(tree.sums, p, lo) == leaves[:lo].sum()
    expected_min = leaves[lo:hi].min() if hi > lo else np.inf
    assert pk.range_min(tree.mins, p, lo, min(hi, 13)) == expected_min


def test_prioritized_demo_split_and_ere_window_stay_in_their_rows():
    rep = StoreReplay(sac_columns(), 20, prioritized=True, demo_capacity=4, demo_fraction=0.5, seed=9)
    rep.add_demos(**rows(1000, 4))
    rep.add(**rows(0, 37))  # wraps the 16-row ring twice
    rep.configure_ere(True, eta=0.5, c_min=5)
    c = rep.ere_window(k=10, K=10)
    batch, idx = rep.sample(64, k=10, K=10)
    ids = row_ids(batch)
    assert ((ids[:32] >= 1000) & (ids[:32] < 1004)).all()
    assert ((ids[32:] >= 37 - c) & (ids[32:] < 37)).all()
    assert idx.weights.max() <= 1.0 and idx.stamps.shape == (64,)
    np.testing.assert_array_equal(idx.stamps, rep.sampler.generation(idx.indices))
    assert rep.update_priorities(idx, np.ones(64)) == 0


def test_torch_outputs_and_priorities_with_grad():
    torch = pytest.importorskip("torch", reason="torch is not installed (numbatraj[torch])")
    cols = [ColumnSpec("obs", np.float32, (3,)), ColumnSpec("reward", np.float32, ())]
    rep = StoreReplay(cols, 64, prioritized=True, seed=3)
    rep.add(obs=np.arange(60, dtype=np.float32).reshape(20, 3),
            reward=np.arange(20, dtype=np.float32))
    outs = {"obs": torch.empty((8, 3)), "reward": torch.empty(8)}
    batch = rep.sample_into(outs, 8)
    np.testing.assert_array_equal(outs["reward"].numpy(), batch.indices.astype(np.float32))
    np.testing.assert_array_equal(outs["obs"].numpy()[:, 0], batch.indices * 3.0)
    td = torch.full((8,), 2.0, requires_grad=True) * 1.5  # a graph node, as a loss gives
    assert rep.update_priorities(batch, td.abs()) == 0
    with pytest.raises(SchemaError, match=r"outputs\['obs'\] is float64"):
        rep.sample_into({"obs": torch.empty((8, 3), dtype=torch.float64),
                         "reward": torch.empty(8)}, 8)
    with pytest.raises(SchemaError, match="requires grad"):
        rep.sample_into({"obs": torch.empty((8, 3), requires_grad=True),
                         "reward": torch.empty(8)}, 8)
