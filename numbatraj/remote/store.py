"""RemoteStore: a trajectory store read over HTTP Range requests (a presigned S3 URL, the
catalog's object endpoint, any static server that honours Range).

Opening reads the file's head (``head_bytes``, 1 MiB by default) in one request and parses
it with h5py through a file object whose every miss becomes one aligned ``block_bytes``
Range read; the manifest, the episode index and every column's chunk table
(``DatasetID.chunk_iter``: row of each chunk, byte offset, stored size) are read then, and
the h5py file stays open only for columns with filters.  A store written with its metadata
aggregated at the front (``meta_block_size``, see docs/scale.md) opens in 2 requests.

Reads (``read_range``, ``read_rows``, ``episode``, ``load_column``, and
``WindowedColumn`` windows, which call ``read_range``) fetch the raw bytes of exactly the
chunks they need: byte ranges of all requested columns are merged where they touch in the
file, fetched in parallel on a small thread pool, and decoded here (a raw chunk is its rows
in C order).  Columns with filters (compression) are fetched the same way and decoded by
h5py from the fetched bytes.  Chunks are kept in a small in-memory LRU (so consecutive
windows never fetch a boundary chunk twice) and, with ``cache=<dir>``, on local disk.

``url`` may be a callable returning a fresh (presigned) URL: it is called at open and again
whenever the server answers 403 (an expired signature); the request is retried with the new
URL, so a long epoch survives expiry without losing its place.

Every chunk decoded (fetched, or read from the disk cache) is checked against the store's
per-chunk digests (``__checksums__/<column>``, :mod:`numbatraj.data.checksums`), which the
open reads and checks with the rest of the metadata (the current writer puts them at the
front of the file, so the open stays at 2-3 requests).  A fetched chunk that fails is an
:class:`~numbatraj.errors.IntegrityError` naming the column and rows (and is never cached);
a disk-cached chunk that fails is dropped and fetched again.  Stores written with
``checksums=False`` are read unchecked.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import h5py
import numpy as np

from numbatraj.data.checksums import ColumnDigests, load_digests, verify_chunks
from numbatraj.data.column import ColumnSpec
from numbatraj.data.layout import inspect_layout
from numbatraj.errors import DownloadError, IntegrityError, RowIndexError, SchemaError
from numbatraj.io.atomic import write_bytes
from numbatraj.io.hdf5 import ensure_filter_plugins

__all__ = ["RemoteStore"]

_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


@dataclass(frozen=True)
class _Column:
    """Where one column's rows are in the file."""

    spec: ColumnSpec
    chunk_rows: int  # rows per chunk; n_rows for a contiguous dataset
    offsets: np.ndarray  # int64 byte offset of chunk k (-1: never written)
    sizes: np.ndarray  # int64 stored bytes of chunk k
    filtered: bool

    @property
    def chunk_bytes(self) -> int:
        return self.chunk_rows * self.spec.row_bytes


