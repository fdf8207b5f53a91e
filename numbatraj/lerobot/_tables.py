"""What a LeRobot v3.0 writer puts in ``meta/`` and ``data/``, and how it lands on disk.

Every file goes through :mod:`numbatraj.io.atomic`: a checkpoint's files join one
:class:`~numbatraj.io.atomic.FileBatch` (each written under its own temporary name beside
its destination, ``<name>.<16 hex>.tmp``, fsynced, then renamed back to back with the
renames journalled in :data:`JOURNAL_PATH`), a single file goes through
:func:`~numbatraj.io.atomic.write_bytes`.  A reader (the importer, a push, LeRobot) never
sees a half-written file, and a crash leaves either the old file or the new one.  The
importer's globs (``file-*.parquet``) never match a temporary name, and the push skips
them (:func:`~numbatraj.io.atomic.is_temp_name`).

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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

import numbatraj.lerobot.schema as S

__all__ = [
    "CAMERA_PREFIX",
    "DEFAULT_CRF",
    "JOURNAL_PATH",
    "SIDECAR_PATH",
    "SIDECAR_VERSION",
    "camera_key",
    "canonical_codec",
    "codec_options",
    "data_schema",
    "encoder_options",
    "episode_data_table",
    "episodes_table",
    "extra_arrow_type",
    "json_bytes",
    "json_fill",
    "parquet_fill",
    "tasks_table",
    "video_feature_info",
]

#: LeRobot's default constant rate factor.
DEFAULT_CRF = 30

#: Per-episode statistics kept for :meth:`LeRobotWriter.resume`, written at every checkpoint.
SIDECAR_PATH = "meta/numbatraj_writer_stats.json"
SIDECAR_VERSION = 1
#: Commit journal of a checkpoint (:meth:`~numbatraj.io.atomic.FileBatch.apply`): the renames
#: still to do, written after every temporary file is complete and before the first rename,
#: deleted after the last one.  :func:`~numbatraj.io.atomic.replay_journal` finishes an
#: interrupted checkpoint from it.
JOURNAL_PATH = "meta/.checkpoint.json"
#: Feature-key prefix LeRobot's recorder gives cameras.
CAMERA_PREFIX = "observation.images."


def camera_key(name: str) -> str:
    """Feature key of a camera: ``"front"`` -> ``"observation.images.front"``; a name that
    already starts with ``"observation."`` is kept."""
    if not name or "/" in name:
        raise ValueError(f"camera name {name!r} must be non-empty and contain no '/'")
    return name if name.startswith("observation.") else CAMERA_PREFIX + name


def json_bytes(doc: Any) -> bytes:
    """``doc`` as LeRobot writes its JSON: indented, UTF-8, a final newline."""
    return (json.dumps(doc, indent=4, ensure_ascii=False) + "\n").encode("utf-8")


def json_fill(doc: Any) -> Callable[[str], None]:
    """A :meth:`~numbatraj.io.atomic.FileBatch.add` filler writing ``doc`` as
    :func:`json_bytes`."""
    data = json_bytes(doc)

    def fill(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)

    return fill


def parquet_fill(path: str, tables: Sequence[pa.Table]) -> Callable[[str], None]:
    """A :meth:`~numbatraj.io.atomic.FileBatch.add` filler writing ``tables`` (one schema) as
    one Snappy Parquet file, one row group each."""
    if not tables:
        raise ValueError(f"nothing to write to {path!r}")

    def fill(tmp: str) -> None:
        with pq.ParquetWriter(
            tmp, tables[0].schema, compression="snappy", use_dictionary=True
        ) as writer:
            for t in tables:
                writer.write_table(t)

    return fill


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


def extra_arrow_type(dtype: str, shape: Sequence[int]) -> pa.DataType:
    """Arrow type of an extra feature's column: a plain scalar for shape ``(1,)`` (as
    LeRobot writes ``next.reward``), else a fixed-size list of the flattened row."""
    scalar = pa.from_numpy_dtype(np.dtype(dtype))
    size = int(np.prod(shape, dtype=np.int64))
    return scalar if tuple(shape) == (1,) else pa.list_(scalar, size)


def data_schema(
    state_dim: int, action_dim: int, extras: Sequence[tuple[str, str, tuple[int, ...]]] = ()
) -> pa.Schema:
    """Arrow schema of a data file (``action`` first, as LeRobot's recorder declares it,
    then ``observation.state``, the extra features in declaration order, the bookkeeping)."""
    fields = [
        pa.field(S.ACTION_KEY, pa.list_(pa.float32(), int(action_dim))),
        pa.field(S.STATE_KEY, pa.list_(pa.float32(), int(state_dim))),
    ]
    for name, dtype, shape in extras:
        fields.append(pa.field(name, extra_arrow_type(dtype, shape)))
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
    extras: Mapping[str, np.ndarray] | None = None,
) -> pa.Table:
    """One episode's rows: ``state`` ``(n, ds)``, ``action`` ``(n, da)`` float32, and each
    extra feature's ``(n, *shape)`` rows (in its declared dtype) under its name."""
    n = state.shape[0]
    frame = np.arange(n, dtype=np.int64)
    cols: dict[str, pa.Array] = {}
    for f in schema:
        if extras is not None and f.name in extras:
            rows = np.ascontiguousarray(extras[f.name]).reshape(n, -1)
            if pa.types.is_fixed_size_list(f.type):
                flat = pa.array(rows.reshape(-1), type=f.type.value_type)
                cols[f.name] = pa.FixedSizeListArray.from_arrays(flat, f.type.list_size)
            else:
                cols[f.name] = pa.array(rows.reshape(-1), type=f.type)
    cols.update({
        S.ACTION_KEY: _fixed(action),
        S.STATE_KEY: _fixed(state),
        "timestamp": pa.array((frame / fps).astype(np.float32)),
        "frame_index": pa.array(frame),
        "episode_index": pa.array(np.full(n, episode_index, np.int64)),
        "index": pa.array(np.arange(start, start + n, dtype=np.int64)),
        "task_index": pa.array(np.full(n, task_index, np.int64)),
    })
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


