"""A kept n-step draw (``StoreReplay(n_step=)``) on Numba's threads
(``_record_kernels.kept_cols_par_cpu``): the same outputs as the serial kernel, and
as the walk of a replay that keeps no targets, bit for bit."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from numbatraj.data.column import ColumnSpec
from numbatraj.replay import StoreReplay
from numbatraj.replay import _record_kernels as rck
from numbatraj.replay import _stream_kernels as sk
from tests.replay.helpers import parallel_kernel_spy

KIND = "replay kept n-step gather"


def _cols() -> list[ColumnSpec]:
    return [ColumnSpec("obs", np.float32, (17,)), ColumnSpec("action", np.float32, (6,)),
            ColumnSpec("reward", np.float32, ()), ColumnSpec("next_obs", np.float32, (17,)),
            ColumnSpec("done", np.bool_, ())]


def _filled(kept: bool, n_envs: int, cap: int, seed: int) -> StoreReplay:
    rng = np.random.default_rng(seed)
    kw = {"n_step": 3, "gamma": 0.9} if kept else {}
    rep = StoreReplay(_cols(), cap, seed=seed, n_envs=n_envs, **kw)
    t = (cap + cap // 3) // n_envs  # steps of every env: the ring wraps
    e = (t, n_envs) if n_envs > 1 else (t,)
    rep.add(obs=rng.standard_normal((*e, 17)).astype(np.float32),
            action=rng.standard_normal((*e, 6)).astype(np.float32),
            reward=rng.standard_normal(e).astype(np.float32),
            next_obs=rng.standard_normal((*e, 17)).astype(np.float32),
            done=rng.random(e) < 0.1)
    return rep


@pytest.fixture
def on_threads(monkeypatch):
    """Every kept n-step draw of at least 64 lanes takes the parallel kernel on all of
    Numba's threads; yields the list of its calls' part counts."""
    with parallel_kernel_spy(monkeypatch, rck, "kept_cols_par_cpu", "AUTO_MIN_BYTES",
                             {KIND: 0}) as calls:
        yield calls


@pytest.mark.parametrize("b", [64, 127, 128, 129, 1000, 4096])
@pytest.mark.parametrize("n_envs", [1, 4])
def test_kept_draw_on_threads_matches_the_walk(on_threads, b, n_envs):
    """The same seed draws the same rows from a replay keeping its targets (on threads)
    and one walking its windows (serial): every output equal, bit for bit."""
    cap = 3000
    kept, walked = _filled(True, n_envs, cap, b), _filled(False, n_envs, cap, b)
    got, gb = kept.sample(b)
    into = {k: np.full_like(v, 7) for k, v in got.items()}
    ib = kept.sample_into(into, b)
    want, wb = walked.sample(b, n_step=3, gamma=0.9)
    want2, wb2 = walked.sample(b, n_step=3, gamma=0.9)
    assert np.array_equal(gb.indices, wb.indices) and np.array_equal(ib.indices, wb2.indices)
    assert set(got) == set(want) == set(into)
    for g, w in ((got, want), (into, want2)):
        for k in w:
            assert g[k].dtype == w[k].dtype and g[k].shape == w[k].shape, k
            assert np.array_equal(g[k].view(np.uint8), w[k].view(np.uint8)), k
    top = int(numba.config.NUMBA_NUM_THREADS)
    assert on_threads == ([top, top] if b >= 2 * top * sk.NSTEP_BLOCK else [])
