"""Read a LeRobot v3.0 directory's metadata and check its bookkeeping before any decoding.

:func:`load_plan` reads ``meta/`` (info, tasks, the episode table, rejected episodes), the
footers of the data files and the headers of the video files, and returns a
:class:`DatasetPlan`: every episode in dataset order with its data file and, per camera, the
video file and first frame it occupies.  Everything that can be checked without decoding is
checked here, so a bad dataset fails before anything is written.
"""

from __future__ import annotations

import glob
import json
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

import numbatraj.lerobot.schema as S
from numbatraj.errors import IntegrityError, LeRobotFormatError
from numbatraj.io.parquet import (
    column_to_numpy,
    parquet_column_names,
    parquet_num_rows,
    read_parquet,
)
from numbatraj.io.video import probe_video

__all__ = ["CameraSegment", "DatasetPlan", "EpisodePlan", "ExtraFeature", "load_plan"]

#: Features the store holds in its own way: state (``qpos``), action, the task index column,
#: and the row bookkeeping its episode index represents (checked row by row on import).
_MAPPED = {S.STATE_KEY, S.ACTION_KEY, "task_index", "frame_index", "episode_index", "index"}
_DTYPES = {"float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8",
           "uint16", "uint32", "uint64", "bool"}


@dataclass(frozen=True)
class ExtraFeature:
    """A feature stored as a column under its LeRobot name (``next.reward``...)."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]


@dataclass(frozen=True)
class CameraSegment:
    """Where one episode lives in one camera's video: the file and its first frame number."""

    path: str
    first: int


@dataclass(frozen=True)
class EpisodePlan:
    """One episode: its index, length, first global row and where its data and frames are."""

    index: int
    length: int
    start: int
    data_path: str
    segments: tuple[CameraSegment, ...]


@dataclass(frozen=True)
class DatasetPlan:
    """Everything the import needs, checked.  Paths are absolute."""

    root: str
    info: dict[str, Any]
    fps: float
    cameras: tuple[str, ...]
    state_dim: int
    action_dim: int
    state_names: tuple[str, ...]
    action_names: tuple[str, ...]
    tasks: dict[int, str]
    episodes: tuple[EpisodePlan, ...]
    rejected: frozenset[int]
    extras: tuple[ExtraFeature, ...] = ()
    image_cameras: frozenset[str] = frozenset()

    @property
    def kept(self) -> list[EpisodePlan]:
        """Episodes not listed in ``meta/rejected_episodes.json``, in dataset order."""
        return [ep for ep in self.episodes if ep.index not in self.rejected]

    @property
    def n_kept_frames(self) -> int:
        return sum(ep.length for ep in self.kept)


