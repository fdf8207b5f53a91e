"""TrajectoryStore: the read-only view of a trajectory store file."""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any

import h5py
import numpy as np

from numbatraj.data.column import ColumnSpec
from numbatraj.data.layout import inspect_layout
from numbatraj.data.stats import STAT_NAMES, STATS_GROUP
from numbatraj.errors import IntegrityError, RowIndexError, SchemaError
from numbatraj.io.hdf5 import RawRowChunks, describe_compression, open_h5_read, raw_row_chunks

__all__ = ["TrajectoryStore"]


def _reopen(path: str, chunk_cache_bytes: int) -> TrajectoryStore:
    return TrajectoryStore(path, chunk_cache_bytes=chunk_cache_bytes)


class TrajectoryStore:
    """Open a trajectory store read-only; the episode index is validated on open.

    Opens files written by :class:`~numbatraj.TrajectoryStoreWriter` and foreign HDF5 files
    that carry an episode index (``ep_len``, optionally ``ep_offset``) with columns as
    top-level datasets, such as the PushT expert dataset.  There is deliberately no
    gather-by-index-from-disk method: scattered reads from disk are thousands of times slower
    than a resident gather (see docs/residency.md).  Load a column with :meth:`load_column`
    (or ``ResidentColumn``) and gather from memory; read disk in contiguous slabs.

    Parameters
    ----------
    path : path-like
        The ``.h5`` file.
    chunk_cache_bytes : int
        HDF5 chunk cache per dataset.

    Raises
    ------
    NotAStoreError
        The file has no episode index.
    IntegrityError
        The episode index, manifest and columns disagree; the message lists every problem.

    Notes
    -----
    A store pickles by path: unpickling (in a DataLoader worker, say) reopens the file, so
    the file must be readable at the same path there.
    """

    def __init__(self, path: str | os.PathLike[str], *, chunk_cache_bytes: int = 16 << 20) -> None:
        self.path = os.fspath(path)
        self._chunk_cache_bytes = int(chunk_cache_bytes)
        f = open_h5_read(self.path, chunk_cache_bytes=chunk_cache_bytes)
        try:
            layout, problems = inspect_layout(f, repr(self.path))
        except BaseException:
            f.close()
            raise
        if problems:
            f.close()
            listing = "\n".join(f"  - {p}" for p in problems)
            raise IntegrityError(
                f"{self.path!r} is not a consistent trajectory store "
                f"({len(problems)} problem(s)):\n{listing}"
            )
        self._f: h5py.File | None = f
        self._layout = layout
        self._lengths = layout.lengths.copy()
        self._offsets = layout.offsets.copy()
        self._lengths.flags.writeable = False
        self._offsets.flags.writeable = False

    # ------------------------------------------------------------------ metadata
    @property
    def n_rows(self) -> int:
        """Total rows (every column has this many)."""
        return self._layout.n_rows

    @property
    def n_episodes(self) -> int:
        return int(self._lengths.shape[0])

    @property
    def columns(self) -> dict[str, ColumnSpec]:
        """Column name -> :class:`ColumnSpec`, in file order."""
        return dict(self._layout.columns)

    @property
    def manifest(self) -> dict[str, str]:
        """The manifest's ``key -> value`` strings (empty for a foreign file)."""
        return dict(self._layout.manifest)

    @property
    def is_foreign(self) -> bool:
        """True when the file has no numbatraj manifest (its schema was recovered)."""
        return self._layout.foreign

    @property
    def fps(self) -> float | None:
        """Frames per second the store was recorded at (manifest ``attr.fps``), or None.

        The LeRobot import and writer record it; a store without it cannot convert
        ``delta_timestamps`` into frame offsets.
        """
        raw = self._layout.manifest.get("attr.fps", "")
        try:
            fps = float(raw)
        except ValueError:
            return None
        return fps if fps > 0 and np.isfinite(fps) else None

    def stats(self, column: str) -> dict[str, np.ndarray]:
        """Per-column statistics stored under ``stats/<column>/`` (see :mod:`numbatraj.data.stats`).

        Returns
        -------
        dict
            ``mean``, ``std``, ``min``, ``max``, ``q01``, ``q99`` (float64, the column's row
            shape) and ``count`` (int64 scalar array), those present in the file.

        Raises
        ------
        SchemaError
            ``column`` is not a column, or the store records no statistics for it.
        """
        self.spec(column)
        if self._f is None:
            raise ValueError(f"store {self.path!r} is closed")
        group = self._f.get(f"{STATS_GROUP}/{column}")
        if not isinstance(group, h5py.Group) or not len(group):
            raise SchemaError(
                f"{self.path!r} records no statistics for column {column!r} (no "
                f"'{STATS_GROUP}/{column}/' datasets); compute them with "
                f"numbatraj.data.stats.compute_stats and write them with the store"
            )
        out: dict[str, np.ndarray] = {}
        for name in STAT_NAMES:
            ds = group.get(name)
            if isinstance(ds, h5py.Dataset):
                out[name] = np.asarray(ds[()])
        return out

    @property
    def episode_lengths(self) -> np.ndarray:
        """int64 ``(n_episodes,)``, read-only."""
        return self._lengths

    @property
    def episode_offsets(self) -> np.ndarray:
        """int64 ``(n_episodes,)`` start row of each episode, read-only."""
        return self._offsets

    def __contains__(self, name: object) -> bool:
        return name in self._layout.columns

    def spec(self, name: str) -> ColumnSpec:
        """The :class:`ColumnSpec` of ``name``; unknown names raise listing the columns."""
        try:
            return self._layout.columns[name]
        except KeyError:
            raise SchemaError(
                f"{self.path!r} has no column {name!r}; columns: "
                f"{', '.join(self._layout.columns)}"
            ) from None

    def _dataset(self, name: str) -> h5py.Dataset:
        self.spec(name)
        if self._f is None:
            raise ValueError(f"store {self.path!r} is closed")
        ds = self._f[name]
        assert isinstance(ds, h5py.Dataset)
        return ds

    def storage(self, name: str) -> dict[str, Any]:
        """How column ``name`` is stored: compression, chunk shape, bytes on disk and in memory."""
        ds = self._dataset(name)
        spec = self.spec(name)
        return {
            "compression": describe_compression(ds),
            "chunks": ds.chunks,
            "stored_bytes": int(ds.id.get_storage_size()),
            "nbytes": int(self.n_rows * spec.row_bytes),
        }

    # ------------------------------------------------------------------ reading
    def _reader(self, name: str) -> tuple[h5py.Dataset, RawRowChunks | None]:
        """The cached dataset handle of ``name`` and, for an unfiltered row-chunked column,
        its chunk map (then rows are read with ``pread`` on HDF5's own file descriptor)."""
        cache: dict[str, tuple[h5py.Dataset, RawRowChunks | None]]
        cache = self.__dict__.setdefault("_read_cache", {})
        hit = cache.get(name)
        if hit is not None and self._f is not None:
            return hit
        ds = self._dataset(name)
        raw = raw_row_chunks(ds, self.spec(name).dtype) if ds.file.driver == "sec2" else None
        cache[name] = (ds, raw)
        return ds, raw

    def _read_rows(self, name: str, start: int, stop: int, out: np.ndarray) -> None:
        ds, raw = self._reader(name)
        if raw is not None:
            assert self._f is not None
            raw.read_into(int(self._f.id.get_vfd_handle()), start, stop, out)
        elif start == 0 and stop == ds.shape[0]:
            ds.read_direct(out)
        else:
            ds.read_direct(out, source_sel=np.s_[start:stop])

    def _check_out(self, out: np.ndarray, shape: tuple[int, ...], spec: ColumnSpec,
                   what: str) -> None:
        if not isinstance(out, np.ndarray):
            raise SchemaError(f"{what}: out must be a numpy array, got {type(out).__name__}")
        if out.dtype != spec.dtype or out.shape != shape:
            raise SchemaError(
                f"{what}: out is {out.dtype.name} {out.shape}, expected {spec.dtype.name} {shape}"
            )
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise SchemaError(f"{what}: out must be a C-contiguous, writeable array")

    def load_column(self, name: str, out: np.ndarray | None = None) -> np.ndarray:
        """The whole column as one contiguous array of shape ``(n_rows, *spec.shape)``.

        ``out``, when given, must be C-contiguous and writeable with that shape and the
        column's dtype; it is filled and returned.
        """
        spec = self.spec(name)
        shape = (self.n_rows, *spec.shape)
        if out is None:
            out = np.empty(shape, dtype=spec.dtype)
        else:
            self._check_out(out, shape, spec, f"load_column({name!r})")
        if self.n_rows:
            self._read_rows(name, 0, self.n_rows, out)
        return out

    def read_range(
        self, name: str, start: int, stop: int, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Rows ``start:stop`` of column ``name`` in one contiguous read.

        ``0 <= start <= stop <= n_rows`` or :class:`RowIndexError`.  When ``out`` is given it
        must be C-contiguous with shape ``(stop - start, *spec.shape)`` and the column's dtype;
        it is filled and returned.  Unfiltered columns are read with ``pread`` straight into
        the buffer, one call per run of chunks stored back to back; compressed ones through
        HDF5 (docs/store.md, "Measured throughput").
        """
        spec = self.spec(name)
        start, stop = int(start), int(stop)
        if not 0 <= start <= stop <= self.n_rows:
            raise RowIndexError(
                f"read_range({name!r}, {start}, {stop}) is outside the store's rows "
                f"[0, {self.n_rows}] (need 0 <= start <= stop <= n_rows)"
            )
        shape = (stop - start, *spec.shape)
        if out is None:
            out = np.empty(shape, dtype=spec.dtype)
        else:
            self._check_out(out, shape, spec, f"read_range({name!r}, {start}, {stop})")
        if stop > start:
            self._read_rows(name, start, stop, out)
        return out

    def episode(self, i: int) -> dict[str, np.ndarray]:
        """Every column's rows of episode ``i`` (negative ``i`` counts from the end)."""
        n = self.n_episodes
        i = int(i)
        if not -n <= i < n:
            raise RowIndexError(f"episode {i} is out of range; the store has {n} episode(s)")
        i %= n
        start = int(self._offsets[i])
        stop = start + int(self._lengths[i])
        return {name: self.read_range(name, start, stop) for name in self._layout.columns}

    # ------------------------------------------------------------------ lifecycle
    def __reduce__(self) -> tuple[Any, tuple[str, int]]:
        # by path: the HDF5 handle cannot cross a process boundary, the file name can
        return (_reopen, (self.path, self._chunk_cache_bytes))

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def __enter__(self) -> TrajectoryStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        cols = ", ".join(f"{n}: {s.describe()}" for n, s in self._layout.columns.items())
        return (
            f"TrajectoryStore({self.path!r}, rows={self.n_rows}, "
            f"episodes={self.n_episodes}, columns={{{cols}}})"
        )
