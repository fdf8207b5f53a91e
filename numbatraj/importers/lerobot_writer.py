"""Record episodes as a LeRobot v3.0 dataset: :class:`LeRobotWriter`.

The tree is the one LeRobot's recorder writes (``meta/info.json``, ``meta/stats.json``,
``meta/tasks.parquet``, ``meta/episodes/chunk-*/file-*.parquet``, ``data/chunk-*/file-*.parquet``,
``videos/<camera>/chunk-*/file-*.mp4``), so LeRobot, :func:`~numbatraj.importers.lerobot.
import_lerobot_v3` and the Hub's viewer all read it.

Frames go straight into one PyAV encoder per camera (:class:`~numbatraj.io.video_encode.
VideoEncoder`); the only per-frame state kept is the episode's numbers (state and action rows)
and a 256-bin histogram per camera for the image statistics.  An mp4 is built under
``<name>.mp4.part`` and renamed when it is finished, so no reader ever sees a partial video.

``checkpoint=True`` (what recorders use): every episode gets its own mp4 per camera, and
:meth:`LeRobotWriter.end_episode` rewrites the current data file and every metadata file, each
atomically.  The directory is then a complete dataset after every episode; a crash loses at
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

from numbatraj.errors import EpisodeError, ResumeError, SchemaError
from numbatraj.importers._lerobot_write_files import CameraFiles, DataFiles, next_key
from numbatraj.importers._lerobot_write_guard import (
    DatasetExistsError,
    refuse_existing_dataset,
    reject_episode,
)
from numbatraj.importers._lerobot_write_meta import (
    DEFAULT_CRF,
    SIDECAR_PATH,
    SIDECAR_VERSION,
    Batch,
    camera_key,
    canonical_codec,
    codec_options,
    data_schema,
    encoder_options,
    episode_data_table,
    episodes_table,
    tasks_table,
    video_feature_info,
)
from numbatraj.importers._lerobot_write_stats import (
    ImageStats,
    aggregate_stats,
    episode_stats,
    flatten_episode_stats,
    stats_to_json,
)
from numbatraj.io.video_encode import resolve_codec
from numbatraj.lerobot import schema as S

__all__ = [
    "DEFAULT_CRF",
    "DatasetExistsError",
    "LeRobotWriter",
    "ResumeError",
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
    ) -> None:
        self.root = os.path.abspath(os.fspath(root))
        if isinstance(fps, bool) or int(fps) != fps or fps <= 0:
            raise SchemaError(f"fps must be a positive whole number, got {fps!r}")
        if height < 1 or width < 1:
            raise SchemaError(f"height and width must be positive, got {height}x{width}")
        for what, names in (("state_names", state_names), ("action_names", action_names)):
            if len(names) == 0 or len(set(names)) != len(names):
                raise SchemaError(f"{what} must be non-empty and unique, got {list(names)}")
        if len(cameras) == 0 or len(set(cameras)) != len(cameras):
            # At least one: numbatraj's importer stores an images column (no zero extent).
            raise SchemaError(f"camera names must be non-empty and unique, got {list(cameras)}")
        if not video_mb > 0 or not data_mb > 0:
            raise SchemaError(f"video_mb and data_mb must be positive, got {video_mb}, {data_mb}")
        self.fps = int(fps)
        self.state_names = tuple(str(n) for n in state_names)
        self.action_names = tuple(str(n) for n in action_names)
        self.cameras = tuple(str(c) for c in cameras)
        self.camera_keys = tuple(camera_key(c) for c in self.cameras)
        self.height, self.width = int(height), int(width)
        self.checkpoint = bool(checkpoint)
        self.encoder = resolve_codec(codec)
        self.options = codec_options(self.encoder, crf)
        self.video_mb, self.data_mb = video_mb, data_mb
        self.robot_type = robot_type
        self._schema = data_schema(len(self.state_names), len(self.action_names))
        self.tasks: list[str] = []
        self._rows: list[dict[str, Any]] = []  # episode table rows
        self._stats: list[dict[str, dict[str, np.ndarray]]] = []  # per-episode statistics
        self.total_frames = 0
        self._meta_key = (0, 0)
        self._meta_first = 0  # first episode of the current episode-table file
        self._data = DataFiles(self.root, self._schema, data_mb * _MB, self.checkpoint)
        self._videos = [
            CameraFiles(
                self.root, key, self.encoder, encoder_options(self.encoder, self.options),
                self.fps, self.width, self.height, video_mb * _MB, self.checkpoint,
            )
            for key in self.camera_keys
        ]
        self._episode: dict[str, Any] | None = None
        self._closed = False
        if not getattr(self, "_resuming", False):
            refuse_existing_dataset(self.root)
            os.makedirs(os.path.join(self.root, "meta"), exist_ok=True)

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

    def add_frame(
        self, state: Any, action: Any, frames: Mapping[str, np.ndarray]
    ) -> None:
        """Append one frame: ``state`` ``(ds,)``, ``action`` ``(da,)`` (float32-convertible)
        and ``frames``: camera name -> ``(height, width, 3)`` uint8 rgb.

        Everything is checked before anything is encoded, so a refused frame leaves the
        episode as it was.
        """
        self._require_open()
        ep = self._episode
        if ep is None:
            raise EpisodeError("add_frame() outside an episode: call begin_episode(task) first")
        s = self._vector(state, self.state_names, "state")
        a = self._vector(action, self.action_names, "action")
        if set(frames) != set(self.cameras):
            missing = sorted(set(self.cameras) - set(frames))
            extra = sorted(set(frames) - set(self.cameras))
            raise SchemaError(
                f"episode {self.n_episodes}, frame {ep['n']}: frames has cameras "
                f"{sorted(frames)}, expected {sorted(self.cameras)} (missing {missing}, "
                f"unknown {extra})"
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
        table = episode_data_table(
            self._schema, state, action, fps=self.fps, episode_index=index, start=start,
            task_index=task_index,
        )
        stats = episode_stats(
            state, action, dict(zip(self.camera_keys, ep["images"])), fps=self.fps,
            episode_index=index, start=start, task_index=task_index,
        )
        batch = Batch() if self.checkpoint else None
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
            "writer": "numbatraj.importers.lerobot_writer",
            "checkpoint": self.checkpoint,
            "encoder": self.encoder,
            "options": self.options,
            "episodes": [
                {"episode_index": i, "stats": stats_to_json(s)} for i, s in enumerate(self._stats)
            ],
        }

    def _write_metadata(self, batch: Batch) -> None:
        """Add every metadata file to ``batch`` and apply it: the files are complete before
        the first rename, ``info.json`` is renamed last, and the renames are journalled
        (:data:`~numbatraj.importers._lerobot_write_meta.JOURNAL_PATH`) so that
        :meth:`resume` completes a checkpoint a crash interrupted between two of them."""
        if not self._rows:
            batch.apply()
            return
        root = self.root
        try:
            batch.parquet(os.path.join(root, S.TASKS_PATH), [tasks_table(self.tasks)])
            meta_rows = self._rows[self._meta_first :]
            path = os.path.join(root, S.episodes_file(*self._meta_key))
            size = batch.parquet(path, [episodes_table(meta_rows)])
            batch.json(
                os.path.join(root, S.STATS_PATH), stats_to_json(aggregate_stats(self._stats))
            )
            batch.json(os.path.join(root, SIDECAR_PATH), self._sidecar())
            batch.json(os.path.join(root, S.INFO_PATH), self._info())
        except BaseException:
            batch.discard()
            raise
        batch.apply(journal_root=root)
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
        self._data.close()
        if not self.checkpoint:
            self._write_metadata(Batch())
        self._closed = True

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
            the session's and the directory's values).
        """
        from numbatraj.importers._lerobot_write_resume import resume_writer

        return resume_writer(
            cls, root, fps=fps, state_names=state_names, action_names=action_names,
            cameras=cameras, height=height, width=width, codec=codec, video_mb=video_mb,
            data_mb=data_mb, robot_type=robot_type, crf=crf,
        )


def _number(x: float) -> int | float:
    return int(x) if float(x).is_integer() else float(x)