def _whole(value: Any, what: str, where: str) -> int:
    """An integer count that JSON may have stored as a float (``12.0``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LeRobotFormatError(f"{where}: {what} is {value!r}, expected a number")
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise LeRobotFormatError(f"{where}: {what} is {value!r}, expected a whole number")
    return int(value)


def _read_info(root: str) -> dict[str, Any]:
    path = os.path.join(root, S.INFO_PATH)
    if not os.path.isfile(path):
        raise LeRobotFormatError(f"{root!r} is not a LeRobot dataset: {S.INFO_PATH} does not exist")
    try:
        with open(path, encoding="utf-8") as fh:
            info = json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise LeRobotFormatError(f"{path!r} is not valid JSON ({exc})") from exc
    if not isinstance(info, dict):
        raise LeRobotFormatError(f"{path!r} holds {type(info).__name__}, expected an object")
    version = info.get("codebase_version")
    if version != S.CODEBASE_VERSION:
        raise LeRobotFormatError(
            f"{path!r}: codebase_version is {version!r}, expected {S.CODEBASE_VERSION!r} "
            f"(convert older datasets with LeRobot's convert_dataset_v21_to_v30)"
        )
    for key in ("fps", "features", "data_path", "total_episodes", "total_frames"):
        if key not in info:
            raise LeRobotFormatError(f"{path!r} has no {key!r} entry")
    if not isinstance(info["features"], dict):
        raise LeRobotFormatError(
            f"{path!r}: 'features' is {type(info['features']).__name__}, expected an object"
        )
    templates = {"data_path": lambda t: S.data_file(t, 0, 0),
                 "video_path": lambda t: S.video_file(t, "camera", 0, 0)}
    for key, fill in templates.items():
        tpl = info.get(key)
        if key == "video_path" and tpl is None:
            continue  # no video cameras (checked against the features later)
        try:
            if not isinstance(tpl, str) or not tpl:
                raise TypeError("not a non-empty string")
            fill(tpl)
        except (KeyError, IndexError, ValueError, TypeError, AttributeError) as exc:
            usual = S.DEFAULT_DATA_PATH if key == "data_path" else S.DEFAULT_VIDEO_PATH
            raise LeRobotFormatError(
                f"{path!r}: {key} {tpl!r} is not a path template ({type(exc).__name__}: "
                f"{exc}); LeRobot's is {usual!r}"
            ) from None
    return info


def _vector(info: dict[str, Any], key: str, where: str) -> tuple[int, tuple[str, ...]]:
    ft = info["features"].get(key)
    if not isinstance(ft, dict):
        raise LeRobotFormatError(
            f"{where}: no feature {key!r}; features are {sorted(info['features'])}"
        )
    shape = ft.get("shape")
    if not isinstance(shape, list | tuple) or len(shape) != 1:
        raise LeRobotFormatError(f"{where}: feature {key!r} has shape {shape!r}, expected [n]")
    dim = _whole(shape[0], f"feature {key!r} shape", where)
    names = ft.get("names")
    if isinstance(names, dict):  # some writers nest names: {"motors": [...]}
        names = next(iter(names.values()), None)
    labels = tuple(str(n) for n in names) if isinstance(names, list) else ()
    return dim, labels


def _cameras(info: dict[str, Any], where: str) -> tuple[tuple[str, ...], frozenset[str]]:
    """Every camera (sorted by name) and those stored as images inside the data files."""
    feats = info["features"]
    images = frozenset(
        k for k, ft in feats.items() if isinstance(ft, dict) and ft.get("dtype") == "image"
    )
    videos = {k for k, ft in feats.items() if isinstance(ft, dict) and ft.get("dtype") == "video"}
    if videos and not info.get("video_path"):
        raise LeRobotFormatError(f"{where}: cameras {sorted(videos)} but no 'video_path' template")
    return tuple(sorted(videos | images)), images


def _extras(info: dict[str, Any], cameras: tuple[str, ...], where: str) -> tuple[ExtraFeature, ...]:
    """Every feature that is not state, action, a camera or row bookkeeping; a feature the
    store cannot hold is an error naming it (never dropped)."""
    out = []
    for name, ft in sorted(info["features"].items()):
        if name in _MAPPED or name in cameras:
            continue
        if not isinstance(ft, dict):
            raise LeRobotFormatError(f"{where}: feature {name!r} is {ft!r}, expected an object")
        dtype, shape = ft.get("dtype"), ft.get("shape")
        if dtype not in _DTYPES:
            raise LeRobotFormatError(
                f"{where}: feature {name!r} has dtype {dtype!r}, which a store column cannot "
                f"hold (numbers or bool: {sorted(_DTYPES)}); it is not dropped silently: "
                f"remove it from info.json to import without it"
            )
        if not isinstance(shape, list | tuple) or not shape:
            raise LeRobotFormatError(f"{where}: feature {name!r} has shape {shape!r}")
        dims = tuple(_whole(d, f"feature {name!r} shape", where) for d in shape)
        if "," in name or "=" in name or "/" in name:
            raise LeRobotFormatError(
                f"{where}: feature {name!r} cannot be a column name (',', '=' or '/')"
            )
        out.append(ExtraFeature(name, np.dtype(dtype), () if dims == (1,) else dims))
    return tuple(out)


def _check_declared(root: str, info: dict[str, Any], table_columns: list[str],
                    data_path: str, video_cams: set[str], where: str) -> None:
    """Data columns and camera columns of the episode table must all be declared: a
    feature missing from info.json would otherwise be dropped without a word."""
    declared = set(info["features"])
    have = set(parquet_column_names(data_path))
    absent = sorted(declared - have - video_cams)
    if absent:
        raise LeRobotFormatError(
            f"{where} declares feature(s) {absent}, but {data_path!r} has no column of that "
            f"name (its columns: {sorted(have)})"
        )
    extra = sorted(have - declared)
    if extra:
        raise LeRobotFormatError(
            f"{data_path!r} holds column(s) {extra} that {where} does not declare as features; "
            f"declare them (they are imported as columns) rather than drop them"
        )
    cams = {c.split("/")[1] for c in table_columns
            if c.startswith("videos/") and c.endswith("/chunk_index") and c.count("/") == 2}
    missing = sorted(cams - video_cams)
    if missing:
        raise LeRobotFormatError(
            f"the episode table of {root!r} has video(s) of camera(s) {missing} that {where} "
            f"does not declare; declare them rather than import without them"
        )


def _read_tasks(root: str) -> dict[int, str]:
    path = os.path.join(root, S.TASKS_PATH)
    if not os.path.isfile(path):
        raise IntegrityError(f"the task table {path!r} is missing")
    table = read_parquet(path)
    names = table.column_names
    text_col = next((c for c in S.TASK_INDEX_NAMES if c in names), None)
    if text_col is None or "task_index" not in names:
        raise LeRobotFormatError(
            f"{path!r} has columns {names}; expected 'task_index' and the task string as "
            f"one of {list(S.TASK_INDEX_NAMES)}"
        )
    idx = column_to_numpy(
        table.column("task_index"), dtype=np.int64, where=f"task_index in {path!r}"
    )
    texts = table.column(text_col).to_pylist()
    tasks: dict[int, str] = {}
    for i, t in zip(idx.tolist(), texts):
        if i in tasks:
            raise IntegrityError(f"{path!r}: task_index {i} appears twice")
        tasks[int(i)] = str(t)
    return tasks


def _read_rejected(root: str, n_episodes: int) -> frozenset[int]:
    path = os.path.join(root, S.REJECTED_PATH)
    if not os.path.isfile(path):
        return frozenset()
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise LeRobotFormatError(f"{path!r} is not valid JSON ({exc})") from exc
    values = doc.get("rejected_episodes") if isinstance(doc, dict) else None
    if not isinstance(values, list):
        raise LeRobotFormatError(
            f'{path!r} should be {{"rejected_episodes": [episode, ...]}}, got {doc!r}'
        )
    out = set()
    for v in values:
        ep = _whole(v, "a rejected episode", path)
        if not 0 <= ep < n_episodes:
            raise IntegrityError(
                f"{path!r} rejects episode {ep}, which does not exist "
                f"(episodes 0..{n_episodes - 1})"
            )
        out.add(ep)
    return frozenset(out)


def _episode_table(root: str, cameras: tuple[str, ...]) -> tuple[dict[str, np.ndarray], list[str]]:
    files = sorted(glob.glob(os.path.join(root, S.EPISODES_DIR, "chunk-*", "file-*.parquet")))
    if not files:
        raise IntegrityError(
            f"{root!r}: no episode table ({S.EPISODES_DIR}/chunk-*/file-*.parquet)"
        )
    cols: dict[str, Any] = {
        S.EP_INDEX: np.int64,
        S.EP_LENGTH: np.int64,
        S.EP_DATA_CHUNK: np.int64,
        S.EP_DATA_FILE: np.int64,
        S.EP_FROM: np.int64,
        S.EP_TO: np.int64,
    }
    for cam in cameras:
        cols[S.video_column(cam, "chunk_index")] = np.int64
        cols[S.video_column(cam, "file_index")] = np.int64
        cols[S.video_column(cam, "from_timestamp")] = np.float64
    parts: dict[str, list[np.ndarray]] = {c: [] for c in cols}
    names: list[str] = []
    for path in files:
        names += [c for c in parquet_column_names(path) if c not in names]
        table = read_parquet(path, list(cols))
        for c, dt in cols.items():
            parts[c].append(column_to_numpy(table.column(c), dtype=dt, where=f"{c!r} in {path!r}"))
    merged = {c: np.concatenate(v) for c, v in parts.items()}
    order = np.argsort(merged[S.EP_INDEX], kind="stable")
    return {c: v[order] for c, v in merged.items()}, names


def _check_episodes(table: dict[str, np.ndarray], info: dict[str, Any], where: str) -> None:
    idx = table[S.EP_INDEX]
    n_info = _whole(info["total_episodes"], "total_episodes", where)
    frames_info = _whole(info["total_frames"], "total_frames", where)
    if idx.size != n_info:
        raise IntegrityError(
            f"the episode table lists {idx.size} episodes, {where} says total_episodes={n_info}"
        )
    expected = np.arange(idx.size)
    if not np.array_equal(idx, expected):
        bad = int(np.flatnonzero(idx != expected)[0])
        raise IntegrityError(
            f"the episode table's episode indices are not 0..{idx.size - 1} each once: "
            f"position {bad} holds episode {int(idx[bad])}, expected {bad}"
        )
    length, lo, hi = table[S.EP_LENGTH], table[S.EP_FROM], table[S.EP_TO]
    if int(length.sum()) != frames_info:
        raise IntegrityError(
            f"episode lengths sum to {int(length.sum())} frames, {where} says "
            f"total_frames={frames_info}"
        )
    starts = np.concatenate([[0], np.cumsum(length)[:-1]])
    for ep in range(idx.size):
        if length[ep] < 1 or lo[ep] != starts[ep] or hi[ep] - lo[ep] != length[ep]:
            raise IntegrityError(
                f"episode {ep}: length {int(length[ep])}, dataset_from_index {int(lo[ep])}, "
                f"dataset_to_index {int(hi[ep])}; expected a positive length and the range "
                f"[{int(starts[ep])}, {int(starts[ep] + length[ep])})"
            )


def _check_data_files(
    root: str, info: dict[str, Any], table: dict[str, np.ndarray], where: str
) -> list[str]:
    paths = []
    by_file: dict[str, int] = {}
    for ep in range(table[S.EP_INDEX].size):
        rel = S.data_file(info["data_path"], table[S.EP_DATA_CHUNK][ep], table[S.EP_DATA_FILE][ep])
        path = os.path.join(root, rel)
        if path not in by_file:
            if not os.path.isfile(path):
                raise IntegrityError(f"episode {ep}: its data file {path!r} is missing")
            by_file[path] = parquet_num_rows(path)
        paths.append(path)
    rows = sum(by_file.values())
    total = _whole(info["total_frames"], "total_frames", where)
    if rows != total:
        detail = ", ".join(f"{os.path.relpath(p, root)}: {n}" for p, n in by_file.items())
        raise IntegrityError(
            f"the data files hold {rows} rows, {where} says total_frames={total} ({detail}); "
            f"a row is missing or duplicated"
        )
    return paths


def _camera_segments(
    root: str, info: dict[str, Any], table: dict[str, np.ndarray], cam: str, fps: float
) -> list[CameraSegment]:
    chunk = table[S.video_column(cam, "chunk_index")]
    fileno = table[S.video_column(cam, "file_index")]
    t0 = table[S.video_column(cam, "from_timestamp")]
    length = table[S.EP_LENGTH]
    segs: list[CameraSegment] = []
    need: dict[str, tuple[int, int, int]] = {}  # path -> (frames needed, first ep, last ep)
    prev_key: tuple[int, int] | None = None
    for ep in range(length.size):
        key = (int(chunk[ep]), int(fileno[ep]))
        path = os.path.join(root, S.video_file(info["video_path"], cam, *key))
        first = round(float(t0[ep]) * fps)
        if prev_key is not None:
            prev = segs[-1]
            if key < prev_key:
                raise IntegrityError(
                    f"camera {cam!r}: episode {ep} is in {path!r}, which comes before "
                    f"{prev.path!r} holding episode {ep - 1}; the camera's episodes are not in "
                    f"dataset order across its files"
                )
            if key == prev_key and first < prev.first + int(length[ep - 1]):
                raise IntegrityError(
                    f"camera {cam!r}: episode {ep} starts at frame {first} of {path!r}, before "
                    f"episode {ep - 1} ends (frames {prev.first}.."
                    f"{prev.first + int(length[ep - 1]) - 1}); "
                    f"the camera's episodes are not in dataset order within its files"
                )
        segs.append(CameraSegment(path, first))
        end = first + int(length[ep])
        if path not in need:
            need[path] = (end, ep, ep)
        elif need[path][0] < end:
            need[path] = (end, need[path][1], ep)
        prev_key = key
    for path, (end, ep0, ep) in need.items():
        if not os.path.isfile(path):
            eps = f"episode {ep0}" if ep0 == ep else f"episodes {ep0}..{ep}"
            raise IntegrityError(f"camera {cam!r}: video file {path!r} ({eps}) is missing")
        header = probe_video(path)
        if header.n_frames and header.n_frames < end:
            raise IntegrityError(
                f"camera {cam!r}: {path!r} holds {header.n_frames} frames, but episode {ep} "
                f"needs frames up to {end - 1}; the video is shorter than its episodes need"
            )
    return segs


def load_plan(root: str | os.PathLike[str]) -> DatasetPlan:
    """Read and check a LeRobot v3.0 directory's metadata; see the module docstring.

    Raises
    ------
    LeRobotFormatError
        Not a v3.0 dataset, or metadata the importer cannot interpret.
    IntegrityError
        Counts that disagree with ``meta/info.json``, a missing or unreadable file, a camera
        whose episodes are out of dataset order, a video with fewer frames than needed.
    """
    root = os.path.abspath(os.fspath(root))
    info = _read_info(root)
    where = repr(os.path.join(root, S.INFO_PATH))
    fps = float(info["fps"]) if isinstance(info["fps"], int | float) else 0.0
    if not fps > 0:
        raise LeRobotFormatError(f"{where}: fps is {info['fps']!r}, expected a positive number")
    state_dim, state_names = _vector(info, S.STATE_KEY, where)
    action_dim, action_names = _vector(info, S.ACTION_KEY, where)
    cameras, image_cams = _cameras(info, where)
    video_cams = tuple(c for c in cameras if c not in image_cams)
    extras = _extras(info, cameras, where)
    tasks = _read_tasks(root)
    table, table_columns = _episode_table(root, video_cams)
    _check_episodes(table, info, where)
    data_paths = _check_data_files(root, info, table, where)
    for path in dict.fromkeys(data_paths):
        _check_declared(root, info, table_columns, path, set(video_cams), where)
    n_eps = table[S.EP_INDEX].size
    segs_of = {cam: _camera_segments(root, info, table, cam, fps) for cam in video_cams}
    per_cam = [segs_of[cam] if cam in segs_of else [CameraSegment("", 0)] * n_eps
               for cam in cameras]
    episodes = tuple(
        EpisodePlan(
            index=ep,
            length=int(table[S.EP_LENGTH][ep]),
            start=int(table[S.EP_FROM][ep]),
            data_path=data_paths[ep],
            segments=tuple(segs[ep] for segs in per_cam),
        )
        for ep in range(table[S.EP_INDEX].size)
    )
    return DatasetPlan(
        root=root,
        info=info,
        fps=fps,
        cameras=cameras,
        state_dim=state_dim,
        action_dim=action_dim,
        state_names=state_names,
        action_names=action_names,
        tasks=tasks,
        episodes=episodes,
        rejected=_read_rejected(root, len(episodes)),
        extras=extras,
        image_cameras=image_cams,
    )
