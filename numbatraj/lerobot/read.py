"""LeRobot v3.0 -> trajectory store: :func:`import_lerobot_v3`.

The import streams.  Metadata is read and checked first (:mod:`._plan`), free disk space is
checked against the estimated output, and only then does decoding start: one forward-only
PyAV decoder per camera, advanced in lockstep with the episode loop, and one data file's
numbers at a time (:mod:`._stream`).  Rows reach the store writer in
batches of a few MiB, so peak memory is about one decoded frame per camera plus one batch,
whatever the dataset's length.

The store holds the columns ``qpos`` (float32, ``observation.state``), ``action`` (float32),
``task_index`` (int32) and ``images`` (uint8 ``(n_cameras, 3, H, W)``, cameras sorted by
name, stored as video or as images in the data files), every other feature of
``info.json`` as a column under its LeRobot name and dtype (``next.reward``,
``next.done``, ``observation.environment_state``, ``timestamp``...; a feature a column
cannot hold is an error naming it), plus the datasets ``norm_qpos_mean``,
``norm_qpos_std``, ``norm_action_mean`` and
``norm_action_std`` (float32; standard deviation floored at ``1e-2`` as ACT does), computed
over the kept episodes and handed to the store writer's ``close(datasets=...)``, so the
store is published once, complete.  Beside them, per-column statistics ``stats/<column>/``
(mean, std, min, max, q01, q99, count; :mod:`numbatraj.data.stats`) for every numeric
column except the uint8 ``images``, read back as ``TrajectoryStore.stats(column)``.  Its
manifest records the source, fps, cameras, the task table, the rejected episodes, and the
source's fingerprint (:func:`source_fingerprint`): an existing output is reused only when it
validates and its fingerprint matches.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from numbatraj.data.column import ColumnSpec
from numbatraj.data.pipelined import PipelinedAppender
from numbatraj.data.store_stats import close_with_stats
from numbatraj.data.writer import TrajectoryStoreWriter
from numbatraj.errors import DatasetExistsError, EpisodeError, LeRobotFormatError, SchemaError
from numbatraj.io.atomic import SYNC_EVERY_BYTES, publish_lock
from numbatraj.io.diskspace import require_free_space
from numbatraj.lerobot._plan import DatasetPlan, load_plan
from numbatraj.lerobot._stream import CameraStreams, DataRows
from numbatraj.lerobot.schema import STATE_KEY as S_STATE

__all__ = [
    "NORM_DATASETS",
    "NORM_STD_FLOOR",
    "LeRobotFormatError",
    "estimate_store_bytes",
    "import_lerobot_v3",
    "norm_stats",
    "source_fingerprint",
    "store_columns",
]

#: Floor on the normalisation standard deviation (ACT's reference clips at this value).
NORM_STD_FLOOR = 1e-2

#: Datasets written beside the columns: ``(name, source column, statistic)``.
NORM_DATASETS: tuple[tuple[str, str, str], ...] = (
    ("norm_qpos_mean", "qpos", "mean"),
    ("norm_qpos_std", "qpos", "std"),
    ("norm_action_mean", "action", "mean"),
    ("norm_action_std", "action", "std"),
)

_BATCH_BYTES = 4 << 20
_STAT_SLAB_ROWS = 1 << 16


def store_columns(plan: DatasetPlan, height: int, width: int) -> list[ColumnSpec]:
    """The columns an import of ``plan`` writes."""
    return [
        ColumnSpec("qpos", np.float32, (plan.state_dim,)),
        ColumnSpec("action", np.float32, (plan.action_dim,)),
        ColumnSpec("task_index", np.int32, ()),
        ColumnSpec("images", np.uint8, (len(plan.cameras), 3, height, width)),
        *(ColumnSpec(ft.name, ft.dtype, ft.shape) for ft in plan.extras),
    ]


def estimate_store_bytes(plan: DatasetPlan, height: int, width: int) -> int:
    """Bytes the store will take: kept frames times the row size of every column."""
    row = sum(spec.row_bytes for spec in store_columns(plan, height, width))
    return plan.n_kept_frames * row + (64 << 10)


@contextmanager
def _progress(total: int, enabled: bool, desc: str) -> Iterator[Any]:
    bar = None
    if enabled and sys.stderr.isatty():
        try:
            from tqdm import tqdm
        except ImportError:  # the bar is optional: no tqdm, no bar
            bar = None
        else:
            bar = tqdm(total=total, unit="frame", unit_scale=True, desc=desc, dynamic_ncols=True)
    try:
        yield bar
    finally:
        if bar is not None:
            bar.close()


def _attrs(plan: DatasetPlan, source: str, height: int, width: int) -> dict[str, str]:
    tasks = {str(k): v for k, v in sorted(plan.tasks.items())}
    return {
        "source": source,
        "source_format": f"lerobot {plan.info.get('codebase_version')}",
        "fps": f"{plan.fps:g}",
        "cameras": ",".join(plan.cameras),
        "image_height": str(height),
        "image_width": str(width),
        "tasks": json.dumps(tasks, ensure_ascii=False),
        "rejected_episodes": json.dumps(sorted(plan.rejected)),
        "source_episodes": ",".join(str(ep.index) for ep in plan.kept),
        "qpos_names": json.dumps(list(plan.state_names), ensure_ascii=False),
        "action_names": json.dumps(list(plan.action_names), ensure_ascii=False),
        "robot_type": str(plan.info.get("robot_type") or ""),
        "image_cameras": ",".join(sorted(plan.image_cameras)),
        "feature_columns": json.dumps(
            {S_STATE: "qpos", "action": "action", "task_index": "task_index",
             **{cam: "images" for cam in plan.cameras},
             **{ft.name: ft.name for ft in plan.extras},
             "index": "(episode index)", "episode_index": "(episode index)",
             "frame_index": "(episode index)"}, ensure_ascii=False),
    }


def source_fingerprint(plan: DatasetPlan, height: int, width: int, source: str | None) -> str:
    """A digest of everything an import's output depends on: the source (``source`` or the
    root, the Hub revision when the root is a Hub snapshot), the size and mtime of every
    file under the dataset root, and the import parameters."""
    files = []
    for dirpath, dirnames, names in os.walk(plan.root):
        dirnames.sort()
        for name in sorted(names):
            full = os.path.join(dirpath, name)
            st = os.stat(full)
            files.append([os.path.relpath(full, plan.root), st.st_size, st.st_mtime_ns])
    doc = {
        "source": source or plan.root,
        "root": plan.root,
        "revision": os.path.basename(plan.root) if os.sep + "snapshots" + os.sep in plan.root
        else None,
        "files": files,
        "params": {"height": int(height), "width": int(width), "format": 2},
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]


def _reuse_problem(out: str, fingerprint: str) -> str | None:
    """Why the existing ``out`` is not this import's output (None: it is, reuse it)."""
    from numbatraj.data.validate import validate_store  # noqa: PLC0415

    report = validate_store(out)
    if not report.ok:
        return f"it does not validate ({'; '.join(report.errors[:3])})"
    from numbatraj.data.store import TrajectoryStore  # noqa: PLC0415

    with TrajectoryStore(out) as st:
        got = st.manifest.get("attr.source_fingerprint")
    if got != fingerprint:
        return (f"its source fingerprint is {got!r}, this import's is {fingerprint!r} "
                f"(another dataset, revision, file or import parameter)")
    return None


