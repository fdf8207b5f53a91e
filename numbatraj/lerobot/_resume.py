"""Read a checkpointed LeRobot v3.0 directory back: :func:`read_resume_state`.

The directory is read back through the importer's own readers (:func:`~numbatraj.lerobot.
_plan.load_plan` checks it whole: counts, data rows, videos) and :mod:`numbatraj.io.parquet`
(the episode table and the last data file).  Per-episode statistics cannot be recomputed
without decoding every video, so they come from the sidecar
``meta/numbatraj_writer_stats.json`` written at every checkpoint; the sidecar is also what
marks a directory as written with checkpoints (one mp4 per episode).

A checkpoint a crash interrupted between two of its renames is completed first, from its
journal (:func:`numbatraj.io.atomic.replay_journal`): every temporary file was complete
before the first rename, so it rolls forward.  What a crash left behind is then removed:
``*.part`` files (the videos or data file of the episode in progress) and temporary files
(:func:`numbatraj.io.atomic.is_temp_name`: a checkpoint interrupted before its journal was
written).

The result is a frozen :class:`_ResumeState`: what the directory was written with (checked
against the session by :meth:`_ResumeState.check_session`) and where a writer continuing it
starts (tasks, episode rows, statistics, the next metadata, data and video files).
:meth:`~numbatraj.lerobot.write.LeRobotWriter.resume` builds the writer from it; this module
never touches a writer.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

import numbatraj.lerobot.schema as S
from numbatraj.errors import ResumeError
from numbatraj.io.atomic import is_temp_name, replay_journal
from numbatraj.io.parquet import read_parquet
from numbatraj.io.video_encode import resolve_codec
from numbatraj.lerobot._files import PART_SUFFIX, Key, next_key
from numbatraj.lerobot._plan import load_plan
from numbatraj.lerobot._stats import FeatureStats, stats_from_json
from numbatraj.lerobot._tables import (
    JOURNAL_PATH,
    SIDECAR_PATH,
    SIDECAR_VERSION,
    camera_key,
    data_schema,
)

__all__ = ["read_resume_state", "remove_leftovers"]

_MB = 1 << 20


@dataclass(frozen=True)
class _ResumeState:
    """A writer's starting point.  ``_ResumeState(root)`` is an empty directory's.

    The first group is where the next episode goes; the second what the directory was
    written with (empty for a new directory); ``removed`` and ``completed`` are the leftovers
    deleted and the interrupted checkpoint's renames completed while it was read.
    """

    root: str
    tasks: tuple[str, ...] = ()
    rows: tuple[dict[str, Any], ...] = ()  # the episode table, one dict per episode
    stats: tuple[dict[str, FeatureStats], ...] = ()  # per-episode statistics
    frames: int = 0
    meta_key: Key = (0, 0)  # episode-table file the next episode goes to
    meta_first: int = 0  # first episode of that file
    data_key: Key = (0, 0)  # data file the next episode goes to
    data_tables: tuple[pa.Table, ...] = ()  # episodes already in that file
    video_keys: Mapping[str, Key] = field(default_factory=dict)  # camera key -> next file

    info: Mapping[str, Any] = field(default_factory=dict)  # meta/info.json
    fps: float = 0.0
    camera_keys: tuple[str, ...] = ()
    state_names: tuple[str, ...] = ()
    action_names: tuple[str, ...] = ()
    encoder: str = ""
    crf: int | None = None
    #: extra features as the directory declares them, ``(name, dtype, shape)`` in order
    extras: tuple[tuple[str, str, tuple[int, ...]], ...] = ()
    data_mb: float = 100  # the file-size limit the positions above were decided with

    removed: tuple[str, ...] = ()
    completed: tuple[str, ...] = ()

    def refuse(self, what: str) -> ResumeError:
        return _refuse(self.root, what)

    def _compare(self, what: str, expected: Any, found: Any) -> None:
        if expected != found:
            raise self.refuse(
                f"{what} differ: this session has {expected!r}, the directory {found!r}"
            )

    def check_session(
        self,
        *,
        fps: int,
        cameras: Sequence[str],
        height: int,
        width: int,
        state_names: Sequence[str],
        action_names: Sequence[str],
        codec: str | None,
        crf: int | None,
        features: Sequence[tuple[str, str, tuple[int, ...]]] = (),
    ) -> None:
        """Raise :class:`ResumeError` naming the first setting of the session that differs
        from the directory's (the codec and CRF only when given)."""
        self._compare("fps", float(fps), self.fps)
        keys = sorted(camera_key(c) for c in cameras)
        self._compare("cameras", keys, sorted(self.camera_keys))
        for key in keys:
            shape = self.info["features"][key].get("shape", [])[:2]
            self._compare(
                f"resolutions of camera {key!r} (height, width)", [height, width], shape
            )
        self._compare("state names", [str(n) for n in state_names], list(self.state_names))
        self._compare("action names", [str(n) for n in action_names], list(self.action_names))
        if codec is not None:
            self._compare("video codecs", resolve_codec(codec), self.encoder)
        if crf is not None:
            self._compare("CRF settings", int(crf), self.crf)
        mine = {n: (d, list(s)) for n, d, s in features}
        theirs = {n: (d, list(s)) for n, d, s in self.extras}
        if mine != theirs:
            diff = sorted(
                n for n in set(mine) | set(theirs) if mine.get(n) != theirs.get(n)
            )
            raise self.refuse(
                f"extra features differ ({diff}): this session has "
                f"{ {n: mine[n] for n in diff if n in mine} } (features=), the directory "
                f"{ {n: theirs[n] for n in diff if n in theirs} }"
            )


