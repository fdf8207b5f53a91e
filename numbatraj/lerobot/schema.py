"""What a LeRobot v3.0 directory holds: paths, file templates, column names, feature dicts.

This is the schema knowledge only, shared by everything that reads or writes the format (the
importer, the writer, the test fixture generator, the recording pusher and the catalog
service, which checks that a snapshot's ``meta/`` names only files it holds).  It opens no
file: :func:`parse_info` and :func:`named_files` take bytes.  The names follow
LeRobot's own writer (``huggingface/lerobot``, ``src/lerobot/datasets/``)::

    meta/info.json                        codebase_version, fps, features, templates, totals
    meta/tasks.parquet                    task string (pandas index) -> task_index
    meta/episodes/chunk-*/file-*.parquet  one row per episode: length, data and video maps
    meta/rejected_episodes.json           optional: episodes kept on disk but not trained on
    data/chunk-*/file-*.parquet           one row per frame
    videos/<camera>/chunk-*/file-*.mp4    each camera's episodes back to back
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping, Sequence
from typing import Any

from numbatraj.errors import IntegrityError

__all__ = [
    "ACTION_KEY",
    "CHUNK_FILE_PATTERN",
    "CODEBASE_VERSION",
    "DEFAULT_CHUNKS_SIZE",
    "DEFAULT_DATA_PATH",
    "DEFAULT_EPISODES_PATH",
    "DEFAULT_VIDEO_PATH",
    "EPISODES_DIR",
    "EPISODES_PREFIX",
    "EP_DATA_CHUNK",
    "EP_DATA_FILE",
    "EP_FROM",
    "EP_INDEX",
    "EP_LENGTH",
    "EP_META_CHUNK",
    "EP_META_FILE",
    "EP_TASKS",
    "EP_TO",
    "FRAME_COLUMNS",
    "INFO_PATH",
    "REJECTED_PATH",
    "STATE_KEY",
    "STATS_PATH",
    "TASKS_PATH",
    "TASK_INDEX_NAMES",
    "VIDEO_FIELDS",
    "build_info",
    "data_file",
    "episodes_file",
    "frame_features",
    "named_files",
    "order_key",
    "parse_info",
    "vector_feature",
    "video_column",
    "video_feature",
    "video_file",
]

CODEBASE_VERSION = "v3.0"

INFO_PATH = "meta/info.json"
TASKS_PATH = "meta/tasks.parquet"
STATS_PATH = "meta/stats.json"
EPISODES_DIR = "meta/episodes"
EPISODES_PREFIX = EPISODES_DIR + "/"
REJECTED_PATH = "meta/rejected_episodes.json"

CHUNK_FILE_PATTERN = "chunk-{chunk_index:03d}/file-{file_index:03d}"
DEFAULT_DATA_PATH = "data/" + CHUNK_FILE_PATTERN + ".parquet"
DEFAULT_VIDEO_PATH = "videos/{video_key}/" + CHUNK_FILE_PATTERN + ".mp4"
DEFAULT_EPISODES_PATH = EPISODES_DIR + "/" + CHUNK_FILE_PATTERN + ".parquet"
#: Files per chunk directory before LeRobot starts the next chunk.
DEFAULT_CHUNKS_SIZE = 1000

STATE_KEY = "observation.state"
ACTION_KEY = "action"

#: Bookkeeping columns of every data row, with the dtype LeRobot declares for them.
FRAME_COLUMNS: dict[str, str] = {
    "timestamp": "float32",
    "frame_index": "int64",
    "episode_index": "int64",
    "index": "int64",
    "task_index": "int64",
}

#: Where ``meta/tasks.parquet`` keeps the task string: pandas' index column name in older
#: writers, ``task`` in newer ones.
TASK_INDEX_NAMES: tuple[str, ...] = ("task", "__index_level_0__")

# Columns of meta/episodes/*.parquet.
EP_INDEX = "episode_index"
EP_LENGTH = "length"
EP_TASKS = "tasks"
EP_DATA_CHUNK = "data/chunk_index"
EP_DATA_FILE = "data/file_index"
EP_FROM = "dataset_from_index"
EP_TO = "dataset_to_index"
EP_META_CHUNK = "meta/episodes/chunk_index"
EP_META_FILE = "meta/episodes/file_index"

#: Per-camera columns of the episode table: ``videos/<camera>/<field>``.
VIDEO_FIELDS: tuple[str, ...] = ("chunk_index", "file_index", "from_timestamp", "to_timestamp")


def video_column(camera: str, field: str) -> str:
    """Name of a camera's column in the episode table (``videos/<camera>/<field>``)."""
    if field not in VIDEO_FIELDS:
        raise ValueError(f"video field {field!r} is not one of {VIDEO_FIELDS}")
    return f"videos/{camera}/{field}"


