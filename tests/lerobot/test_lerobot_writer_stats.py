"""The writer's statistics against a plain NumPy computation over the frames it was given."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from numbatraj.lerobot._stats import (
    ImageStats,
    aggregate_feature_stats,
    vector_stats,
)
from tests.lerobot.test_lerobot_writer_support import CAMERAS, record

Q = (0.01, 0.10, 0.50, 0.90, 0.99)
QK = ("q01", "q10", "q50", "q90", "q99")


def numpy_vector(x: np.ndarray) -> dict[str, np.ndarray]:
    x = np.asarray(x, np.float64).reshape(len(x), -1)
    out = {"min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0), "count": [len(x)]}
    out.update(dict(zip(QK, np.quantile(x, Q, axis=0))))
    return out


def numpy_image(frames: np.ndarray) -> dict[str, np.ndarray]:
    """Per channel over frames[:, ::4, ::4], /255, shaped (3, 1, 1)."""
    px = frames[:, ::4, ::4].reshape(-1, 3).astype(np.float64)
    out = {
        "min": px.min(0), "max": px.max(0), "mean": px.mean(0), "std": px.std(0),
        **dict(zip(QK, np.quantile(px, Q, axis=0))),
    }
    shaped = {k: (v / 255.0).reshape(3, 1, 1) for k, v in out.items()}
    shaped["count"] = [len(frames)]
    return shaped


def assert_stats(got: dict, want: dict, what: str) -> None:
    assert set(got) == set(want) | {"count"}, what
    for k, v in want.items():
        np.testing.assert_allclose(np.asarray(got[k], np.float64), np.asarray(v, np.float64),
                                   rtol=1e-9, atol=1e-9, err_msg=f"{what} {k}")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    root = tmp_path_factory.mktemp("stats") / "ds"
    return record(root, [7, 1, 13], codec="libx264", texture=True)


def _episode_rows(root: str) -> list[dict]:
    files = sorted(glob.glob(os.path.join(root, "meta/episodes/*/*.parquet")))
    return pa.concat_tables([pq.read_table(p) for p in files]).to_pylist()


def test_episode_stats_equal_numpy(recorded):
    rows = _episode_rows(recorded.root)
    start = 0
    for e, row in enumerate(rows):
        n = recorded.lengths[e]

        def get(feat: str, row: dict = row) -> dict:
            return {k.rsplit("/", 1)[1]: v for k, v in row.items() if k.startswith(f"stats/{feat}/")}

        assert_stats(get("action"), numpy_vector(recorded.action[e]), f"episode {e} action")
        assert_stats(get("observation.state"), numpy_vector(recorded.state[e]), f"episode {e} state")
        for cam in CAMERAS:
            assert_stats(get(f"observation.images.{cam}"), numpy_image(recorded.frames[cam][e]),
                         f"episode {e} camera {cam}")
        frame = np.arange(n)
        assert_stats(get("frame_index"), numpy_vector(frame), f"episode {e} frame_index")
        assert_stats(get("index"), numpy_vector(frame + start), f"episode {e} index")
        assert_stats(get("timestamp"), numpy_vector((frame / 30).astype(np.float32)), f"episode {e} ts")
        assert_stats(get("episode_index"), numpy_vector(np.full(n, e)), f"episode {e} episode_index")
        start += n


def test_dataset_stats_equal_numpy(recorded):
    stats = json.load(open(os.path.join(recorded.root, "meta/stats.json")))
    for feat, parts in (("action", recorded.action), ("observation.state", recorded.state)):
        allrows = np.concatenate(parts)
        want = numpy_vector(allrows)
        got = stats[feat]
        for k in ("min", "max", "mean", "std", "count"):
            np.testing.assert_allclose(got[k], want[k], rtol=1e-9, atol=1e-12, err_msg=f"{feat} {k}")
        # LeRobot's rule for quantiles across episodes: an envelope of the episodes' values.
        per_ep = np.stack([np.quantile(p.astype(np.float64), Q, axis=0) for p in parts])
        for i, k in enumerate(QK):
            env = per_ep[:, i].min(0) if Q[i] <= 0.5 else per_ep[:, i].max(0)
            np.testing.assert_allclose(got[k], env, rtol=1e-9, err_msg=f"{feat} {k}")
    for cam in CAMERAS:
        frames = np.concatenate(recorded.frames[cam])
        want = numpy_image(frames)
        got = stats[f"observation.images.{cam}"]
        for k in ("min", "max", "mean", "std", "count"):
            np.testing.assert_allclose(got[k], want[k], rtol=1e-9, atol=1e-12, err_msg=f"{cam} {k}")
        assert np.asarray(got["q50"]).shape == (3, 1, 1)


def test_image_histogram_quantiles_on_edge_cases():
    # One frame, one constant colour: every statistic is that colour, std 0.
    s = ImageStats()
    s.add(np.full((8, 8, 3), (0, 128, 255), np.uint8))
    r = s.result()
    for k in ("min", "max", "mean", *QK):
        np.testing.assert_allclose(r[k].ravel(), np.array([0, 128, 255]) / 255.0)
    np.testing.assert_array_equal(r["std"].ravel(), 0.0)
    assert r["count"].tolist() == [1]
    # Only every 4th pixel counts: a frame whose sampled pixels are 10 and others 200.
    img = np.full((9, 9, 3), 200, np.uint8)
    img[::4, ::4] = 10
    s = ImageStats()
    s.add(img)
    np.testing.assert_allclose(s.result()["max"].ravel(), 10 / 255.0)
    with pytest.raises(ValueError, match="no frame"):
        ImageStats().result()


def test_single_row_and_aggregation_of_one():
    one = vector_stats(np.array([[1.5, -2.0]]))
    assert one["std"].tolist() == [0.0, 0.0] and one["q99"].tolist() == [1.5, -2.0]
    agg = aggregate_feature_stats([one])
    for k in one:
        np.testing.assert_array_equal(agg[k], one[k])
    with pytest.raises(ValueError, match="no statistics"):
        aggregate_feature_stats([])