def _directory_extras(
    info: Mapping[str, Any], cameras: Sequence[str], where: str
) -> tuple[tuple[str, str, tuple[int, ...]], ...]:
    """The extra features ``info.json`` declares (not state, action, a camera or the
    bookkeeping), in its order."""
    reserved = {S.ACTION_KEY, S.STATE_KEY, *S.FRAME_COLUMNS, *cameras}
    out = []
    for name, ft in info.get("features", {}).items():
        if name in reserved:
            continue
        if not isinstance(ft, dict) or not isinstance(ft.get("shape"), list):
            raise _refuse(where, f"feature {name!r} of {S.INFO_PATH} is {ft!r}")
        out.append((str(name), str(ft.get("dtype")), tuple(int(d) for d in ft["shape"])))
    return tuple(out)


#: The folders a writer creates inside its directory (everything it writes is under them).
WRITER_DIRS = ("meta", "data", "videos")


def remove_leftovers(root: str, *, writer_dirs_only: bool = False) -> list[str]:
    """Delete ``*.part`` and temporary (:func:`~numbatraj.io.atomic.is_temp_name`) files under
    ``root`` (only under :data:`WRITER_DIRS` with ``writer_dirs_only``: a directory that holds
    no dataset yet may hold files of its own); returns what was removed."""
    gone = []
    tops = [os.path.join(root, d) for d in WRITER_DIRS] if writer_dirs_only else [root]
    for dirpath, _dirs, files in (w for top in tops for w in os.walk(top)):
        for name in files:
            if name.endswith(PART_SUFFIX) or is_temp_name(name):
                path = os.path.join(dirpath, name)
                os.remove(path)
                gone.append(path)
    return gone


def _refuse(root: str, what: str) -> ResumeError:
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
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _refuse(root, f"{SIDECAR_PATH} is not valid JSON ({exc})") from None
    version = doc.get("version") if isinstance(doc, dict) else None
    if version != SIDECAR_VERSION:
        raise _refuse(root, f"{SIDECAR_PATH} has version {version!r}, expected 1")
    if not doc.get("checkpoint"):
        raise _refuse(
            root,
            "it was written with checkpoint=False (episodes share video files); only a "
            "checkpointed directory can be continued",
        )
    return doc


def _sidecar_stats(root: str, entries: Sequence[Any]) -> tuple[dict[str, FeatureStats], ...]:
    try:
        return tuple(stats_from_json(e["stats"]) for e in entries)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise _refuse(
            root, f"{SIDECAR_PATH} holds malformed per-episode statistics ({exc!r})"
        ) from None


def _episode_rows(root: str) -> list[dict[str, Any]]:
    files = sorted(glob.glob(os.path.join(root, S.EPISODES_DIR, "chunk-*", "file-*.parquet")))
    rows: list[dict[str, Any]] = []
    for path in files:
        rows += read_parquet(path).to_pylist()
    rows.sort(key=lambda r: int(r[S.EP_INDEX]))
    return rows