def frame_features() -> dict[str, dict[str, Any]]:
    """The feature entries LeRobot adds to every dataset for the bookkeeping columns."""
    return {
        name: {"dtype": dtype, "shape": [1], "names": None} for name, dtype in FRAME_COLUMNS.items()
    }


def vector_feature(names: Sequence[str], dtype: str = "float32") -> dict[str, Any]:
    """Feature entry of a fixed-size vector (``observation.state``, ``action``)."""
    return {"dtype": dtype, "shape": [len(names)], "names": list(names)}


def video_feature(
    height: int, width: int, *, codec: str, fps: int, pix_fmt: str = "yuv420p"
) -> dict[str, Any]:
    """Feature entry of a camera stored as video, with the codec block LeRobot records."""
    return {
        "dtype": "video",
        "shape": [int(height), int(width), 3],
        "names": ["height", "width", "channels"],
        "info": {
            "video.height": int(height),
            "video.width": int(width),
            "video.codec": codec,
            "video.pix_fmt": pix_fmt,
            "video.is_depth_map": False,
            "video.fps": int(fps),
            "video.channels": 3,
            "has_audio": False,
        },
    }


def build_info(
    *,
    fps: int,
    features: dict[str, dict[str, Any]],
    total_episodes: int,
    total_frames: int,
    total_tasks: int,
    robot_type: str | None = None,
    chunks_size: int = DEFAULT_CHUNKS_SIZE,
    data_files_size_in_mb: int = 100,
    video_files_size_in_mb: int = 200,
) -> dict[str, Any]:
    """A ``meta/info.json`` document as LeRobot v3.0 writes it.

    ``features`` should hold the data features; :func:`frame_features` are added when absent.
    """
    feats = dict(features)
    for name, ft in frame_features().items():
        feats.setdefault(name, ft)
    has_video = any(ft.get("dtype") == "video" for ft in feats.values())
    return {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": robot_type,
        "total_episodes": int(total_episodes),
        "total_frames": int(total_frames),
        "total_tasks": int(total_tasks),
        "chunks_size": int(chunks_size),
        "data_files_size_in_mb": data_files_size_in_mb,
        "video_files_size_in_mb": video_files_size_in_mb,
        "fps": int(fps),
        "splits": {"train": f"0:{int(total_episodes)}"},
        "data_path": DEFAULT_DATA_PATH,
        "video_path": DEFAULT_VIDEO_PATH if has_video else None,
        "features": feats,
    }


def data_file(template: str, chunk_index: int, file_index: int) -> str:
    """Relative path of a data file from the ``data_path`` template."""
    return template.format(chunk_index=int(chunk_index), file_index=int(file_index))


def video_file(template: str, camera: str, chunk_index: int, file_index: int) -> str:
    """Relative path of a camera's video file from the ``video_path`` template."""
    return template.format(
        video_key=camera, chunk_index=int(chunk_index), file_index=int(file_index)
    )


def episodes_file(chunk_index: int, file_index: int) -> str:
    """Relative path of an episode-table file."""
    return DEFAULT_EPISODES_PATH.format(chunk_index=int(chunk_index), file_index=int(file_index))


# --- what a snapshot's meta/ names (the pusher's order, the service's check) ---

def parse_info(raw: bytes, where: str = INFO_PATH) -> dict[str, Any]:
    """``info.json`` as a dict (raises :class:`IntegrityError` naming ``where``)."""
    try:
        info = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise IntegrityError(f"{where} is not JSON: {exc}") from None
    if not isinstance(info, dict):
        raise IntegrityError(f"{where} is not a JSON object")
    return info


