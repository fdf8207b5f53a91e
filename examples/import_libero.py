"""Import a LIBERO suite into a trajectory store, on generated demonstration files.

    python examples/import_libero.py            # generated suite, temporary directory
    python examples/import_libero.py SUITE_DIR  # a real suite (e.g. libero_goal/)

The generated suite mimics the released files: one ``<TASK>_demo.hdf5`` per task, demos
``demo_0 ... demo_N`` with actions, states, uint8 rewards/dones and two 128x128 cameras.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import h5py
import numpy as np

from numbatraj import validate_store
from numbatraj.cli import format_info
from numbatraj.importers.libero import import_libero

TASKS = {
    "open_the_middle_drawer_of_the_cabinet": "open the middle layer of the drawer",
    "put_the_bowl_on_the_stove": "put the bowl on the stove",
}


def write_suite(root: str, n_demos: int = 3, hw: int = 128, seed: int = 0) -> str:
    """A small LIBERO-shaped suite directory; returns its path."""
    rng = np.random.default_rng(seed)
    suite = os.path.join(root, "libero_goal")
    os.makedirs(suite)
    for task, language in TASKS.items():
        with h5py.File(os.path.join(suite, f"{task}_demo.hdf5"), "w") as f:
            data = f.create_group("data")
            data.attrs["problem_info"] = json.dumps({"language_instruction": language})
            data.attrs["macros_image_convention"] = "opengl"
            data.attrs["env_name"] = "Libero_Kitchen_Tabletop_Manipulation"
            for k in range(n_demos):
                T = int(rng.integers(20, 40))
                g = data.create_group(f"demo_{k}")
                g["actions"] = rng.uniform(-1, 1, (T, 7))
                g["states"] = rng.normal(size=(T, 79))
                done = np.zeros(T, np.uint8)
                done[-1] = 1
                g["rewards"], g["dones"] = done, done
                g["obs/joint_states"] = np.cumsum(rng.normal(0, 0.01, (T, 7)), axis=0)
                g["obs/gripper_states"] = rng.uniform(0, 0.04, (T, 2))
                for cam in ("agentview_rgb", "eye_in_hand_rgb"):
                    g[f"obs/{cam}"] = rng.integers(0, 256, (T, hw, hw, 3), dtype=np.uint8)
                g.attrs["num_samples"] = T
    return suite


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("suite_dir", nargs="?", help="a real suite; default: generate one")
    p.add_argument("--no-images", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        suite = args.suite_dir or write_suite(tmp)
        out = os.path.join(tmp, "libero_goal.h5")
        import_libero(suite, out, images=not args.no_images, flip_images="vertical")
        print(format_info(out))
        report = validate_store(out)
        print(report)
        if not report.ok:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