def _key(row: Mapping[str, Any], chunk: str, fileno: str) -> Key:
    return int(row[chunk]), int(row[fileno])


def read_resume_state(
    root: str | os.PathLike[str], *, data_mb: float | None = None
) -> _ResumeState:
    """Where a writer continuing ``root`` starts.

    ``data_mb`` is the session's file-size limit (default: the directory's); it decides
    whether the last episode-table and data files take more episodes.

    Raises
    ------
    ResumeError
        No dataset, an interrupted checkpoint that cannot be completed, no sidecar (not
        written with checkpoints), a sidecar written with ``checkpoint=False`` or behind the
        episode table.
    LeRobotFormatError, IntegrityError
        The directory does not read back as a complete dataset.
    """
    root = os.path.abspath(os.fspath(root))
    try:
        completed = replay_journal(os.path.join(root, JOURNAL_PATH), root=root)
    except (OSError, ValueError) as exc:
        raise _refuse(root, f"its interrupted checkpoint cannot be completed: {exc}") from exc
    if not os.path.isfile(os.path.join(root, S.INFO_PATH)):
        raise _refuse(root, f"{S.INFO_PATH} does not exist; there is no dataset to continue")
    side = _read_sidecar(root)
    removed = remove_leftovers(root, writer_dirs_only=True)
    plan = load_plan(root)
    info = plan.info
    rows = _episode_rows(root)
    n = len(plan.episodes)
    side_stats = side.get("episodes", [])
    if not isinstance(side_stats, list):
        raise _refuse(root, f"{SIDECAR_PATH} 'episodes' is {side_stats!r}, expected a list")
    if len(side_stats) < n:
        raise _refuse(
            root,
            f"{SIDECAR_PATH} holds statistics for {len(side_stats)} episodes, the dataset "
            f"has {n}",
        )
    limit = data_mb if data_mb is not None else info.get("data_files_size_in_mb", 100)
    meta_key: Key = (0, 0)
    meta_first = 0
    data_key: Key = (0, 0)
    data_tables: tuple[pa.Table, ...] = ()
    video_keys: dict[str, Key] = {}
    extras = _directory_extras(info, plan.cameras, root)
    if rows:
        last = rows[-1]
        meta_key = _key(last, S.EP_META_CHUNK, S.EP_META_FILE)
        if os.path.getsize(os.path.join(root, S.episodes_file(*meta_key))) >= limit * _MB:
            meta_key, meta_first = next_key(meta_key), n
        else:
            meta_first = next(
                i for i, r in enumerate(rows)
                if _key(r, S.EP_META_CHUNK, S.EP_META_FILE) == meta_key
            )
        data_key = _key(last, S.EP_DATA_CHUNK, S.EP_DATA_FILE)
        data_path = os.path.join(root, S.data_file(S.DEFAULT_DATA_PATH, *data_key))
        if os.path.getsize(data_path) >= limit * _MB:
            data_key = next_key(data_key)
        else:
            names = data_schema(plan.state_dim, plan.action_dim, extras).names
            data_tables = (read_parquet(data_path, names),)
        for key in plan.cameras:
            video_keys[key] = next_key(
                _key(last, S.video_column(key, "chunk_index"), S.video_column(key, "file_index"))
            )
    return _ResumeState(
        root=root,
        tasks=tuple(plan.tasks[i] for i in sorted(plan.tasks)),
        rows=tuple(rows),
        stats=_sidecar_stats(root, side_stats[:n]),
        frames=sum(ep.length for ep in plan.episodes),
        meta_key=meta_key,
        meta_first=meta_first,
        data_key=data_key,
        data_tables=data_tables,
        video_keys=video_keys,
        info=info,
        fps=plan.fps,
        camera_keys=plan.cameras,
        state_names=plan.state_names,
        action_names=plan.action_names,
        encoder=str(side.get("encoder")),
        crf=(side.get("options") or {}).get("crf"),
        extras=extras,
        data_mb=limit,
        removed=tuple(removed),
        completed=tuple(completed),
    )
