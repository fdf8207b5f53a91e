"""TrajectoryStore additions the training path needs: fps, stats(), pickling by path."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from numbatraj import SchemaError, TrajectoryStore
from numbatraj.data.stats import STAT_NAMES, compute_stats, stats_datasets
from tests.training.helpers import make_store


def test_fps_and_stats_roundtrip(tmp_path):
    path = make_store(tmp_path / "s.h5", (4, 6))
    with TrajectoryStore(path) as s:
        assert s.fps == 10.0
        st = s.stats("action")
        assert list(st) == list(STAT_NAMES)
        act = s.load_column("action").astype(np.float64)
        np.testing.assert_allclose(st["mean"], act.mean(0), rtol=1e-12)
        np.testing.assert_allclose(st["std"], act.std(0), rtol=1e-12)
        np.testing.assert_array_equal(st["min"], act.min(0))
        np.testing.assert_array_equal(st["max"], act.max(0))
        np.testing.assert_allclose(st["q01"], np.quantile(act, 0.01, axis=0))
        np.testing.assert_allclose(st["q99"], np.quantile(act, 0.99, axis=0))
        assert int(st["count"]) == 10
        with pytest.raises(SchemaError, match="no statistics for column 'images'"):
            s.stats("images")
        with pytest.raises(SchemaError, match="no column 'nope'"):
            s.stats("nope")


def test_no_fps(tmp_path):
    with TrajectoryStore(make_store(tmp_path / "s.h5", (2,), fps=None)) as s:
        assert s.fps is None


def test_store_pickles_by_path(tmp_path):
    path = make_store(tmp_path / "s.h5", (2, 3))
    with TrajectoryStore(path) as s:
        blob = pickle.dumps(s)
        assert len(blob) < 500  # the path, not the data
        with pickle.loads(blob) as t:
            assert t.path == s.path and t.n_rows == 5
            np.testing.assert_array_equal(t.load_column("qpos"), s.load_column("qpos"))


def test_stats_helpers_refuse_bad_input():
    with pytest.raises(SchemaError, match="at least one row"):
        compute_stats(np.zeros((0, 3)))
    with pytest.raises(SchemaError, match="lack std"):
        stats_datasets({"a": {"mean": 0}})
    st = compute_stats(np.arange(10, dtype=np.uint8)[:, None])
    assert st["mean"].dtype == np.float64 and st["count"].dtype == np.int64
