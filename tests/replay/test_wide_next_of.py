"""next_of over a wide source (a column stored apart, gathered with its next rows in one
pass): every draw equals the same replay over a narrow source (the record path), row for
row, across streams, episode ends, the side table, the ring wrap, n-step and frame stacks."""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj.data import ColumnSpec
from numbatraj.replay import StoreReplay
from numbatraj.replay.buffer import WIDE_BYTES
from tests.replay.helpers import parallel_kernel_spy

W = 160  # float32: 640 bytes a row, above WIDE_BYTES


def _cols(w: int) -> list[ColumnSpec]:
    return [ColumnSpec("obs", np.float32, (w,)), ColumnSpec("reward", np.float32, ()),
            ColumnSpec("done", np.bool_, ()), ColumnSpec("truncated", np.bool_, ())]


def _wide(obs2: np.ndarray) -> np.ndarray:
    """(n, W) rows whose first two entries are the narrow row, the rest derived from it."""
    k = np.arange(W - 2, dtype=np.float32)
    return np.concatenate([obs2, obs2[:, :1] * 3.0 + k + obs2[:, 1:2]], axis=1)


@pytest.mark.parametrize("n_envs", [1, 2, 3])
@pytest.mark.parametrize("n_step", [None, 3])
@pytest.mark.parametrize("depth", [None, 2])
@pytest.mark.parametrize("prioritized", [False, True])
def test_wide_next_of_matches_narrow(n_envs, n_step, depth, prioritized):
    assert W * 4 > WIDE_BYTES
    kw = dict(n_envs=n_envs, next_of={"next_obs": "obs"}, seed=3, prioritized=prioritized)
    if depth:
        kw["frame_stack"] = {"obs": depth}
    cap = 7 * n_envs
    narrow = StoreReplay(_cols(2), cap, **kw)
    wide = StoreReplay(_cols(W), cap, **kw)
    assert "obs" in wide._wide and "obs" not in narrow._wide
    rng = np.random.default_rng(n_envs)
    step = 0
    for _ in range(9):  # more steps than the ring holds: it wraps
        n = int(rng.integers(1, 4))
        ids = step + np.arange(n * n_envs, dtype=np.float32)
        obs = np.stack([ids, ids % 5], 1).astype(np.float32)
        nxt = obs + 100.0
        done = rng.random(n * n_envs) < 0.2
        trunc = (rng.random(n * n_envs) < 0.1) & ~done
        def steps(a):  # (T, n_envs, ...): one row of every env per step
            return a if n_envs == 1 else a.reshape(-1, n_envs, *a.shape[1:])

        base = dict(reward=steps(ids), done=steps(done), truncated=steps(trunc))
        narrow.add(obs=steps(obs), next_obs=steps(nxt), **base)
        wide.add(obs=steps(_wide(obs)), next_obs=steps(_wide(nxt)), **base)
        step += n * n_envs
        for into in (False, True):
            if into:
                spec = {k: (v.dtype, v.shape) for k, v in
                        wide.sample(5, n_step=n_step)[0].items()}
                out_w = {k: np.full(s, -1, d) for k, (d, s) in spec.items()}
                bw = wide.sample_into(out_w, 5, n_step=n_step)
                spec = {k: (v.dtype, v.shape) for k, v in
                        narrow.sample(5, n_step=n_step)[0].items()}
                out_n = {k: np.full(s, -1, d) for k, (d, s) in spec.items()}
                bn = narrow.sample_into(out_n, 5, n_step=n_step)
            else:
                out_w, bw = wide.sample(64, n_step=n_step)
                out_n, bn = narrow.sample(64, n_step=n_step)
            np.testing.assert_array_equal(bw.indices, bn.indices)
            for key in ("obs", "next_obs"):
                a, b = out_w[key], out_n[key]
                np.testing.assert_array_equal(a[..., :2], b)
                np.testing.assert_array_equal(a.reshape(-1, W), _wide(b.reshape(-1, 2)))
            for key in set(out_n) - {"obs", "next_obs"}:
                np.testing.assert_array_equal(out_w[key], out_n[key])


