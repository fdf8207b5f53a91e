"""What a LeRobot v3.0 writer puts in ``meta/`` and ``data/``, and how it lands on disk.

Every file goes through a :class:`Batch`: it is written under a hidden temporary name
beside its destination (``.<name>.<pid>.tmp``), flushed, fsynced and renamed over the final
name (several files back to back), so a reader (the importer, a push, LeRobot) never
sees a half-written file, and a crash leaves either the old file or the new one.  Hidden
names are skipped by the importer's globs and by the push.

The layouts follow LeRobot's own writer (``huggingface/lerobot``, ``src/lerobot/datasets/``):

- data rows: the declared features in declaration order, vectors as Arrow fixed-size lists,
  then ``timestamp`` (float32), ``frame_index``, ``episode_index``, ``index``, ``task_index``
  (int64); Snappy-compressed, one row group per episode;
- ``meta/tasks.parquet``: ``task_index`` plus the task string as the pandas index ``task``
  (the file carries pandas' schema metadata, so ``pandas.read_parquet`` restores the index);
- the episode table: one row per episode, bookkeeping, per-camera video location, flattened
  ``stats/<feature>/<stat>`` columns, then ``meta/episodes/chunk_index`` and ``file_index``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from numbatraj.lerobot import schema as S

__all__ = [
    "Batch",
    "CAMERA_PREFIX",
    "DEFAULT_CRF",
    "JOURNAL_PATH",
    "canonical_codec",
    "codec_options",
    "encoder_options",
    "SIDECAR_PATH",
    "SIDECAR_VERSION",
    "atomic_write_json",
    "atomic_write_parquet",
    "camera_key",
    "data_schema",
    "episode_data_table",
    "episodes_table",
    "fsync_dir",
    "replay_journal",
    "temp_name",
    "tasks_table",
    "video_feature_info",
]

#: LeRobot's default constant rate factor.
DEFAULT_CRF = 30

#: Per-episode statistics kept for :meth:`LeRobotWriter.resume`, written at every checkpoint.
SIDECAR_PATH = "meta/numbatraj_writer_stats.json"
SIDECAR_VERSION = 1
#: Commit journal of a checkpoint: the renames still to do, written (atomically) after every
#: temporary file is complete and before the first rename, deleted after the last one.
#: :func:`replay_journal` finishes an interrupted checkpoint from it.
JOURNAL_PATH = "meta/.checkpoint.json"
JOURNAL_VERSION = 1
#: Feature-key prefix LeRobot's recorder gives cameras.
CAMERA_PREFIX = "observation.images."


def camera_key(name: str) -> str:
    """Feature key of a camera: ``"front"`` -> ``"observation.images.front"``; a name that
    already starts with ``"observation."`` is kept."""
    if not name or "/" in name:
        raise ValueError(f"camera name {name!r} must be non-empty and contain no '/'")
    return name if name.startswith("observation.") else CAMERA_PREFIX + name


def temp_name(path: str) -> str:
    """The hidden temporary name a file is built under before its rename."""
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.{os.getpid()}.tmp")


def fsync_dir(path: str) -> None:
    """fsync a directory (its entries: renames, creations); errors are ignored."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_temp(path: str, fill: Callable[[str], None]) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = temp_name(path)
    try:
        fill(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        try:
            os.remove(tmp)
        except FileNotFoundError:
            pass
        raise
    return tmp


def _json_fill(doc: Any) -> Callable[[str], None]:
    text = json.dumps(doc, indent=4, ensure_ascii=False) + "\n"

    def fill(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)

    return fill


def _parquet_fill(path: str, tables: Sequence[pa.Table]) -> Callable[[str], None]:
    if not tables:
        raise ValueError(f"nothing to write to {path!r}")

    def fill(tmp: str) -> None:
        with pq.ParquetWriter(
            tmp, tables[0].schema, compression="snappy", use_dictionary=True
        ) as writer:
            for t in tables:
                writer.write_table(t)

    return fill


class Batch:
    """Files written completely under temporary names, then renamed into place back to back
    by :meth:`apply`, in the order they were added."""

    def __init__(self) -> None:
        self._pending: list[tuple[str, str]] = []

    def add(self, path: str, fill: Callable[[str], None]) -> int:
        """Write ``path``'s temporary file now; returns its size in bytes."""
        tmp = _write_temp(path, fill)
        self._pending.append((tmp, path))
        return os.path.getsize(tmp)

    def json(self, path: str, doc: Any) -> int:
        """Add ``doc`` as indented UTF-8 JSON."""
        return self.add(path, _json_fill(doc))

    def parquet(self, path: str, tables: Sequence[pa.Table]) -> int:
        """Add ``tables`` (one schema) as one Snappy Parquet file, one row group each."""
        return self.add(path, _parquet_fill(path, tables))

    def apply(self, journal_root: str | None = None) -> None:
        """Rename every temporary file over its destination, then fsync the directories.

        With ``journal_root`` (a dataset directory) and more than one file, the renames are
        first recorded in ``<journal_root>/``:data:`JOURNAL_PATH`, which is deleted once they
        are all durable: a crash between two renames leaves the journal, and
        :func:`replay_journal` completes them.
        """
        journal = None
        if journal_root is not None and len(self._pending) > 1:
            journal = os.path.join(journal_root, JOURNAL_PATH)
            doc = {
                "version": JOURNAL_VERSION,
                "renames": [
                    [os.path.relpath(t, journal_root), os.path.relpath(p, journal_root)]
                    for t, p in self._pending
                ],
            }
            tmp = _write_temp(journal, _json_fill(doc))
            os.replace(tmp, journal)
            fsync_dir(os.path.dirname(journal))
        dirs = []
        for tmp, path in self._pending:
            os.replace(tmp, path)
            if os.path.dirname(path) not in dirs:
                dirs.append(os.path.dirname(path))
        self._pending.clear()
        for d in dirs:
            fsync_dir(d)
        if journal is not None:
            os.remove(journal)
            fsync_dir(os.path.dirname(journal))

    def discard(self) -> None:
        """Delete the temporary files not yet renamed."""
        for tmp, _ in self._pending:
            try:
                os.remove(tmp)
            except FileNotFoundError:
                pass
        self._pending.clear()


def _journal_path(root: str, rel: Any) -> str:
    """``rel`` (from a journal) under ``root``; refuses anything that would leave it."""
    if not isinstance(rel, str) or not rel or os.path.isabs(rel):
        raise ValueError(f"{JOURNAL_PATH} names {rel!r}, not a path inside the dataset")
    norm = os.path.normpath(rel)
    if norm == ".." or norm.startswith(".." + os.sep):
        raise ValueError(f"{JOURNAL_PATH} names {rel!r}, outside the dataset")
    return os.path.join(root, norm)


def replay_journal(root: str) -> list[str]:
    """Finish the checkpoint a crash interrupted between its renames.

    Reads ``<root>/``:data:`JOURNAL_PATH` (absent: nothing to do), renames every temporary
    file it lists that is still there over its destination (the ones already renamed are
    gone), fsyncs the directories and deletes the journal.  Returns the destinations renamed
    now.  Raises ``ValueError`` for a journal that does not read back, or a rename whose
    temporary file and destination are both missing.
    """
    journal = os.path.join(root, JOURNAL_PATH)
    if not os.path.isfile(journal):
        return []
    with open(journal, encoding="utf-8") as fh:
        doc = json.load(fh)
    if not isinstance(doc, dict) or doc.get("version") != JOURNAL_VERSION:
        raise ValueError(f"{JOURNAL_PATH} is not a version-{JOURNAL_VERSION} journal")
    renames = doc.get("renames")
    if not isinstance(renames, list) or not all(
        isinstance(r, list) and len(r) == 2 for r in renames
    ):
        raise ValueError(f"{JOURNAL_PATH} has no list of renames")
    pairs = [(_journal_path(root, t), _journal_path(root, p)) for t, p in renames]
    for tmp, path in pairs:
        name = os.path.basename(tmp)
        if not (name.startswith(".") and name.endswith(".tmp")):
            raise ValueError(f"{JOURNAL_PATH} renames {tmp!r}, not a temporary file")
        if not os.path.exists(tmp) and not os.path.exists(path):
            raise ValueError(
                f"{JOURNAL_PATH}: neither {tmp!r} nor its destination {path!r} exists"
            )
    done, dirs = [], []
    for tmp, path in pairs:
        if os.path.exists(tmp):
            os.replace(tmp, path)
            done.append(path)
        if os.path.dirname(path) not in dirs:
            dirs.append(os.path.dirname(path))
    for d in dirs:
        fsync_dir(d)
    os.remove(journal)
    fsync_dir(os.path.dirname(journal))
    return done


def atomic_write_json(path: str, doc: Any) -> None:
    """``doc`` as indented UTF-8 JSON at ``path``, atomically (temporary name, rename)."""
    batch = Batch()
    batch.json(path, doc)
    batch.apply()


def atomic_write_parquet(path: str, tables: Sequence[pa.Table]) -> int:
    """``tables`` as one Parquet file at ``path``, atomically; returns its size."""
    batch = Batch()
    size = batch.parquet(path, tables)
    batch.apply()
    return size


def video_feature_info(
    height: int, width: int, *, codec: str, fps: int, options: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``info`` block LeRobot records for a camera: stream facts, then encoder settings."""
    info: dict[str, Any] = {
        "video.height": int(height),
        "video.width": int(width),
        "video.codec": codec,
        "video.pix_fmt": "yuv420p",
        "video.fps": int(fps),
        "video.channels": 3,
        "has_audio": False,
    }
    for key in ("g", "crf", "preset", "fast_decode"):
        info[f"video.{key}"] = options.get(key)
    info["video.extra_options"] = {}
    info["video.video_backend"] = "pyav"
    info["is_depth_map"] = False
    return info


def data_schema(state_dim: int, action_dim: int) -> pa.Schema:
    """Arrow schema of a data file (``action`` first, as LeRobot's recorder declares it)."""
    fields = [
        pa.field(S.ACTION_KEY, pa.list_(pa.float32(), int(action_dim))),
        pa.field(S.STATE_KEY, pa.list_(pa.float32(), int(state_dim))),
    ]
    for name, dtype in S.FRAME_COLUMNS.items():
        fields.append(pa.field(name, pa.from_numpy_dtype(np.dtype(dtype))))
    return pa.schema(fields)


def _fixed(rows: np.ndarray) -> pa.Array:
    flat = pa.array(np.ascontiguousarray(rows, dtype=np.float32).reshape(-1), type=pa.float32())
    return pa.FixedSizeListArray.from_arrays(flat, rows.shape[1])


def episode_data_table(
    schema: pa.Schema,
    state: np.ndarray,
    action: np.ndarray,
    *,
    fps: int,
    episode_index: int,
    start: int,
    task_index: int,
) -> pa.Table:
    """One episode's rows: ``state`` ``(n, ds)``, ``action`` ``(n, da)`` float32."""
    n = state.shape[0]
    frame = np.arange(n, dtype=np.int64)
    cols = {
        S.ACTION_KEY: _fixed(action),
        S.STATE_KEY: _fixed(state),
        "timestamp": pa.array((frame / fps).astype(np.float32)),
        "frame_index": pa.array(frame),
        "episode_index": pa.array(np.full(n, episode_index, np.int64)),
        "index": pa.array(np.arange(start, start + n, dtype=np.int64)),
        "task_index": pa.array(np.full(n, task_index, np.int64)),
    }
    return pa.Table.from_arrays([cols[f.name] for f in schema], schema=schema)


def tasks_table(tasks: Sequence[str]) -> pa.Table:
    """``meta/tasks.parquet``: ``task_index`` and the pandas index ``task``, as pandas writes a
    ``DataFrame({"task_index": ...}, index=pd.Index(tasks, name="task"))``."""
    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": "task",
                "field_name": "task",
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": None,
            },
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.3",
    }
    schema = pa.schema(
        [pa.field("task_index", pa.int64()), pa.field("task", pa.string())],
        metadata={b"pandas": json.dumps(pandas_meta).encode()},
    )
    return pa.Table.from_arrays(
        [pa.array(np.arange(len(tasks), dtype=np.int64)), pa.array(list(tasks), pa.string())],
        schema=schema,
    )


def episodes_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """The episode-table rows as Arrow (ints int64, floats double, lists nested)."""
    if not rows:
        raise ValueError("an episode table needs at least one row")
    names = list(rows[0])
    for r in rows[1:]:
        if list(r) != names:
            raise ValueError(f"episode rows have different columns: {names} vs {list(r)}")
    return pa.Table.from_pydict({n: [r[n] for r in rows] for n in names})


def codec_options(encoder: str, crf: int | None = None) -> dict[str, Any]:
    """Encoder options as LeRobot sets them: GOP 2, CRF 30; SVT-AV1 preset 12, fast-decode 0."""
    opts: dict[str, Any] = {"g": 2, "crf": DEFAULT_CRF if crf is None else int(crf)}
    if encoder == "libsvtav1":
        opts.update({"preset": 12, "fast_decode": 0})
    return opts


def encoder_options(encoder: str, opts: Mapping[str, Any]) -> dict[str, Any]:
    """``opts`` as the PyAV encoder takes them (``fast_decode`` -> ``svtav1-params``)."""
    out = {k: v for k, v in opts.items() if k != "fast_decode" and v is not None}
    if encoder == "libsvtav1" and opts.get("fast_decode") is not None:
        out["svtav1-params"] = f"fast-decode={int(opts['fast_decode'])}"
    return out


def canonical_codec(encoder: str) -> str:
    """The codec name LeRobot records in ``video.codec`` (``libsvtav1`` -> ``av1``)."""
    return {"libsvtav1": "av1", "libaom-av1": "av1", "libx264": "h264", "libx265": "hevc"}.get(
        encoder, encoder
    )
