"""Stream a planned LeRobot dataset: data rows per episode, frames per camera in lockstep.

:class:`DataRows` holds one data file at a time (numbers only, sorted by global ``index``)
and hands out an episode's rows after checking that each of its rows is there exactly once.
:class:`CameraStreams` keeps one forward-only decoder per camera and switches a camera to its
next file when the episode loop reaches an episode stored there.  Nothing grows with the
dataset: the working set is one data file's numbers and one decoded frame per camera.
"""

from __future__ import annotations

import io
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from PIL import Image

import numbatraj.lerobot.schema as S
from numbatraj.errors import IntegrityError
from numbatraj.io.parquet import read_parquet, table_to_numpy
from numbatraj.io.video import FrameCursor, frame_to_rgb, resize_rgb
from numbatraj.lerobot._plan import DatasetPlan, EpisodePlan

__all__ = ["CameraStreams", "DataRows", "EpisodeRows"]

EpisodeRows = tuple[np.ndarray, np.ndarray, np.ndarray]


def _image_bytes(column: Any, cam: str, path: str) -> list[bytes]:
    """The encoded frames of an image camera column (LeRobot stores ``{bytes, path}``)."""
    out = []
    for i, v in enumerate(column.to_pylist()):
        data = v.get("bytes") if isinstance(v, dict) else v
        if not isinstance(data, bytes | bytearray) or not data:
            raise IntegrityError(
                f"{path!r}: camera {cam!r} row {i} holds no image bytes ({type(v).__name__})"
            )
        out.append(bytes(data))
    return out


def decode_image(data: bytes, height: int, width: int, where: str) -> np.ndarray:
    """An encoded frame (PNG, JPEG...) as ``(H, W, 3)`` uint8 RGB at the store's size."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            rgb = np.asarray(img.convert("RGB"))
    except (OSError, ValueError) as exc:
        raise IntegrityError(f"{where}: the image cannot be decoded ({exc})") from exc
    return resize_rgb(rgb, height, width)


def _listing(values: np.ndarray, limit: int = 8) -> str:
    shown = ", ".join(str(int(v)) for v in values[:limit])
    return shown + (f", ... ({values.size} in all)" if values.size > limit else "")


class DataRows:
    """Rows of ``observation.state``, ``action`` and ``task_index`` per episode."""

    def __init__(self, plan: DatasetPlan) -> None:
        self._plan = plan
        self._path: str | None = None
        self._cols: dict[str, np.ndarray] = {}
        self._images: dict[str, list[bytes]] = {}
        #: the extra features' rows of the last :meth:`episode` (name -> array)
        self.extras: dict[str, np.ndarray] = {}
        #: the image cameras' encoded frames of the last :meth:`episode` (name -> bytes list)
        self.images: dict[str, list[bytes]] = {}

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
        for ft in self._plan.extras:
            dtypes[ft.name] = ft.dtype
        image_cams = sorted(self._plan.image_cameras)
        table = read_parquet(path, list(dtypes) + image_cams)
        cols = table_to_numpy(table, dtypes, where=repr(path))
        images = {cam: _image_bytes(table.column(cam), cam, path) for cam in image_cams}
        del table
        for ft in self._plan.extras:
            v = cols[ft.name]
            if v.size != v.shape[0] * int(np.prod(ft.shape, dtype=np.int64)):
                raise IntegrityError(
                    f"{path!r}: feature {ft.name!r} rows have shape {v.shape[1:]}, info.json "
                    f"declares {ft.shape or (1,)}"
                )
            cols[ft.name] = v.reshape((v.shape[0], *ft.shape))
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
        self._images = {cam: [b[i] for i in order.tolist()] for cam, b in images.items()}
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
        self.extras = {ft.name: c[ft.name][sl] for ft in self._plan.extras}
        self.images = {cam: b[lo:hi] for cam, b in self._images.items()}
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
        self._images: dict[str, list[bytes]] = {}

    def start_episode(self, ep: EpisodePlan) -> None:
        """Point every camera at ``ep``'s video file, opening the next file when it changes."""
        for c, seg in enumerate(ep.segments):
            if self._plan.cameras[c] in self._plan.image_cameras:
                continue  # frames come from the data file (set_images)
            cur = self._cursors[c]
            if cur is None or cur.path != seg.path:
                if cur is not None:
                    cur.close()
                    self._cursors[c] = None
                self._cursors[c] = FrameCursor(seg.path, self._plan.fps)
        self._ep = ep

    def set_images(self, images: dict[str, list[bytes]]) -> None:
        """The current episode's encoded frames of the image cameras (from the data file)."""
        self._images = images

    def _read_camera(self, c: int, lo: int, hi: int, out: np.ndarray) -> None:
        ep = self._ep
        assert ep is not None
        cam = self._plan.cameras[c]
        if cam in self._plan.image_cameras:
            frames = self._images[cam]
            for j in range(lo, hi):
                rgb = decode_image(frames[j], self._h, self._w,
                                   f"camera {cam!r}, episode {ep.index}, frame {j}")
                np.copyto(out[j - lo, c], rgb.transpose(2, 0, 1))
            return
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
