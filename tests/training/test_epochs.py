"""Epoch semantics: coverage, determinism from (seed, epoch), exact mid-epoch resume."""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj.training import BatchLoader
from tests.training.helpers import make_store


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("ep") / "s.h5", (1, 2, 17, 3, 30), stats=())


def _indices(batches):
    return [b["index"].copy() for b in batches]


def _loader(path, **kw):
    kw.setdefault("columns", ["qpos"])
    return BatchLoader(path, kw.pop("batch_size", 8), **kw)


def test_every_frame_once_per_epoch_without_drop_last(path):
    loader = _loader(path, drop_last=False, deltas={"action": range(16)})
    assert len(loader) == -(-53 // 8)
    for _ in range(3):
        seen = np.concatenate(_indices(loader))
        assert sorted(seen.tolist()) == list(range(53))
    assert loader.epoch == 3


def test_drop_last_serves_full_batches_only(path):
    loader = _loader(path, drop_last=True)
    got = _indices(loader)
    assert len(got) == 53 // 8 and all(g.shape == (8,) for g in got)
    assert np.unique(np.concatenate(got)).size == 48


def test_order_is_fixed_by_seed_and_epoch(path):
    a = [np.concatenate(_indices(_loader(path, seed=5, drop_last=False)))]
    b = _loader(path, seed=5, drop_last=False)
    e0 = np.concatenate(_indices(b))
    e1 = np.concatenate(_indices(b))
    np.testing.assert_array_equal(a[0], e0)
    assert not np.array_equal(e0, e1)
    other = np.concatenate(_indices(_loader(path, seed=6, drop_last=False)))
    assert not np.array_equal(e0, other)


def test_no_shuffle_is_row_order(path):
    got = np.concatenate(_indices(_loader(path, shuffle=False, drop_last=False)))
    np.testing.assert_array_equal(got, np.arange(53))


def test_resume_mid_epoch_exactly(path):
    ref = _loader(path, seed=3)
    full = _indices(ref) + _indices(ref)
    run = _loader(path, seed=3)
    it = iter(run)
    head = [next(it)["index"].copy() for _ in range(4)]
    state = run.state_dict()
    again = _loader(path, seed=3)
    again.load_state_dict(state)
    tail = _indices(again) + _indices(again)
    got = head + tail
    assert len(got) == len(full)
    for x, y in zip(got, full, strict=True):
        np.testing.assert_array_equal(x, y)


def test_next_batch_rolls_into_next_epoch(path):
    loader = _loader(path, batch_size=50, drop_last=True)
    a = loader.next_batch()["index"]
    b = loader.next_batch()["index"]
    assert loader.epoch == 1 and a.shape == b.shape == (50,)


def test_episode_selection(path):
    loader = _loader(path, episodes=[3, 1], drop_last=False, batch_size=2)
    seen = sorted(np.concatenate(_indices(loader)).tolist())
    # episode 1 is rows 1..2, episode 3 rows 20..22
    assert seen == [1, 2, 20, 21, 22]
    b = loader.gather(np.array([20, 1]))
    np.testing.assert_array_equal(b["episode_index"], [3, 1])
