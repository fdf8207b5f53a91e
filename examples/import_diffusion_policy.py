"""Import a Diffusion Policy zarr replay buffer, on a generated PushT-shaped buffer.

    python examples/import_diffusion_policy.py                      # generated buffer
    python examples/import_diffusion_policy.py pusht_cchi_v7_replay.zarr

Needs the zarr package (``pip install 'numbatraj[importers]'``).
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

from numbatraj import validate_store
from numbatraj.cli import format_info
from numbatraj.importers.diffusion_policy import import_diffusion_policy


def write_buffer(path: str, seed: int = 0) -> None:
    """A Blosc-compressed zarr v2 group: data/{img,state,action}, meta/episode_ends."""
    import zarr
    from numcodecs import Blosc

    rng = np.random.default_rng(seed)
    ends = np.cumsum(rng.integers(50, 120, 6)).astype(np.int64)
    n = int(ends[-1])
    root = zarr.open_group(path, mode="w", zarr_format=2)
    blosc = Blosc(cname="lz4", clevel=5, shuffle=Blosc.NOSHUFFLE)
    arrays = {
        "data/img": rng.integers(0, 256, (n, 96, 96, 3)).astype(np.float32),
        "data/state": rng.uniform(0, 512, (n, 5)).astype(np.float32),
        "data/action": rng.uniform(0, 512, (n, 2)).astype(np.float32),
    }
    for key, a in arrays.items():
        root.create_array(key, shape=a.shape, dtype=a.dtype, chunks=(64, *a.shape[1:]),
                          compressors=blosc)
        root[key][...] = a  # type: ignore[index]
    root.create_array("meta/episode_ends", shape=ends.shape, dtype=ends.dtype, compressors=None)
    root["meta/episode_ends"][...] = ends  # type: ignore[index]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("path", nargs="?")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = args.path or os.path.join(tmp, "pusht_replay.zarr")
        if not args.path:
            write_buffer(src)
        out = os.path.join(tmp, "pusht.h5")
        import_diffusion_policy(src, out)
        print(format_info(out))
        report = validate_store(out)
        print(report)
        if not report.ok:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