#: Frames at most this wide are encoded by SVT-AV1 on one thread (``lp=1``): the SVT-AV1
#: inside PyAV 15.0/15.1's wheels dies of SIGFPE on frames 24 px wide or narrower when it
#: runs more than one thread (PyAV 16/17 hang instead); 25 px and wider, and ``lp=1`` at
#: any size, encode (measured with PyAV 15.0, 15.1, 16.0.1, 17.0.0, 18.1.0).
SVTAV1_ONE_THREAD_WIDTH = 24


def encoder_options(encoder: str, opts: Mapping[str, Any],
                    width: int | None = None) -> dict[str, Any]:
    """``opts`` as the PyAV encoder takes them (``fast_decode`` -> ``svtav1-params``; a
    frame ``width`` up to :data:`SVTAV1_ONE_THREAD_WIDTH` adds ``lp=1``)."""
    out = {k: v for k, v in opts.items() if k != "fast_decode" and v is not None}
    if encoder == "libsvtav1":
        params = []
        if opts.get("fast_decode") is not None:
            params.append(f"fast-decode={int(opts['fast_decode'])}")
        if width is not None and width <= SVTAV1_ONE_THREAD_WIDTH:
            params.append("lp=1")
        if params:
            out["svtav1-params"] = ":".join(params)
    return out


def canonical_codec(encoder: str) -> str:
    """The codec name LeRobot records in ``video.codec`` (``libsvtav1`` -> ``av1``)."""
    return {"libsvtav1": "av1", "libaom-av1": "av1", "libx264": "h264", "libx265": "hevc"}.get(
        encoder, encoder
    )
