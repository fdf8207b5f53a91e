"""Record a few synthetic episodes as a LeRobot v3.0 dataset, reject one, import the rest.

A scripted "arm" (six joints, a gripper action of five motors) and two cameras that draw a
moving square stand in for an SO-101 teleoperation session, so it needs no robot and no
network:

    python examples/record_synthetic.py [--workdir DIR] [--codec libsvtav1|libx264]

What a recorder does is the same with real hardware::

    refuse_existing_dataset(root)                 # or LeRobotWriter.resume(root, ...)
    w = LeRobotWriter(root, fps, state_names, action_names, cameras, height, width)
    w.begin_episode("pick the cube"); w.add_frame(state, action, frames); w.end_episode()
    reject_episode(root, index, note="...")       # the moment the operator says so
    w.close()
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from numbatraj.data.store import TrajectoryStore  # noqa: E402
from numbatraj.lerobot import LeRobotWriter, import_lerobot_v3, reject_episode  # noqa: E402
from numbatraj.lerobot.write import refuse_existing_dataset  # noqa: E402

JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
H, W, FPS = 48, 64, 30


def camera_frame(cam: int, t: float) -> np.ndarray:
    """A square moving on a gradient: something for the encoder and the statistics."""
    img = np.empty((H, W, 3), np.uint8)
    img[..., 0] = np.linspace(30, 200, W, dtype=np.uint8)[None, :]
    img[..., 1] = np.linspace(60, 120, H, dtype=np.uint8)[:, None]
    img[..., 2] = 90 + 60 * cam
    x = int((W - 12) * (0.5 + 0.5 * np.sin(t + cam)))
    y = int((H - 12) * (0.5 + 0.5 * np.cos(0.7 * t)))
    img[y : y + 12, x : x + 12] = (250, 240, 40)
    return img


def record(root: str, codec: str, lengths: list[int]) -> None:
    refuse_existing_dataset(root)
    with LeRobotWriter(
        root, FPS, [f"{j}.pos" for j in JOINTS], [f"{j}.pos" for j in JOINTS[:5]],
        ["front", "wrist"], H, W, codec=codec, robot_type="so101_follower",
    ) as w:
        for ep, n in enumerate(lengths):
            w.begin_episode("put the cube in the bowl" if ep % 2 == 0 else "stack the cubes")
            for j in range(n):
                t = j / FPS + ep
                state = np.sin(t + np.arange(6)) * 40.0
                action = state[:5] + np.cos(3 * t) * 2.0
                frames = {"front": camera_frame(0, t), "wrist": camera_frame(1, t)}
                w.add_frame(state, action, frames)
            w.end_episode()
            print(f"recorded episode {ep}: {n} frames")
            if ep == 1:  # the operator rejects it at once; it stays on disk
                reject_episode(root, ep, note="gripper missed the cube")
                print(f"rejected episode {ep}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--codec", default="libsvtav1", help="libsvtav1 (AV1) or libx264")
    args = ap.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="numbatraj-record-")
    root = os.path.join(work, "so101-synthetic")
    lengths = [40, 25, 33, 50]
    record(root, args.codec, lengths)

    with open(os.path.join(root, "meta", "info.json"), encoding="utf-8") as fh:
        info = json.load(fh)
    print(f"dataset: {root}: {info['total_episodes']} episodes, {info['total_frames']} frames")
    out = os.path.join(work, "so101-synthetic.h5")
    import_lerobot_v3(root, out, height=H, width=W, force=True, show_progress=False)
    with TrajectoryStore(out) as store:
        print(f"store: {out}: {store.n_episodes} episodes, {store.n_rows} frames "
              f"(rejected: {json.loads(store.manifest['attr.rejected_episodes'])})")
        assert store.n_rows == sum(n for e, n in enumerate(lengths) if e != 1)


if __name__ == "__main__":
    main()
