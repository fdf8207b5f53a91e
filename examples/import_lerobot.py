"""Import a LeRobot v3.0 dataset into a trajectory store and look at what came out.

Runs on a small generated dataset (two cameras, AV1 and H.264, seven unequal episodes, one
rejected), so it needs no network:

    python examples/import_lerobot.py [--workdir DIR]

With a real dataset the same two calls apply::

    root = resolve_dataset_root("ORG/NAME")          # cache, LeRobot home, HF cache, download
    import_lerobot_v3(root, "store.h5", height=240, width=320)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from numbatraj.data.store import TrajectoryStore  # noqa: E402
from numbatraj.lerobot import import_lerobot_v3  # noqa: E402

# The dataset generator of the tests stands in for a recording here.
from tests.lerobot.lerobot_fixtures import adversarial_spec, write_dataset  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--height", type=int, default=48)
    ap.add_argument("--width", type=int, default=64)
    args = ap.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="numbatraj-lerobot-")
    root = write_dataset(os.path.join(work, "so101-demo"), adversarial_spec(rejected=[4]))
    out = os.path.join(work, f"so101-demo_{args.height}x{args.width}.h5")
    import_lerobot_v3(root, out, height=args.height, width=args.width, force=True)

    with TrajectoryStore(out) as store:
        m = store.manifest
        print(f"store: {out}")
        print(f"{store.n_episodes} episodes, {store.n_rows} frames at {m['attr.fps']} fps")
        print(f"cameras: {m['attr.cameras']}")
        print(f"tasks: {json.loads(m['attr.tasks'])}")
        print(f"rejected episodes (not imported): {json.loads(m['attr.rejected_episodes'])}")
        for name, spec in store.columns.items():
            print(f"  {name:<11} {spec.dtype.name:<8} {spec.shape}")
        first = store.episode(0)
        print(f"episode 0: qpos {first['qpos'].shape}, images {first['images'].shape}")
    with h5py.File(out, "r") as f:
        for key in ("norm_qpos_mean", "norm_qpos_std", "norm_action_mean", "norm_action_std"):
            print(f"  {key:<16} {np.array2string(f[key][()], precision=3)}")


if __name__ == "__main__":
    main()