@pytest.fixture
def on_threads(monkeypatch):
    """``set_num_threads(NUMBA_NUM_THREADS)`` with the parallel threshold at 0 bytes, so the
    wide gathers take the parallel kernel; yields the list of its calls' part counts."""
    import numba

    from numbatraj.replay import _ring_kernels as rk

    top = int(numba.config.NUMBA_NUM_THREADS)
    with parallel_kernel_spy(monkeypatch, rk, "gather_wide_pair_par_cpu",
                             "PARALLEL_MIN_BYTES", 0) as calls:
        yield calls
    assert calls and set(calls) == {top}, "the parallel wide gather did not run"


@pytest.mark.parametrize("n_step", [None, 3])
@pytest.mark.parametrize("depth", [None, 2])
def test_wide_next_of_on_threads_matches_narrow(on_threads, n_step, depth):
    """The same draws as above with the wide gathers split over Numba's threads."""
    test_wide_next_of_matches_narrow(2, n_step, depth, False)


def test_wide_stored_columns_on_threads_match_numpy(on_threads):
    """obs and next_obs stored apart, gathered on threads: equal to indexing what was added."""
    cols = [ColumnSpec("obs", np.uint8, (3, 20, 20)), ColumnSpec("next_obs", np.uint8, (3, 20, 20)),
            ColumnSpec("reward", np.float32, ())]
    rep = StoreReplay(cols, 64, seed=1)
    assert {"obs", "next_obs"} <= set(rep._wide)
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 256, (90, 3, 20, 20), dtype=np.uint8)
    nxt = rng.integers(0, 256, (90, 3, 20, 20), dtype=np.uint8)
    rew = rng.standard_normal(90).astype(np.float32)
    rep.add(obs=obs, next_obs=nxt, reward=rew)  # wraps: rows 26.. of the batch are kept
    held = {"obs": obs[26:], "next_obs": nxt[26:], "reward": rew[26:]}
    order = rep.time_order()  # physical rows, oldest first
    for b in (4, 5, 33):
        out, batch = rep.sample(b)
        logical = np.argsort(order)[batch.indices]
        for k, v in held.items():
            np.testing.assert_array_equal(out[k], v[logical])


@pytest.mark.parametrize("into", [False, True])
def test_wide_columns_paired_by_row_type(monkeypatch, into):
    """Wide columns stored apart go through the gather two at a time where their row types
    match (one pass, one thread decision), alone otherwise, and dequantised apart; every
    draw equals the stored rows at the drawn indices, whatever is paired with what."""
    import numbatraj.replay.buffer as B

    cols = [ColumnSpec("a", np.uint8, (3, 20, 20)), ColumnSpec("b", np.uint8, (3, 20, 20)),
            ColumnSpec("q", np.float32, (600,)), ColumnSpec("c", np.uint8, (1, 30, 30)),
            ColumnSpec("d", np.uint8, (3, 20, 20)), ColumnSpec("e", np.float32, (300,)),
            ColumnSpec("r", np.float32, ())]
    rep = StoreReplay(cols, 50, seed=1, quantize={"q": (-1.0, 1.0)})
    assert set(rep._wide) == {"a", "b", "q", "c", "d", "e"}
    rng = np.random.default_rng(0)
    rows = {c.name: (rng.integers(0, 256, (70, *c.shape), dtype=np.uint8) if c.dtype == np.uint8
                     else rng.uniform(-1, 1, (70, *c.shape)).astype(np.float32)) for c in cols}
    rep.add(**rows)  # wraps: the newest 50 rows are kept
    calls = []
    real = B._wide_gather

    def spy(words, idx, out, idx_b=None, out_b=None, words_b=None):  # type: ignore[no-untyped-def]
        calls.append(out_b is not None)
        return real(words, idx, out, idx_b, out_b, words_b)

    monkeypatch.setattr(B, "_wide_gather", spy)
    for _ in range(3):
        if into:
            outs = {c.name: np.empty((40, *c.shape), c.dtype) for c in cols}
            batch = rep.sample_into(outs, 40)
        else:
            outs, batch = rep.sample(40)
        phys = batch.indices
        for c in cols:
            want = rep.storage(c.name)[phys]
            if c.name == "q":  # quantised: the stored codes' values
                np.testing.assert_allclose(outs["q"], -1.0 + want * np.float32(2 / 255),
                                           atol=1e-6)
                continue
            np.testing.assert_array_equal(outs[c.name], want, err_msg=c.name)
        # a with b; q dequantised apart; c alone (900-byte rows: 225 uint32 words); d with e
        # (uint8 and float32, both 1,200-byte rows of 150 uint64 words)
        assert calls[-3:] == [True, False, True]
