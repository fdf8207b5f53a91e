"""Streaming video encoding over PyAV: rgb24 frames in, one video file out, nothing buffered.

:class:`VideoEncoder` opens a container and one encoder stream, and each :meth:`VideoEncoder.add`
hands one frame straight to the encoder; the packets it returns are muxed at once.  Frame
``k`` gets presentation time ``k / rate`` exactly (``time_base = 1 / rate``), so a reader can
locate frames by ``round(t * rate)``.  The file can be built under another name than the one
it ends with (``path`` with an explicit ``container_format``), which lets a caller rename it
into place only once it is complete.

Codec names follow FFmpeg's encoder names; :data:`CODEC_ALIASES` maps short names
(``"av1"`` -> ``libsvtav1``, ``"h264"`` -> ``libx264``).  :func:`available_encoders` lists
which of the known video encoders this PyAV build has.
"""

from __future__ import annotations

import os
from fractions import Fraction
from types import TracebackType
from typing import Any, Self

import av
import numpy as np

from numbatraj.errors import UnsupportedCodecError

__all__ = [
    "CODEC_ALIASES",
    "KNOWN_ENCODERS",
    "UnsupportedCodecError",
    "VideoEncoder",
    "available_encoders",
    "resolve_codec",
]

#: Short names accepted for encoders.
CODEC_ALIASES: dict[str, str] = {"av1": "libsvtav1", "svtav1": "libsvtav1", "h264": "libx264"}

#: Video encoders probed by :func:`available_encoders`, in order of preference.
KNOWN_ENCODERS: tuple[str, ...] = ("libsvtav1", "libaom-av1", "libx264", "libx265", "mpeg4")


def available_encoders() -> list[str]:
    """Names in :data:`KNOWN_ENCODERS` that this PyAV build can encode with."""
    found = []
    for name in KNOWN_ENCODERS:
        try:
            av.codec.Codec(name, "w")
        except Exception:  # PyAV raises UnknownCodecError / ValueError depending on version
            continue
        found.append(name)
    return found


def resolve_codec(codec: str) -> str:
    """The encoder name for ``codec`` (aliases resolved), checked against this PyAV build.

    Raises
    ------
    UnsupportedCodecError
        The encoder is unknown to FFmpeg or not compiled into this PyAV build.
    """
    name = CODEC_ALIASES.get(codec, codec)
    try:
        av.codec.Codec(name, "w")
    except Exception as exc:
        raise UnsupportedCodecError(
            f"video codec {codec!r} (encoder {name!r}) is not available in this PyAV build "
            f"({type(exc).__name__}); available encoders: {available_encoders()}"
        ) from exc
    return name


def _opt_strings(options: dict[str, Any] | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in (options or {}).items() if v is not None}


class VideoEncoder:
    """One video file being encoded from ``(height, width, 3)`` uint8 rgb24 frames.

    Parameters
    ----------
    path : path-like
        File to write (created or truncated).
    codec : str
        Encoder name or alias (see :func:`resolve_codec`).
    rate : int
        Frames per second; frame ``k`` is stamped ``k / rate`` seconds.
    width, height : int
        Frame size.  Every frame must have it.
    options : dict, optional
        Encoder options (``{"crf": 30, "g": 2, "preset": 12}``); values become strings.
    pix_fmt : str
        Pixel format of the stream (``"yuv420p"``).
    container_format : str, optional
        Container format (``"mp4"``); needed when ``path``'s extension does not say it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        codec: str,
        rate: int,
        width: int,
        height: int,
        *,
        options: dict[str, Any] | None = None,
        pix_fmt: str = "yuv420p",
        container_format: str | None = None,
    ) -> None:
        if int(rate) != rate or rate <= 0:
            raise ValueError(f"rate must be a positive whole number of frames/s, got {rate!r}")
        if width < 1 or height < 1:
            raise ValueError(f"width and height must be positive, got {width}x{height}")
        self.path = os.fspath(path)
        self.codec = resolve_codec(codec)
        self.rate = int(rate)
        self.width, self.height = int(width), int(height)
        self.frames = 0
        self.packets = 0
        self.encoded_bytes = 0
        self._tb = Fraction(1, self.rate)
        self._container: Any = av.open(self.path, "w", format=container_format)
        try:
            stream: Any = self._container.add_stream(
                self.codec, rate=self.rate, options=_opt_strings(options)
            )
            stream.width, stream.height, stream.pix_fmt = self.width, self.height, pix_fmt
            stream.time_base = self._tb
            self._stream: Any = stream
        except BaseException:
            self._container.close()
            raise

    @property
    def closed(self) -> bool:
        """Whether the file is finished (or abandoned)."""
        return self._container is None

    def add(self, rgb: np.ndarray) -> None:
        """Encode one ``(height, width, 3)`` uint8 frame and mux what the encoder returns."""
        if self._container is None:
            raise ValueError(f"{self.path!r}: the encoder is closed")
        if rgb.shape != (self.height, self.width, 3) or rgb.dtype != np.uint8:
            raise ValueError(
                f"{self.path!r}: frame is {rgb.dtype} {rgb.shape}, expected uint8 "
                f"({self.height}, {self.width}, 3)"
            )
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        frame.pts = self.frames
        frame.time_base = self._tb
        for packet in self._stream.encode(frame):
            self._mux(packet)
        self.frames += 1

    def _mux(self, packet: Any) -> None:
        self.packets += 1
        self.encoded_bytes += int(packet.size)
        self._container.mux(packet)

    def estimated_size(self) -> int:
        """Bytes the file holds once the frames given so far are encoded: the packets out
        of the encoder, plus the frames still inside it (lookahead) at the average packet
        size so far."""
        if self.packets == 0:
            return 0
        pending = max(0, self.frames - self.packets)
        return self.encoded_bytes + pending * self.encoded_bytes // self.packets

    def close(self) -> None:
        """Flush the encoder, write the container trailer, close the file and fsync it (so
        that metadata written after it never names a video still in the page cache)."""
        container, self._container = self._container, None
        if container is None:
            return
        try:
            for packet in self._stream.encode():
                self.packets += 1
                self.encoded_bytes += int(packet.size)
                container.mux(packet)
        finally:
            container.close()
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def abort(self) -> None:
        """Close without flushing and delete the file."""
        container, self._container = self._container, None
        if container is not None:
            try:
                container.close()
            except Exception:  # the file is being thrown away
                pass
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"VideoEncoder({self.path!r}, {self.codec}, {self.frames} frames, {state})"
