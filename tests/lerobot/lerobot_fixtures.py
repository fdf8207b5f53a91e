"""Generate LeRobot v3.0 datasets built to break an importer's bookkeeping.

:func:`write_dataset` turns a declarative :class:`DatasetSpec` into a directory with
pyarrow and PyAV, using the schema names of :mod:`numbatraj.lerobot.schema`
(so a LeRobot writer can share them).  What it can make awkward on purpose:

- unequal episode lengths, rows shuffled inside the data files;
- several data files, episode-table files and video files per camera, over two chunks, with
  video file boundaries unrelated to data file boundaries;
- padding frames between episodes inside a video file (so an episode's first frame is only
  known from ``from_timestamp``), float drift in those timestamps, episodes stored out of
  dataset order, dropped frames;
- AV1 (SVT-AV1) or H.264 (libx264) per camera, native sizes different from the import size;
- rows dropped or duplicated, totals in ``info.json`` that lie, floats for size fields.

Every frame encodes its own camera, episode and frame number as four vertical grey stripes
(:func:`frame_code`, :func:`read_code`), which survive the codecs and a resize.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from numbatraj.lerobot import schema as S

__all__ = [
    "PAD_EPISODE",
    "CameraSpec",
    "DatasetSpec",
    "action_row",
    "adversarial_spec",
    "expected_code",
    "extra_value",
    "frame_code",
    "read_code",
    "state_row",
    "write_dataset",
]

#: Episode code of padding frames (no episode owns them).
PAD_EPISODE = 15
_LEVEL = 17  # grey step between code values: 0, 17, ..., 255

CODECS = {"av1": "libsvtav1", "h264": "libx264"}
os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1: errors only, not its banner per file


@dataclass
class CameraSpec:
    """One camera: its name, codec, native size and how its episodes fill its video files.

    ``files`` lists, per video file, the episodes it holds in the order they are encoded;
    ``keys`` the ``(chunk, file)`` of each.  ``gap`` padding frames go before every episode
    after the first in a file (``lead`` before the first).  ``drop`` lists
    ``(file position, frame number in file)`` frames left out of the encode.  ``texture``
    fills all but the top eighth of each frame with moving noise (realistic decode cost for
    benchmarks; :func:`read_code` then no longer applies).
    """

    name: str
    codec: str = "h264"
    width: int = 32
    height: int = 24
    files: list[list[int]] = field(default_factory=list)
    keys: list[tuple[int, int]] = field(default_factory=list)
    gap: int = 0
    lead: int = 0
    drop: list[tuple[int, int]] = field(default_factory=list)
    texture: bool = False


@dataclass
class DatasetSpec:
    """A whole dataset; see the module docstring."""

    lengths: list[int]
    cameras: list[CameraSpec]
    data_files: list[list[int]]
    data_keys: list[tuple[int, int]]
    meta_files: list[list[int]]
    meta_keys: list[tuple[int, int]]
    fps: int = 30
    state_dim: int = 6
    action_dim: int = 5
    tasks: list[str] = field(default_factory=lambda: ["pick the cube", "place it\nin the bowl"])
    episode_task: list[int] | None = None
    shuffle_rows: bool = True
    task_text_column: str = "task"
    float_sizes: bool = False
    rejected: list[int] | None = None
    drop_rows: list[int] = field(default_factory=list)
    duplicate_rows: list[int] = field(default_factory=list)
    info_overrides: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    #: Drift added to every from/to_timestamp, sign alternating by episode, like the float
    #: error of LeRobot's accumulated durations (an importer that floors instead of
    #: rounding ``from_timestamp * fps`` picks the wrong frame).
    timestamp_drift: float = 1e-9
    #: Extra features, ``name -> (dtype, shape)``, with values from :func:`extra_value`
    #: (``next.reward``, ``next.done``, ``observation.environment_state``...).
    extra_features: dict[str, tuple[str, list[int]]] = field(default_factory=dict)
    #: Cameras stored as PNG images inside the data files (dtype ``image``), not as video.
    image_cameras: list[CameraSpec] = field(default_factory=list)


def state_row(ep: int, j: int, dim: int) -> np.ndarray:
    """The ``observation.state`` of frame ``j`` of episode ``ep`` (float32)."""
    k = np.arange(dim, dtype=np.float64)
    return (np.sin(0.37 * j + 1.3 * ep + k) * (1.0 + 0.25 * k) + 0.1 * ep).astype(np.float32)


def action_row(ep: int, j: int, dim: int) -> np.ndarray:
    """The ``action`` of frame ``j`` of episode ``ep`` (float32)."""
    k = np.arange(dim, dtype=np.float64)
    return (np.cos(0.21 * j - 0.7 * ep + 2 * k) * (2.0 - 0.3 * k) - 0.05 * j).astype(np.float32)


def extra_value(name: str, dtype: str, shape: list[int], ep: int, j: int) -> np.ndarray:
    """The value of extra feature ``name`` at frame ``j`` of episode ``ep`` (exact in its
    dtype)."""
    k = sum(map(ord, name)) % 97
    size = int(np.prod(shape))
    base = np.arange(size, dtype=np.float64) + 100 * ep + j + k / 8
    if dtype == "bool":
        val = (np.arange(size) + ep + j + k) % 3 == 0
    elif dtype.startswith(("int", "uint")):
        val = (base * 8).astype(np.int64) % 120
    else:
        val = base / 4
    return np.asarray(val, dtype=dtype).reshape(shape)


def frame_code(cam: int, ep: int, j: int, height: int, width: int) -> np.ndarray:
    """An ``(height, width, 3)`` uint8 frame: four grey stripes coding camera, episode and
    frame number (``j // 16``, ``j % 16``), each value 0..15: camera and episode are coded
    modulo 16, the frame number modulo 256 (see :func:`expected_code`)."""
    values = (cam % 16, ep % 16, (j // 16) % 16, j % 16)
    img = np.empty((height, width, 3), np.uint8)
    bounds = np.linspace(0, width, 5).round().astype(int)
    for s, v in enumerate(values):
        img[:, bounds[s] : bounds[s + 1]] = v * _LEVEL
    return img


def expected_code(cam: int, ep: int, j: int) -> tuple[int, int, int]:
    """What :func:`read_code` returns for a frame written by ``frame_code(cam, ep, j, ...)``."""
    return cam % 16, ep % 16, j % 256


def read_code(img: np.ndarray) -> tuple[int, int, int]:
    """``(camera, episode, frame)`` read back from an ``(H, W, 3)`` or ``(3, H, W)`` image."""
    if img.shape[0] == 3 and img.shape[-1] != 3:
        img = img.transpose(1, 2, 0)
    width = img.shape[1]
    bounds = np.linspace(0, width, 5)
    vals = []
    for s in range(4):
        mid = (bounds[s] + bounds[s + 1]) / 2
        half = max(1, int((bounds[s + 1] - bounds[s]) / 4))
        lo, hi = int(mid) - half + 1, int(mid) + half
        stripe = img[:, max(0, lo) : max(lo + 1, hi)].astype(np.float64)
        vals.append(round(stripe.mean() / _LEVEL))
    cam, ep, hi16, lo16 = vals
    return cam, ep, hi16 * 16 + lo16


def adversarial_spec(**overrides: Any) -> DatasetSpec:
    """The default bad-bookkeeping dataset: 7 unequal episodes, 3 data files over 2 chunks,
    2 episode-table files over 2 chunks, two cameras (AV1 and H.264) whose video files split
    the episodes differently from the data files and from each other, padding frames."""
    spec = DatasetSpec(
        lengths=[5, 9, 3, 12, 7, 4, 8],
        cameras=[
            # Listed wrist first: the store sorts cameras by name (front, wrist).
            CameraSpec(
                "observation.images.wrist",
                codec="h264",
                width=32,
                height=24,
                files=[[0, 1, 2, 3], [4], [5, 6]],
                keys=[(0, 0), (0, 1), (1, 0)],
                gap=2,
            ),
            CameraSpec(
                "observation.images.front",
                codec="av1",
                width=40,
                height=30,
                files=[[0, 1], [2, 3, 4, 5], [6]],
                keys=[(0, 0), (1, 0), (1, 1)],
                gap=1,
                lead=3,
            ),
        ],
        data_files=[[0, 1, 2], [3, 4], [5, 6]],
        data_keys=[(0, 0), (0, 1), (1, 0)],
        meta_files=[[0, 1, 2, 3], [4, 5, 6]],
        meta_keys=[(0, 0), (1, 0)],
        episode_task=[0, 1, 0, 0, 1, 1, 0],
    )
    for k, v in overrides.items():
        setattr(spec, k, v)
    return spec


def _encode(
    path: str, codec: str, fps: int, width: int, height: int, frames: list[tuple[int, np.ndarray]]
) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with av.open(path, "w") as container:
        stream = container.add_stream(CODECS[codec], rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.time_base = Fraction(1, fps)
        if codec == "av1":
            stream.options = {"preset": "12", "crf": "18", "svtav1-params": "lp=1"}
        else:
            stream.options = {"crf": "12", "preset": "ultrafast"}
        for pts, img in frames:
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            frame.pts = pts
            frame.time_base = Fraction(1, fps)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def _frame(cam_id: int, ep: int, j: int, cam: CameraSpec) -> np.ndarray:
    img = frame_code(cam_id, ep, j, cam.height, cam.width)
    if cam.texture:
        top = cam.height // 8
        h = cam.height - top
        yy, xx = np.mgrid[0:h, 0 : cam.width]
        wave = 96 + 64 * np.sin((xx + 3 * j) / 9.0) * np.cos((yy - 2 * j + 7 * ep) / 13.0)
        noise = np.random.default_rng((cam_id, ep, j)).integers(-8, 9, (h, cam.width, 1))
        img[top:] = np.clip(wave[..., None] + noise + [0, 20, 40], 0, 255).astype(np.uint8)
    return img


def _write_videos(root: str, spec: DatasetSpec, ep_rows: dict[int, dict[str, Any]]) -> None:
    for cam_id, cam in enumerate(spec.cameras):
        for pos, (eps, key) in enumerate(zip(cam.files, cam.keys)):
            frames: list[np.ndarray] = []
            for n, ep in enumerate(eps):
                pad = cam.lead if n == 0 else cam.gap
                frames += [_frame(cam_id, PAD_EPISODE, 0, cam)] * pad
                t0 = len(frames) / spec.fps + (-1) ** (ep + 1) * spec.timestamp_drift
                frames += [_frame(cam_id, ep, j, cam) for j in range(spec.lengths[ep])]
                ep_rows[ep].update(
                    {
                        S.video_column(cam.name, "chunk_index"): key[0],
                        S.video_column(cam.name, "file_index"): key[1],
                        S.video_column(cam.name, "from_timestamp"): t0,
                        S.video_column(cam.name, "to_timestamp"): t0 + spec.lengths[ep] / spec.fps,
                    }
                )
            dropped = {k for p, k in cam.drop if p == pos}
            numbered = [(k, f) for k, f in enumerate(frames) if k not in dropped]
            rel = S.video_file(S.DEFAULT_VIDEO_PATH, cam.name, *key)
            _encode(os.path.join(root, rel), cam.codec, spec.fps, cam.width, cam.height, numbered)


def _vector_array(rows: np.ndarray, fixed: bool) -> pa.Array:
    flat = pa.array(rows.reshape(-1), type=pa.float32())
    if fixed:
        return pa.FixedSizeListArray.from_arrays(flat, rows.shape[1])
    offsets = pa.array(np.arange(rows.shape[0] + 1, dtype=np.int32) * rows.shape[1])
    return pa.ListArray.from_arrays(offsets, flat)


def _write_data(root: str, spec: DatasetSpec, starts: list[int], task_of: list[int]) -> None:
    rng = np.random.default_rng(spec.seed)
    for eps, key in zip(spec.data_files, spec.data_keys):
        idx, epi, fi = [], [], []
        for ep in eps:
            for j in range(spec.lengths[ep]):
                g = starts[ep] + j
                if g in spec.drop_rows:
                    continue
                reps = 2 if g in spec.duplicate_rows else 1
                idx += [g] * reps
                epi += [ep] * reps
                fi += [j] * reps
        order = rng.permutation(len(idx)) if spec.shuffle_rows else np.arange(len(idx))
        idx_a, ep_a, fi_a = (np.asarray(x, np.int64)[order] for x in (idx, epi, fi))
        state = np.stack([state_row(e, j, spec.state_dim) for e, j in zip(ep_a, fi_a)])
        action = np.stack([action_row(e, j, spec.action_dim) for e, j in zip(ep_a, fi_a)])
        extra: dict[str, Any] = {}
        for name, (dtype, shape) in spec.extra_features.items():
            vals = np.stack([extra_value(name, dtype, shape, e, j) for e, j in zip(ep_a, fi_a)])
            if shape == [1]:
                extra[name] = pa.array(vals.reshape(-1))
            else:
                flat = pa.array(vals.reshape(-1))
                extra[name] = pa.FixedSizeListArray.from_arrays(flat, int(np.prod(shape)))
        for cam_id, cam in enumerate(spec.image_cameras, start=len(spec.cameras)):
            pngs = [_png(_frame(cam_id, e, j, cam)) for e, j in zip(ep_a, fi_a)]
            extra[cam.name] = pa.array([{"bytes": b, "path": None} for b in pngs],
                                       pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
        table = pa.table(
            {
                **extra,
                S.ACTION_KEY: _vector_array(action, fixed=True),
                S.STATE_KEY: _vector_array(state, fixed=False),
                "timestamp": pa.array((fi_a / spec.fps).astype(np.float32)),
                "frame_index": pa.array(fi_a),
                "episode_index": pa.array(ep_a),
                "index": pa.array(idx_a),
                "task_index": pa.array(np.asarray([task_of[e] for e in ep_a], np.int64)),
            }
        )
        path = os.path.join(root, S.data_file(S.DEFAULT_DATA_PATH, *key))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        pq.write_table(table, path, compression="snappy")


def _png(img: np.ndarray) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    return buf.getvalue()


def _write_meta(root: str, spec: DatasetSpec, ep_rows: dict[int, dict[str, Any]]) -> None:
    for eps, key in zip(spec.meta_files, spec.meta_keys):
        rows = [ep_rows[ep] | {S.EP_META_CHUNK: key[0], S.EP_META_FILE: key[1]} for ep in eps]
        cols = {name: [r[name] for r in rows] for name in rows[0]}
        path = os.path.join(root, S.episodes_file(*key))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        pq.write_table(pa.table(cols), path)
    tasks = pa.table(
        {
            spec.task_text_column: pa.array(spec.tasks, pa.string()),
            "task_index": pa.array(np.arange(len(spec.tasks), dtype=np.int64)),
        }
    )
    pq.write_table(tasks, os.path.join(root, S.TASKS_PATH))
    features: dict[str, Any] = {
        S.ACTION_KEY: S.vector_feature([f"a{i}.pos" for i in range(spec.action_dim)]),
        S.STATE_KEY: S.vector_feature([f"q{i}.pos" for i in range(spec.state_dim)]),
    }
    for cam in spec.cameras:
        features[cam.name] = S.video_feature(cam.height, cam.width, codec=cam.codec, fps=spec.fps)
    for cam in spec.image_cameras:
        features[cam.name] = {"dtype": "image", "shape": [cam.height, cam.width, 3],
                              "names": ["height", "width", "channels"]}
    for name, (dtype, shape) in spec.extra_features.items():
        features[name] = {"dtype": dtype, "shape": list(shape), "names": None}
    info = S.build_info(
        fps=spec.fps,
        features=features,
        total_episodes=len(spec.lengths),
        total_frames=sum(spec.lengths),
        total_tasks=len(spec.tasks),
        robot_type="so101_follower",
    )
    if spec.float_sizes:
        for k in ("total_episodes", "total_frames", "total_tasks", "chunks_size"):
            info[k] = float(info[k])
        info["data_files_size_in_mb"] = 100.0
    info.update(spec.info_overrides)
    with open(os.path.join(root, S.INFO_PATH), "w", encoding="utf-8") as fh:
        json.dump(info, fh, indent=4)
    with open(os.path.join(root, S.STATS_PATH), "w", encoding="utf-8") as fh:
        json.dump({S.ACTION_KEY: {"mean": [0.0] * spec.action_dim}}, fh)
    if spec.rejected is not None:
        with open(os.path.join(root, S.REJECTED_PATH), "w", encoding="utf-8") as fh:
            json.dump({"rejected_episodes": spec.rejected, "note": "operator rejected"}, fh)


def write_dataset(root: str | os.PathLike[str], spec: DatasetSpec) -> str:
    """Write ``spec`` as a LeRobot v3.0 directory at ``root``; returns ``root``."""
    root = os.fspath(root)
    os.makedirs(os.path.join(root, "meta"), exist_ok=True)
    n = len(spec.lengths)
    starts = np.concatenate([[0], np.cumsum(spec.lengths)[:-1]]).astype(int).tolist()
    task_of = spec.episode_task or [ep % len(spec.tasks) for ep in range(n)]
    data_key = {ep: key for eps, key in zip(spec.data_files, spec.data_keys) for ep in eps}
    ep_rows: dict[int, dict[str, Any]] = {}
    for ep in range(n):
        ep_rows[ep] = {
            S.EP_INDEX: ep,
            S.EP_TASKS: [spec.tasks[task_of[ep]]],
            S.EP_LENGTH: spec.lengths[ep],
            S.EP_DATA_CHUNK: data_key[ep][0],
            S.EP_DATA_FILE: data_key[ep][1],
            S.EP_FROM: starts[ep],
            S.EP_TO: starts[ep] + spec.lengths[ep],
            "stats/action/mean": [0.0] * spec.action_dim,
        }
    _write_videos(root, spec, ep_rows)
    _write_data(root, spec, starts, task_of)
    _write_meta(root, spec, ep_rows)
    return root
