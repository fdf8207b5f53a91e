"""A DreamerV3-shaped loop: online sequence replay with ``is_first`` (no torch).

Two generated environments add one step each per iteration; the world-model "training"
draws windows of ``T`` consecutive steps of one stream with ``sample_sequences``: spanning
episode boundaries (DreamerV3's default), where ``is_first`` marks the rows that begin an
episode so a recurrent state is reset there, and, for comparison, windows kept inside one
episode with ``<col>_is_pad``.  A recurrent "state" (an exponential moving sum of the
observations, reset on ``is_first``) shows the reset rule.  A prioritized replay then
draws windows in proportion to R2D2 priorities from a fake ``(B, T)`` TD error.

    python examples/replay_dreamer_like.py [--steps 600] [--out build/replay_dreamer]
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from numbatraj import ColumnSpec, PrioritizedSampler
from numbatraj.replay import StoreReplay

N_ENVS, T, B = 2, 16, 8
COLUMNS = [
    ColumnSpec("image", np.uint8, (8, 8)),
    ColumnSpec("action", np.float32, (2,)),
    ColumnSpec("reward", np.float32, ()),
    ColumnSpec("done", np.bool_, ()),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--out", default="build/replay_dreamer")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(0)
    rep = StoreReplay(COLUMNS, 256 * N_ENVS, n_envs=N_ENVS, seed=3)
    per = StoreReplay(COLUMNS, 256 * N_ENVS, prioritized=True, alpha=0.9, n_envs=N_ENVS, seed=3)
    t = np.zeros(N_ENVS, np.int64)
    for step in range(args.steps):
        t += 1
        done = rng.random(N_ENVS) < 0.04
        image = np.full((N_ENVS, 8, 8), step % 200, np.uint8)
        image += np.arange(N_ENVS, dtype=np.uint8)[:, None, None]
        rows = dict(image=image,
                    action=rng.standard_normal((N_ENVS, 2)).astype(np.float32),
                    reward=t.astype(np.float32), done=done)
        rep.add(**rows)
        per.add(**rows)
        t[done] = 0
        if step < T:
            continue
        seq, batch = rep.sample_sequences(B, T)
        first = seq["is_first"]
        # is_first follows the stored episode ends: the row after a done row
        done_before = np.zeros_like(first)
        done_before[:, 1:] = seq["done"][:, :-1]
        assert np.array_equal(first[:, 1:], done_before[:, 1:]), "is_first != previous done"
        # reward counts steps since the episode start: it is 1 exactly on is_first rows
        assert np.array_equal(first[:, 1:], seq["reward"][:, 1:] == 1)
        state = np.zeros(B)
        for k in range(T):  # the recurrent state resets where an episode begins
            state = np.where(first[:, k], 0.0, 0.9 * state) + seq["image"][:, k].mean((1, 2))
        inside, _ = rep.sample_sequences(B, T, within_episode=True)
        pad = inside["image_is_pad"]
        assert not inside["is_first"][:, 1:][~pad[:, 1:]].any(), "a window crossed an episode"
        if step % 50 == 0:
            pseq, pbatch = per.sample_sequences(B, T)
            td = rng.standard_normal((B, T)) * (1 + pseq["reward"])  # later steps: larger
            per.update_priorities(pbatch, td, eta=0.9)
    sampler = per.sampler
    assert isinstance(sampler, PrioritizedSampler)
    leaves = sampler.tree.leaves[: per.capacity]
    print(f"{rep.size} rows in {N_ENVS} streams; last window is_first at "
          f"{np.flatnonzero(first[0]).tolist()}; {int((leaves != leaves.max()).sum())} "
          f"window starts re-prioritized")


if __name__ == "__main__":
    main()
