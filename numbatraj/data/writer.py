"""TrajectoryStoreWriter: streaming, type-checked, atomic writes of a trajectory store."""

from __future__ import annotations

import operator
import os
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any

import h5py
import numpy as np

from numbatraj.data.checksums import (
    ALGORITHM,
    CHECKSUM_GROUP,
    ChunkDigester,
    digest_bytes,
    load_digests,
)
from numbatraj.data.column import STORE_DATASETS, ColumnSpec, check_column_set
from numbatraj.data.episode_index import offsets_from_lengths
from numbatraj.data.manifest import build_manifest, check_attrs, check_text, encode_manifest
from numbatraj.data.stats import STAT_NAMES, STATS_GROUP
from numbatraj.errors import (
    EpisodeError,
    NumbatrajError,
    RowIndexError,
    SchemaError,
    WriteFailedError,
)
from numbatraj.io.atomic import (
    discard,
    publish,
    publish_lock,
    remove_stale_temps,
    temp_path,
)
from numbatraj.io.h5write import LIBVER, close_discarded, flushed
from numbatraj.io.hdf5 import compression_kwargs, ensure_filter_plugins

__all__ = ["TrajectoryStoreWriter", "default_chunk_rows", "CHUNK_TARGET_BYTES"]

#: HDF5 metadata aggregation block (``meta_block_size``): see TrajectoryStoreWriter.__init__.
META_BLOCK_BYTES = 1 << 20

#: Target bytes per HDF5 chunk (see docs/store.md, "Chunking", for the measurements).
CHUNK_TARGET_BYTES = 256 << 10


def _datasync(fd: int) -> None:
    if hasattr(os, "fdatasync"):
        os.fdatasync(fd)
    else:  # pragma: no cover - macOS, Windows
        os.fsync(fd)


