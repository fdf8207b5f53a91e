"""TrajectoryStore: the read-only view of a trajectory store file."""

from __future__ import annotations

import mmap
import os
from types import TracebackType
from typing import Any

import h5py
import numpy as np

from numbatraj._pages import filled
from numbatraj.data._digest_kernels import _digest_range_cpu, copy_digest_chunks
from numbatraj.data.checksums import (
    ChunkPartReader,
    ChunkReader,
    ColumnDigests,
    load_digests,
    read_verified,
)
from numbatraj.data.column import ColumnSpec
from numbatraj.data.layout import StoreLayout, inspect_layout
from numbatraj.data.stats import STAT_NAMES, STATS_GROUP
from numbatraj.errors import IntegrityError, RowIndexError, SchemaError
from numbatraj.io.hdf5 import RawRowChunks, describe_compression, open_h5_read, raw_row_chunks

__all__ = ["TrajectoryStore"]


def _inspect_checked(
    f: h5py.File, where: str
) -> tuple[StoreLayout, list[str], dict[str, ColumnDigests]]:
    """:func:`inspect_layout` plus the checksum checks; h5py's own errors (a metadata
    checksum, an unreadable object header) become :class:`IntegrityError` naming the file."""
    try:
        layout, problems = inspect_layout(f, where)
        raw = f["__manifest__"][()] if "__manifest__" in f else None
        digests, more = load_digests(f, layout.manifest, layout.columns, layout.n_rows, raw)
    except IntegrityError:
        raise
    except (OSError, RuntimeError, KeyError, ValueError, TypeError) as exc:
        raise IntegrityError(f"{where} cannot be read as a store: {exc}") from exc
    return layout, problems + more, digests


