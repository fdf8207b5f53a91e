"""Reopen a checkpointed LeRobot v3.0 directory: :func:`resume_writer`.

The directory is read back through the importer's own readers (:func:`~numbatraj.importers.
_lerobot_meta.load_plan` checks it whole: counts, data rows, videos) and
:mod:`numbatraj.io.parquet` (the episode table and the last data file).  Per-episode
statistics cannot be recomputed without decoding every video, so they come from the sidecar
``meta/numbatraj_writer_stats.json`` written at every checkpoint; the sidecar is also what
marks a directory as written with checkpoints (one mp4 per episode).

A checkpoint a crash interrupted between two of its renames is completed first, from its
journal (:func:`~numbatraj.importers._lerobot_write_meta.replay_journal`): every temporary
file was complete before the first rename, so it rolls forward.  What a crash left behind is
then removed: ``*.part`` files (the videos or data file of the episode in progress) and
hidden ``.*.tmp`` files (a checkpoint interrupted before its journal was written).
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from numbatraj.importers._lerobot_meta import load_plan
from numbatraj.importers._lerobot_write_files import PART_SUFFIX, next_key
from numbatraj.importers._lerobot_write_meta import (
    SIDECAR_PATH,
    SIDECAR_VERSION,
    camera_key,
    replay_journal,
)
from numbatraj.importers._lerobot_write_stats import stats_from_json
from numbatraj.io.parquet import read_parquet
from numbatraj.io.video_encode import resolve_codec
from numbatraj.lerobot import schema as S

if TYPE_CHECKING:
    from numbatraj.importers.lerobot_writer import LeRobotWriter

__all__ = ["remove_leftovers", "resume_writer"]

_MB = 1 << 20


def remove_leftovers(root: str) -> list[str]:
    """Delete ``*.part`` and hidden ``.*.tmp`` files under ``root``; returns what was removed."""
    gone = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name.endswith(PART_SUFFIX) or (name.startswith(".") and name.endswith(".tmp")):
                path = os.path.join(dirpath, name)
                os.remove(path)
                gone.append(path)
    return gone


def _refuse(root: str, what: str) -> Exception:
    from numbatraj.importers.lerobot_writer import ResumeError

    return ResumeError(f"cannot resume {root!r}: {what}")


def _read_sidecar(root: str) -> dict[str, Any]:
    path = os.path.join(root, SIDECAR_PATH)
    if not os.path.isfile(path):
        raise _refuse(
            root,
            f"{SIDECAR_PATH} is missing, so it was not written by LeRobotWriter with "
            f"checkpoint=True; its episodes may share video files and its per-episode "
            f"statistics are unknown",
        )
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    if not isinstance(doc, dict) or doc.get("version") != SIDECAR_VERSION:
        raise _refuse(root, f"{SIDECAR_PATH} has version {doc.get('version')!r}, expected 1")
    if not doc.get("checkpoint"):
        raise _refuse(
            root,
            "it was written with checkpoint=False (episodes share video files); only a "
            "checkpointed directory can be continued",
        )
    return doc


def _compare(root: str, what: str, expected: Any, found: Any) -> None:
    if expected != found:
        raise _refuse(
            root, f"{what} differ: this session has {expected!r}, the directory {found!r}"
        )


def _episode_rows(root: str) -> list[dict[str, Any]]:
    files = sorted(glob.glob(os.path.join(root, S.EPISODES_DIR, "chunk-*", "file-*.parquet")))
    rows: list[dict[str, Any]] = []
    for path in files:
        rows += read_parquet(path).to_pylist()
    rows.sort(key=lambda r: int(r[S.EP_INDEX]))
    return rows


def resume_writer(
    cls: type[LeRobotWriter],
    root: str | os.PathLike[str],
    *,
    fps: int,
    state_names: Sequence[str],
    action_names: Sequence[str],
    cameras: Sequence[str],
    height: int,
    width: int,
    codec: str | None = None,
    video_mb: float | None = None,
    data_mb: float | None = None,
    robot_type: str | None = None,
    crf: int | None = None,
) -> LeRobotWriter:
    """A :class:`LeRobotWriter` positioned after the last episode of ``root``.

    The session's settings must match the directory: ``fps``, the cameras, each camera's
    ``height`` x ``width``, the state and action names, and the codec and CRF (when given).
    ``video_mb``, ``data_mb`` and ``robot_type`` default to the directory's.

    Raises
    ------
    ResumeError
        No dataset, no sidecar (not written with checkpoints), a sidecar written with
        ``checkpoint=False`` or behind the episode table, or a setting that differs (the
        message names it, with both values).
    LeRobotFormatError, IntegrityError
        The directory does not read back as a complete dataset.
    """
    root = os.path.abspath(os.fspath(root))
    try:
        completed = replay_journal(root)
    except (OSError, ValueError) as exc:
        raise _refuse(root, f"its interrupted checkpoint cannot be completed: {exc}") from exc
    if not os.path.isfile(os.path.join(root, S.INFO_PATH)):
        raise _refuse(root, f"{S.INFO_PATH} does not exist; there is no dataset to continue")
    side = _read_sidecar(root)
    removed = remove_leftovers(root)
    plan = load_plan(root)
    info = plan.info
    _compare(root, "fps", float(fps), plan.fps)
    keys = sorted(camera_key(c) for c in cameras)
    _compare(root, "cameras", keys, sorted(plan.cameras))
    for key in keys:
        shape = info["features"][key].get("shape", [])[:2]
        _compare(root, f"resolutions of camera {key!r} (height, width)", [height, width], shape)
    _compare(root, "state names", [str(n) for n in state_names], list(plan.state_names))
    _compare(root, "action names", [str(n) for n in action_names], list(plan.action_names))
    encoder = str(side.get("encoder"))
    if codec is not None:
        _compare(root, "video codecs", resolve_codec(codec), encoder)
    side_crf = (side.get("options") or {}).get("crf")
    if crf is not None:
        _compare(root, "CRF settings", int(crf), side_crf)
    rows = _episode_rows(root)
    n = len(plan.episodes)
    stats = side.get("episodes", [])
    if len(stats) < n:
        raise _refuse(
            root,
            f"{SIDECAR_PATH} holds statistics for {len(stats)} episodes, the dataset has {n}",
        )
    writer = cls.__new__(cls)
    writer._resuming = True  # type: ignore[attr-defined]
    writer.__init__(  # type: ignore[misc]
        root, fps, state_names, action_names, cameras, height, width,
        checkpoint=True, codec=encoder,
        video_mb=video_mb if video_mb is not None else info.get("video_files_size_in_mb", 100),
        data_mb=data_mb if data_mb is not None else info.get("data_files_size_in_mb", 100),
        robot_type=robot_type if robot_type is not None else info.get("robot_type"),
        crf=side_crf,
    )
    writer.tasks = [plan.tasks[i] for i in sorted(plan.tasks)]
    writer._rows = rows
    writer._stats = [stats_from_json(s["stats"]) for s in stats[:n]]
    writer.total_frames = sum(ep.length for ep in plan.episodes)
    writer.resumed_removed = removed  # type: ignore[attr-defined]
    writer.resumed_completed = completed  # type: ignore[attr-defined]
    if not rows:
        return writer
    last = rows[-1]
    meta_key = (int(last[S.EP_META_CHUNK]), int(last[S.EP_META_FILE]))
    meta_path = os.path.join(root, S.episodes_file(*meta_key))
    if os.path.getsize(meta_path) >= writer.data_mb * _MB:
        writer._meta_key, writer._meta_first = next_key(meta_key), n
    else:
        writer._meta_key = meta_key
        writer._meta_first = next(
            i for i, r in enumerate(rows)
            if (int(r[S.EP_META_CHUNK]), int(r[S.EP_META_FILE])) == meta_key
        )
    data = writer._data
    data_key = (int(last[S.EP_DATA_CHUNK]), int(last[S.EP_DATA_FILE]))
    data_path = data.path(data_key)
    if os.path.getsize(data_path) >= writer.data_mb * _MB:
        data.file_key, data.tables = next_key(data_key), []
    else:
        table = read_parquet(data_path, data.schema.names)
        data.file_key, data.tables = data_key, [table.cast(data.schema)]
    for key, cam in zip(writer.camera_keys, writer._videos):
        chunk = int(last[S.video_column(key, "chunk_index")])
        fileno = int(last[S.video_column(key, "file_index")])
        cam.file_key = next_key((chunk, fileno))
    return writer
