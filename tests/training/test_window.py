"""Window values, pad masks and normalisation against the brute-force reference."""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj import TrajectoryStore
from numbatraj.training import BatchLoader
from tests.reference import window_batch_ref
from tests.training.helpers import force_parallel, make_store

LENGTHS = [(1,), (2,), (1, 2, 30), (30, 1, 1, 2)]
DELTAS = [[0], [-3, -1, 0], list(range(16)), [-40, 5, 0, 41], [2, -2, 2]]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("win")
    return {ls: make_store(d / f"s{i}.h5", ls, seed=i) for i, ls in enumerate(LENGTHS)}


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("deltas", DELTAS)
def test_every_frame_matches_reference(stores, lengths, deltas):
    with TrajectoryStore(stores[lengths]) as s:
        cols = {c: s.load_column(c) for c in s.columns}
        loader = BatchLoader(
            s, 7, deltas={"action": deltas, "observation.images.wrist": deltas[:2]},
            columns=["qpos", "task_index"], shuffle=False, drop_last=False,
        )
        cur = np.arange(s.n_rows)
        batch = loader.gather(cur)
    lens = np.asarray(lengths)
    vals, pad, ep = window_batch_ref(cols["action"], lens, cur, deltas)
    np.testing.assert_array_equal(batch["action"], vals)
    np.testing.assert_array_equal(batch["action_is_pad"], pad)
    np.testing.assert_array_equal(batch["episode_index"], ep)
    np.testing.assert_array_equal(batch["index"], cur)
    wrist = np.ascontiguousarray(cols["images"][:, 1])
    vals, pad, _ = window_batch_ref(wrist, lens, cur, deltas[:2])
    np.testing.assert_array_equal(batch["observation.images.wrist"], vals)
    np.testing.assert_array_equal(batch["observation.images.wrist_is_pad"], pad)
    for c in ("qpos", "task_index"):
        np.testing.assert_array_equal(batch[c], cols[c])
        assert batch[c].dtype == cols[c].dtype
    assert set(batch) == {"qpos", "task_index", "action", "observation.images.wrist",
                          "action_is_pad", "observation.images.wrist_is_pad", "index",
                          "episode_index"}


def test_first_and_last_frames_clamp(stores):
    path = stores[(1, 2, 30)]
    loader = BatchLoader(path, 4, deltas={"qpos": [-1, 0, 1]}, columns=["qpos"])
    qpos = loader.store.load_column("qpos")
    # episode 2 spans rows 3..32: its first and last frames, and the 1-frame episode 0
    b = loader.gather(np.array([3, 32, 0, 1]))
    np.testing.assert_array_equal(b["qpos_is_pad"], [[1, 0, 0], [0, 0, 1], [1, 0, 1], [1, 0, 0]])
    np.testing.assert_array_equal(b["qpos"][0], qpos[[3, 3, 4]])
    np.testing.assert_array_equal(b["qpos"][1], qpos[[31, 32, 32]])
    np.testing.assert_array_equal(b["qpos"][2], qpos[[0, 0, 0]])
    np.testing.assert_array_equal(b["qpos"][3], qpos[[1, 1, 2]])
    np.testing.assert_array_equal(b["episode_index"], [2, 2, 0, 1])
    loader.close()


def test_large_batch_parallel_path_matches_reference(stores):
    path = stores[(1, 2, 30)]
    loader = BatchLoader(path, 64, deltas={"action": range(16)}, columns=["images"])
    cur = np.random.default_rng(1).integers(0, loader.store.n_rows, 64)
    with force_parallel():
        b = loader.gather(cur)
    act = loader.store.load_column("action")
    vals, pad, _ = window_batch_ref(act, loader.store.episode_lengths, cur, list(range(16)))
    np.testing.assert_array_equal(b["action"], vals)
    np.testing.assert_array_equal(b["action_is_pad"], pad)
    np.testing.assert_array_equal(b["images"], loader.store.load_column("images")[cur])
    loader.close()


def test_normalisation_matches_lerobot_formulas(stores):
    path = stores[(1, 2, 30)]
    loader = BatchLoader(path, 8, deltas={"action": [-1, 0, 3]},
                         normalize={"action": "mean_std", "qpos": "min_max"},
                         columns=["qpos"], images="float")
    s = loader.store
    cur = np.arange(s.n_rows)
    b = loader.gather(cur)
    act, qpos = s.load_column("action"), s.load_column("qpos")
    st_a, st_q = s.stats("action"), s.stats("qpos")
    raw, _, _ = window_batch_ref(act, s.episode_lengths, cur, [-1, 0, 3])
    mean, std = st_a["mean"].astype(np.float32), st_a["std"].astype(np.float32)
    want = (raw - mean) / (std + np.float32(1e-8))
    assert b["action"].dtype == np.float32
    np.testing.assert_array_equal(b["action"], want)
    lo, hi = st_q["min"].astype(np.float32), st_q["max"].astype(np.float32)
    want_q = ((qpos - lo) / (hi - lo + np.float32(1e-8))) * np.float32(2) - np.float32(1)
    np.testing.assert_array_equal(b["qpos"], want_q)
    assert b["qpos"].min() >= -1 and b["qpos"].max() <= 1
    loader.close()


def test_images_float_is_unit_range(stores):
    path = stores[(2,)]
    loader = BatchLoader(path, 2, columns=["images", "observation.images.front"],
                         images="float")
    b = loader.gather(np.array([0, 1]))
    imgs = loader.store.load_column("images")
    np.testing.assert_array_equal(b["images"], imgs.astype(np.float32) / np.float32(255))
    np.testing.assert_array_equal(b["observation.images.front"],
                                  imgs[:, 0].astype(np.float32) / np.float32(255))
    loader.close()


def test_delta_timestamps_follow_lerobot_rounding(stores):
    path = stores[(1, 2, 30)]
    by_ts = BatchLoader(path, 5, delta_timestamps={"action": [-0.1, 0.0, 0.30004]},
                        columns=[])
    by_frames = BatchLoader(path, 5, deltas={"action": [-1, 0, 3]}, columns=[])
    cur = np.arange(by_ts.store.n_rows)
    a, b = by_ts.gather(cur), by_frames.gather(cur)
    for k in ("action", "action_is_pad", "index", "episode_index"):
        np.testing.assert_array_equal(a[k], b[k])