class _Http:
    """Range GETs against one object, with URL refresh on 403 and request accounting."""

    def __init__(self, url: str | Callable[[], str], timeout: float, workers: int) -> None:
        import requests

        self._requests = requests
        self._source = url
        self._url = url() if callable(url) else str(url)
        self._timeout = timeout
        self._local = threading.local()
        self._lock = threading.Lock()
        self.size: int | None = None
        self.requests = 0
        self.bytes = 0
        self.refreshes = 0
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="remote-store")

    def _session(self) -> Any:
        s = getattr(self._local, "session", None)
        if s is None:
            s = self._local.session = self._requests.Session()
        return s

    def get(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` (one request; one more per URL refresh)."""
        for attempt in range(3):
            url = self._url
            try:
                r = self._session().get(url, headers={"Range": f"bytes={start}-{stop - 1}",
                                                      "Accept-Encoding": "identity"},
                                        timeout=self._timeout)
            except self._requests.RequestException as exc:
                raise DownloadError(f"GET bytes {start}-{stop - 1} of {_redact(url)} "
                                    f"failed: {exc}") from exc
            with self._lock:
                self.requests += 1
                self.bytes += len(r.content)
            if r.status_code == 403 and callable(self._source) and attempt < 2:
                with self._lock:
                    if self._url == url:  # one refresh per expiry, not one per thread
                        self._url = self._source()
                        self.refreshes += 1
                continue
            if r.status_code == 416:
                raise IntegrityError(f"{_redact(url)} answered 416 to bytes {start}-{stop - 1}:"
                                     f" the object is shorter than its store layout says")
            if r.status_code != 206:
                hint = (" (the server ignores Range; RemoteStore needs Range support)"
                        if r.status_code == 200 else "")
                raise DownloadError(f"GET bytes {start}-{stop - 1} of {_redact(url)} answered "
                                    f"HTTP {r.status_code}{hint}: {r.text[:200]!r}")
            m = _CONTENT_RANGE.match(r.headers.get("Content-Range", ""))
            if not m or int(m.group(1)) != start or len(r.content) != int(m.group(2)) - start + 1:
                raise DownloadError(f"{_redact(url)} answered bytes {start}-{stop - 1} with "
                                    f"Content-Range {r.headers.get('Content-Range')!r} and "
                                    f"{len(r.content)} bytes")
            total = None if m.group(3) == "*" else int(m.group(3))
            if total is not None:
                if self.size is None:
                    self.size = total
                elif total != self.size:
                    raise IntegrityError(f"{_redact(url)} is now {total} bytes, it was "
                                         f"{self.size} at open: the object changed")
            return r.content
        raise DownloadError(f"{_redact(self._url)} still answers 403 after refreshing the "
                            f"URL twice")


def _redact(url: str) -> str:
    """The URL without its query string (presigned signatures stay out of messages)."""
    return url.split("?", 1)[0] + ("?..." if "?" in url else "")


class _RangeFile(io.RawIOBase):
    """A read-only file object over :class:`_Http` for h5py: known extents are served from
    memory, a miss fetches the ``block``-aligned blocks around it."""

    def __init__(self, http: _Http, size: int, block: int) -> None:
        super().__init__()
        self._http = http
        self._size = size
        self._block = block
        self._blocks: dict[int, bytes] = {}  # block number -> bytes
        self._extra: dict[int, bytes] = {}  # start -> bytes (prefetched chunk ranges)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def add(self, start: int, data: bytes) -> None:
        """Bytes known at ``start`` (whole blocks are filed as blocks)."""
        b = self._block
        if start % b == 0 and (len(data) % b == 0 or start + len(data) == self._size):
            for k in range(0, len(data), b):
                self._blocks[(start + k) // b] = data[k : k + b]
        else:
            self._extra[start] = data

    def drop_extra(self) -> None:
        self._extra.clear()

    def _from_extra(self, pos: int, n: int) -> bytes | None:
        for s, d in self._extra.items():
            if s <= pos and pos + n <= s + len(d):
                return d[pos - s : pos - s + n]
        return None

    def readinto(self, buf: Any) -> int:
        mv = memoryview(buf).cast("B")
        n = min(len(mv), max(0, self._size - self._pos))
        if n == 0:
            return 0
        hit = self._from_extra(self._pos, n)
        if hit is not None:
            mv[:n] = hit
            self._pos += n
            return n
        b = self._block
        first, last = self._pos // b, (self._pos + n - 1) // b
        missing = [k for k in range(first, last + 1) if k not in self._blocks]
        if missing:  # one request for the run of missing blocks
            lo, hi = missing[0] * b, min((missing[-1] + 1) * b, self._size)
            self.add(lo, self._http.get(lo, hi))
        data = b"".join(self._blocks[k] for k in range(first, last + 1))
        off = self._pos - first * b
        mv[:n] = data[off : off + n]
        self._pos += n
        return n


class RemoteStore:
    """A trajectory store behind an HTTP URL that honours Range requests; read-only.

    Parameters
    ----------
    url : str or callable returning str
        The object's URL, or a function returning a fresh one (a presigned URL from the
        catalog); the function is called again when the server answers 403.
    cache : path-like, optional
        Directory keeping fetched chunks on local disk (keyed by the object's identity, not
        its URL, so a refreshed URL reuses them).
    head_bytes : int
        Bytes read by the first request (the superblock and front-aggregated metadata).
    block_bytes : int
        Granularity of the metadata reads that miss the head.
    memory_cache_bytes : int
        In-memory LRU of decoded chunks.
    workers : int
        Parallel Range requests.
    timeout : float
        Seconds per request.

    Attributes
    ----------
    requests, bytes_fetched : int
        Requests made and body bytes received so far (the open included).
    """

    def __init__(
        self,
        url: str | Callable[[], str],
        *,
        cache: str | os.PathLike[str] | None = None,
        head_bytes: int = 1 << 20,
        block_bytes: int = 64 << 10,
        memory_cache_bytes: int = 64 << 20,
        workers: int = 4,
        timeout: float = 60.0,
    ) -> None:
        ensure_filter_plugins()
        self._http = _Http(url, timeout, workers)
        head = self._http.get(0, head_bytes)  # an object shorter than that: its whole body
        size = self._http.size if self._http.size is not None else len(head)
        self._size = size
        self._file = _RangeFile(self._http, size, block_bytes)
        self._file.add(0, head if len(head) % block_bytes == 0 or len(head) == size
                       else head[: len(head) // block_bytes * block_bytes])
        self.url = _redact(self._http._url)
        try:
            self._h5 = h5py.File(self._file, "r")
            layout, problems = inspect_layout(self._h5, self.url)
            if problems:
                listing = "\n".join(f"  - {p}" for p in problems)
                raise IntegrityError(f"{self.url} is not a consistent trajectory store "
                                     f"({len(problems)} problem(s)):\n{listing}")
            self._layout = layout
            raw = self._h5["__manifest__"][()] if "__manifest__" in self._h5 else None
            digests, problems = load_digests(self._h5, layout.manifest, layout.columns,
                                             layout.n_rows, raw)
            if problems:
                listing = "\n".join(f"  - {p}" for p in problems)
                raise IntegrityError(f"{self.url} fails its metadata checks "
                                     f"({len(problems)} problem(s)):\n{listing}")
            self._cols = {n: self._column(n, s) for n, s in layout.columns.items()}
            # a column's digests cover its HDF5 chunks (the writer's); virtual chunks of a
            # contiguous dataset do not line up with them
            self._digests: dict[str, ColumnDigests] = {
                n: d for n, d in digests.items() if d.chunk_rows == self._cols[n].chunk_rows}
        except BaseException:
            self.close()
            raise
        self._lengths = layout.lengths.copy()
        self._offsets = layout.offsets.copy()
        self._lengths.flags.writeable = False
        self._offsets.flags.writeable = False
        ident = hashlib.sha256(head[:4096] + str(size).encode()
                               + "\n".join(f"{k}={v}" for k, v in sorted(layout.manifest.items()))
                               .encode()).hexdigest()[:24]
        self._disk = None if cache is None else os.path.join(os.fspath(cache), ident)
        self._lru: OrderedDict[tuple[str, int], np.ndarray] = OrderedDict()
        self._lru_bytes = 0
        self._lru_max = int(memory_cache_bytes)
        self.open_requests = self._http.requests
        self.open_bytes = self._http.bytes

    def _column(self, name: str, spec: ColumnSpec) -> _Column:
        ds = self._h5[name]
        assert isinstance(ds, h5py.Dataset)
        if ds.dtype.byteorder not in ("=", "|") and ds.dtype != ds.dtype.newbyteorder("="):
            raise SchemaError(f"{self.url}: column {name!r} is stored {ds.dtype.str}; "
                              f"RemoteStore reads native byte order only")
        n_rows = self._layout.n_rows
        filtered = ds.id.get_create_plist().get_nfilters() > 0
        if ds.chunks is None:  # contiguous (a foreign file): cut into virtual chunks
            off = ds.id.get_offset()
            c = max(1, (256 << 10) // max(spec.row_bytes, 1))
            k = np.arange(-(-n_rows // c), dtype=np.int64)
            rows = np.minimum(c, n_rows - k * c)
            base = -1 if off is None else int(off)
            offsets = np.where(base < 0, -1, base + k * c * spec.row_bytes)
            return _Column(spec, c, offsets.astype(np.int64), rows * spec.row_bytes, False)
        if tuple(ds.chunks[1:]) != tuple(spec.shape):
            whole = ("n", *map(str, spec.shape))
            raise SchemaError(f"{self.url}: column {name!r} is chunked {ds.chunks}; "
                              f"RemoteStore reads chunks of whole rows ({', '.join(whole)})")
        c = int(ds.chunks[0])
        n_chunks = -(-n_rows // c)
        offsets = np.full(n_chunks, -1, dtype=np.int64)
        sizes = np.zeros(n_chunks, dtype=np.int64)

        def note(info: Any) -> None:
            k = info.chunk_offset[0] // c
            if k < n_chunks:
                offsets[k] = info.byte_offset
                sizes[k] = info.size

        ds.id.chunk_iter(note)
        return _Column(spec, c, offsets, sizes, filtered)

    # ------------------------------------------------------------------ metadata
    @property
    def n_rows(self) -> int:
        return self._layout.n_rows

    @property
    def n_episodes(self) -> int:
        return int(self._lengths.shape[0])

    @property
    def columns(self) -> dict[str, ColumnSpec]:
        return dict(self._layout.columns)

    @property
    def manifest(self) -> dict[str, str]:
        return dict(self._layout.manifest)

    @property
    def episode_lengths(self) -> np.ndarray:
        return self._lengths

    @property
    def episode_offsets(self) -> np.ndarray:
        return self._offsets

    @property
    def size_bytes(self) -> int:
        """Bytes of the whole object."""
        return self._size

    @property
    def requests(self) -> int:
        return self._http.requests

    @property
    def bytes_fetched(self) -> int:
        return self._http.bytes

    @property
    def url_refreshes(self) -> int:
        """How many times the URL callable was asked for a new URL after a 403."""
        return self._http.refreshes

    def __contains__(self, name: object) -> bool:
        return name in self._cols

    def spec(self, name: str) -> ColumnSpec:
        try:
            return self._cols[name].spec
        except KeyError:
            raise SchemaError(f"{self.url} has no column {name!r}; columns: "
                              f"{', '.join(self._cols)}") from None

    def storage(self, name: str) -> dict[str, Any]:
        """Chunk rows, chunk count and stored bytes of column ``name``."""
        col = self._cols[self.spec(name).name]
        return {"chunk_rows": col.chunk_rows, "chunks": int(col.offsets.shape[0]),
                "stored_bytes": int(col.sizes.sum()), "filtered": col.filtered}

    # ------------------------------------------------------------------ chunk fetching
    def _chunk_key(self, name: str, k: int) -> str | None:
        if self._disk is None:
            return None
        return os.path.join(self._disk, name, f"{k}.bin")

    def _remember(self, key: tuple[str, int], arr: np.ndarray) -> None:
        if arr.nbytes > self._lru_max:
            return
        self._lru[key] = arr
        self._lru_bytes += arr.nbytes
        while self._lru_bytes > self._lru_max:
            _, old = self._lru.popitem(last=False)
            self._lru_bytes -= old.nbytes

    def _bad_chunk(self, name: str, k: int, arr: np.ndarray) -> tuple[int, int] | None:
        """Rows ``(lo, hi)`` of chunk ``k`` when its decoded rows fail their digest."""
        cd = self._digests.get(name)
        if cd is None:
            return None
        lo, hi = cd.rows(k, self.n_rows)
        rows = arr[: hi - lo]
        if rows.shape[0] != hi - lo:
            return lo, hi
        return (lo, hi) if verify_chunks(name, cd, k, np.ascontiguousarray(rows),
                                         self.n_rows) else None

    def _decode(self, name: str, k: int, raw: bytes) -> np.ndarray:
        col = self._cols[name]
        spec = col.spec
        if col.filtered:
            return self._decode_filtered(name, k, raw)
        a = np.frombuffer(raw, dtype=spec.dtype)
        return a.reshape(-1, *spec.shape)

    def _decode_filtered(self, name: str, k: int, raw: bytes) -> np.ndarray:
        """A filtered chunk, decoded by h5py from bytes already fetched."""
        col = self._cols[name]
        start = k * col.chunk_rows
        stop = min(start + col.chunk_rows, self.n_rows)
        self._file.add(int(col.offsets[k]), raw)
        try:
            out = np.empty((stop - start, *col.spec.shape), dtype=col.spec.dtype)
            self._h5[name].read_direct(out, source_sel=np.s_[start:stop])
        finally:
            self._file.drop_extra()
        return out

    def _chunks(self, wanted: Iterable[tuple[str, int]]) -> dict[tuple[str, int], np.ndarray]:
        """Decoded chunks ``(column, k)``: from memory, then disk, then merged Range reads."""
        got: dict[tuple[str, int], np.ndarray] = {}
        fetch: list[tuple[int, int, str, int]] = []  # (byte start, stop, column, k)
        for name, k in wanted:
            key = (name, k)
            if key in self._lru:
                self._lru.move_to_end(key)
                got[key] = self._lru[key]
                continue
            col = self._cols[name]
            off, size = int(col.offsets[k]), int(col.sizes[k])
            if off < 0:  # never written: the fill value
                got[key] = np.zeros((col.chunk_rows, *col.spec.shape), dtype=col.spec.dtype)
                continue
            path = self._chunk_key(name, k)
            if path is not None and os.path.exists(path):
                with open(path, "rb") as f:
                    raw = f.read()
                if len(raw) == size:
                    arr = self._decode(name, k, raw)
                    if self._bad_chunk(name, k, arr) is None:  # else: fetched again
                        got[key] = arr
                        self._remember(key, arr)
                        continue
            fetch.append((off, off + size, name, k))
        if not fetch:
            return got
        fetch.sort()
        runs: list[list[Any]] = []  # [start, stop, members]
        for a, b, name, k in fetch:
            if runs and a <= runs[-1][1]:
                runs[-1][1] = max(runs[-1][1], b)
                runs[-1][2].append((a, b, name, k))
            else:
                runs.append([a, b, [(a, b, name, k)]])
        bodies = list(self._http.pool.map(lambda r: self._http.get(r[0], r[1]), runs))
        for (a0, _, members), body in zip(runs, bodies):
            for a, b, name, k in members:
                raw = body[a - a0 : b - a0]
                arr = self._decode(name, k, raw)
                bad = self._bad_chunk(name, k, arr)
                if bad is not None:
                    raise IntegrityError(
                        f"{self.url}: column {name!r} rows {bad[0]}..{bad[1] - 1} (chunk {k}, "
                        f"bytes {a}-{b - 1}) fail their checksum: the object is corrupt")
                path = self._chunk_key(name, k)
                if path is not None:
                    write_bytes(path, raw)
                got[(name, k)] = arr
                self._remember((name, k), arr)
        return got

    # ------------------------------------------------------------------ reading
    def _check_range(self, name: str, start: int, stop: int) -> None:
        if not 0 <= start <= stop <= self.n_rows:
            raise RowIndexError(
                f"read_range({name!r}, {start}, {stop}) is outside the store's rows "
                f"[0, {self.n_rows}] (need 0 <= start <= stop <= n_rows)")

    def read_rows(self, start: int, stop: int,
                  columns: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Rows ``start:stop`` of several columns (default: all) with one merged fetch."""
        names = list(self._cols) if columns is None else [self.spec(n).name for n in columns]
        start, stop = int(start), int(stop)
        for n in names:
            self._check_range(n, start, stop)
        out = {n: np.empty((stop - start, *self._cols[n].spec.shape),
                           dtype=self._cols[n].spec.dtype) for n in names}
        self._fill(out, start, stop)
        return out

    def _fill(self, out: dict[str, np.ndarray], start: int, stop: int) -> None:
        if stop <= start:
            return
        wanted: list[tuple[str, int]] = []
        for n in out:
            c = self._cols[n].chunk_rows
            wanted.extend((n, k) for k in range(start // c, (stop - 1) // c + 1))
        chunks = self._chunks(wanted)
        for n, dst in out.items():
            c = self._cols[n].chunk_rows
            for k in range(start // c, (stop - 1) // c + 1):
                a, b = max(start, k * c), min(stop, (k + 1) * c)
                dst[a - start : b - start] = chunks[(n, k)][a - k * c : b - k * c]

    def read_range(self, name: str, start: int, stop: int,
                   out: np.ndarray | None = None) -> np.ndarray:
        """Rows ``start:stop`` of column ``name`` (as ``TrajectoryStore.read_range``)."""
        spec = self.spec(name)
        start, stop = int(start), int(stop)
        self._check_range(name, start, stop)
        shape = (stop - start, *spec.shape)
        if out is None:
            out = np.empty(shape, dtype=spec.dtype)
        elif out.dtype != spec.dtype or out.shape != shape or not out.flags.c_contiguous:
            raise SchemaError(f"read_range({name!r}, {start}, {stop}): out is {out.dtype.name} "
                              f"{out.shape}, expected C-contiguous {spec.dtype.name} {shape}")
        self._fill({name: out}, start, stop)
        return out

    def load_column(self, name: str) -> np.ndarray:
        """The whole column, ``(n_rows, *shape)``."""
        return self.read_range(name, 0, self.n_rows)

    def episode(self, i: int) -> dict[str, np.ndarray]:
        """Every column's rows of episode ``i`` (negative counts from the end)."""
        n = self.n_episodes
        i = int(i)
        if not -n <= i < n:
            raise RowIndexError(f"episode {i} is out of range; the store has {n} episode(s)")
        i %= n
        start = int(self._offsets[i])
        return self.read_rows(start, start + int(self._lengths[i]))

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        h5 = getattr(self, "_h5", None)
        if h5 is not None:
            h5.close()
            self._h5 = None
        self._http.pool.shutdown(wait=False)

    def __enter__(self) -> RemoteStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"RemoteStore({self.url!r}, rows={self.n_rows}, episodes={self.n_episodes}, "
                f"columns={list(self._cols)})")
