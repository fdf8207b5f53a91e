"""Bad inputs: each a numbatraj error naming the culprit."""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj import EpisodeError, NumbatrajError, SamplerError, SchemaError
from numbatraj.training import BatchLoader
from tests.training.helpers import make_store


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("err") / "s.h5", (3, 5))


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("err") / "bare.h5", (3, 5), stats=(),
                      lerobot=False, fps=None)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"deltas": {"nope": [0]}}, "'nope'.*columns: qpos"),
    ({"deltas": {"observation.images.side": [0]}}, "observation.images.side.*LeRobot names"),
    ({"deltas": {"action": [0, 0.5]}}, r"deltas\['action'\] holds 0.5"),
    ({"deltas": {"action": [True]}}, "must be integers"),
    ({"deltas": {"action": []}}, "is empty"),
    ({"deltas": {"action": "012"}}, "sequence of int"),
    ({"delta_timestamps": {"action": [0.0, 0.125]}}, r"\[0.125\] are not multiples of 1/10"),
    ({"delta_timestamps": {"action": [0.0]}, "deltas": {"action": [0]}}, "not both"),
    ({"episodes": []}, "selection .* is empty"),
    ({"episodes": [2]}, "outside the store's episodes"),
    ({"episodes": [0, 0]}, "twice"),
    ({"normalize": {"action": "zscore"}}, "'zscore'; expected one of mean_std"),
    ({"normalize": {"images": "mean_std"}}, "image column"),
    ({"normalize": {"task_index": "mean_std"}}, "no statistics for column 'task_index'"),
    ({"columns": ["qpos", "qpos"]}, "twice"),
    ({"columns": "qpos"}, "the string"),
    ({"images": "rgb"}, "images='rgb'"),
    ({"output": "tf"}, "output='tf'"),
    ({"device": "tpu"}, "device='tpu'"),
    ({"seed": -1}, "seed"),
])
def test_bad_arguments(path, kwargs, match):
    with pytest.raises(NumbatrajError, match=match):
        BatchLoader(path, 2, **kwargs)


def test_error_classes(path, bare):
    with pytest.raises(SchemaError):
        BatchLoader(path, 2, deltas={"nope": [0]})
    with pytest.raises(EpisodeError):
        BatchLoader(path, 2, episodes=[])
    with pytest.raises(SamplerError):
        BatchLoader(path, 0)
    with pytest.raises(ValueError):  # numbatraj errors are also the natural builtin
        BatchLoader(path, 2, deltas={"action": [0.5]})


def test_store_without_fps_refuses_delta_timestamps(bare):
    with pytest.raises(SchemaError, match="records none .*attr.fps"):
        BatchLoader(bare, 2, delta_timestamps={"action": [0.0]})


def test_store_without_stats_refuses_normalize(bare):
    with pytest.raises(SchemaError, match="no statistics for column 'action'"):
        BatchLoader(bare, 2, normalize={"action": "mean_std"})


def test_aliases_only_on_lerobot_stores(bare):
    with pytest.raises(SchemaError, match="'observation.state'"):
        BatchLoader(bare, 2, columns=["observation.state"])


def test_bad_out_buffers(path):
    loader = BatchLoader(path, 2, deltas={"action": [0, 1]}, columns=["qpos"])
    cur = np.array([0, 4])
    with pytest.raises(SchemaError, match=r"out\['action'\] is float64 \(2, 2, 2\), expected float32"):
        loader.gather(cur, out={"action": np.zeros((2, 2, 2))})
    with pytest.raises(SchemaError, match=r"out\['qpos'\] is float32 \(3, 3\), expected float32 \(2, 3\)"):
        loader.gather(cur, out={"qpos": np.zeros((3, 3), np.float32)})
    ro = np.zeros((2, 3), np.float32)
    ro.flags.writeable = False
    with pytest.raises(SchemaError, match=r"out\['qpos'\] is read-only"):
        loader.gather(cur, out={"qpos": ro})
    with pytest.raises(SchemaError, match="C-contiguous"):
        loader.gather(cur, out={"qpos": np.zeros((3, 2), np.float32).T})
    with pytest.raises(SchemaError, match="does not have"):
        loader.gather(cur, out={"reward": np.zeros(2)})
    with pytest.raises(SchemaError, match="must be a numpy array"):
        loader.gather(cur, out={"qpos": [[0.0] * 3] * 2})
    with pytest.raises(NumbatrajError, match="row 99 at position 1"):
        loader.gather(np.array([0, 99]))
    out = np.full((2, 3), -1, np.float32)
    b = loader.gather(cur, out={"qpos": out})
    assert b["qpos"] is out
    np.testing.assert_array_equal(out, loader.store.load_column("qpos")[cur])


def test_resume_refuses_other_loader(path):
    a = BatchLoader(path, 2, seed=1, columns=["qpos"])
    b = BatchLoader(path, 2, seed=2, columns=["qpos"])
    with pytest.raises(SamplerError, match="seed=1"):
        b.load_state_dict(a.state_dict())
