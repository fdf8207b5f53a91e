"""Sequential video decoding over PyAV, and RGB resizing with Pillow.

:class:`FrameCursor` reads one video file forward only, handing out frames by their number
at a given rate (``round(pts_seconds * rate)``), which is how a file that packs several clips
back to back is indexed.  It keeps no decoded frame except the one it is positioned on, so
memory does not grow with the file.  Frames are never looked up by counting: a frame whose
number is absent (a gap) is reported, not silently replaced by its neighbour.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import av
import numpy as np
from PIL import Image

from numbatraj.errors import IntegrityError

__all__ = ["FrameCursor", "VideoInfo", "frame_to_rgb", "probe_video", "resize_rgb"]


@dataclass(frozen=True)
class VideoInfo:
    """What the container says about its first video stream.

    ``n_frames`` is the container's frame count, 0 when it does not record one.
    """

    path: str
    codec: str
    width: int
    height: int
    pix_fmt: str
    rate: float
    n_frames: int


def _open(path: str) -> Any:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"video file {path!r} does not exist")
    try:
        container = av.open(path)
    except (av.FFmpegError, OSError, ValueError) as exc:
        raise IntegrityError(f"{path!r} cannot be opened as a video ({exc})") from exc
    if not container.streams.video:
        container.close()
        raise IntegrityError(f"{path!r} holds no video stream")
    return container


def _info(path: str, stream: Any) -> VideoInfo:
    rate = stream.average_rate or stream.base_rate or 0
    return VideoInfo(
        path=path,
        codec=str(stream.codec_context.name),
        width=int(stream.codec_context.width),
        height=int(stream.codec_context.height),
        pix_fmt=str(stream.codec_context.pix_fmt or ""),
        rate=float(rate),
        n_frames=int(stream.frames or 0),
    )


def probe_video(path: str | os.PathLike[str]) -> VideoInfo:
    """Open ``path``, read its first video stream's header and close it (no decoding)."""
    p = os.fspath(path)
    container = _open(p)
    try:
        return _info(p, container.streams.video[0])
    finally:
        container.close()


def resize_rgb(rgb: np.ndarray, height: int, width: int) -> np.ndarray:
    """Resize an ``(h, w, 3)`` uint8 image with Pillow's BILINEAR filter.

    Returns ``rgb`` itself when it already has the requested size.
    """
    if rgb.shape[0] == height and rgb.shape[1] == width:
        return rgb
    img = Image.fromarray(np.ascontiguousarray(rgb))
    return np.asarray(img.resize((width, height), Image.Resampling.BILINEAR))


def frame_to_rgb(frame: Any, height: int | None = None, width: int | None = None) -> np.ndarray:
    """A decoded PyAV frame as ``(H, W, 3)`` uint8 rgb24, resized when ``height``/``width``
    differ from the frame's own size."""
    rgb = frame.to_ndarray(format="rgb24")
    if height is None or width is None:
        return rgb
    return resize_rgb(rgb, height, width)


class FrameCursor:
    """Forward-only access to one video file's frames by frame number.

    Parameters
    ----------
    path : path-like
        The video file.
    rate : float
        Frames per second used to number frames: frame ``k`` is the one whose presentation
        time ``t`` has ``round(t * rate) == k``.
    threads : bool
        Let the decoder use frame/slice threads (``thread_type="AUTO"``).
    """

    def __init__(self, path: str | os.PathLike[str], rate: float, *, threads: bool = True) -> None:
        self.path = os.fspath(path)
        if not rate > 0:
            raise ValueError(f"rate must be positive, got {rate!r}")
        self.rate = float(rate)
        self._container = _open(self.path)
        stream = self._container.streams.video[0]
        if threads:
            stream.thread_type = "AUTO"
        self.info = _info(self.path, stream)
        self._frames = self._container.decode(stream)
        self._current: Any = None
        self._current_index = -1
        self._ended = False

    @property
    def position(self) -> int:
        """Number of the frame the cursor is on (-1 before the first)."""
        return self._current_index

    def _advance(self) -> bool:
        try:
            frame = next(self._frames)
        except StopIteration:
            self._ended = True
            return False
        except av.FFmpegError as exc:
            raise IntegrityError(
                f"{self.path!r}: decoding failed after frame {self._current_index} ({exc})"
            ) from exc
        if frame.pts is None or frame.time is None:
            raise IntegrityError(
                f"{self.path!r}: a frame after frame {self._current_index} has no timestamp"
            )
        index = round(float(frame.time) * self.rate)
        if index <= self._current_index:
            raise IntegrityError(
                f"{self.path!r}: frame timestamps do not increase (frame {index} at "
                f"{float(frame.time):.6f} s follows frame {self._current_index})"
            )
        self._current, self._current_index = frame, index
        return True

    def frame(self, index: int) -> Any:
        """The decoded frame number ``index`` (a ``av.VideoFrame``).

        ``index`` must not be below the cursor's position: the file is read forward only.
        Frames between the position and ``index`` are decoded and dropped.

        Raises
        ------
        IntegrityError
            The file ends before frame ``index``, or has no frame with that number.
        ValueError
            ``index`` is behind the cursor.
        """
        index = int(index)
        if index < self._current_index:
            raise ValueError(
                f"{self.path!r}: frame {index} is behind the cursor (at frame "
                f"{self._current_index}); the cursor only moves forward"
            )
        while self._current_index < index:
            if self._ended or not self._advance():
                raise IntegrityError(
                    f"{self.path!r} ends before frame {index}: its last frame is "
                    f"{self._current_index} ({self._current_index + 1} frames at "
                    f"{self.rate:g} fps)"
                )
        if self._current_index != index:
            raise IntegrityError(
                f"{self.path!r} has no frame {index} (timestamp {index / self.rate:.6f} s): "
                f"the next frame is {self._current_index} at "
                f"{float(self._current.time):.6f} s"
            )
        return self._current

    def close(self) -> None:
        """Release the decoder and the file."""
        container, self._container = self._container, None
        self._current = None
        if container is not None:
            container.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FrameCursor({self.path!r}, rate={self.rate:g}, position={self._current_index})"
