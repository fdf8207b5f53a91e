"""Stream a planned LeRobot dataset: data rows per episode, frames per camera in lockstep.

:class:`DataRows` holds one data file at a time (numbers only, sorted by global ``index``)
and hands out an episode's rows after checking that each of its rows is there exactly once.
:class:`CameraStreams` keeps one forward-only decoder per camera and switches a camera to its
next file when the episode loop reaches an episode stored there.  Nothing grows with the
dataset: the working set is one data file's numbers and one decoded frame per camera.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from numbatraj.errors import IntegrityError
from numbatraj.importers._lerobot_meta import DatasetPlan, EpisodePlan
from numbatraj.io.parquet import read_parquet, table_to_numpy
from numbatraj.io.video import FrameCursor, frame_to_rgb
from numbatraj.lerobot import schema as S

__all__ = ["CameraStreams", "DataRows", "EpisodeRows"]

EpisodeRows = tuple[np.ndarray, np.ndarray, np.ndarray]


def _listing(values: np.ndarray, limit: int = 8) -> str:
    shown = ", ".join(str(int(v)) for v in values[:limit])
    return shown + (f", ... ({values.size} in all)" if values.size > limit else "")


class DataRows:
    """Rows of ``observation.state``, ``action`` and ``task_index`` per episode."""

    def __init__(self, plan: DatasetPlan) -> None:
        self._plan = plan
        self._path: str | None = None
        self._cols: dict[str, np.ndarray] = {}

    def _load(self, path: str) -> None:
        self._cols = {}
        self._path = None
        dtypes: dict[str, Any] = {
            "index": np.int64,
            "episode_index": np.int64,
            "frame_index": np.int64,
            "task_index": np.int64,
            S.STATE_KEY: np.float32,
            S.ACTION_KEY: np.float32,
        }
        table = read_parquet(path, list(dtypes))
        cols = table_to_numpy(table, dtypes, where=repr(path))
        del table
        for key, dim in (
            (S.STATE_KEY, self._plan.state_dim),
            (S.ACTION_KEY, self._plan.action_dim),
        ):
            if cols[key].ndim != 2 or cols[key].shape[1] != dim:
                raise IntegrityError(
                    f"{path!r}: {key!r} rows have shape {cols[key].shape[1:]}, info.json "
                    f"declares ({dim},)"
                )
        order = np.argsort(cols["index"], kind="stable")
        self._cols = {k: v[order] for k, v in cols.items()}
        self._path = path

    def episode(self, ep: EpisodePlan) -> EpisodeRows:
        """``(qpos float32 (n, ds), action float32 (n, da), task_index int32 (n,))``, rows in
        frame order.

        Raises :class:`IntegrityError` naming the file and episode when a row is missing,
        duplicated, labelled with another episode, out of frame order, or names an unknown
        task.
        """
        if self._path != ep.data_path:
            self._load(ep.data_path)
        c = self._cols
        index = c["index"]
        lo = int(np.searchsorted(index, ep.start, side="left"))
        hi = int(np.searchsorted(index, ep.start + ep.length, side="left"))
        rows = index[lo:hi]
        expected = np.arange(ep.start, ep.start + ep.length, dtype=np.int64)
        where = f"data file {ep.data_path!r}, episode {ep.index}"
        if rows.size != ep.length or not np.array_equal(rows, expected):
            missing = np.setdiff1d(expected, rows)
            uniq, counts = np.unique(rows, return_counts=True)
            dup = uniq[counts > 1]
            parts = []
            if missing.size:
                parts.append(f"row(s) with index {_listing(missing)} are missing")
            if dup.size:
                parts.append(f"row(s) with index {_listing(dup)} are duplicated")
            raise IntegrityError(
                f"{where} (rows {ep.start}..{ep.start + ep.length - 1}): " + "; ".join(parts)
            )
        sl = slice(lo, hi)
        bad = np.flatnonzero(c["episode_index"][sl] != ep.index)
        if bad.size:
            r = int(bad[0])
            raise IntegrityError(
                f"{where}: row index {int(rows[r])} is labelled episode "
                f"{int(c['episode_index'][lo + r])}"
            )
        bad = np.flatnonzero(c["frame_index"][sl] != np.arange(ep.length))
        if bad.size:
            r = int(bad[0])
            raise IntegrityError(
                f"{where}: row index {int(rows[r])} has frame_index "
                f"{int(c['frame_index'][lo + r])}, expected {r}"
            )
        task = c["task_index"][sl]
        unknown = np.setdiff1d(task, np.fromiter(self._plan.tasks, dtype=np.int64))
        if unknown.size:
            raise IntegrityError(
                f"{where}: task_index {_listing(unknown)} not in meta/tasks.parquet "
                f"(known: {sorted(self._plan.tasks)})"
            )
        return c[S.STATE_KEY][sl], c[S.ACTION_KEY][sl], task.astype(np.int32)


class CameraStreams:
    """One forward-only decoder per camera, advanced in lockstep with the episode loop.

    Parameters
    ----------
    plan : DatasetPlan
    height, width : int
        Output size; frames of another size are resized with Pillow BILINEAR.
    """

    def __init__(self, plan: DatasetPlan, height: int, width: int) -> None:
        self._plan = plan
        self._h, self._w = int(height), int(width)
        self._cursors: list[FrameCursor | None] = [None] * len(plan.cameras)
        self._ep: EpisodePlan | None = None
        self._pool: ThreadPoolExecutor | None = None

    def start_episode(self, ep: EpisodePlan) -> None:
        """Point every camera at ``ep``'s video file, opening the next file when it changes."""
        for c, seg in enumerate(ep.segments):
            cur = self._cursors[c]
            if cur is None or cur.path != seg.path:
                if cur is not None:
                    cur.close()
                    self._cursors[c] = None
                self._cursors[c] = FrameCursor(seg.path, self._plan.fps)
        self._ep = ep

    def _read_camera(self, c: int, lo: int, hi: int, out: np.ndarray) -> None:
        ep = self._ep
        assert ep is not None
        seg = ep.segments[c]
        cur = self._cursors[c]
        assert cur is not None
        for j in range(lo, hi):
            try:
                frame = cur.frame(seg.first + j)
            except IntegrityError as exc:
                raise IntegrityError(
                    f"camera {self._plan.cameras[c]!r}, episode {ep.index} (frame {j} of "
                    f"{ep.length}): {exc}; the video is shorter than its episodes need or "
                    f"has a gap"
                ) from exc
            rgb = frame_to_rgb(frame, self._h, self._w)
            np.copyto(out[j - lo, c], rgb.transpose(2, 0, 1))

    def read(self, lo: int, hi: int, out: np.ndarray) -> None:
        """Frames ``lo..hi-1`` of the current episode from every camera into ``out[: hi - lo]``
        (rows of shape (n_cam, 3, H, W)).

        Cameras after the first are decoded on worker threads (one per camera, each touching
        only its own decoder and its own slice of ``out``); PyAV releases the GIL while it
        decodes and converts, so the cameras proceed in parallel.
        """
        n = len(self._cursors)
        if self._pool is None and n > 1:
            self._pool = ThreadPoolExecutor(max_workers=n - 1, thread_name_prefix="numbatraj-cam")
        futures = [
            self._pool.submit(self._read_camera, c, lo, hi, out)
            for c in range(1, n)
            if self._pool is not None
        ]
        first: BaseException | None = None
        try:
            if n:
                self._read_camera(0, lo, hi, out)
        except BaseException as exc:
            first = exc
        for fut in futures:  # always wait: no worker may outlive this call
            try:
                fut.result()
            except BaseException as exc:
                first = first or exc
        if first is not None:
            raise first

    def close(self) -> None:
        """Close every decoder and the worker threads."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        for c, cur in enumerate(self._cursors):
            if cur is not None:
                cur.close()
            self._cursors[c] = None

    def __repr__(self) -> str:
        open_files = [os.path.basename(c.path) for c in self._cursors if c is not None]
        return f"CameraStreams(cameras={list(self._plan.cameras)}, open={open_files})"
