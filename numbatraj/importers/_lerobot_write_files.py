"""Which file an episode goes to: one camera's mp4 files, and the data Parquet files.

:class:`CameraFiles` owns one camera's encoder.  With checkpoints every episode is its own
mp4; without, episodes are appended to the open mp4 until it has reached its size limit.  An
mp4 is encoded under ``<file>.mp4.part`` and renamed when finished.

:class:`DataFiles` owns the data Parquet files.  With checkpoints the current file is
rewritten (complete, under a temporary name, renamed with the rest of the checkpoint) after
every episode from the Arrow tables of its episodes, which are only numbers; without, an open
Parquet writer appends one row group per episode to ``<file>.parquet.part``.

Both start a new file (next ``file-NNN``, next ``chunk-NNN`` after
:data:`~numbatraj.lerobot.schema.DEFAULT_CHUNKS_SIZE` files) for the episode after
the one that brought the current file to its limit.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from numbatraj.importers._lerobot_write_meta import Batch, fsync_dir
from numbatraj.io.video_encode import VideoEncoder
from numbatraj.lerobot import schema as S

__all__ = ["PART_SUFFIX", "CameraFiles", "DataFiles", "next_key"]

PART_SUFFIX = ".part"
Key = tuple[int, int]


def next_key(key: Key) -> Key:
    """The ``(chunk, file)`` after ``key``."""
    chunk, fileno = key
    return (chunk + 1, 0) if fileno + 1 >= S.DEFAULT_CHUNKS_SIZE else (chunk, fileno + 1)


def _finish(part: str) -> None:
    """Rename a finished (already fsynced) ``part`` file into place and fsync its directory,
    so the rename is durable before any metadata naming the file is written."""
    os.replace(part, part[: -len(PART_SUFFIX)])
    fsync_dir(os.path.dirname(part) or ".")


class CameraFiles:
    """One camera's video files.  ``key`` is the ``observation.images.*`` feature key."""

    def __init__(
        self,
        root: str,
        key: str,
        encoder: str,
        options: dict[str, Any],
        fps: int,
        width: int,
        height: int,
        limit_bytes: float,
        checkpoint: bool,
    ) -> None:
        self.root, self.key, self.encoder, self.options = root, key, encoder, options
        self.fps, self.width, self.height = fps, width, height
        self.limit, self.checkpoint = limit_bytes, checkpoint
        self.file_key: Key = (0, 0)  # file the open or next episode goes to
        self._enc: VideoEncoder | None = None
        self._episodes_in_file = 0
        self._first = 0  # frame of the open episode inside the file

    def path(self, key: Key) -> str:
        """Final path of file ``key``."""
        return os.path.join(self.root, S.video_file(S.DEFAULT_VIDEO_PATH, self.key, *key))

    def begin_episode(self) -> None:
        if self._enc is None:
            part = self.path(self.file_key) + PART_SUFFIX
            os.makedirs(os.path.dirname(part), exist_ok=True)
            self._enc = VideoEncoder(
                part, self.encoder, self.fps, self.width, self.height,
                options=self.options, container_format="mp4",
            )
            self._episodes_in_file = 0
        self._first = self._enc.frames

    def add(self, rgb: np.ndarray) -> None:
        assert self._enc is not None
        self._enc.add(rgb)

    def _close_file(self) -> None:
        enc, self._enc = self._enc, None
        assert enc is not None
        if self._episodes_in_file == 0:
            enc.abort()
            return
        enc.close()
        _finish(enc.path)
        self.file_key = next_key(self.file_key)

    def end_episode(self, n: int) -> tuple[Key, int]:
        """Account the open episode's ``n`` frames; returns ``(file key, first frame)``."""
        enc = self._enc
        assert enc is not None and enc.frames - self._first == n
        key, first = self.file_key, self._first
        self._episodes_in_file += 1
        if self.checkpoint or enc.estimated_size() >= self.limit:
            self._close_file()
        return key, first

    def discard_episode(self) -> None:
        """Forget the open episode.  With checkpoints its file is deleted; otherwise its
        frames stay in the shared file as unreferenced padding (readers locate episodes by
        ``from_timestamp``), and a file holding no kept episode is deleted at close."""
        if self._enc is None:
            return
        if self.checkpoint:
            self._enc.abort()
            self._enc = None

    def close(self) -> None:
        if self._enc is not None:
            self._close_file()


class DataFiles:
    """The data Parquet files; :meth:`add_episode` returns the ``(chunk, file)`` used."""

    def __init__(self, root: str, schema: pa.Schema, limit_bytes: float, checkpoint: bool):
        self.root, self.schema = root, schema
        self.limit, self.checkpoint = limit_bytes, checkpoint
        self.file_key: Key = (0, 0)
        self.tables: list[pa.Table] = []  # checkpoint mode: the current file's episodes
        self._writer: Any = None
        self._fh: Any = None

    def path(self, key: Key) -> str:
        """Final path of data file ``key``."""
        return os.path.join(self.root, S.data_file(S.DEFAULT_DATA_PATH, *key))

    def add_episode(self, table: pa.Table, batch: Batch | None = None) -> Key:
        """Add one episode's rows.  With checkpoints the rewritten file joins ``batch``."""
        key = self.file_key
        if self.checkpoint:
            assert batch is not None
            self.tables.append(table)
            size = batch.parquet(self.path(key), self.tables)
            if size >= self.limit:
                self.file_key, self.tables = next_key(key), []
            return key
        if self._writer is None:
            part = self.path(key) + PART_SUFFIX
            os.makedirs(os.path.dirname(part), exist_ok=True)
            self._fh = open(part, "wb")  # noqa: SIM115 - closed in _close_file
            self._writer = pq.ParquetWriter(
                self._fh, self.schema, compression="snappy", use_dictionary=True
            )
        self._writer.write_table(table)
        if self._fh.tell() >= self.limit:
            self._close_file()
        return key

    def _close_file(self) -> None:
        self._writer.close()
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        _finish(self.path(self.file_key) + PART_SUFFIX)
        self._writer = self._fh = None
        self.file_key = next_key(self.file_key)

    def close(self) -> None:
        if self._writer is not None:
            self._close_file()
