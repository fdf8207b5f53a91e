"""StoreRecorder / VectorStoreRecorder: the store's rows are exactly what the env returned,
episode boundaries are terminated | truncated, for CartPole, Pendulum, a Dict-space toy env
and a 4-env SyncVectorEnv."""

from __future__ import annotations

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
from gymnasium import spaces as gs  # noqa: E402

from numbatraj import TrajectoryStore, validate_store  # noqa: E402
from numbatraj.gym import StoreRecorder, VectorStoreRecorder  # noqa: E402


class DictToy(gym.Env):
    """Dict observation (Box + Discrete + Tuple), MultiDiscrete action, episodes of 3..6."""

    def __init__(self):
        self.observation_space = gs.Dict({
            "pos": gs.Box(-10, 10, (2,), np.float32),
            "mode": gs.Discrete(4),
            "flags": gs.Tuple((gs.MultiBinary(3), gs.Discrete(2))),
        })
        self.action_space = gs.MultiDiscrete([3, 5])
        self.t = 0

    def _obs(self):
        r = self.np_random
        return {"pos": r.uniform(-1, 1, 2).astype(np.float32), "mode": int(r.integers(4)),
                "flags": (r.integers(0, 2, 3).astype(np.int8), int(r.integers(2)))}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.limit = 0, int(self.np_random.integers(3, 7))
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        terminated = self.t >= self.limit and self.t % 2 == 0
        truncated = self.t >= self.limit and not terminated
        return self._obs(), float(action.sum()) * 0.5, terminated, truncated, {}


def _play(env, seed, episodes, n_steps=None):
    """Run ``env``; return the expected rows (obs the action was taken in...) per episode."""
    eps, rows = [], []
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    steps = 0
    while len(eps) < episodes:
        action = env.action_space.sample()
        nxt, reward, terminated, truncated, _ = env.step(action)
        rows.append((obs, action, reward, terminated, truncated))
        steps += 1
        obs = nxt
        if terminated or truncated or (n_steps and steps % n_steps == 0):
            eps.append(rows)
            rows = []
            if terminated or truncated:
                obs, _ = env.reset()
    return eps


def _leaf(value, path):
    for k in path:
        value = value[int(k)] if isinstance(value, tuple) else value[k]
    return value


def _check(path, expected, obs_cols, complete=None):
    assert validate_store(str(path)).ok
    with TrajectoryStore(str(path)) as s:
        assert s.n_episodes == len(expected)
        assert s.episode_lengths.tolist() == [len(e) for e in expected]
        flat = [r for e in expected for r in e]
        for col in obs_cols:
            got = s.load_column(col)
            want = np.array([np.asarray(_leaf(r[0], col.split(".")[1:])) for r in flat])
            np.testing.assert_array_equal(got, want.astype(got.dtype).reshape(got.shape))
        np.testing.assert_array_equal(
            s.load_column("action"),
            np.array([r[1] for r in flat]).reshape(s.load_column("action").shape))
        np.testing.assert_array_equal(s.load_column("reward"),
                                      np.array([r[2] for r in flat], np.float32))
        done, trunc = s.load_column("done"), s.load_column("truncated")
        np.testing.assert_array_equal(done, [r[3] for r in flat])
        np.testing.assert_array_equal(trunc, [r[4] for r in flat])
        # episode boundaries = terminated | truncated (the last len - complete episodes were
        # still running at close(): kept, their last row unflagged)
        complete = len(expected) if complete is None else complete
        ends = np.cumsum(s.episode_lengths) - 1
        boundary = np.zeros(s.n_rows, bool)
        boundary[ends[:complete]] = True
        flagged_rows = int(ends[complete - 1]) + 1 if complete else 0
        np.testing.assert_array_equal((done | trunc)[:flagged_rows], boundary[:flagged_rows])
        assert not (done | trunc)[flagged_rows:].any()


@pytest.mark.parametrize("env_id,episodes", [("CartPole-v1", 4), ("Pendulum-v1", 2)])
def test_registered_envs(tmp_path, env_id, episodes):
    path = tmp_path / "rec.h5"
    env = StoreRecorder(gym.make(env_id), path, seed=3)
    expected = _play(env, 3, episodes)
    assert not path.exists()  # published only on close
    env.close()
    _check(path, expected, ["obs"])
    with TrajectoryStore(str(path)) as s:
        assert s.manifest["env_id"] == env_id


def test_dict_space_toy_env(tmp_path):
    path = tmp_path / "toy.h5"
    env = StoreRecorder(DictToy(), path)
    expected = _play(env, 7, 6)
    env.close()
    cols = ["obs.pos", "obs.mode", "obs.flags.0", "obs.flags.1"]
    with TrajectoryStore(str(path)) as s:
        # the space's key order (gymnasium sorts a plain dict's keys)
        assert list(s.columns)[:5] == ["obs.flags.0", "obs.flags.1", "obs.mode", "obs.pos",
                                       "action"]
    _check(path, expected, cols)


def test_close_keeps_the_episode_in_progress(tmp_path):
    path = tmp_path / "part.h5"
    env = StoreRecorder(gym.make("Pendulum-v1"), path)
    env.reset(seed=0)
    for _ in range(5):
        env.step(env.action_space.sample())
    env.close()
    with TrajectoryStore(str(path)) as s:
        assert s.episode_lengths.tolist() == [5]
        assert not s.load_column("done").any() and not s.load_column("truncated").any()


def test_error_leaves_no_store(tmp_path):
    path = tmp_path / "bad.h5"
    env = StoreRecorder(gym.make("CartPole-v1"), path)
    with pytest.raises(Exception, match="reset"):  # gymnasium's order check, or ours
        env.step(0)
    env.close()
    with TrajectoryStore(str(path)) as s:
        assert s.n_rows == 0


def test_sync_vector_env_records_each_sub_env_as_its_own_episodes(tmp_path):
    n = 4
    venv = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(n)])
    path = tmp_path / "vec.h5"
    env = VectorStoreRecorder(venv, path)
    obs, _ = env.reset(seed=11)
    env.action_space.seed(11)
    pending = [[] for _ in range(n)]
    finished = []  # episodes in the order they end
    resetting = np.zeros(n, bool)
    for _ in range(120):
        actions = env.action_space.sample()
        nxt, rew, term, trunc, _ = env.step(actions)
        for i in range(n):
            if resetting[i]:
                continue
            pending[i].append((obs[i], actions[i], rew[i], bool(term[i]), bool(trunc[i])))
            if term[i] or trunc[i]:
                finished.append(pending[i])
                pending[i] = []
        resetting = term | trunc
        obs = nxt
    env.close()
    expected = finished + [p for p in pending if p]  # close() writes the ones in progress
    assert len(finished) >= n
    _check(path, expected, ["obs"], complete=len(finished))
