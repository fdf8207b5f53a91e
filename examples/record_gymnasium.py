"""Record a few episodes of two Gymnasium envs into trajectory stores, then read them back.

CartPole-v1 (Box observation, Discrete action) and Pendulum-v1 (Box / Box) ship with
gymnasium.  A random policy acts; nothing is trained.  Needs the ``gym`` extra::

    python examples/record_gymnasium.py --out /tmp/rec --episodes 3
"""

from __future__ import annotations

import argparse
import os

import gymnasium as gym
import numpy as np

from numbatraj import TrajectoryStore, validate_store
from numbatraj.gym import StoreRecorder


def record(env_id: str, path: str, episodes: int, seed: int) -> None:
    env = StoreRecorder(gym.make(env_id), path, seed=seed, overwrite=True)
    env.action_space.seed(seed)
    env.reset(seed=seed)
    done = 0
    while done < episodes:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            done += 1
            env.reset()
    env.close()  # publishes the store


def describe(path: str) -> str:
    with TrajectoryStore(path) as s:
        starts = np.concatenate([[0], np.cumsum(s.episode_lengths)[:-1]])
        returns = np.add.reduceat(s.load_column("reward"), starts).astype(np.float64)
        cols = ", ".join(f"{n} {c.dtype.name}{c.shape}" for n, c in s.columns.items())
        return (f"{os.path.basename(path)}: {s.n_episodes} episodes, {s.n_rows} rows, "
                f"returns {np.round(returns, 1).tolist()}; columns {cols}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".", help="directory for the stores (default .)")
    ap.add_argument("--episodes", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for env_id in ("CartPole-v1", "Pendulum-v1"):
        path = os.path.join(args.out, f"{env_id}.h5")
        record(env_id, path, args.episodes, args.seed)
        assert validate_store(path).ok
        print(describe(path))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
