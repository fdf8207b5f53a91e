"""Import a Minari HDF5 dataset, on a generated two-episode dataset.

    python examples/import_minari.py                              # generated dataset
    python examples/import_minari.py ~/.minari/datasets/mujoco/hopper/expert-v0
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
from numbatraj.importers.minari import import_minari


def write_dataset(root: str, seed: int = 0) -> str:
    """``<root>/dummy-v0/data/{metadata.json, main_data.hdf5}``; returns the dataset dir."""
    rng = np.random.default_rng(seed)
    d = os.path.join(root, "dummy-v0")
    os.makedirs(os.path.join(d, "data"))
    lengths = [50, 80]
    box = {"type": "Box", "dtype": "float64", "shape": [4]}
    meta = {"dataset_id": "example/dummy-v0", "total_episodes": 2, "total_steps": sum(lengths),
            "data_format": "hdf5", "observation_space": json.dumps(box),
            "action_space": json.dumps({"type": "Box", "dtype": "float32", "shape": [2]}),
            "minari_version": "0.5.3"}
    with open(os.path.join(d, "data", "metadata.json"), "w") as fh:
        json.dump(meta, fh)
    with h5py.File(os.path.join(d, "data", "main_data.hdf5"), "w", track_order=True) as f:
        for e, n in enumerate(lengths):
            g = f.create_group(f"episode_{e}")
            g.attrs.update({"id": e, "seed": e, "total_steps": n})
            g["observations"] = rng.normal(size=(n + 1, 4))
            g["actions"] = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
            g["rewards"] = rng.normal(size=n)
            g["terminations"] = np.arange(n) == n - 1
            g["truncations"] = np.zeros(n, bool)
    return d


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("path", nargs="?")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = args.path or write_dataset(tmp)
        out = os.path.join(tmp, "minari.h5")
        import_minari(src, out)
        print(format_info(out))
        report = validate_store(out)
        print(report)
        if not report.ok:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