def default_chunk_rows(row_bytes: int, target_bytes: int = CHUNK_TARGET_BYTES) -> int:
    """Rows per chunk: the largest power of two whose chunk stays within ``target_bytes``."""
    rows = max(1, target_bytes // max(1, row_bytes))
    return 1 << (int(rows).bit_length() - 1)


class TrajectoryStoreWriter:
    """Write a trajectory store by streaming appends.

    The file is built at a temporary name beside ``path`` (``<path>.<random>.tmp``, see
    :func:`numbatraj.io.atomic.temp_path`) and renamed to ``path`` only when :meth:`close`
    succeeds, so an exception or a killed process never leaves a file at ``path`` that looks
    finished.  Every column is chunked with an unlimited leading axis; rows go to disk on each
    :meth:`append` and the writer keeps none in memory.

    Parameters
    ----------
    path : path-like
        Destination ``.h5`` file.
    columns : iterable of ColumnSpec
        The declared columns.  Every append is checked against them.
    env_id, seed : optional
        Recorded in the manifest.
    attrs : mapping, optional
        Extra ``key -> value`` strings recorded in the manifest (``attr.<key>``).
    overwrite : bool
        Replace an existing file at ``path`` on close.  Otherwise an existing file is an error.
    chunk_rows : mapping of str to int, optional
        Rows per chunk for specific columns; others use :func:`default_chunk_rows`.
    sync_every_bytes : int
        During a long write, flush the temporary file (HDF5's caches to the OS) and
        ``fdatasync`` it every time this many bytes have been appended since the last sync,
        so the disk keeps up with the writer and the fsync in :meth:`close` finds little left
        to do; 0 (the default) never syncs before :meth:`close`.  Imports of large datasets
        use :data:`numbatraj.io.atomic.SYNC_EVERY_BYTES` (32 MiB).
    checksums : bool
        Record a digest of every chunk of every column (default; see
        :mod:`numbatraj.data.checksums` and docs/store.md "Checksums").  ``False`` for
        scratch data: the index and manifest are still checked, the column data is not.

    Raises
    ------
    LockedError
        Another writer (this or another process) is writing ``path`` right now: the store
        writer never waits (a write can take hours); the message names the holder's pid.
    WriteFailedError
        A write, flush, fsync or rename failed (``ENOSPC``, ``EIO``...), here or in any
        later call: the writer is then dead, its temporary file removed, nothing published.

    Examples
    --------
    >>> with TrajectoryStoreWriter("run.h5", [ColumnSpec("state", np.float32, (26,))]) as w:
    ...     w.append("state", np.zeros((100, 26), np.float32))
    ...     w.end_episode()
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        columns: Iterable[ColumnSpec],
        *,
        env_id: str | None = None,
        seed: int | None = None,
        attrs: Mapping[str, Any] | None = None,
        overwrite: bool = False,
        chunk_rows: Mapping[str, int] | None = None,
        sync_every_bytes: int = 0,
        checksums: bool = True,
    ) -> None:
        self._columns = check_column_set(columns)
        self._attrs = check_attrs(attrs)
        if env_id is not None:
            check_text("env_id", str(env_id))
        self._env_id = env_id
        self._seed = None if seed is None else int(seed)
        self.path = os.fspath(path)
        self._overwrite = overwrite
        if os.path.isdir(self.path):
            raise IsADirectoryError(f"store path {self.path!r} is a directory")
        chunk_rows = dict(chunk_rows or {})
        unknown = set(chunk_rows) - set(self._columns)
        if unknown:
            raise SchemaError(f"chunk_rows names undeclared column(s) {sorted(unknown)}")
        try:
            every = -1 if isinstance(sync_every_bytes, bool) else operator.index(sync_every_bytes)
        except TypeError:
            every = -1
        if every < 0:
            raise SchemaError(
                f"sync_every_bytes must be a whole number >= 0 (0: off), got {sync_every_bytes!r}"
            )
        self._sync_every = every
        self._unsynced = 0
        self._sync_fd = -1
        self._checksums = bool(checksums)
        self._failed: BaseException | None = None
        self._file: h5py.File | None = None
        self._ds: dict[str, h5py.Dataset] = {}
        self._digesters: dict[str, ChunkDigester] = {}
        self._chunk_rows: dict[str, int] = {}
        self.tmp_path = temp_path(self.path)
        # one writer per path, and it never waits: a second writer fails naming the first
        self._lock = publish_lock(self.path, wait=False, what="TrajectoryStoreWriter")
        self._lock.acquire()
        try:
            if os.path.exists(self.path) and not overwrite:
                raise FileExistsError(
                    f"{self.path!r} already exists; pass overwrite=True to replace it on close"
                )
            remove_stale_temps(self.path)  # the lock says no live writer owns them
            ensure_filter_plugins()
            for name, spec in self._columns.items():
                given = chunk_rows.get(name)
                rows = default_chunk_rows(spec.row_bytes) if given is None else int(given)
                if rows < 1:
                    raise SchemaError(f"chunk_rows[{name!r}] = {rows}, expected >= 1")
                self._chunk_rows[name] = rows
            # metadata aggregated in 1 MiB blocks: the object headers and chunk indexes sit
            # in a few contiguous regions at the front, so a store behind HTTP Range opens in
            # <= 3 requests (numbatraj.remote.store; measured in docs/scale.md), for 0.3 % of
            # size.  "w-": the temporary name is new, never an existing file's second name.
            try:
                self._file = h5py.File(
                    self.tmp_path, "w-", meta_block_size=META_BLOCK_BYTES, libver=LIBVER
                )
            except OSError as exc:
                raise self._fail(exc, "creating the temporary file") from exc
            if self._sync_every:
                self._sync_fd = os.open(self.tmp_path, os.O_RDONLY)
            for name, spec in self._columns.items():
                rows = self._chunk_rows[name]
                self._ds[name] = self._file.create_dataset(
                    name,
                    shape=(0, *spec.shape),
                    maxshape=(None, *spec.shape),
                    chunks=(rows, *spec.shape),
                    dtype=spec.dtype,
                    **compression_kwargs(spec.compression, spec.compression_level),
                )
                if self._checksums:
                    self._digesters[name] = ChunkDigester(rows, spec.row_bytes)
        except BaseException:
            self.abort()
            raise
        self._counts = dict.fromkeys(self._columns, 0)
        self._lengths: list[int] = []
        self._episode_start = 0

    # ------------------------------------------------------------------ properties
    @property
    def columns(self) -> dict[str, ColumnSpec]:
        """The declared columns, by name."""
        return dict(self._columns)

    @property
    def n_episodes(self) -> int:
        """Episodes closed so far."""
        return len(self._lengths)

    @property
    def n_rows(self) -> int:
        """Rows inside closed episodes."""
        return self._episode_start

    @property
    def closed(self) -> bool:
        return self._file is None

    # ------------------------------------------------------------------ writing
    def _require_open(self) -> h5py.File:
        if self._failed is not None:
            raise WriteFailedError(
                getattr(self._failed, "errno", None),
                f"writer for {self.path!r} failed earlier ({self._failed}); nothing was "
                f"published",
            )
        if self._file is None:
            raise NumbatrajError(f"writer for {self.path!r} is closed")
        return self._file

    def _fail(self, exc: BaseException, doing: str) -> WriteFailedError:
        """Mark the writer dead after a failed I/O call, discard its temporary file and
        release the path; the error to raise."""
        self._failed = exc
        self.abort()
        err = getattr(exc, "errno", None)
        reason = getattr(exc, "strerror", None) or str(exc)
        return WriteFailedError(
            err, f"{doing} of {self.path!r} failed ({reason}); the store was not published"
            + ("" if self._overwrite is False else " and the previous file is untouched")
        )

    def _checked(self, name: str, rows: Any) -> np.ndarray:
        spec = self._columns.get(name)
        if spec is None:
            raise SchemaError(
                f"column {name!r} is not declared; declared columns: {', '.join(self._columns)}"
            )
        arr = np.asarray(rows)
        if arr.dtype != spec.dtype:
            same_name = arr.dtype.name == spec.dtype.name  # e.g. a byte-order difference
            want = spec.dtype.str if same_name else spec.dtype.name
            got = arr.dtype.str if same_name else arr.dtype.name
            raise SchemaError(
                f"column {name!r} is {want}, append got {got} "
                f"(no silent casts: convert with .astype(np.{spec.dtype.name}) if intended)"
            )
        if arr.ndim != len(spec.shape) + 1 or arr.shape[1:] != spec.shape:
            expected = "(n, " + ", ".join(map(str, spec.shape)) + ")" if spec.shape else "(n,)"
            raise SchemaError(
                f"column {name!r} rows have shape {spec.shape}, append got an array of shape "
                f"{arr.shape}; expected {expected} (for a single row pass row[None])"
            )
        return arr

    def append(self, name: str, rows: Any) -> None:
        """Append ``n`` rows to column ``name``.

        ``rows`` must have shape ``(n, *spec.shape)`` and exactly the declared dtype; a
        mismatch raises :class:`SchemaError` and writes nothing.  No silent casts.
        """
        self._require_open()
        self._write(name, self._checked(name, rows))

    def append_rows(self, rows: Mapping[str, Any]) -> None:
        """Append to several columns at once; every array is checked before any is written."""
        self._require_open()
        checked = [(name, self._checked(name, v)) for name, v in rows.items()]
        for name, arr in checked:
            self._write(name, arr)

    def _write(self, name: str, arr: np.ndarray) -> None:
        n = arr.shape[0]
        if n == 0:
            return
        ds = self._ds[name]
        start = self._counts[name]
        arr = np.ascontiguousarray(arr)
        try:
            ds.resize(start + n, axis=0)
            ds.write_direct(arr, dest_sel=np.s_[start : start + n])
        except BaseException as exc:
            # after a failed write HDF5's state is not to be trusted: the writer is dead
            # (no publish); KeyboardInterrupt and friends pass through unchanged
            if isinstance(exc, Exception):
                raise self._fail(exc, f"appending {n} row(s) to column {name!r}") from exc
            self._failed = exc
            raise
        self._counts[name] = start + n
        digester = self._digesters.get(name)
        if digester is not None:
            digester.feed(arr)
        if self._sync_every:
            self._unsynced += arr.nbytes
            if self._unsynced >= self._sync_every:
                self._sync()

    def _sync(self) -> None:
        """Flush HDF5's caches to the temporary file and ``fdatasync`` it."""
        assert self._file is not None
        try:
            for ds in self._ds.values():
                ds.flush()
            self._file.flush()
            _datasync(self._sync_fd)
        except Exception as exc:
            raise self._fail(exc, "syncing") from exc
        self._unsynced = 0

    def read_range(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of column ``name`` appended so far, in one contiguous read
        (for statistics computed before :meth:`close`, such as datasets passed to it).

        ``0 <= start <= stop <= rows appended to name`` or :class:`RowIndexError`.
        """
        self._require_open()
        spec = self._columns.get(name)
        if spec is None:
            raise SchemaError(
                f"column {name!r} is not declared; declared columns: {', '.join(self._columns)}"
            )
        start, stop, n = int(start), int(stop), self._counts[name]
        if not 0 <= start <= stop <= n:
            raise RowIndexError(
                f"read_range({name!r}, {start}, {stop}) is outside the {n} row(s) appended "
                f"so far (need 0 <= start <= stop <= {n})"
            )
        out = np.empty((stop - start, *spec.shape), dtype=spec.dtype)
        if stop > start:
            self._ds[name].read_direct(out, source_sel=np.s_[start:stop])
        return out

    def _step_problem(self) -> str | None:
        counts = set(self._counts.values())
        if len(counts) > 1:
            detail = ", ".join(f"{k}={v}" for k, v in self._counts.items())
            return f"columns are not in step (row counts: {detail})"
        return None

    def end_episode(self) -> int:
        """Close the current episode; returns its length.

        Raises :class:`EpisodeError` when the columns hold different numbers of rows or the
        episode is empty.
        """
        self._require_open()
        problem = self._step_problem()
        if problem:
            raise EpisodeError(f"end_episode() in {self.path!r}: {problem}")
        total = next(iter(self._counts.values()))
        length = total - self._episode_start
        if length == 0:
            raise EpisodeError(
                f"end_episode() in {self.path!r}: zero-length episode (no rows appended since "
                f"row {self._episode_start}); episodes must hold at least one row"
            )
        self._lengths.append(length)
        self._episode_start = total
        return length

    def _checked_datasets(self, datasets: Mapping[str, Any]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for name, value in datasets.items():
            # a plain name, or a column's statistic stats/<column>/<stat> (data/stats.py)
            parts = name.split("/") if isinstance(name, str) else []
            is_stat = (len(parts) == 3 and parts[0] == STATS_GROUP
                       and parts[1] in self._columns and parts[2] in STAT_NAMES)
            if not isinstance(name, str) or not name or ("/" in name and not is_stat):
                raise SchemaError(
                    f"close(datasets=...): dataset name {name!r} must be a non-empty str "
                    f"without '/', or {STATS_GROUP}/<column>/<stat> for a declared column "
                    f"and a stat in {', '.join(STAT_NAMES)}"
                )
            if is_stat:
                out[name] = np.asarray(value)
                continue
            if name in self._columns or name in STORE_DATASETS or name.startswith("__"):
                raise SchemaError(
                    f"close(datasets=...): {name!r} clashes with a column "
                    f"({', '.join(self._columns)}), the store's own datasets "
                    f"({', '.join(sorted(STORE_DATASETS))}) or the reserved '__' prefix"
                )
            arr = np.asarray(value)
            if arr.dtype.kind not in "biufc":
                raise SchemaError(
                    f"close(datasets=...): {name!r} is {arr.dtype}, expected a numeric or "
                    f"bool array"
                )
            out[name] = arr
        return out

    def close(self, datasets: Mapping[str, Any] | None = None) -> None:
        """Write the episode index and manifest, then publish the temporary file as ``path``.

        Parameters
        ----------
        datasets : mapping of str to array, optional
            Extra named datasets stored beside the columns before the file is published
            (for example normalisation statistics), each written as given (its dtype and
            shape kept).  A name may not be a column's, a store dataset's (``ep_len``,
            ``ep_offset``, ``__manifest__``) or start with ``__``; the arrays must be numeric
            or bool.  They are not columns: the manifest does not list them.

        Raises
        ------
        EpisodeError
            The columns are out of step, or rows were appended after the last
            :meth:`end_episode` (the writer stays open).
        SchemaError
            A bad ``datasets`` entry (the writer stays open).
        """
        if self._failed is not None:
            self._require_open()  # raises: a failed writer never publishes
        if self._file is None:
            return
        extra = self._checked_datasets(datasets or {})
        problem = self._step_problem()
        if problem:
            raise EpisodeError(f"close() of {self.path!r}: {problem}")
        total = next(iter(self._counts.values()))
        if total != self._episode_start:
            raise EpisodeError(
                f"close() of {self.path!r}: {total - self._episode_start} row(s) after the last "
                f"end_episode() (rows {self._episode_start}..{total - 1}); call end_episode() "
                f"to keep them, or abort() to discard the file"
            )
        f = self._file
        lengths = np.asarray(self._lengths, dtype=np.int64)
        manifest = build_manifest(
            self._columns,
            n_rows=total,
            n_episodes=len(lengths),
            env_id=self._env_id,
            seed=self._seed,
            attrs=self._attrs,
            chunk_rows=self._chunk_rows,
            checksums=ALGORITHM if self._checksums else "none",
        )
        small = {"ep_len": lengths, "ep_offset": offsets_from_lengths(lengths)}
        for name, digester in self._digesters.items():
            small[f"{CHECKSUM_GROUP}/{name}"] = digester.finish()
        small.update(extra)
        try:
            for name, arr in small.items():
                flushed(f.create_dataset(name, data=arr))
                manifest[f"digest.{name}"] = digest_bytes(arr)
            flushed(f.create_dataset("__manifest__", data=encode_manifest(manifest, seal=True)))
            for ds in self._ds.values():
                ds.flush()
            # flush raises what h5py's close would only print ("Can't decrement id ref
            # count"): every deferred chunk and metadata write is checked here
            f.flush()
        except Exception as exc:
            raise self._fail(exc, "writing the index and manifest") from exc
        self._file = None
        self._ds.clear()
        try:
            f.close()
            self._close_sync_fd()
            self._verify_written()  # publish fsyncs before its rename
        except Exception as exc:
            raise self._fail(exc, "closing and verifying the temporary file") from exc
        # overwrite=False links the file into place, so a store that appeared meanwhile is
        # never clobbered (the finished one then stays at tmp_path, as the error says)
        try:
            publish(self.tmp_path, self.path, overwrite=self._overwrite)
        except FileExistsError:
            self._lock.release()
            raise
        except Exception as exc:
            raise self._fail(exc, "publishing") from exc
        self._lock.release()

    def _verify_written(self) -> None:
        """Re-open the closed temporary file and check what a reader checks on open: the
        metadata (HDF5's own checksums), the layout, the manifest and index digests."""
        from numbatraj.data.layout import inspect_layout  # noqa: PLC0415 - writer-only path

        with h5py.File(self.tmp_path, "r") as g:
            layout, problems = inspect_layout(g, repr(self.tmp_path))
            _, more = load_digests(g, layout.manifest, layout.columns, layout.n_rows,
                                   g["__manifest__"][()])
        problems += more
        if problems or layout.n_rows != self._episode_start:
            raise OSError(f"the written file does not read back: {'; '.join(problems)}")

    def _close_sync_fd(self) -> None:
        fd, self._sync_fd = self._sync_fd, -1
        if fd >= 0:
            os.close(fd)

    def abort(self) -> None:
        """Discard everything: close the temporary file and delete it.  ``path`` is untouched."""
        f, self._file = self._file, None
        self._ds.clear()
        if f is not None:
            try:
                if self._failed is not None:
                    close_discarded(f)
                else:
                    f.close()
            except Exception:  # pragma: no cover - the file is being discarded anyway
                pass
        self._close_sync_fd()
        discard(self.tmp_path)
        self._lock.release()

    def __enter__(self) -> TrajectoryStoreWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.abort()
            return
        try:
            self.close()
        except FileExistsError:
            raise  # the finished store stays at tmp_path, as the message says
        except (EpisodeError, SchemaError):
            self.abort()
            raise
        except BaseException:
            self.abort()
            raise

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return (
            f"TrajectoryStoreWriter({self.path!r}, columns={list(self._columns)}, "
            f"rows={self.n_rows}, episodes={self.n_episodes}, {state})"
        )
