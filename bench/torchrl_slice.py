"""TorchRL's ``SliceSampler``: 256 windows of 64 steps from a ring of 16-byte rows (obs 2
float32, reward float32, done bool), the draw ``bench/test_replay.py`` times for
``StoreReplay.sample_sequences(256, 64)``.

TorchRL needs its own torch, so this runs in a separate venv and writes
``bench/results/torchrl_slice.json``; ``bench/test_replay.py::test_sequences_torchrl_slice``
reads it into the sequences table::

    python3.11 -m venv build/torchrl-venv
    build/torchrl-venv/bin/pip install torch==2.14.1 torchrl   # torchrl 0.14.1
    build/torchrl-venv/bin/python bench/torchrl_slice.py [rows]   # default 10**7

Same data as the numbatraj bench (``_seq_replay``): ``rng = default_rng(0)``, blocks of
2**20 rows repeated, done with probability 1e-3; episodes are ids cut after each done
(``traj_key``), as SliceSampler needs.  Compile/warm-up excluded: one untimed draw first.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import tensordict
import torch
import torchrl
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.data.replay_buffers.samplers import SliceSampler


def main(rows: int) -> dict:
    chunk = 1 << 20
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((chunk, 2), dtype=np.float32)
    reward = rng.standard_normal(chunk, dtype=np.float32)
    done = rng.random(chunk) < 1e-3
    reps = -(-rows // chunk)
    d = np.tile(done, reps)[:rows]
    ep = np.concatenate([[0], np.cumsum(d[:-1])]).astype(np.int64)
    td = tensordict.TensorDict({
        "obs": torch.from_numpy(np.tile(obs, (reps, 1))[:rows]),
        "reward": torch.from_numpy(np.tile(reward, reps)[:rows]),
        "done": torch.from_numpy(d),
        "episode": torch.from_numpy(ep),
    }, batch_size=[rows])
    rb = ReplayBuffer(storage=LazyTensorStorage(rows), batch_size=256 * 64,
                      sampler=SliceSampler(num_slices=256, traj_key="episode"))
    rb.extend(td)
    rb.sample()
    ts = []
    for _ in range(20):
        a = time.perf_counter()
        rb.sample()
        ts.append(time.perf_counter() - a)
    return {"rows": rows, "median_s": float(np.median(ts)), "min_s": float(min(ts)),
            "torch": torch.__version__, "torchrl": torchrl.__version__,
            "load": os.getloadavg()[0]}


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10**7
    res = main(n)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                       "torchrl_slice.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res))
