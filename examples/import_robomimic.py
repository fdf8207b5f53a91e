"""Import a robomimic HDF5 file (one filter key), on a generated Lift-shaped file.

    python examples/import_robomimic.py                       # generated file
    python examples/import_robomimic.py low_dim_v15.hdf5 --filter-key train
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
from numbatraj.importers.robomimic import import_robomimic


def write_file(path: str, n_demos: int = 12, seed: int = 0) -> None:
    """Demos ``demo_1 .. demo_N`` with obs/next_obs and a 90/10 train/valid mask."""
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        data.attrs["env_args"] = json.dumps({"env_name": "Lift", "type": 1, "env_kwargs": {}})
        for k in range(1, n_demos + 1):
            T = int(rng.integers(30, 60))
            g = data.create_group(f"demo_{k}")
            g["actions"] = rng.uniform(-1, 1, (T, 7))
            g["states"] = rng.normal(size=(T, 32))
            g["rewards"] = (np.arange(T) == T - 1).astype(np.float64)
            g["dones"] = (np.arange(T) == T - 1).astype(np.int64)
            for key, width in (("robot0_eef_pos", 3), ("object", 10)):
                o = rng.normal(size=(T + 1, width))
                g[f"obs/{key}"], g[f"next_obs/{key}"] = o[:-1], o[1:]
            g.attrs["num_samples"] = T
        names = [f"demo_{k}".encode() for k in range(1, n_demos + 1)]
        f["mask/train"] = np.array(names[: -n_demos // 10 or None], dtype="S")
        f["mask/valid"] = np.array(names[-n_demos // 10 or len(names):], dtype="S")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("path", nargs="?")
    p.add_argument("--filter-key", default="train")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = args.path or os.path.join(tmp, "low_dim_v15.hdf5")
        if not args.path:
            write_file(src)
        out = os.path.join(tmp, "lift.h5")
        import_robomimic(src, out, filter_key=args.filter_key)
        print(format_info(out))
        report = validate_store(out)
        print(report)
        if not report.ok:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
