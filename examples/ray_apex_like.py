"""An Ape-X-shaped run on a local Ray: 2 writer actors stepping a numpy env, 1 learner.

Each writer steps 16 copies of a point-mass env with an epsilon-greedy policy and adds 1,000
transitions per call to its own shard of a prioritized :class:`ShardedReplay`; the learner
fits a linear Q function by TD(0) on minibatches drawn across both shards, keeps one sample in
flight with ``sample_async`` while it trains on the last, and feeds ``|TD error|`` back as
priorities.  A rate limiter holds the learner to about 0.5 sampled rows per inserted row.

    python examples/ray_apex_like.py [--rows 20000] [--batch 256]

Ray starts inside the script on 2 CPUs, loopback only, without the dashboard.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import ray

import numbatraj
from numbatraj import ColumnSpec
from numbatraj.errors import RateLimitTimeoutError
from numbatraj.ray import RateLimiter, ShardedReplay

N_ACT = 3  # push left, nothing, push right
COLUMNS = [
    ColumnSpec("obs", np.float32, (2,)),
    ColumnSpec("action", np.int64, ()),
    ColumnSpec("reward", np.float32, ()),
    ColumnSpec("next_obs", np.float32, (2,)),
    ColumnSpec("done", np.bool_, ()),
]


class PointMass:
    """``n`` point masses on a line; reward -|x|; an episode ends after 200 steps."""

    def __init__(self, n: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.n = n
        self.x = self.rng.uniform(-1, 1, (n, 2)).astype(np.float32)  # position, velocity
        self.t = np.zeros(n, dtype=np.int64)

    def step(self, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pos, vel = self.x[:, 0], self.x[:, 1]
        vel = np.clip(vel + 0.05 * (a - 1), -1, 1)
        pos = np.clip(pos + 0.1 * vel, -2, 2)
        self.x = np.stack([pos, vel], axis=1).astype(np.float32)
        self.t += 1
        done = self.t >= 200
        reward = -np.abs(pos).astype(np.float32)
        nxt = self.x.copy()
        if done.any():
            self.x[done] = self.rng.uniform(-1, 1, (int(done.sum()), 2))
            self.t[done] = 0
        return nxt, reward, done


def features(obs: np.ndarray) -> np.ndarray:
    return np.concatenate([obs, obs**2, np.ones((obs.shape[0], 1), np.float32)], axis=1)


@ray.remote(num_cpus=1)
class Writer:
    def run(self, replay: ShardedReplay, k: int, rows: int, eps: float) -> int:
        env = PointMass(16, seed=k)
        rng = np.random.default_rng(100 + k)
        w = np.zeros((5, N_ACT), np.float32)  # a writer would pull the learner's weights
        buf: dict[str, list[np.ndarray]] = {c.name: [] for c in COLUMNS}
        added = 0
        while added < rows:
            obs = env.x.copy()
            greedy = np.argmax(features(obs) @ w, axis=1)
            a = np.where(rng.random(env.n) < eps, rng.integers(0, N_ACT, env.n), greedy)
            nxt, r, d = env.step(a)
            for name, v in zip(buf, (obs, a, r, nxt, d)):
                buf[name].append(v)
            if len(buf["obs"]) * env.n >= 1000:
                batch = {n: np.concatenate(v)[:1000] for n, v in buf.items()}
                replay.add(writer=k, timeout=60, **batch)
                added += 1000
                buf = {c.name: [] for c in COLUMNS}
        return added


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20_000, help="rows per writer")
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()

    root = os.path.dirname(os.path.dirname(numbatraj.__file__))  # workers import this copy
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": root}})
    t0 = time.monotonic()
    limiter = RateLimiter.ratio(samples_per_insert=0.5, min_size_to_sample=2000,
                                error_buffer=2000)
    replay = ShardedReplay(2, COLUMNS, capacity=50_000, prioritized=True, seed=0,
                           rate_limiter=limiter, beta=0.4)
    writers = [Writer.remote() for _ in range(2)]  # type: ignore[attr-defined]
    runs = [w.run.remote(replay, k, args.rows, 0.3) for k, w in enumerate(writers)]

    q = np.zeros((5, N_ACT), np.float64)
    steps, gamma, lr = 0, 0.98, 0.05
    pending = replay.sample_async(args.batch, timeout=30)
    while True:
        try:
            data, batch = ray.get(pending)
        except RateLimitTimeoutError:
            break
        if not ray.wait(runs, num_returns=len(runs), timeout=0)[1]:
            break  # writers done: stop after this batch
        pending = replay.sample_async(args.batch, timeout=5)  # in flight while we train
        f, fn = features(data["obs"]), features(data["next_obs"])
        target = data["reward"] + gamma * (~data["done"]) * (fn @ q).max(axis=1)
        a = data["action"]
        td = target - (f @ q)[np.arange(a.shape[0]), a]
        grad = np.zeros_like(q)
        np.add.at(grad.T, a, (batch.weights * td)[:, None] * f)
        q += lr * grad / a.shape[0]
        replay.update_priorities(batch, np.abs(td))
        steps += 1
    added = ray.get(runs)
    stats = replay.stats()
    secs = time.monotonic() - t0
    print(f"writers added {sum(added)} rows, learner took {steps} steps of {args.batch} "
          f"in {secs:.1f} s")
    for k, s in enumerate(stats):
        print(f"  shard {k}: {s['size']} rows, {s['sampled']} sampled "
              f"({s['sampled'] / max(s['inserted'], 1):.2f} per insert), "
              f"writer waited {s['insert_wait_s']:.2f} s")
    lo, hi = limiter.band
    assert sum(added) == 2 * args.rows
    assert all(lo <= s["diff_min"] and s["diff_max"] <= hi for s in stats)
    replay.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
