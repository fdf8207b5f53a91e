"""What a LeRobot v3.0 directory holds: paths, file templates, column names, feature dicts.

This is the schema knowledge only, shared by everything that reads or writes the format (the
importer, the test fixture generator, a writer).  It reads no file.  The names follow
LeRobot's own writer (``huggingface/lerobot``, ``src/lerobot/datasets/``)::

    meta/info.json                        codebase_version, fps, features, templates, totals
    meta/tasks.parquet                    task string (pandas index) -> task_index
    meta/episodes/chunk-*/file-*.parquet  one row per episode: length, data and video maps
    meta/rejected_episodes.json           optional: episodes kept on disk but not trained on
    data/chunk-*/file-*.parquet           one row per frame
    videos/<camera>/chunk-*/file-*.mp4    each camera's episodes back to back
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "ACTION_KEY",
    "CHUNK_FILE_PATTERN",
    "CODEBASE_VERSION",
    "DEFAULT_CHUNKS_SIZE",
    "DEFAULT_DATA_PATH",
    "DEFAULT_EPISODES_PATH",
    "DEFAULT_VIDEO_PATH",
    "EPISODES_DIR",
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
