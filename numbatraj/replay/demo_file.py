"""``.demo`` files: flat transition rows with an intervention flag, for a replay's demo prefix.

Transitions recorded during teleoperation or DAgger interventions are not episodes of a
trajectory store: they are rows for an off-policy replay.  A ``.demo`` file is one flat,
self-describing, memory-mappable file (format version 2, little-endian):

=========  ========================================================================
offset     content
=========  ========================================================================
0          fixed header, 64 bytes: magic ``b"NTJDEMO\\0"`` (8), version uint32,
           JSON length uint32, n_rows uint64, record_bytes uint64, CRC-32 of the
           records uint32, CRC-32 of the header (these 64 bytes with this field zero,
           the JSON and its padding) uint32, flags uint32 (bit 0: the records CRC is
           set; clear when written with ``checksums=False``), 20 zero bytes
           (version 1: no header CRC, 28 zero bytes; still read)
64         JSON (UTF-8): ``{"columns": [{"name", "dtype", "shape"}...],
           "data_offset": int}``; zero padding to a multiple of 64
data_off   ``n_rows`` packed records of the structured dtype the columns describe
=========  ========================================================================

Every file has a bool ``intervention`` column (True where a human took over).  The writer
builds a temporary file beside ``path`` (``numbatraj.io.atomic.temp_path``) and publishes it
when :meth:`DemoWriter.close` has written the final
row count and CRC; a reader refuses a wrong magic, an unknown version, a header that does
not parse, a header whose CRC fails (a flipped ``<f4`` -> ``<i4`` is an error, never a
reinterpretation), and a file whose size is not exactly ``data_offset + n_rows *
record_bytes``.  The writer holds the path's publish lock while it writes (a second writer
of one path fails at once naming the first); a failed write is a
:class:`~numbatraj.errors.WriteFailedError` and publishes nothing.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Iterable
from types import TracebackType
from typing import Any

import numpy as np

from numbatraj.data.column import ColumnSpec
from numbatraj.errors import IntegrityError, NumbatrajError, SchemaError, WriteFailedError
from numbatraj.io.atomic import discard, publish, publish_lock, remove_stale_temps, temp_path
from numbatraj.replay.columns import ReplayColumns

__all__ = ["DemoWriter", "DemoFile", "DEMO_MAGIC", "DEMO_VERSION", "INTERVENTION"]

DEMO_MAGIC = b"NTJDEMO\x00"
DEMO_VERSION = 2
INTERVENTION = "intervention"
_FIXED = struct.Struct("<8sIIQQIII20x")  # 64 bytes
_FLAG_RECORD_CRC = 1
_ALIGN = 64


def _record_dtype(specs: Iterable[ColumnSpec]) -> np.dtype:
    return np.dtype([(s.name, s.dtype.newbyteorder("<"), s.shape) for s in specs])


def _with_intervention(columns: Iterable[ColumnSpec]) -> list[ColumnSpec]:
    cols = list(columns)
    for c in cols:
        if c.name == INTERVENTION and (c.dtype != np.bool_ or c.shape != ()):
            raise SchemaError(
                f"column {INTERVENTION!r} is the .demo flag and must be bool (), declared "
                f"{c.dtype.name} {c.shape}"
            )
    if all(c.name != INTERVENTION for c in cols):
        cols.append(ColumnSpec(INTERVENTION, np.dtype(np.bool_), ()))
    return cols


class DemoWriter:
    """Append transition rows to a new ``.demo`` file; :meth:`close` finalises atomically.

    Parameters
    ----------
    path : path-like
        Destination; built at :attr:`tmp_path` (``<path>.<random>.tmp``) beside it.
    columns : iterable of ColumnSpec
        Row layout (typically obs, action, reward, next_obs, done); a bool ``intervention``
        column is added when not declared.
    overwrite : bool
        Replace an existing file at ``path`` on close.  Without it, a file that appears at
        ``path`` while writing is not replaced: :meth:`close` raises FileExistsError and
        leaves the finished file at :attr:`tmp_path`.
    """

    def __init__(self, path: str | os.PathLike[str], columns: Iterable[ColumnSpec], *,
                 overwrite: bool = False, checksums: bool = True) -> None:
        self.path = os.fspath(path)
        self._checksums = bool(checksums)
        self._lock = publish_lock(self.path, wait=False, what="DemoWriter")
        self._lock.acquire()
        try:
            if os.path.exists(self.path) and not overwrite:
                raise FileExistsError(f"{self.path!r} exists; pass overwrite=True to replace it")
            remove_stale_temps(self.path)
            self._open(columns, overwrite)
        except BaseException:
            self._lock.release()
            raise

    def _open(self, columns: Iterable[ColumnSpec], overwrite: bool) -> None:
        self._cols = ReplayColumns(_with_intervention(columns))
        self._data_cols = ReplayColumns(
            [s for s in self._cols.specs.values() if s.name != INTERVENTION]
        )
        self._dtype = _record_dtype(self._cols.specs.values())
        meta: dict[str, Any] = {
            "columns": [
                {"name": s.name, "dtype": s.dtype.newbyteorder("<").str, "shape": list(s.shape)}
                for s in self._cols.specs.values()
            ],
        }
        # data_offset depends on the JSON length, which includes it: iterate to a fixpoint
        off = 0
        while True:
            meta["data_offset"] = off
            body = json.dumps(meta).encode()
            need = -(-(_FIXED.size + len(body)) // _ALIGN) * _ALIGN
            if need == off:
                break
            off = need
        self._json = body
        self._offset = off
        self._n = 0
        self._crc = 0
        self._overwrite = overwrite
        self._keep_tmp = False
        self.tmp_path = temp_path(self.path)
        self._f: Any = open(self.tmp_path, "xb")  # noqa: SIM115 - closed in close()/abort()
        try:
            self._f.write(self._fixed())
            self._f.write(body)
            self._f.write(b"\0" * (off - _FIXED.size - len(body)))
        except OSError as exc:
            self._f.close()
            self._f = None
            discard(self.tmp_path)
            raise self._failed(exc) from exc

    def _failed(self, exc: OSError) -> WriteFailedError:
        return WriteFailedError(exc.errno, f"writing {self.path!r} failed ({exc.strerror or exc})"
                                f"; nothing was published")

    def _fixed(self) -> bytes:
        flags = _FLAG_RECORD_CRC if self._checksums else 0
        crc = self._crc if self._checksums else 0
        pad = b"\0" * (self._offset - _FIXED.size - len(self._json))
        blank = _FIXED.pack(DEMO_MAGIC, DEMO_VERSION, len(self._json), self._n,
                            self._dtype.itemsize, crc, 0, flags)
        head_crc = zlib.crc32(blank + self._json + pad)
        return _FIXED.pack(DEMO_MAGIC, DEMO_VERSION, len(self._json), self._n,
                           self._dtype.itemsize, crc, head_crc, flags)

    @property
    def columns(self) -> dict[str, ColumnSpec]:
        return dict(self._cols.specs)

    @property
    def n_rows(self) -> int:
        return self._n

    def append(self, **rows: Any) -> int:
        """Append one row or ``n`` rows per column (``intervention`` defaults to False).

        Checked like ``StoreReplay.add`` (exact dtype, row shape, equal lengths); nothing is
        written when a check fails.  Returns ``n``.
        """
        if self._f is None:
            raise NumbatrajError(f"DemoWriter for {self.path!r} is closed")
        if INTERVENTION in rows:
            arrays, n = self._cols.check_rows(rows, "DemoWriter.append")
        else:
            arrays, n = self._data_cols.check_rows(rows, "DemoWriter.append")
            arrays[INTERVENTION] = np.zeros(n, np.bool_)
        rec = np.empty(n, dtype=self._dtype)
        for name, a in arrays.items():
            rec[name] = a
        data = rec.tobytes()
        try:
            self._f.write(data)
        except OSError as exc:
            self.abort()
            raise self._failed(exc) from exc
        if self._checksums:
            self._crc = zlib.crc32(data, self._crc)
        self._n += n
        return n

    def close(self) -> None:
        """Write the final row count and CRC, then publish :attr:`tmp_path` at ``path``
        (fsync, rename or, without ``overwrite``, a link that never clobbers a file that
        appeared meanwhile, fsync of the directory)."""
        f, self._f = self._f, None
        if f is None:
            return
        try:
            try:
                f.seek(0)
                f.write(self._fixed())
                f.flush()
            finally:
                f.close()
        except OSError as exc:
            self.abort()
            raise self._failed(exc) from exc
        try:
            publish(self.tmp_path, self.path, overwrite=self._overwrite)
        except FileExistsError:
            self._lock.release()
            self._raise_appeared()
        except BaseException:
            self.abort()
            raise
        self._lock.release()

    def _raise_appeared(self) -> None:
        self._keep_tmp = True
        raise FileExistsError(
            f"{self.path!r} appeared while the .demo file was being written and "
            f"overwrite=False, so it was not replaced; the finished file was left at "
            f"{self.tmp_path!r}"
        ) from None

    def abort(self) -> None:
        """Discard the temporary file; ``path`` is untouched."""
        f, self._f = self._f, None
        if f is not None:
            try:
                f.close()
            except OSError:
                pass  # being discarded
        self._lock.release()
        if self._keep_tmp:  # finished, but a file appeared at path: keep the work
            return
        discard(self.tmp_path)

    def __enter__(self) -> DemoWriter:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        if et is not None:
            self.abort()
            return
        try:
            self.close()
        except BaseException:
            self.abort()
            raise


class DemoFile:
    """A ``.demo`` file opened for reading (memory-mapped records).

    Parameters
    ----------
    path : path-like
    verify : bool
        Also check the CRC-32 of the records (reads the whole file once).

    Raises
    ------
    IntegrityError
        Wrong magic (a foreign file), unknown version, unreadable header, a size that is not
        exactly the header's promise (a truncated or extended file), or a CRC mismatch.
    """

    def __init__(self, path: str | os.PathLike[str], *, verify: bool = True) -> None:
        self.path = os.fspath(path)
        size = os.path.getsize(self.path)
        with open(self.path, "rb") as f:
            head = f.read(_FIXED.size)
            if len(head) < _FIXED.size or head[:8] != DEMO_MAGIC:
                raise IntegrityError(
                    f"{self.path!r} is not a .demo file: it starts with {head[:8]!r}, expected "
                    f"the magic {DEMO_MAGIC!r} (file is {size} bytes)"
                )
            magic, version, jlen, n, rec_bytes, crc, head_crc, flags = _FIXED.unpack(head)
            if version not in (1, DEMO_VERSION):
                raise IntegrityError(
                    f"{self.path!r} is .demo version {version}; this numbatraj reads versions "
                    f"1 and {DEMO_VERSION}"
                )
            if version == 1:
                flags = _FLAG_RECORD_CRC
            raw_json = f.read(jlen)
            if version >= 2:
                rest = f.read(max(0, min(size, 1 << 20) - _FIXED.size - jlen))
                blank = _FIXED.pack(magic, version, jlen, n, rec_bytes, crc, 0, flags)
                try:
                    offset_guess = int(json.loads(raw_json.decode())["data_offset"])
                except (ValueError, KeyError, TypeError, UnicodeDecodeError):
                    offset_guess = -1
                pad = rest[: max(0, offset_guess - _FIXED.size - jlen)]
                if offset_guess < 0 or zlib.crc32(blank + raw_json + pad) != head_crc:
                    raise IntegrityError(
                        f"{self.path!r}: the .demo header fails its CRC-32 (a flipped bit in "
                        f"the header or its JSON); the file is corrupt"
                    )
            try:
                meta = json.loads(raw_json.decode())
                specs = [ColumnSpec(c["name"], np.dtype(c["dtype"]), tuple(c["shape"]))
                         for c in meta["columns"]]
                offset = int(meta["data_offset"])
            except (ValueError, KeyError, TypeError, UnicodeDecodeError, SchemaError) as exc:
                raise IntegrityError(
                    f"{self.path!r}: the .demo header ({jlen} bytes of JSON) is unreadable: {exc}"
                ) from exc
        self._dtype = _record_dtype(specs)
        self._specs = {s.name: s for s in specs}
        if INTERVENTION not in self._specs:
            raise IntegrityError(f"{self.path!r}: the .demo header declares no {INTERVENTION!r}")
        if rec_bytes != self._dtype.itemsize or offset < _FIXED.size + jlen:
            raise IntegrityError(
                f"{self.path!r}: header says {rec_bytes}-byte records at offset {offset}, its "
                f"columns describe {self._dtype.itemsize}-byte records after byte "
                f"{_FIXED.size + jlen}"
            )
        expected = offset + n * rec_bytes
        if size != expected:
            what = "truncated" if size < expected else "longer than its header says"
            raise IntegrityError(
                f"{self.path!r} is {what}: {size} bytes, expected {expected} "
                f"({n} records of {rec_bytes} bytes after a {offset}-byte header)"
            )
        self.n_rows = int(n)
        self._rec: np.ndarray
        if n:
            self._rec = np.memmap(self.path, dtype=self._dtype, mode="r", offset=offset,
                                  shape=(self.n_rows,))
        else:
            self._rec = np.zeros(0, dtype=self._dtype)
        if verify and flags & _FLAG_RECORD_CRC:
            got = zlib.crc32(self._rec.view(np.uint8)) if n else 0  # type: ignore[arg-type]
            if got != crc:
                raise IntegrityError(
                    f"{self.path!r}: CRC-32 of the records is {got:#010x}, header says {crc:#010x}"
                )

    @property
    def columns(self) -> dict[str, ColumnSpec]:
        """The columns, ``intervention`` included."""
        return dict(self._specs)

    def column(self, name: str) -> np.ndarray:
        """Column ``name``, shape ``(n_rows, *shape)``: a read-only strided view of the map."""
        if name not in self._specs:
            raise SchemaError(
                f"{self.path!r} has no column {name!r}; columns: {', '.join(self._specs)}"
            )
        return self._rec[name]

    @property
    def intervention(self) -> np.ndarray:
        """bool ``(n_rows,)``: True where a human intervened."""
        return self.column(INTERVENTION)

    def __len__(self) -> int:
        return self.n_rows

    def __repr__(self) -> str:
        return f"DemoFile({self.path!r}, rows={self.n_rows}, columns={list(self._specs)})"
