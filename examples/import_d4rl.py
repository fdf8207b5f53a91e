"""Import a D4RL-style flat HDF5 file, on a generated hopper-shaped file.

    python examples/import_d4rl.py                 # generated file
    python examples/import_d4rl.py FILE.hdf5       # e.g. ~/.d4rl/datasets/hopper_medium-v2.hdf5
"""

from __future__ import annotations

import argparse
import os
import tempfile

import h5py
import numpy as np

from numbatraj import validate_store
from numbatraj.cli import format_info
from numbatraj.importers.d4rl import import_d4rl


def write_file(path: str, n: int = 5000, seed: int = 0) -> None:
    """Concatenated episodes with terminals, a 1000-step time limit and infos/*."""
    rng = np.random.default_rng(seed)
    term = rng.random(n) < 0.004
    timeouts = np.zeros(n, bool)
    start = 0
    for i in range(n):
        if term[i]:
            start = i + 1
        elif i - start == 999:
            timeouts[i], start = True, i + 1
    obs = rng.normal(size=(n + 1, 11)).astype(np.float32)
    with h5py.File(path, "w") as f:
        f["observations"], f["next_observations"] = obs[:-1], obs[1:]
        f["actions"] = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
        f["rewards"] = rng.normal(size=n).astype(np.float32)
        f["terminals"], f["timeouts"] = term, timeouts
        f["infos/qpos"] = rng.normal(size=(n, 6)).astype(np.float32)
        f["metadata/algorithm"] = np.bytes_("SAC")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("path", nargs="?")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = args.path or os.path.join(tmp, "hopper_medium-v2.hdf5")
        if not args.path:
            write_file(src)
        out = os.path.join(tmp, "hopper.h5")
        import_d4rl(src, out)
        print(format_info(out))
        report = validate_store(out)
        print(report)
        if not report.ok:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
