"""Train a tiny Diffusion-Policy-like denoiser for a few steps from a generated store.

Diffusion Policy's windows: ``n_obs_steps=2`` frames of state and images (offsets -1, 0)
and a 16-step action horizon starting one frame back (offsets -1..14).  Observation frames
before an episode's first frame are clamped to it (flagged in ``*_is_pad``); images come as
float32 in [0, 1], state and action min/max-normalised to [-1, 1] inside the gather.

    python examples/train_diffusion_like.py --steps 20 --workdir /tmp/dp
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_act_like import make_store  # noqa: E402  (the same generated store)

from numbatraj.training import BatchLoader  # noqa: E402

N_OBS = 2
HORIZON = 16
T_DIFFUSION = 50


class TinyDenoiser(nn.Module):
    def __init__(self, state_dim: int = 6, action_dim: int = 6) -> None:
        super().__init__()
        self.vision = nn.Sequential(nn.Conv2d(3, 8, 5, stride=4), nn.ReLU(),
                                    nn.AdaptiveAvgPool2d(1), nn.Flatten())
        cond = N_OBS * (state_dim + 16)
        self.net = nn.Sequential(nn.Linear(cond + HORIZON * action_dim + 1, 128), nn.Mish(),
                                 nn.Linear(128, HORIZON * action_dim))
        self.action_dim = action_dim

    def forward(self, noisy: torch.Tensor, k: torch.Tensor, state: torch.Tensor,
                front: torch.Tensor, wrist: torch.Tensor) -> torch.Tensor:
        b = noisy.shape[0]
        f = self.vision(front.flatten(0, 1)).view(b, N_OBS, -1)
        w = self.vision(wrist.flatten(0, 1)).view(b, N_OBS, -1)
        cond = torch.cat([f, w, state], dim=-1).flatten(1)
        x = torch.cat([cond, noisy.flatten(1), k[:, None].float() / T_DIFFUSION], dim=1)
        out: torch.Tensor = self.net(x).view(b, HORIZON, self.action_dim)
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--workdir", default=".")
    args = ap.parse_args()
    path = make_store(os.path.join(args.workdir, "dp_store.h5"))
    obs = list(range(1 - N_OBS, 1))
    loader = BatchLoader(
        path, args.batch_size,
        deltas={"observation.state": obs, "observation.images.front": obs,
                "observation.images.wrist": obs, "action": range(-1, HORIZON - 1)},
        normalize={"observation.state": "min_max", "action": "min_max"},
        images="float", output="torch", seed=1,
    )
    betas = torch.linspace(1e-4, 0.02, T_DIFFUSION)
    alpha_bar = torch.cumprod(1 - betas, 0)
    model = TinyDenoiser()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    step, losses = 0, []
    while step < args.steps:
        for batch in loader:
            act = batch["action"]
            k = torch.randint(0, T_DIFFUSION, (act.shape[0],), generator=gen)
            noise = torch.randn(act.shape, generator=gen)
            ab = alpha_bar[k][:, None, None]
            noisy = ab.sqrt() * act + (1 - ab).sqrt() * noise
            pred = model(noisy, k, batch["observation.state"], batch["observation.images.front"],
                         batch["observation.images.wrist"])
            mask = ~batch["action_is_pad"]
            loss = ((pred - noise) ** 2).mean(-1)[mask].mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            step += 1
            if step >= args.steps:
                break
    dt = time.perf_counter() - t0
    print(f"Diffusion-like: {step} steps, batch {args.batch_size}, loss {losses[0]:.3f} -> "
          f"{losses[-1]:.3f}, {step / dt:.1f} steps/s")
    assert np.isfinite(losses).all()
    loader.close()


if __name__ == "__main__":
    main()