class _FileMap:
    """The store file mapped read-only: what the raw chunk reads copy from.

    Why a mapping and not ``pread``: with checksums on, every chunk read must also be
    digested.  ``pread`` copies the page cache into ``out`` and a second pass then reads
    ``out`` again for the digest; measured on a warm 1.04 GB column (bench/test_store_io.py,
    the issue 14 note), the read alone ran at 1.07x h5py's contiguous read and read + digest
    at 0.63x, and digesting each chunk right after its pread did not help (the kernel's
    copy does not leave the chunk in cache: 0.44-0.60x for 1 to 40 chunks per pread).  One
    pass that copies each word from the mapping and digests it on the way
    (``_copy_digest_chunks``) reads the bytes once: 0.92-0.98x.  On a machine where the
    destination lines then had to be read before being written (the Intel Xeon VM: the
    one pass took as long as a copy plus a digest pass, 0.90-0.95x), reads of 4 MiB and
    more go with streaming stores (``copy_digest_chunks``): 1.17-1.25x.

    The mapping lives as long as the store is open; :meth:`TrajectoryStore.close` drops it
    (unmapped once no read is still using it).  Its pages are faulted in by the first read
    that touches them and stay mapped: a first ``load_column`` through page faults ran at
    0.80x h5py's speed, later ones at 0.98x.  ``madvise(MADV_POPULATE_READ)`` before each
    read made first reads faster (0.92x) but every later one slower (it walks the page
    tables again: 180 ms against 136 ms for the column, and slower 4096-row slabs), so
    it is not used.  The file's size is checked before every
    read, so a store truncated in place raises :class:`IntegrityError` instead of faulting
    (a truncation racing with a read is not caught: numbatraj never modifies a published
    file, it publishes a new one by rename).
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        self.size = len(self._mm)
        self.bytes = np.frombuffer(self._mm, np.uint8)

    def check_size(self, end: int) -> None:
        """Raise OSError when the file (now, or as mapped) ends before byte ``end``."""
        now = os.fstat(self.fd).st_size
        if end > min(now, self.size):
            raise OSError(f"the file is {now} bytes but its chunk index places data up to "
                          f"byte {end}: it was truncated")


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
        try:
            f = open_h5_read(self.path, chunk_cache_bytes=chunk_cache_bytes)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise IntegrityError(str(exc)) from exc
        try:
            layout, problems, self._digests = _inspect_checked(f, repr(self.path))
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
                try:
                    out[name] = np.asarray(ds[()])
                except (OSError, RuntimeError) as exc:
                    raise IntegrityError(
                        f"{self.path!r}: statistic {STATS_GROUP}/{column}/{name} cannot be "
                        f"read: {exc}"
                    ) from exc
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

    def _file_map(self) -> _FileMap:
        m: _FileMap | None = self.__dict__.get("_map")
        if m is None:
            if self._f is None:
                raise ValueError(f"store {self.path!r} is closed")
            m = _FileMap(int(self._f.id.get_vfd_handle()))
            self.__dict__["_map"] = m
        return m

    def _chunk_readers(self, name: str) -> tuple[ChunkReader | None, ChunkPartReader | None]:
        """For a raw-chunked column, the readers that copy and digest whole chunks in one
        pass from the file mapping (:class:`_FileMap`), and that digest a chunk only partly
        inside a read and copy just its rows; (None, None) for the HDF5 path."""
        _, raw = self._reader(name)
        if raw is None:
            return None, None
        cb = raw.chunk_rows * raw.row_bytes
        total = raw.n_rows * raw.row_bytes
        offs = raw.offsets

        def read(out: np.ndarray, k0: int, k1: int) -> np.ndarray:
            m = self._file_map()
            dst = out.reshape(-1).view(np.uint8)
            if dst.size != min(total, k1 * cb) - k0 * cb:
                raise ValueError(f"chunks {k0}..{k1 - 1} do not fill {dst.size} bytes")
            m.check_size(int(offs[k0:k1].max()) + cb)
            dig = np.empty(k1 - k0, np.uint64)
            copy_digest_chunks(m.bytes, offs, k0, k1, cb, total, dst, dig)
            return dig

        def read_part(out: np.ndarray, k: int, r0: int, r1: int) -> int:
            # a slab's edge chunk: digested where it lies, which leaves it in cache for the
            # copy of the rows asked for; 4096-row slabs took 0.64x h5py's time this way,
            # 0.74x through a scratch chunk, 0.96x by pread + digest (docs/residency.md)
            m = self._file_map()
            o = int(offs[k])
            m.check_size(o + cb)
            n = min(cb, total - k * cb)
            got = int(_digest_range_cpu(m.bytes, o, o + n))
            rb = raw.row_bytes
            out.reshape(-1).view(np.uint8)[:] = m.bytes[o + r0 * rb : o + r1 * rb]
            return got

        return read, read_part

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
        if out is None:  # a large new array: its pages faulted in ahead on a free core
            return filled(shape, spec.dtype, lambda o: self._read(name, 0, self.n_rows, o))
        self._check_out(out, shape, spec, f"load_column({name!r})")
        self._read(name, 0, self.n_rows, out)
        return out

    def read_range(
        self, name: str, start: int, stop: int, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Rows ``start:stop`` of column ``name`` in one contiguous read.

        ``0 <= start <= stop <= n_rows`` or :class:`RowIndexError`.  When ``out`` is given it
        must be C-contiguous with shape ``(stop - start, *spec.shape)`` and the column's dtype;
        it is filled and returned.  Unfiltered columns with checksums are copied straight
        into the buffer from a read-only mapping of the file, each chunk digested as it is
        copied (one pass over the bytes); without checksums they are read with ``pread``,
        one call per run of chunks stored back to back; compressed ones through HDF5
        (docs/store.md, "Measured throughput"; docs/residency.md, "Slabs and whole
        columns").
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
            return filled(shape, spec.dtype, lambda o: self._read(name, start, stop, o))
        self._check_out(out, shape, spec, f"read_range({name!r}, {start}, {stop})")
        self._read(name, start, stop, out)
        return out

    def _read(self, name: str, start: int, stop: int, out: np.ndarray) -> None:
        # every chunk the rows touch is checked against its digest (data/checksums.py),
        # whichever way _read_rows fetches them (pread of raw chunks, or HDF5); no rows: no
        # read at all
        if stop <= start:
            return
        self._reader(name)  # a closed store or unknown column: its own error, not a read error

        def read(buf: np.ndarray, lo: int, hi: int) -> None:
            self._read_rows(name, lo, hi, buf)

        cd = self._digests.get(name)
        whole, part = self._chunk_readers(name) if cd is not None else (None, None)
        read_verified(read, name, cd, self.n_rows, start, stop, out, repr(self.path),
                      whole, part)

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
        # the mapping is not closed here: a read still copying from it on another thread
        # keeps it alive, and it is unmapped when the last reference goes
        self.__dict__.pop("_map", None)
        self.__dict__.pop("_read_cache", None)
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
