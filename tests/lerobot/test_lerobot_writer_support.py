"""Shared helpers for the LeRobot writer tests (no tests here).

:func:`record` writes episodes with :class:`LeRobotWriter` from deterministic inputs and
returns what it wrote, so a test can compare an import or a statistic against it.  Frames
carry their camera, episode and frame number as grey stripes (the importer fixtures'
:func:`frame_code`), plus optional texture in the lower half so statistics are not trivial.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import h5py
import numpy as np

from numbatraj.lerobot.read import import_lerobot_v3
from numbatraj.lerobot.write import LeRobotWriter
from tests.lerobot.lerobot_fixtures import frame_code, read_code

H, W = 24, 32
CAMERAS = ("wrist", "front")  # listed unsorted on purpose: the store sorts by feature key
STATE_NAMES = tuple(f"joint{i}.pos" for i in range(6))
ACTION_NAMES = tuple(f"motor{i}.pos" for i in range(5))


def state_of(ep: int, j: int, dim: int = 6) -> np.ndarray:
    k = np.arange(dim)
    return (np.sin(0.3 * j + ep + k) * (1 + k) + 0.01 * ep).astype(np.float32)


def action_of(ep: int, j: int, dim: int = 5) -> np.ndarray:
    k = np.arange(dim)
    return (np.cos(0.2 * j - ep + 2 * k) * (2 - 0.3 * k) - 0.05 * j).astype(np.float32)


def frame_of(cam: int, ep: int, j: int, texture: bool = False) -> np.ndarray:
    img = frame_code(cam, ep, j, H, W)
    if texture:
        rng = np.random.default_rng((cam, ep, j))
        img[H // 2 :] = rng.integers(0, 256, (H - H // 2, W, 3), dtype=np.uint8)
    return img


@dataclass
class Recorded:
    """What :func:`record` wrote, in dataset order."""

    root: str
    lengths: list[int]
    tasks: list[str]
    state: list[np.ndarray] = field(default_factory=list)
    action: list[np.ndarray] = field(default_factory=list)
    frames: dict[str, list[np.ndarray]] = field(default_factory=dict)  # camera -> per episode


def writer_args(**kw: object) -> dict[str, object]:
    args: dict[str, object] = dict(
        fps=30,
        state_names=STATE_NAMES,
        action_names=ACTION_NAMES,
        cameras=CAMERAS,
        height=H,
        width=W,
        crf=15,  # tight enough for the 8-pixel code stripes to survive 4:2:0 chroma
    )
    args.update(kw)
    return args


def add_episodes(
    w: LeRobotWriter,
    rec: Recorded,
    lengths: list[int],
    tasks: list[str],
    *,
    texture: bool = False,
    first_episode: int = 0,
) -> None:
    for n, (length, task) in enumerate(zip(lengths, tasks)):
        ep = first_episode + n
        assert w.begin_episode(task) == ep
        st = np.stack([state_of(ep, j) for j in range(length)])
        ac = np.stack([action_of(ep, j) for j in range(length)])
        per_cam = {c: [frame_of(i, ep, j, texture) for j in range(length)] for i, c in enumerate(w.cameras)}
        for j in range(length):
            w.add_frame(st[j], ac[j], {c: per_cam[c][j] for c in w.cameras})
        assert w.end_episode() == ep
        rec.lengths.append(length)
        rec.tasks.append(task)
        rec.state.append(st)
        rec.action.append(ac)
        for c in w.cameras:
            rec.frames.setdefault(c, []).append(np.stack(per_cam[c]))


def record(
    root: str | os.PathLike[str],
    lengths: list[int],
    tasks: list[str] | None = None,
    *,
    texture: bool = False,
    **kw: object,
) -> Recorded:
    root = os.fspath(root)
    tasks = tasks or [("pick the cube", "place it")[e % 2] for e in range(len(lengths))]
    rec = Recorded(root, [], [])
    with LeRobotWriter(root, **writer_args(**kw)) as w:  # type: ignore[arg-type]
        add_episodes(w, rec, lengths, tasks, texture=texture)
    return rec


def import_and_check(
    rec: Recorded, out: str, *, skip: tuple[int, ...] = (), max_mean_err: float = 6.0
) -> dict[str, np.ndarray]:
    """Import ``rec.root`` and compare it with what was recorded (episodes in ``skip`` are
    expected to be left out).  Numbers must be exact; every frame must read back its own
    camera/episode/frame code, and the mean pixel error stay under ``max_mean_err``."""
    import_lerobot_v3(rec.root, out, height=H, width=W, show_progress=False, force=True)
    kept = [e for e in range(len(rec.lengths)) if e not in skip]
    with h5py.File(out, "r") as f:
        got = {k: f[k][:] for k in ("qpos", "action", "task_index", "images", "ep_len")}
    np.testing.assert_array_equal(got["ep_len"], [rec.lengths[e] for e in kept])
    np.testing.assert_array_equal(got["qpos"], np.concatenate([rec.state[e] for e in kept]))
    np.testing.assert_array_equal(got["action"], np.concatenate([rec.action[e] for e in kept]))
    task_ids = {t: i for i, t in enumerate(dict.fromkeys(rec.tasks))}
    want_tasks = np.concatenate([np.full(rec.lengths[e], task_ids[rec.tasks[e]]) for e in kept])
    np.testing.assert_array_equal(got["task_index"], want_tasks)
    order = sorted(range(len(CAMERAS)), key=lambda i: "observation.images." + CAMERAS[i])
    row = 0
    for e in kept:
        for j in range(rec.lengths[e]):
            for slot, cam_id in enumerate(order):
                img = got["images"][row, slot].transpose(1, 2, 0)
                want = rec.frames[CAMERAS[cam_id]][e][j]
                assert read_code(img[: H // 2]) == (cam_id, e % 16, j % 256), (e, j, cam_id)
                err = np.abs(img.astype(np.int16) - want.astype(np.int16))[: H // 2].mean()
                assert err < max_mean_err, (e, j, cam_id, err)
            row += 1
    return got
