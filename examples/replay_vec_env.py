"""An n-step DQN-shaped loop on a vectorised numpy environment (no gymnasium, no torch).

``N_ENVS`` copies of a small chain environment step together, as gymnasium's
``SyncVectorEnv`` does: each step adds one row per env (``(n_envs, *shape)``) to a replay
with ``n_envs`` streams and ``next_of={"next_obs": "obs"}``, so an observation is stored
once and the final observation of an episode (and each env's newest one) is kept in the
side table.  Minibatches come with 3-step returns per stream, stopping at episode ends
and at the write head: the replay is built for them (``n_step=3, gamma=0.9``), so each row
keeps its window's targets as rows arrive, equal to a walk at sample time.  The script
checks a few targets against a brute-force recomputation from its own per-env history,
checkpoints and resumes, and dumps the streams as separate episodes.

    python examples/replay_vec_env.py [--steps 400] [--out build/replay_vec_env]
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np

from numbatraj import ColumnSpec, TrajectoryStore
from numbatraj.replay import StoreReplay

N_ENVS, LENGTH, N_STEP, GAMMA = 4, 12, 3, 0.9
COLUMNS = [
    ColumnSpec("obs", np.float32, (2,)),
    ColumnSpec("action", np.int64, ()),
    ColumnSpec("reward", np.float32, ()),
    ColumnSpec("done", np.bool_, ()),
    ColumnSpec("truncated", np.bool_, ()),
]


class ChainEnvs:
    """``n`` chains: action 1 moves right (reward 1 at the end, terminal), 0 left; an
    episode is truncated after ``LENGTH`` steps; envs reset themselves (auto-reset)."""

    def __init__(self, n: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.pos = np.zeros(n, np.int64)
        self.t = np.zeros(n, np.int64)
        self.n = n

    def obs(self) -> np.ndarray:
        return np.stack([self.pos, self.t], 1).astype(np.float32)

    def step(self, action: np.ndarray):  # type: ignore[no-untyped-def]
        self.pos = np.clip(self.pos + np.where(action == 1, 1, -1), 0, 6)
        self.t += 1
        done = self.pos == 6
        trunc = (self.t >= LENGTH) & ~done
        reward = done.astype(np.float32) - 0.01
        final_obs = self.obs()
        ended = done | trunc
        self.pos[ended] = 0
        self.t[ended] = 0
        return final_obs, reward, done, trunc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--out", default="build/replay_vec_env")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    envs = ChainEnvs(N_ENVS, seed=0)
    rep = StoreReplay(COLUMNS, 64 * N_ENVS, n_envs=N_ENVS, next_of={"next_obs": "obs"}, seed=1,
                      n_step=N_STEP, gamma=GAMMA)  # the draws below read the kept targets
    history: list[list[dict[str, Any]]] = [[] for _ in range(N_ENVS)]  # the script's own record
    rng = np.random.default_rng(2)
    obs = envs.obs()
    q = np.zeros((7, 2))  # a tabular "network"
    for step in range(args.steps):
        action = rng.integers(0, 2, N_ENVS) if rng.random() < 0.3 else \
            q[obs[:, 0].astype(int)].argmax(1)
        next_obs, reward, done, trunc = envs.step(action)
        rep.add(obs=obs, action=action.astype(np.int64), reward=reward, done=done,
                truncated=trunc, next_obs=next_obs)
        for e in range(N_ENVS):
            history[e].append(dict(obs=obs[e].copy(), reward=float(reward[e]),
                                   done=bool(done[e]), trunc=bool(trunc[e]),
                                   next=next_obs[e].copy()))
        obs = envs.obs()  # after auto-reset: the next step's first observation
        if step >= 16:
            batch, _ = rep.sample(32, n_step=N_STEP, gamma=GAMMA)
            s = batch["obs"][:, 0].astype(int)
            s2 = batch["next_obs"][:, 0].astype(int)
            a = batch["action"]
            target = batch["return"] + batch["discount"] * q[s2].max(1)
            np.add.at(q, (s, a), 0.1 * (target - q[s, a]))

    # check targets against the script's own per-env history (the newest rows)
    batch, _ = rep.sample(64, n_step=N_STEP, gamma=GAMMA)
    held = rep.size // N_ENVS
    checked = 0
    for i in range(64):
        for e in range(N_ENVS):
            rows = history[e][-held:]
            for t, row in enumerate(rows):
                if not np.array_equal(row["obs"], batch["obs"][i]) or \
                        row["reward"] != batch["reward"][i]:
                    continue
                ret, m = 0.0, 0
                disc = GAMMA**N_STEP
                for k in range(N_STEP):
                    r = rows[t + k]
                    ret += GAMMA**k * r["reward"]
                    m = k
                    if r["done"]:
                        disc = 0.0
                        break
                    if r["trunc"] or t + k + 1 >= len(rows):
                        disc = GAMMA ** (k + 1)
                        break
                same = abs(ret - batch["return"][i]) < 1e-5
                same = same and abs(disc - batch["discount"][i]) < 1e-6
                if same and np.array_equal(rows[t + m]["next"], batch["next_obs"][i]):
                    checked += 1
                    break
            else:
                continue
            break
    assert checked == 64, f"only {checked} of 64 n-step targets matched the history"

    ckpt = os.path.join(args.out, "replay.ckpt")
    rep.save(ckpt)
    back = StoreReplay.load(ckpt)
    a, _ = rep.sample(16, n_step=N_STEP, gamma=GAMMA)
    b, _ = back.sample(16, n_step=N_STEP, gamma=GAMMA)
    assert all(np.array_equal(a[k], b[k]) for k in a), "resumed replay diverged"

    path = os.path.join(args.out, "replay.h5")
    n_ep = rep.dump(path, env_id="chain-v0", overwrite=True)
    with TrajectoryStore(path) as st:
        man = st.manifest
        print(f"{rep.size} rows in {N_ENVS} streams, {n_ep} episodes dumped; "
              f"cut at start: [{man['attr.ep_cut_start']}], open: [{man['attr.ep_open']}]")
    print(f"side table: {rep._side.n_kept if rep._side else 0} final observations kept; "
          f"q = {np.round(q.max(1), 2).tolist()}")


if __name__ == "__main__":
    main()
