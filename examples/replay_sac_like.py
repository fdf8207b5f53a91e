"""A SAC-shaped loop on StoreReplay with generated transitions (no environment, no torch).

Records a few teleoperated transitions to a ``.demo`` file, pins them as the replay's demo
prefix, then alternates environment steps (random transitions) with prioritized minibatches
(a quarter from the demos, ERE over the online rows) and priority updates from a fake TD
error.  Half way it checkpoints, reloads and checks the resumed replay samples exactly what
the original does; at the end it dumps the buffer into a trajectory store.

    python examples/replay_sac_like.py [--steps 3000] [--out build/replay_example]
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from numbatraj import ColumnSpec, TrajectoryStore
from numbatraj.replay import DemoFile, DemoWriter, StoreReplay

OBS, ACT = 17, 6
COLUMNS = [
    ColumnSpec("obs", np.float32, (OBS,)),
    ColumnSpec("action", np.float32, (ACT,)),
    ColumnSpec("reward", np.float32, ()),
    ColumnSpec("next_obs", np.float32, (OBS,)),
    ColumnSpec("done", np.bool_, ()),
]


def transition(rng: np.random.Generator, t: int) -> dict[str, object]:
    obs = rng.uniform(-1, 1, OBS).astype(np.float32)
    return {
        "obs": obs,
        "action": rng.uniform(-1, 1, ACT).astype(np.float32),
        "reward": np.float32(rng.normal()),
        "next_obs": np.clip(obs + 0.01, -1, 1).astype(np.float32),
        "done": t % 200 == 199,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--out", default="build/replay_example")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(0)

    demo_path = os.path.join(args.out, "teleop.demo")
    with DemoWriter(demo_path, COLUMNS, overwrite=True) as w:
        for t in range(64):
            w.append(**transition(rng, t), intervention=t % 4 == 0)
    demos = DemoFile(demo_path)
    print(f"{demo_path}: {len(demos)} rows, {int(demos.intervention.sum())} interventions")

    replay = StoreReplay(COLUMNS, capacity=2048, prioritized=True, seed=1, demo_capacity=64,
                         demo_fraction=0.25, quantize={"next_obs": (-1.0, 1.0)})
    replay.load_demos(demos)
    replay.configure_ere(True, eta=0.996, c_min=256)

    ckpt = os.path.join(args.out, "replay.ckpt")
    resumed = None
    for t in range(args.steps):
        row = transition(rng, t)
        replay.add(**row)
        if resumed is not None:
            resumed.add(**row)
        if replay.size < 256:
            continue
        k, big_k = t % 50, 50
        batch, idx = replay.sample(128, k=k, K=big_k)
        td = np.abs(batch["reward"] - 0.9 * batch["obs"].mean(axis=1))
        replay.update_priorities(idx, td)
        if resumed is not None:  # the reloaded replay samples exactly what the original does
            rbatch, ridx = resumed.sample(128, k=k, K=big_k)
            assert np.array_equal(ridx.indices, idx.indices), "resumed replay diverged"
            assert all(np.array_equal(rbatch[c], batch[c]) for c in batch)
            resumed.update_priorities(ridx, td)
        if t == args.steps // 2:
            replay.save(ckpt)
            resumed = StoreReplay.load(ckpt)
    print(f"replay: {replay}; resumed run matched the original after step {args.steps // 2}")

    store_path = os.path.join(args.out, "replay_dump.h5")
    n_ep = replay.dump(store_path, env_id="synthetic-sac", overwrite=True)
    with TrajectoryStore(store_path) as st:
        print(f"{store_path}: {st.n_rows} rows in {n_ep} episodes")


if __name__ == "__main__":
    main()
