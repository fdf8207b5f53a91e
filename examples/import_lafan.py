"""Import LAFAN1 clips retargeted to the Unitree G1 (CSV, 30 fps), on generated clips.

    python examples/import_lafan.py           # generated clips, temporary directory
    python examples/import_lafan.py DIR       # real clips (the dataset's g1/ folder)
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

from numbatraj import TrajectoryStore, validate_store
from numbatraj.cli import format_info
from numbatraj.importers.lafan import import_lafan_g1


def write_clips(root: str, seed: int = 0) -> str:
    """Two smooth G1 clips (walk, dance) in LAFAN1's CSV layout; returns the folder."""
    rng = np.random.default_rng(seed)
    folder = os.path.join(root, "g1")
    os.makedirs(folder)
    for name, T in (("walk1_subject1", 90), ("dance2_subject3", 60)):
        t = np.arange(T) / 30.0
        root_pos = np.c_[0.8 * t, 0.05 * np.sin(2 * t), np.full(T, 0.78)]
        yaw = 0.4 * t
        quat = np.c_[np.zeros(T), np.zeros(T), np.sin(yaw / 2), np.cos(yaw / 2)]  # xyzw
        joints = 0.3 * np.sin(2 * np.pi * t[:, None] + rng.uniform(0, 6.3, 29))
        np.savetxt(os.path.join(folder, f"{name}.csv"), np.c_[root_pos, quat, joints],
                   delimiter=",", fmt="%.6f")
    return folder


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", nargs="?", help="real clips; default: generate two")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.folder or write_clips(tmp)
        out = os.path.join(tmp, "lafan_g1.h5")
        import_lafan_g1(folder, out)
        print(format_info(out))
        with TrajectoryStore(out) as s:
            w = s.load_column("root_ang_vel")
            print(f"mean yaw rate {w[:, 2].mean():.3f} rad/s; clips: {s.manifest['attr.clips']}")
        report = validate_store(out)
        print(report)
        if not report.ok:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