def _write_rows(
    plan: DatasetPlan, writer: TrajectoryStoreWriter, height: int, width: int, bar: Any
) -> None:
    n_cam = len(plan.cameras)
    row_shape = (n_cam, 3, height, width)
    batch = max(1, min(1024, _BATCH_BYTES // max(1, n_cam * 3 * height * width)))
    data = DataRows(plan)
    cams = CameraStreams(plan, height, width)
    names = [ft.name for ft in plan.extras]
    try:
        with PipelinedAppender(writer, "images", row_shape, np.dtype(np.uint8), batch) as pipe:
            for ep in plan.kept:
                qpos, action, task = data.episode(ep)
                extras = data.extras
                cams.set_images(data.images)
                cams.start_episode(ep)
                for lo in range(0, ep.length, batch):
                    hi = min(ep.length, lo + batch)
                    images = pipe.buffer()
                    cams.read(lo, hi, images)
                    rows = {"qpos": qpos[lo:hi], "action": action[lo:hi],
                            "task_index": task[lo:hi]}
                    rows.update({n: extras[n][lo:hi] for n in names})
                    pipe.append(rows, images)
                    if bar is not None:
                        bar.update(hi - lo)
                pipe.end_episode()
            pipe.finish()
    finally:
        cams.close()


def _mean_std(writer: TrajectoryStoreWriter, column: str) -> tuple[np.ndarray, np.ndarray]:
    """Mean and population standard deviation over the rows written to ``column``, two
    passes in float64 slabs."""
    n = writer.n_rows
    shape = writer.columns[column].shape
    total = np.zeros(shape, np.float64)
    for lo in range(0, n, _STAT_SLAB_ROWS):
        slab = writer.read_range(column, lo, min(n, lo + _STAT_SLAB_ROWS))
        total += slab.astype(np.float64).sum(axis=0)
    mean = total / n
    sq = np.zeros_like(mean)
    for lo in range(0, n, _STAT_SLAB_ROWS):
        d = writer.read_range(column, lo, min(n, lo + _STAT_SLAB_ROWS)).astype(np.float64) - mean
        sq += (d * d).sum(axis=0)
    return mean, np.sqrt(sq / n)


def norm_stats(writer: TrajectoryStoreWriter) -> dict[str, np.ndarray]:
    """The :data:`NORM_DATASETS` over the rows ``writer`` holds (float32)."""
    stats = {col: _mean_std(writer, col) for col in ("qpos", "action")}
    out = {}
    for name, col, what in NORM_DATASETS:
        mean, std = stats[col]
        value = mean if what == "mean" else np.maximum(std, NORM_STD_FLOOR)
        out[name] = value.astype(np.float32)
    return out


def import_lerobot_v3(
    root: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    height: int = 240,
    width: int = 320,
    overwrite: bool = False,
    force: bool | None = None,
    show_progress: bool | None = None,
    source: str | None = None,
    progress: bool | None = None,
) -> str:
    """Convert a LeRobot v3.0 dataset directory into a trajectory store.

    Parameters
    ----------
    root : path-like
        The dataset directory (holding ``meta/info.json``); see
        :func:`~numbatraj.lerobot.hub.resolve_dataset_root` for Hub datasets.
    out : path-like
        The ``.h5`` store to write.  It is built under a temporary name of its own
        (``<out>.<16 hex>.tmp``, :func:`numbatraj.io.atomic.temp_path`) and published once,
        complete with its normalisation datasets; a failed import leaves nothing at ``out``
        and removes only its own temporary file.
    height, width : int
        Image size in the store; frames of another size are resized (Pillow BILINEAR).
    overwrite : bool
        Replace an existing ``out`` that is not this import's output.  Without it, an
        existing ``out`` is returned as is only when it validates and its manifest's
        ``source_fingerprint`` equals this import's (:func:`source_fingerprint`: the same
        dataset, revision, files and parameters); otherwise :class:`DatasetExistsError`
        says why.  Imports of one ``out`` run one at a time (a second waits, then reuses).
    force : bool, optional
        The former name of ``overwrite``, still accepted.
    show_progress : bool, optional
        Show a progress bar (frames, frames/s, ETA); by default (and when true) shown only
        when stderr is a terminal.
    source : str, optional
        What the manifest records as the source (default: the absolute ``root``).
    progress : bool, optional
        The former name of ``show_progress``, still accepted (not both).

    Returns
    -------
    str
        ``out``.

    Raises
    ------
    LeRobotFormatError
        Not a v3.0 dataset (the message names the version found), or metadata that cannot be
        interpreted.
    IntegrityError
        A missing or corrupt file, counts that disagree with ``meta/info.json``, a data row
        missing or duplicated, a camera's episodes out of dataset order, a video shorter than
        its episodes need.  The message names the file, episode or camera.
    DiskSpaceError
        Not enough free space for the estimated store (checked before decoding).
    EpisodeError
        Every episode is rejected.
    DatasetExistsError
        ``out`` exists, is not this import's output, and ``overwrite`` was not given.
    """
    out = os.fspath(out)
    if progress is not None and show_progress is not None and progress != show_progress:
        raise TypeError(
            f"import_lerobot_v3() got show_progress={show_progress!r} and its alias "
            f"progress={progress!r}; pass one"
        )
    shown = show_progress if show_progress is not None else progress
    if height < 1 or width < 1:
        raise SchemaError(f"height and width must be positive, got {height}x{width}")
    if force is not None:
        overwrite = overwrite or bool(force)
    plan = load_plan(root)
    if not plan.kept:
        raise EpisodeError(
            f"every episode of {plan.root!r} is listed in meta/rejected_episodes.json; "
            f"nothing to import"
        )
    fingerprint = source_fingerprint(plan, height, width, source)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with publish_lock(out, wait=True, what="LeRobot import"):
        if os.path.lexists(out):
            if os.path.isdir(out):
                raise IsADirectoryError(f"store path {out!r} is a directory")
            problem = _reuse_problem(out, fingerprint)
            if problem is None:
                return out
            if not overwrite:
                raise DatasetExistsError(
                    f"{out!r} exists and is not this import's output: {problem}; pass "
                    f"overwrite=True (--overwrite) to replace it"
                )
        require_free_space(out, estimate_store_bytes(plan, height, width),
                           what=f"the store {out!r}")
        attrs = _attrs(plan, source or plan.root, height, width)
        attrs["source_fingerprint"] = fingerprint
        # the writer builds the store under a temporary name of its own and publishes it
        # once, at close
        writer = TrajectoryStoreWriter(
            out,
            store_columns(plan, height, width),
            env_id=str(plan.info.get("robot_type") or "") or None,
            attrs=attrs,
            overwrite=True,
            sync_every_bytes=SYNC_EVERY_BYTES,
        )
        try:
            with _progress(plan.n_kept_frames, shown is not False, os.path.basename(out)) as bar:
                _write_rows(plan, writer, height, width, bar)
            close_with_stats(writer, norm_stats(writer))
        except BaseException:
            writer.abort()
            raise
    return out