def _int_column(table: Any, name: str, where: str) -> list[int]:
    if name not in table.column_names:
        raise IntegrityError(f"{where} has no column {name!r}")
    values = table.column(name).to_pylist()
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise IntegrityError(
                f"{where} column {name!r} row {i} is {v!r}, not a non-negative integer"
            )
    return values


_INDEX_FIELDS = ("chunk_index", "file_index")
_INDEX_SPEC = re.compile(r"(0?[1-9])?d?")


def _check_template(tpl: Any, key: str, fields: tuple[str, ...]) -> str:
    """``info.json``'s ``key`` template, refused unless it only names ``fields`` with an
    integer spec of at most 9 digits (``{chunk_index:03d}``) and no conversion."""
    allowed = ", ".join("{" + f + "}" for f in fields)

    def bad(why: str) -> IntegrityError:
        return IntegrityError(
            f"{INFO_PATH} {key} {tpl!r} is not a path template this catalog accepts ({why}); "
            f"it may name only {allowed}, an index with a spec like :03d"
        )

    if not isinstance(tpl, str) or not tpl or len(tpl) > 512:
        raise bad("not a non-empty string of at most 512 chars")
    try:
        parsed = list(string.Formatter().parse(tpl))
    except ValueError as exc:
        raise bad(str(exc)) from None
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if field not in fields:
            raise bad(f"unknown field {{{field}}}")
        if conversion is not None:
            raise bad(f"conversion !{conversion} on {{{field}}}")
        if field in _INDEX_FIELDS:
            if not _INDEX_SPEC.fullmatch(spec or ""):
                raise bad(f"format spec {spec!r} on {{{field}}}")
        elif spec:
            raise bad(f"format spec {spec!r} on {{{field}}}")
    return tpl


def named_files(info_raw: bytes, episode_tables: Mapping[str, bytes]) -> set[str]:
    """Every video and data file that ``info.json`` + the episode tables point a reader at.

    Parameters
    ----------
    info_raw : bytes
        Content of ``meta/info.json``.
    episode_tables : mapping
        ``meta/episodes/...parquet`` path -> content, for every episode-table file.

    Raises
    ------
    IntegrityError
        Unreadable JSON or Parquet, or a column the format requires is absent (named).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    info = parse_info(info_raw)
    features = info.get("features") or {}
    if not isinstance(features, dict):
        raise IntegrityError(f"{INFO_PATH} features is not a JSON object")
    cameras = sorted(
        k for k, v in features.items() if isinstance(v, dict) and v.get("dtype") == "video"
    )
    video_tpl = info.get("video_path")
    if video_tpl is not None:
        video_tpl = _check_template(video_tpl, "video_path", ("video_key", *_INDEX_FIELDS))
    data_tpl = info.get("data_path")
    data_tpl = DEFAULT_DATA_PATH if data_tpl is None else _check_template(
        data_tpl, "data_path", _INDEX_FIELDS)
    out: set[str] = set()
    for path, raw in sorted(episode_tables.items()):
        try:
            table = pq.read_table(pa.BufferReader(raw))
        except (pa.ArrowException, OSError) as exc:
            raise IntegrityError(f"{path} is not a readable Parquet file: {exc}") from None
        for c, f in zip(_int_column(table, "data/chunk_index", path),
                        _int_column(table, "data/file_index", path)):
            out.add(data_tpl.format(chunk_index=c, file_index=f))
        for cam in cameras:
            if not video_tpl:
                raise IntegrityError(f"{INFO_PATH} has video feature {cam!r} but no video_path")
            chunks = _int_column(table, f"videos/{cam}/chunk_index", path)
            files = _int_column(table, f"videos/{cam}/file_index", path)
            for c, f in zip(chunks, files):
                out.add(video_tpl.format(video_key=cam, chunk_index=c, file_index=f))
    return out


def order_key(path: str) -> tuple[int, str]:
    """Push order: videos, then data, then other files, then ``meta/`` with ``info.json``
    last, so the service holds what the metadata names before the metadata itself."""
    if path == INFO_PATH:
        rank = 4
    elif path.startswith("meta/"):
        rank = 3
    elif path.startswith("videos/"):
        rank = 0
    elif path.startswith("data/"):
        rank = 1
    else:
        rank = 2
    return rank, path
