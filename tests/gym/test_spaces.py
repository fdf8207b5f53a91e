"""numbatraj.data.spaces: every supported space to columns, flatten, and from_spaces."""

from __future__ import annotations

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
from gymnasium import spaces as gs  # noqa: E402

from numbatraj import StoreReplay  # noqa: E402
from numbatraj.data.spaces import columns_from_spaces, flatten, space_columns  # noqa: E402
from numbatraj.errors import SchemaError  # noqa: E402


def _cols(space, name="obs"):
    return [(c.name, c.dtype.name, c.shape) for c in space_columns(space, name)]


def test_each_space_maps_to_documented_columns():
    assert _cols(gs.Box(-1, 1, (3, 2), np.float32)) == [("obs", "float32", (3, 2))]
    assert _cols(gs.Discrete(5, start=2)) == [("obs", "int64", ())]
    assert _cols(gs.MultiDiscrete([3, 4])) == [("obs", "int64", (2,))]
    assert _cols(gs.MultiBinary(4)) == [("obs", "int8", (4,))]
    nested = gs.Dict({"pos": gs.Box(-1, 1, (2,)), "arm": gs.Dict({"q": gs.Box(0, 1, (7,))}),
                      "pair": gs.Tuple((gs.Discrete(3), gs.MultiBinary(2)))})
    # keys in the space's order (gymnasium sorts a plain dict's keys)
    assert _cols(nested) == [("obs.arm.q", "float32", (7,)), ("obs.pair.0", "int64", ()),
                             ("obs.pair.1", "int8", (2,)), ("obs.pos", "float32", (2,))]
    with pytest.raises(SchemaError, match="Text"):
        space_columns(gs.Text(5), "obs")


def test_flatten_single_and_batch():
    sp = gs.Dict({"a": gs.Box(-1, 1, (2,)), "b": gs.Discrete(3)})
    flat = flatten(sp, {"a": np.array([0.5, -0.5], np.float32), "b": 2}, "obs")
    assert flat["obs.a"].shape == (1, 2) and flat["obs.b"].tolist() == [2]
    batch = flatten(sp, {"a": np.zeros((4, 2), np.float32), "b": np.arange(4) % 3}, "obs",
                    batch=True)
    assert batch["obs.a"].shape == (4, 2) and batch["obs.b"].dtype == np.int64
    with pytest.raises(SchemaError, match="shape"):
        flatten(gs.Box(-1, 1, (3,)), np.zeros(2, np.float32), "obs")


def test_columns_from_spaces_and_replay_from_spaces():
    obs, act = gs.Box(-1, 1, (3,), np.float32), gs.Discrete(2)
    names = [c.name for c in columns_from_spaces(obs, act)]
    assert names == ["obs", "action", "reward", "done", "truncated"]
    rep = StoreReplay.from_spaces(obs, act, 32, seed=1)
    assert list(rep.columns) == ["obs", "action", "reward", "done", "truncated", "next_obs"]
    assert rep.columns["next_obs"].shape == (3,) and rep.capacity == 32
    rep.add(obs=np.zeros((4, 3), np.float32), action=np.ones(4, np.int64),
            reward=np.ones(4, np.float32), done=np.zeros(4, bool), truncated=np.zeros(4, bool),
            next_obs=np.ones((4, 3), np.float32))
    assert rep.size == 4
    bare = StoreReplay.from_spaces(obs, act, 8, next_obs=False)
    assert "next_obs" not in bare.columns
