"""WindowedColumn: a column too big for memory, held one contiguous slab at a time.

The slab lives in one buffer allocated when the column is made.  :meth:`WindowedColumn.seek`
and :meth:`WindowedColumn.advance` refill it with a single contiguous ``read_range``; a gather
takes absolute row numbers and must stay inside the resident window.  There is deliberately no
refill-on-miss: a silent refill would turn one stray index into a disk read per minibatch
element, the pattern measured thousands of times slower than a resident gather
(docs/residency.md).  ``WindowSampler`` draws rows inside :attr:`WindowedColumn.window`.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import numpy as np

from numbatraj.data.resident import (
    as_words,
    device_gather,
    gather_words,
    host_indices,
    out_array,
)
from numbatraj.errors import RowIndexError, SchemaError

if TYPE_CHECKING:
    from numbatraj.data.store import TrajectoryStore

__all__ = ["WindowedColumn"]


class WindowedColumn:
    """A sliding, non-overlapping window of one store column, resident in a fixed buffer.

    Make one with :meth:`make`; it starts positioned at row 0.

    Attributes
    ----------
    window : (int, int)
        ``(start, stop)`` absolute rows now resident; ``stop - start <= window_rows``, shorter
        for the last window of a store whose length is not a multiple of ``window_rows``.
    """

    def __init__(self, store: TrajectoryStore, name: str, window_rows: int) -> None:
        spec = store.spec(name)
        try:
            rows = operator.index(window_rows)
        except TypeError:
            raise SchemaError(
                f"WindowedColumn {name!r}: window_rows must be an int, got {window_rows!r}"
            ) from None
        if rows < 1:
            raise SchemaError(f"WindowedColumn {name!r}: window_rows = {rows}, expected >= 1")
        self._store = store
        self.name = name
        self.window_rows = int(rows)
        self._dtype = spec.dtype
        self._row_shape = tuple(spec.shape)
        self._row_bytes = spec.row_bytes
        self._n_rows = store.n_rows
        cap = min(self.window_rows, max(self._n_rows, 1))
        self._buf = np.empty((cap, *self._row_shape), dtype=self._dtype)
        self._words = as_words(self._buf, cap, self._row_bytes)
        self._start = 0
        self._stop = 0
        self._dev: Any = None  # device mirror of the current window, made on demand

    @classmethod
    def make(cls, store: TrajectoryStore, name: str, window_rows: int) -> WindowedColumn:
        """A windowed view of column ``name`` with a ``window_rows``-row buffer, at row 0.

        The buffer holds ``min(window_rows, store.n_rows)`` rows and is never reallocated.
        """
        col = cls(store, name, window_rows)
        if col._n_rows:
            col.seek(0)
        return col

    # ------------------------------------------------------------------ metadata
    @property
    def window(self) -> tuple[int, int]:
        """``(start, stop)``: the absolute rows now resident (``stop`` exclusive)."""
        return (self._start, self._stop)

    @property
    def rows(self) -> np.ndarray:
        """The resident rows, ``(stop - start, *row_shape)``, a view of the buffer."""
        return self._buf[: self._stop - self._start]

    @property
    def n_rows(self) -> int:
        """Rows in the whole column (on disk)."""
        return self._n_rows

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def row_shape(self) -> tuple[int, ...]:
        return self._row_shape

    def __repr__(self) -> str:
        return (
            f"WindowedColumn({self.name!r}, {self._dtype.name} {self._row_shape}, "
            f"window={self.window}, window_rows={self.window_rows}, rows={self._n_rows})"
        )

    # ------------------------------------------------------------------ moving
    def seek(self, start: int) -> None:
        """Make rows ``[start, min(start + window_rows, n_rows))`` resident (one slab read).

        Raises :class:`RowIndexError` unless ``0 <= start < n_rows``.  If the read fails the
        window is left empty, so no gather can return stale rows.
        """
        start = operator.index(start)
        if not 0 <= start < self._n_rows:
            raise RowIndexError(
                f"WindowedColumn {self.name!r}: seek({start}) is outside the rows "
                f"[0, {self._n_rows})"
            )
        stop = min(start + self.window_rows, self._n_rows)
        self._start = self._stop = start
        self._dev = None
        self._store.read_range(self.name, start, stop, out=self._buf[: stop - start])
        self._stop = stop

    def advance(self) -> bool:
        """Move to the next non-overlapping window (``start = old stop``).

        Returns False, leaving the window where it is, when the last window is resident.
        """
        if self._stop >= self._n_rows:
            return False
        self.seek(self._stop)
        return True

    # ------------------------------------------------------------------ gathering
    def _hint(self) -> str:
        return (
            f" (the resident window is rows [{self._start}, {self._stop}); windowed columns "
            f"never refill on a miss: seek() or advance() first)"
        )

    def gather(self, idx: Any, out: np.ndarray | None = None) -> np.ndarray:
        """``out[i, ...] = column[idx[i], ...]`` for absolute rows inside :attr:`window`.

        Parameters
        ----------
        idx : int array ``(B,)`` or ``(B, T)``, or IndexBatch
            Absolute row numbers, each in ``[start, stop)``.
        out : array ``(*idx.shape, *row_shape)`` of the column dtype, optional
            Filled in place and returned; must be C-contiguous.

        Raises
        ------
        RowIndexError
            An index outside the resident window; names the first position and value and
            writes nothing.
        """
        what = f"gather from windowed column {self.name!r}"
        flat = host_indices(idx, what)
        shape = flat.shape
        res = out_array(out, (*shape, *self._row_shape), self._dtype, what)
        flat = flat.reshape(-1)
        out_w = as_words(res, flat.shape[0], self._row_bytes)
        gather_words(
            self._words, flat, out_w, self._start, self._start, self._stop, what, shape,
            self._hint(),
        )
        return res

    def gather_device(self, idx: Any, out: Any = None, *, stream: Any = 0) -> Any:
        """Device twin of :meth:`gather`; the window is mirrored to the GPU on first use
        after each move.  Same arguments as ``ResidentColumn.gather_device``."""
        if self._dev is None:
            from numbatraj._cuda import get_cuda

            k = self._stop - self._start
            self._dev = get_cuda().to_device(np.ascontiguousarray(self._words[:k]))
        what = f"gather_device from windowed column {self.name!r}"
        return device_gather(
            self._dev, self._row_shape, self._dtype, self._row_bytes, idx, out, self._start,
            self._start, self._stop, what, stream, self._hint(),
        )
