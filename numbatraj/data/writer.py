"""TrajectoryStoreWriter: streaming, type-checked, atomic writes of a trajectory store."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any

import h5py
import numpy as np

from numbatraj.data.column import ColumnSpec, check_column_set
from numbatraj.data.episode_index import offsets_from_lengths
from numbatraj.data.manifest import build_manifest, check_attrs, check_text, encode_manifest
from numbatraj.errors import EpisodeError, NumbatrajError, SchemaError
from numbatraj.io.atomic import discard, publish, temp_path
from numbatraj.io.hdf5 import compression_kwargs, ensure_filter_plugins

__all__ = ["TrajectoryStoreWriter", "default_chunk_rows", "CHUNK_TARGET_BYTES"]

#: Target bytes per HDF5 chunk (see docs/store.md, "Chunking", for the measurements).
CHUNK_TARGET_BYTES = 256 << 10


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
        if os.path.exists(self.path) and not overwrite:
            raise FileExistsError(
                f"{self.path!r} already exists; pass overwrite=True to replace it on close"
            )
        chunk_rows = dict(chunk_rows or {})
        unknown = set(chunk_rows) - set(self._columns)
        if unknown:
            raise SchemaError(f"chunk_rows names undeclared column(s) {sorted(unknown)}")
        self.tmp_path = temp_path(self.path)
        ensure_filter_plugins()
        self._file: h5py.File | None = h5py.File(self.tmp_path, "w")
        self._ds: dict[str, h5py.Dataset] = {}
        try:
            for name, spec in self._columns.items():
                given = chunk_rows.get(name)
                rows = default_chunk_rows(spec.row_bytes) if given is None else int(given)
                if rows < 1:
                    raise SchemaError(f"chunk_rows[{name!r}] = {rows}, expected >= 1")
                self._ds[name] = self._file.create_dataset(
                    name,
                    shape=(0, *spec.shape),
                    maxshape=(None, *spec.shape),
                    chunks=(rows, *spec.shape),
                    dtype=spec.dtype,
                    **compression_kwargs(spec.compression, spec.compression_level),
                )
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
        if self._file is None:
            raise NumbatrajError(f"writer for {self.path!r} is closed")
        return self._file

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
        before = dict(self._counts)
        try:
            for name, arr in checked:
                self._write(name, arr)
        except BaseException:
            # an I/O error part way: put the columns already written back in step
            for name, _ in checked:
                if self._counts[name] != before[name]:
                    self._ds[name].resize(before[name], axis=0)
                    self._counts[name] = before[name]
            raise

    def _write(self, name: str, arr: np.ndarray) -> None:
        n = arr.shape[0]
        if n == 0:
            return
        ds = self._ds[name]
        start = self._counts[name]
        ds.resize(start + n, axis=0)
        try:
            ds.write_direct(np.ascontiguousarray(arr), dest_sel=np.s_[start : start + n])
        except BaseException:
            ds.resize(start, axis=0)
            raise
        self._counts[name] = start + n

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

    def close(self) -> None:
        """Write the episode index and manifest, then publish the temporary file as ``path``.

        Raises :class:`EpisodeError` (and stays open) when the columns are out of step or
        rows were appended after the last :meth:`end_episode`.
        """
        if self._file is None:
            return
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
        f.create_dataset("ep_len", data=lengths)
        f.create_dataset("ep_offset", data=offsets_from_lengths(lengths))
        manifest = build_manifest(
            self._columns,
            n_rows=total,
            n_episodes=len(lengths),
            env_id=self._env_id,
            seed=self._seed,
            attrs=self._attrs,
        )
        f.create_dataset("__manifest__", data=encode_manifest(manifest))
        f.close()
        self._file = None
        # overwrite=False links the file into place, so a store that appeared meanwhile is
        # never clobbered (the finished one then stays at tmp_path, as the error says)
        publish(self.tmp_path, self.path, overwrite=self._overwrite)

    def abort(self) -> None:
        """Discard everything: close the temporary file and delete it.  ``path`` is untouched."""
        f, self._file = self._file, None
        if f is not None:
            try:
                f.close()
            except Exception:  # pragma: no cover - the file is being discarded anyway
                pass
        discard(self.tmp_path)

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
        except BaseException:
            self.abort()
            raise

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return (
            f"TrajectoryStoreWriter({self.path!r}, columns={list(self._columns)}, "
            f"rows={self.n_rows}, episodes={self.n_episodes}, {state})"
        )
