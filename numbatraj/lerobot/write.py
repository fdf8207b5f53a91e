"""Record episodes as a LeRobot v3.0 dataset: :class:`LeRobotWriter`.

The tree is the one LeRobot's recorder writes (``meta/info.json``, ``meta/stats.json``,
``meta/tasks.parquet``, ``meta/episodes/chunk-*/file-*.parquet``, ``data/chunk-*/file-*.parquet``,
``videos/<camera>/chunk-*/file-*.mp4``), so LeRobot, :func:`~numbatraj.lerobot.read.
import_lerobot_v3` and the Hub's viewer all read it.

Frames go straight into one PyAV encoder per camera (:class:`~numbatraj.io.video_encode.
VideoEncoder`); the only per-frame state kept is the episode's numbers (state and action rows)
and a 256-bin histogram per camera for the image statistics.  An mp4 is built under
``<name>.mp4.part`` and published (:func:`numbatraj.io.atomic.publish`) when it is finished,
so no reader ever sees a partial video.

``checkpoint=True`` (what recorders use): every episode gets its own mp4 per camera, and
:meth:`LeRobotWriter.end_episode` rewrites the current data file and every metadata file as
one journalled :class:`~numbatraj.io.atomic.FileBatch`.  The directory is then a complete
dataset after every episode; a crash loses at
most the episode being recorded, and :meth:`LeRobotWriter.resume` carries on.

``checkpoint=False``: episodes are appended to each camera's open mp4 and to an open Parquet
writer, and the metadata is written once by :meth:`LeRobotWriter.close`.

In both modes a video or data file stops taking episodes once it has reached ``video_mb`` /
``data_mb``: files roll only between episodes (an episode split across two videos could not be
located), so a file can exceed the limit by at most one episode.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Self

import numpy as np

import numbatraj.lerobot.schema as S
from numbatraj.errors import DatasetExistsError, EpisodeError, ResumeError, SchemaError
from numbatraj.io.atomic import FileBatch, PublishLock, publish_lock
from numbatraj.io.video_encode import resolve_codec
from numbatraj.lerobot._files import CameraFiles, DataFiles, next_key
from numbatraj.lerobot._guard import refuse_existing_dataset, reject_episode
from numbatraj.lerobot._resume import _ResumeState, read_resume_state, remove_leftovers
from numbatraj.lerobot._settings import WriterSettings, extra_features
from numbatraj.lerobot._stats import (
    ImageStats,
    aggregate_stats,
    episode_stats,
    flatten_episode_stats,
    stats_to_json,
)
from numbatraj.lerobot._tables import (
    DEFAULT_CRF,
    JOURNAL_PATH,
    SIDECAR_PATH,
    SIDECAR_VERSION,
    camera_key,
    canonical_codec,
    codec_options,
    data_schema,
    encoder_options,
    episode_data_table,
    episodes_table,
    json_fill,
    parquet_fill,
    tasks_table,
    video_feature_info,
)

__all__ = [
    "DEFAULT_CRF",
    "DatasetExistsError",
    "LeRobotWriter",
    "ResumeError",
    "WriterSettings",
    "codec_options",
    "refuse_existing_dataset",
    "reject_episode",
]

os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1: errors only, not a banner per file

_MB = 1 << 20


class LeRobotWriter:
    """Write episodes as a LeRobot v3.0 dataset; see the module docstring.

    Parameters
    ----------
    root : path-like
        The dataset directory.  Refused if it already holds a dataset
        (:func:`refuse_existing_dataset`); use :meth:`resume` to continue one.
    fps : int
        Frames per second.
    state_names, action_names : sequence of str
        Names of the ``observation.state`` and ``action`` entries (their lengths are the
        dimensions; they may differ).
    cameras : sequence of str
        Camera names (``"front"`` becomes the feature ``observation.images.front``).
        ``add_frame`` takes frames keyed by these names.
    height, width : int
        Frame size of every camera.
    checkpoint : bool
        Make the directory a complete dataset after every episode (one mp4 per episode).
    codec : str
        ``"libsvtav1"`` (AV1, LeRobot's default) or ``"libx264"``; aliases ``"av1"``, ``"h264"``.
    video_mb, data_mb : float
        Size at which a video or data file stops taking episodes.
    robot_type : str, optional
        Recorded in ``meta/info.json``.
    crf : int, optional
        Constant rate factor (default :data:`DEFAULT_CRF`).
    features : mapping, optional
        Extra per-frame features, ``name -> (dtype, shape)`` (or ``name -> {"dtype": ...,
        "shape": ...}`` as in ``meta/info.json``), e.g. ``{"next.reward": ("float32", (1,)),
        "next.done": ("bool", (1,)), "observation.environment_state": ("float32", (4,))}``.
        dtypes: bool, (u)int8-64, float16/32/64; shape ``()`` or ``(1,)`` is a scalar.
        Each is written as a data column of that name, declared in ``info.json`` and given
        statistics; :meth:`add_frame` then takes every one of them in ``extra=``.  Names of
        features the writer fills itself (``action``, ``observation.state``, the cameras,
        ``timestamp``, ``frame_index``, ``episode_index``, ``index``, ``task_index``) are
        refused.

    One writer owns a directory: it holds :func:`~numbatraj.io.atomic.publish_lock` of
    ``root`` (the lock file ``<root>.lock`` beside it) until :meth:`close`, so a second
    writer or resume of the same directory fails at once (:class:`~numbatraj.errors.
    LockedError` naming the holder).  Holding it, a new writer and :meth:`resume` delete what
    a killed run left in the directory (``*.part`` files and temporaries under ``meta/``,
    ``data/`` and ``videos/``,
    :func:`~numbatraj.io.atomic.is_temp_name`); they are listed in :attr:`resumed_removed`.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        fps: int,
        state_names: Sequence[str],
        action_names: Sequence[str],
        cameras: Sequence[str],
        height: int,
        width: int,
        *,
        checkpoint: bool = True,
        codec: str = "libsvtav1",
        video_mb: float = 100,
        data_mb: float = 100,
        robot_type: str | None = None,
        crf: int | None = None,
        features: Mapping[str, Any] | None = None,
    ) -> None:
        settings = WriterSettings(
            root=os.fspath(root), fps=fps, state_names=tuple(state_names),
            action_names=tuple(action_names), cameras=tuple(cameras), height=height,
            width=width, checkpoint=checkpoint, codec=codec, video_mb=video_mb,
            data_mb=data_mb, robot_type=robot_type, crf=crf, features=features or {},
        )
        lock = _writer_lock(settings.root)
        try:
            refuse_existing_dataset(settings.root)
            removed = remove_leftovers(settings.root, writer_dirs_only=True)
            os.makedirs(os.path.join(settings.root, "meta"), exist_ok=True)
            self._start(settings, _ResumeState(settings.root, removed=tuple(removed)))
        except BaseException:
            lock.release()
            raise
        self._lock: PublishLock | None = lock

    @classmethod
    def _from_state(cls, settings: WriterSettings, state: _ResumeState) -> LeRobotWriter:
        """A writer continuing the directory ``state`` was read from (see :meth:`resume`)."""
        writer = cls.__new__(cls)  # the directory holds a dataset: skip __init__'s refusal
        writer._start(settings, state)
        return writer

    def _start(self, settings: WriterSettings, state: _ResumeState) -> None:
        """Set every attribute: the settings, and the position ``state`` records (an empty
        one for a new directory)."""
        self.settings = settings
        self.root = settings.root
        self.fps = settings.fps
        self.state_names = settings.state_names
        self.action_names = settings.action_names
        self.cameras = settings.cameras
        self.camera_keys = tuple(camera_key(c) for c in self.cameras)
        self.height, self.width = settings.height, settings.width
        self.checkpoint = settings.checkpoint
        self.encoder = resolve_codec(settings.codec)
        self.options = codec_options(self.encoder, settings.crf)
        self.video_mb, self.data_mb = settings.video_mb, settings.data_mb
        self.robot_type = settings.robot_type
        #: The extra features, ``(name, dtype, shape)`` in declaration order.
        self.extra_features: tuple[tuple[str, str, tuple[int, ...]], ...] = settings.features
        self._schema = data_schema(
            len(self.state_names), len(self.action_names), self.extra_features
        )
        self.tasks: list[str] = list(state.tasks)
        self._rows: list[dict[str, Any]] = list(state.rows)  # episode table rows
        self._stats: list[dict[str, dict[str, np.ndarray]]] = list(state.stats)  # per episode
        self.total_frames = state.frames
        self._meta_key = state.meta_key
        self._meta_first = state.meta_first  # first episode of the current episode-table file
        self._data = DataFiles(
            self.root, self._schema, self.data_mb * _MB, self.checkpoint,
            file_key=state.data_key, tables=state.data_tables,
        )
        self._videos = [
            CameraFiles(
                self.root, key, self.encoder, encoder_options(self.encoder, self.options,
                                                 self.width),
                self.fps, self.width, self.height, self.video_mb * _MB, self.checkpoint,
                file_key=state.video_keys.get(key, (0, 0)),
            )
            for key in self.camera_keys
        ]
        self._episode: dict[str, Any] | None = None
        self._closed = False
        self._lock = None  # set by __init__ / resume once it is held
        #: Leftovers of a crash that :meth:`resume` deleted, and the renames of an
        #: interrupted checkpoint it completed (both empty for a new directory).
        self.resumed_removed: list[str] = list(state.removed)
        self.resumed_completed: list[str] = list(state.completed)

    # -- episodes -------------------------------------------------------------------------

    @property
    def n_episodes(self) -> int:
        """Episodes written (the open one excluded)."""
        return len(self._rows)

    @property
    def in_episode(self) -> bool:
        """Whether an episode is open."""
        return self._episode is not None

    def _require_open(self) -> None:
        if self._closed:
            raise EpisodeError(f"the writer of {self.root!r} is closed")

    def begin_episode(self, task: str) -> int:
        """Open episode :attr:`n_episodes` for ``task``; returns its index."""
        self._require_open()
        if self._episode is not None:
            raise EpisodeError(
                f"episode {self.n_episodes} is still open ({self._episode['n']} frames); "
                f"end_episode() or discard_episode() first"
            )
        if not isinstance(task, str) or not task:
            raise SchemaError(f"task must be a non-empty string, got {task!r}")
        for cam in self._videos:
            cam.begin_episode()
        self._episode = {
            "task": task,
            "n": 0,
            "state": [],
            "action": [],
            "images": [ImageStats() for _ in self.cameras],
            "extra": {name: [] for name, _, _ in self.extra_features},
        }
        return self.n_episodes

    def _vector(self, value: Any, names: tuple[str, ...], what: str) -> np.ndarray:
        arr = np.asarray(value, dtype=np.float32)
        if arr.shape != (len(names),):
            raise SchemaError(
                f"episode {self.n_episodes}, frame {self._episode['n'] if self._episode else 0}: "
                f"{what} has shape {arr.shape}, expected ({len(names)},) for {list(names)}"
            )
        return arr

    def _extra_values(self, extra: Mapping[str, Any] | None, frame: int) -> dict[str, np.ndarray]:
        """``extra`` checked against :attr:`extra_features`: every one present, nothing else,
        each of its dtype's kind (an int for a float feature is fine, a float for an int
        feature or a string for anything is not) and shape."""
        given = {} if extra is None else extra
        if not isinstance(given, Mapping):
            raise SchemaError(
                f"episode {self.n_episodes}, frame {frame}: extra must be a mapping "
                f"feature -> value, got {type(given).__name__}"
            )
        names = [n for n, _, _ in self.extra_features]
        if set(given) != set(names):
            missing = sorted(set(names) - set(given))
            unknown = sorted(set(given) - set(names))
            raise SchemaError(
                f"episode {self.n_episodes}, frame {frame}: extra features missing "
                f"{missing}, unknown {unknown} (the writer declares {names})"
            )
        out: dict[str, np.ndarray] = {}
        for name, dtype, shape in self.extra_features:
            value = given[name]
            try:
                arr = np.asarray(value)
            except (TypeError, ValueError) as exc:
                raise SchemaError(
                    f"episode {self.n_episodes}, frame {frame}: extra feature {name!r} is "
                    f"not an array ({exc})"
                ) from None
            want = np.dtype(dtype)
            if arr.dtype.kind not in "biuf" or not np.can_cast(arr.dtype, want, "same_kind"):
                raise SchemaError(
                    f"episode {self.n_episodes}, frame {frame}: extra feature {name!r} has "
                    f"dtype {arr.dtype}, which does not convert to its declared {dtype}"
                )
            if arr.shape != shape and not (shape == (1,) and arr.shape == ()):
                raise SchemaError(
                    f"episode {self.n_episodes}, frame {frame}: extra feature {name!r} has "
                    f"shape {arr.shape}, expected {shape}"
                )
            out[name] = arr.astype(want).reshape(shape)
        return out

    def add_frame(
        self,
        state: Any,
        action: Any,
        frames: Mapping[str, np.ndarray],
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Append one frame: ``state`` ``(ds,)``, ``action`` ``(da,)`` (float32-convertible),
        ``frames``: camera name -> ``(height, width, 3)`` uint8 rgb, and ``extra``: every
        extra feature (``features=``) -> its value (``shape``; a scalar for shape ``(1,)``).

        Everything is checked before anything is encoded, so a refused frame leaves the
        episode as it was.
        """
        self._require_open()
        ep = self._episode
        if ep is None:
            raise EpisodeError("add_frame() outside an episode: call begin_episode(task) first")
        s = self._vector(state, self.state_names, "state")
        a = self._vector(action, self.action_names, "action")
        extras = self._extra_values(extra, ep["n"])
        if set(frames) != set(self.cameras):
            missing = sorted(set(self.cameras) - set(frames))
            unknown = sorted(set(frames) - set(self.cameras))
            raise SchemaError(
                f"episode {self.n_episodes}, frame {ep['n']}: frames has cameras "
                f"{sorted(frames)}, expected {sorted(self.cameras)} (missing {missing}, "
                f"unknown {unknown})"
            )
        imgs = []
        for cam in self.cameras:
            img = frames[cam]
            if not isinstance(img, np.ndarray) or img.dtype != np.uint8 or img.shape != (
                self.height, self.width, 3,
            ):
                found = (
                    f"{img.dtype} {img.shape}" if isinstance(img, np.ndarray)
                    else type(img).__name__
                )
                raise SchemaError(
                    f"episode {self.n_episodes}, frame {ep['n']}, camera {cam!r}: frame is "
                    f"{found}, expected uint8 ({self.height}, {self.width}, 3) rgb"
                )
            imgs.append(img)
        for files, stats, img in zip(self._videos, ep["images"], imgs):
            files.add(img)
            stats.add(img)
        ep["state"].append(s)
        ep["action"].append(a)
        for name, value in extras.items():
            ep["extra"][name].append(value)
        ep["n"] += 1

    def discard_episode(self) -> None:
        """Drop the open episode: its partial videos are deleted, nothing else changed."""
        if self._episode is None:
            return
        for cam in self._videos:
            cam.discard_episode()
        self._episode = None

    def _task_index(self, task: str) -> int:
        if task not in self.tasks:
            self.tasks.append(task)
        return self.tasks.index(task)

    def end_episode(self) -> int:
        """Close the open episode and, with ``checkpoint=True``, rewrite the metadata.

        Returns the episode's index.  An episode with no frame is refused (and discarded).
        """
        self._require_open()
        ep = self._episode
        if ep is None:
            raise EpisodeError("end_episode() without an open episode")
        index = self.n_episodes
        if ep["n"] == 0:
            self.discard_episode()
            raise EpisodeError(f"episode {index} has no frame; it was discarded")
        state = np.stack(ep["state"])
        action = np.stack(ep["action"])
        n, start = state.shape[0], self.total_frames
        task_index = self._task_index(ep["task"])
        extras = {
            name: np.stack(ep["extra"][name]).astype(dtype, copy=False)
            for name, dtype, _ in self.extra_features
        }
        table = episode_data_table(
            self._schema, state, action, fps=self.fps, episode_index=index, start=start,
            task_index=task_index, extras=extras,
        )
        stats = episode_stats(
            state, action, dict(zip(self.camera_keys, ep["images"])), fps=self.fps,
            episode_index=index, start=start, task_index=task_index, extras=extras,
        )
        batch = FileBatch() if self.checkpoint else None
        try:
            data_key = self._data.add_episode(table, batch)
        except BaseException:
            if batch is not None:
                batch.discard()
            raise
        row: dict[str, Any] = {
            S.EP_INDEX: index,
            S.EP_TASKS: [ep["task"]],
            S.EP_LENGTH: n,
            S.EP_DATA_CHUNK: data_key[0],
            S.EP_DATA_FILE: data_key[1],
            S.EP_FROM: start,
            S.EP_TO: start + n,
        }
        for key, cam in zip(self.camera_keys, self._videos):
            (chunk, fileno), first = cam.end_episode(n)
            row[S.video_column(key, "chunk_index")] = chunk
            row[S.video_column(key, "file_index")] = fileno
            row[S.video_column(key, "from_timestamp")] = first / self.fps
            row[S.video_column(key, "to_timestamp")] = (first + n) / self.fps
        row.update(flatten_episode_stats(stats))
        row[S.EP_META_CHUNK], row[S.EP_META_FILE] = self._meta_key
        self._rows.append(row)
        self._stats.append(stats)
        self.total_frames += n
        self._episode = None
        if batch is not None:
            self._write_metadata(batch)
        return index

    # -- metadata -------------------------------------------------------------------------

    def features(self) -> dict[str, dict[str, Any]]:
        """The ``features`` entry of ``meta/info.json``."""
        feats: dict[str, dict[str, Any]] = {
            S.ACTION_KEY: S.vector_feature(self.action_names),
            S.STATE_KEY: S.vector_feature(self.state_names),
        }
        codec = canonical_codec(self.encoder)
        for key in self.camera_keys:
            feats[key] = {
                "dtype": "video",
                "shape": [self.height, self.width, 3],
                "names": ["height", "width", "channels"],
                "info": video_feature_info(
                    self.height, self.width, codec=codec, fps=self.fps, options=self.options
                ),
            }
        for name, dtype, shape in self.extra_features:
            feats[name] = {"dtype": dtype, "shape": list(shape), "names": None}
        feats.update(S.frame_features())
        return feats

    def _info(self) -> dict[str, Any]:
        info = S.build_info(
            fps=self.fps,
            features=self.features(),
            total_episodes=self.n_episodes,
            total_frames=self.total_frames,
            total_tasks=len(self.tasks),
            robot_type=self.robot_type,
        )
        # LeRobot declares these ints; a fractional limit (tests) is kept as given.
        info["data_files_size_in_mb"] = _number(self.data_mb)
        info["video_files_size_in_mb"] = _number(self.video_mb)
        if not self.camera_keys:
            info["video_path"] = None
        return info

    def _sidecar(self) -> dict[str, Any]:
        return {
            "version": SIDECAR_VERSION,
            "writer": "numbatraj.lerobot.write",
            "checkpoint": self.checkpoint,
            "encoder": self.encoder,
            "options": self.options,
            "episodes": [
                {"episode_index": i, "stats": stats_to_json(s)} for i, s in enumerate(self._stats)
            ],
        }

    def _write_metadata(self, batch: FileBatch) -> None:
        """Add every metadata file to ``batch`` and apply it: the files are complete before
        the first rename, ``info.json`` is renamed last, and the renames are journalled
        (``meta/.checkpoint.json``) so that :meth:`resume` completes a checkpoint a crash
        interrupted between two of them."""
        if not self._rows:
            batch.apply()
            return
        root = self.root
        try:
            tasks = os.path.join(root, S.TASKS_PATH)
            batch.add(tasks, parquet_fill(tasks, [tasks_table(self.tasks)]))
            meta_rows = self._rows[self._meta_first :]
            path = os.path.join(root, S.episodes_file(*self._meta_key))
            size = batch.add(path, parquet_fill(path, [episodes_table(meta_rows)]))
            batch.add(
                os.path.join(root, S.STATS_PATH),
                json_fill(stats_to_json(aggregate_stats(self._stats))),
            )
            batch.add(os.path.join(root, SIDECAR_PATH), json_fill(self._sidecar()))
            batch.add(os.path.join(root, S.INFO_PATH), json_fill(self._info()))
        except BaseException:
            batch.discard()
            raise
        batch.apply(os.path.join(root, JOURNAL_PATH), root=root)
        if size >= self.data_mb * _MB:  # the next episode starts a new episode-table file
            self._meta_key = next_key(self._meta_key)
            self._meta_first = len(self._rows)

    def reject_episode(self, index: int, note: str | None = None) -> list[int]:
        """:func:`reject_episode` on this writer's directory."""
        return reject_episode(self.root, index, note)

    def close(self, *, discard_open_episode: bool = False) -> None:
        """Finish every file and write the metadata.

        An open episode is refused (:class:`EpisodeError`) unless ``discard_open_episode``.
        """
        if self._closed:
            return
        if self._episode is not None:
            if not discard_open_episode:
                raise EpisodeError(
                    f"episode {self.n_episodes} is still open ({self._episode['n']} frames); "
                    f"end_episode() first, or close(discard_open_episode=True)"
                )
            self.discard_episode()
        for cam in self._videos:
            cam.close()
        try:
            self._data.close()
            if not self.checkpoint:
                self._write_metadata(FileBatch())
        finally:
            self._closed = True
            if self._lock is not None:
                self._lock.release()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(discard_open_episode=exc_type is not None)

    def __repr__(self) -> str:
        return (
            f"LeRobotWriter({self.root!r}, fps={self.fps}, cameras={list(self.cameras)}, "
            f"episodes={self.n_episodes}, frames={self.total_frames})"
        )

    @classmethod
    def resume(
        cls,
        root: str | os.PathLike[str],
        fps: int,
        state_names: Sequence[str],
        action_names: Sequence[str],
        cameras: Sequence[str],
        height: int,
        width: int,
        *,
        codec: str | None = None,
        video_mb: float | None = None,
        data_mb: float | None = None,
        robot_type: str | None = None,
        crf: int | None = None,
        features: Mapping[str, Any] | None = None,
    ) -> LeRobotWriter:
        """Reopen a directory written with ``checkpoint=True`` and carry on after its last
        episode.

        The arguments are the constructor's; they must match what is on disk (fps, cameras,
        resolution, state and action names, and the codec and CRF when given).  ``video_mb``,
        ``data_mb`` and ``robot_type`` default to the directory's.  A checkpoint a crash
        interrupted between its renames is completed first (from its journal; the paths
        renamed are in ``resumed_completed``), then leftovers of a crash (``*.part`` videos
        of the episode in progress, temporary metadata files) are deleted.

        Raises
        ------
        ResumeError
            A directory written without checkpoints, or a setting that differs (named, with
            the session's and the directory's values), the extra features (``features``,
            default none) included: name, dtype and shape must equal the directory's.
        LockedError
            Another writer holds the directory.
        """
        lock = _writer_lock(os.path.abspath(os.fspath(root)))
        try:
            state = read_resume_state(root, data_mb=data_mb)
            state.check_session(
                fps=fps, cameras=cameras, height=height, width=width, state_names=state_names,
                action_names=action_names, codec=codec, crf=crf,
                features=extra_features(features, tuple(camera_key(c) for c in cameras)),
            )
            info = state.info
            settings = WriterSettings(
                root=state.root, fps=fps, state_names=tuple(state_names),
                action_names=tuple(action_names), cameras=tuple(cameras), height=height,
                width=width, checkpoint=True, codec=state.encoder,
                video_mb=(
                    video_mb if video_mb is not None
                    else info.get("video_files_size_in_mb", 100)
                ),
                data_mb=state.data_mb,
                robot_type=robot_type if robot_type is not None else info.get("robot_type"),
                crf=state.crf, features=state.extras,
            )
            writer = cls._from_state(settings, state)
        except BaseException:
            lock.release()
            raise
        writer._lock = lock
        return writer


def _writer_lock(root: str) -> PublishLock:
    """The lock a writer holds on its directory for its lifetime (fails at once if held)."""
    return publish_lock(os.path.abspath(root), wait=False, what="LeRobotWriter").acquire()


def _number(x: float) -> int | float:
    return int(x) if float(x).is_integer() else float(x)
