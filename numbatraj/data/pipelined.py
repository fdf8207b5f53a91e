"""Overlap decoding with writing: a store writer driven from one background thread.

h5py releases the GIL while HDF5 writes a chunk and PyAV releases it while a frame decodes,
so writing batch ``k`` while batch ``k + 1`` is decoded hides most of the write time.  The
batches live in a small fixed pool of preallocated buffers that the writing thread hands
back once written; memory stays at ``pool`` batches whatever the dataset's length.

Periodic flushes to disk during the write are the writer's own
(:class:`~numbatraj.data.writer.TrajectoryStoreWriter`'s ``sync_every_bytes``); they run on
the writing thread too, since that is where the writer is called.

Only the background thread touches the writer between :meth:`PipelinedAppender.start` and
:meth:`PipelinedAppender.finish`; an error there is re-raised in the caller's thread at its
next call.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Mapping
from types import TracebackType

import numpy as np

from numbatraj.data.writer import TrajectoryStoreWriter

__all__ = ["PipelinedAppender"]

_END_EPISODE = "end_episode"
_STOP = "stop"


class PipelinedAppender:
    """Append batches to ``writer`` from a background thread.

    Parameters
    ----------
    writer : TrajectoryStoreWriter
    column : str
        The column whose rows are staged in the pool buffers (the large one: images).
    row_shape : tuple of int
        Shape of one row of ``column``.
    dtype : numpy dtype
    batch_rows : int
        Rows per buffer.
    pool : int
        Number of buffers (at least 2: one being filled, one being written).
    """

    def __init__(
        self,
        writer: TrajectoryStoreWriter,
        column: str,
        row_shape: tuple[int, ...],
        dtype: np.dtype,
        batch_rows: int,
        pool: int = 3,
    ) -> None:
        self._writer = writer
        self._column = column
        self._free: queue.Queue[np.ndarray] = queue.Queue()
        for _ in range(max(2, pool)):
            self._free.put(np.empty((batch_rows, *row_shape), dtype=dtype))
        self._work: queue.Queue[tuple[str, object, object]] = queue.Queue()
        self._error: BaseException | None = None
        self._cancelled = False
        self._thread = threading.Thread(
            target=self._run, name="numbatraj-store-writer", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while True:
            kind, rows, buf = self._work.get()
            if kind == _STOP:
                return
            try:
                if self._error is None and not self._cancelled:
                    if kind == _END_EPISODE:
                        self._writer.end_episode()
                    else:
                        assert isinstance(rows, dict) and isinstance(buf, np.ndarray)
                        n = len(next(iter(rows.values())))
                        self._writer.append_rows({**rows, self._column: buf[:n]})
            except BaseException as exc:  # handed to the caller's thread
                self._error = exc
            finally:
                if isinstance(buf, np.ndarray):
                    self._free.put(buf)

    def _check(self) -> None:
        if self._error is not None:
            raise self._error

    def buffer(self) -> np.ndarray:
        """A free ``(batch_rows, *row_shape)`` buffer to fill (blocks while all are queued)."""
        self._check()
        buf = self._free.get()
        self._check()
        return buf

    def append(self, rows: Mapping[str, np.ndarray], buf: np.ndarray) -> None:
        """Queue ``rows`` plus the first ``len(rows)`` rows of ``buf`` for ``column``.

        ``buf`` must come from :meth:`buffer`; it is written later and then reused, so it
        must not be touched after this call.  The arrays in ``rows`` must not change either.
        """
        self._check()
        self._work.put(("rows", dict(rows), buf))

    def end_episode(self) -> None:
        """Queue the writer's ``end_episode``."""
        self._check()
        self._work.put((_END_EPISODE, None, None))

    def finish(self) -> None:
        """Wait until everything queued is written; re-raise the writing thread's error."""
        self._work.put((_STOP, None, None))
        self._thread.join()
        self._check()

    def __enter__(self) -> PipelinedAppender:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._thread.is_alive():
            self._cancelled = exc_type is not None
            self._work.put((_STOP, None, None))
            self._thread.join()
