"""Train a tiny ACT-like policy for a few steps from a generated LeRobot-like store.

ACT's windows: the current frame's state and camera images, and a chunk of the next 16
actions (``delta_timestamps={"action": [t / fps for t in range(16)]}``).  Chunks running
past an episode's end are clamped to its last action and flagged in ``action_is_pad``; the
loss ignores those steps, as ACT does.  Batches come normalised (mean/std) and as torch
tensors that wrap the gathered buffers.

    python examples/train_act_like.py --steps 20 --workdir /tmp/act
"""

from __future__ import annotations

import argparse
import os
import time

import h5py
import numpy as np
import torch
from torch import nn

from numbatraj import ColumnSpec, TrajectoryStore, TrajectoryStoreWriter
from numbatraj.data.stats import compute_stats, stats_datasets
from numbatraj.training import BatchLoader

FPS = 10
CHUNK = 16


def make_store(path: str, episodes: int = 6, frames: int = 40,
               hw: tuple[int, int] = (24, 32)) -> str:
    """A store laid out like a LeRobot import (qpos, action, images of two cameras, fps),
    with per-column stats.  Stats are added with h5py until the writer takes them."""
    rng = np.random.default_rng(0)
    cols = [ColumnSpec("qpos", np.float32, (6,)), ColumnSpec("action", np.float32, (6,)),
            ColumnSpec("images", np.uint8, (2, 3, *hw))]
    attrs = {"fps": FPS, "source_format": "lerobot v3.0", "cameras": "front,wrist"}
    with TrajectoryStoreWriter(path, cols, attrs=attrs, overwrite=True) as w:
        for _ in range(episodes):
            t = np.linspace(0, 1, frames, dtype=np.float32)[:, None]
            qpos = np.sin(t * np.arange(1, 7, dtype=np.float32) * 3)
            qpos = qpos + rng.normal(0, 0.01, (frames, 6))
            act = np.roll(qpos, -1, axis=0)
            img = rng.integers(0, 256, (frames, 2, 3, *hw), dtype=np.uint8)
            w.append_rows({"qpos": qpos.astype(np.float32), "action": act.astype(np.float32),
                           "images": img})
            w.end_episode()
    with TrajectoryStore(path) as s:
        stats = {c: compute_stats(s.load_column(c)) for c in ("qpos", "action")}
    with h5py.File(path, "r+") as f:
        for name, value in stats_datasets(stats).items():
            f.create_dataset(name, data=value)
    return path


class TinyACT(nn.Module):
    def __init__(self, state_dim: int = 6, action_dim: int = 6, chunk: int = CHUNK) -> None:
        super().__init__()
        self.vision = nn.Sequential(nn.Conv2d(3, 8, 5, stride=4), nn.ReLU(),
                                    nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Sequential(nn.Linear(state_dim + 16, 64), nn.ReLU(),
                                  nn.Linear(64, chunk * action_dim))
        self.chunk, self.action_dim = chunk, action_dim

    def forward(self, state: torch.Tensor, front: torch.Tensor,
                wrist: torch.Tensor) -> torch.Tensor:
        feats = torch.cat([self.vision(front), self.vision(wrist), state], dim=1)
        out: torch.Tensor = self.head(feats).view(-1, self.chunk, self.action_dim)
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--workdir", default=".")
    args = ap.parse_args()
    path = make_store(os.path.join(args.workdir, "act_store.h5"))
    loader = BatchLoader(
        path, args.batch_size,
        delta_timestamps={"action": [t / FPS for t in range(CHUNK)]},
        columns=["observation.state", "observation.images.front", "observation.images.wrist"],
        normalize={"observation.state": "mean_std", "action": "mean_std"},
        images="float", output="torch", seed=0,
    )
    policy = TinyACT()
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    t0 = time.perf_counter()
    step, losses = 0, []
    while step < args.steps:
        for batch in loader:
            pred = policy(batch["observation.state"], batch["observation.images.front"],
                          batch["observation.images.wrist"])
            l1 = (pred - batch["action"]).abs().mean(-1)
            loss = (l1 * ~batch["action_is_pad"]).sum() / (~batch["action_is_pad"]).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            step += 1
            if step >= args.steps:
                break
    dt = time.perf_counter() - t0
    print(f"ACT-like: {step} steps, batch {args.batch_size}, loss {losses[0]:.3f} -> "
          f"{losses[-1]:.3f}, {step / dt:.1f} steps/s, epoch {loader.epoch}")
    assert np.isfinite(losses).all()
    loader.close()


if __name__ == "__main__":
    main()
