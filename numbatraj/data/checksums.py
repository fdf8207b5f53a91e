"""Store checksums: one 64-bit digest per stored chunk of every column, kept in the file.

Why digests of our own and not HDF5's ``fletcher32`` filter: measured in the same run
(``bench/test_integrity.py``, docs/store.md "Checksums"), fletcher32 cut warm
``load_column`` to about 0.45x and appends to about 0.75x (HDF5 checksums 2 bytes at a time
and can no longer read raw chunks straight into the caller's array), where the ``nbh64``
digests below (:mod:`numbatraj.data._digest_kernels`, about 30 GB/s) cost one pass over
memory.  The digest covers the *decoded* row bytes, so it checks compressed and raw columns
alike, and whatever path reads the chunk.

Layout (written by :class:`~numbatraj.TrajectoryStoreWriter`, format version 2):

- ``__checksums__/<column>``: uint64 ``(n_chunks,)``, digest ``k`` covers rows
  ``k*C .. min((k+1)*C, n_rows)`` where ``C`` is the column's HDF5 chunk rows (manifest
  ``column.<name>.chunk_rows``);
- manifest ``checksums=nbh64`` (``none`` when written with ``checksums=False``: the column
  digests are then absent, everything below still holds), ``digest.<dataset>=<16 hex>`` for
  ``ep_len``, ``ep_offset``, every ``__checksums__`` array and every extra dataset, and a last
  line ``manifest_digest=<16 hex>`` over every byte before it;
- the HDF5 metadata itself (object headers, chunk indexes, superblock) is written in the
  1.10 file format, whose structures carry their own checksums, verified by libhdf5.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import h5py
import numpy as np

from numbatraj._jit import parallel_region, parallel_threads
from numbatraj.data._digest_kernels import (
    _digest_chunks_cpu,
    _digest_chunks_par,
    _digest_range_cpu,
    _stream_final,
    _stream_reset,
    _stream_update,
)
from numbatraj.errors import IntegrityError

__all__ = [
    "ALGORITHM",
    "CHECKSUM_GROUP",
    "ChunkDigester",
    "ColumnDigests",
    "ChunkPartReader",
    "ChunkReader",
    "RowReader",
    "dataset_reader",
    "digest_bytes",
    "digest_chunks",
    "load_digests",
    "manifest_digest_problem",
    "read_verified",
    "seal_manifest_text",
    "verify_chunks",
]

ALGORITHM = "nbh64"
CHECKSUM_GROUP = "__checksums__"
MANIFEST_DIGEST_KEY = "manifest_digest"



def _as_bytes(arr: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(arr)
    return a.reshape(-1).view(np.uint8)


def digest_chunks(buf: np.ndarray, chunk_bytes: int) -> np.ndarray:
    """uint64 digests of ``buf``'s bytes cut into pieces of ``chunk_bytes`` (the last shorter)."""
    b = _as_bytes(buf)
    cb = max(1, int(chunk_bytes))
    out = np.empty(-(-b.size // cb) if b.size else 0, np.uint64)
    if not out.size:
        return out
    # the project's thread policy (numbatraj._jit): on the calling thread unless
    # set_num_threads(n > 1) said the cores are ours (a parallel region waits for its
    # slowest worker, which on a busy machine waits for a core)
    if out.size > 1 and parallel_threads(b.size) > 1:
        with parallel_region():
            _digest_chunks_par(b, cb, out)
    else:
        _digest_chunks_cpu(b, cb, out)
    return out


def digest_bytes(data: bytes | np.ndarray) -> str:
    """The digest of a whole buffer as 16 hex digits."""
    b = np.frombuffer(data, np.uint8) if isinstance(data, bytes | bytearray) else _as_bytes(data)
    return f"{int(_digest_range_cpu(b, 0, b.size)):016x}"


class ChunkDigester:
    """Digests of one column's chunks, fed by appends of any size.

    Holds no rows: a chunk split over several appends is digested as a stream (four
    64-bit lanes and at most 31 pending bytes); whole chunks inside an append are digested
    straight from the caller's array.
    """

    def __init__(self, chunk_rows: int, row_bytes: int) -> None:
        self.chunk_rows = int(chunk_rows)
        self.row_bytes = int(row_bytes)
        self._lanes = np.empty(4, np.uint64)
        self._pending = np.zeros(32, np.uint8)
        self._meta = np.zeros(2, np.int64)
        _stream_reset(self._lanes, self._meta)
        self._fill = 0  # rows of the current chunk fed so far
        self._done: list[np.ndarray] = []

    def _close_chunk(self) -> None:
        self._done.append(np.array([_stream_final(self._lanes, self._pending, self._meta)],
                                   np.uint64))
        _stream_reset(self._lanes, self._meta)
        self._fill = 0

    def feed(self, rows: np.ndarray) -> None:
        """Account for ``rows`` (C-contiguous, ``(n, *row_shape)``) appended after the others."""
        n = int(rows.shape[0])
        if not n:
            return
        b = _as_bytes(rows)
        rb, c = self.row_bytes, self.chunk_rows
        i = 0
        if self._fill:
            take = min(c - self._fill, n)
            _stream_update(self._lanes, self._pending, self._meta, b[: take * rb])
            self._fill += take
            i = take
            if self._fill == c:
                self._close_chunk()
        full = (n - i) // c
        if full:
            self._done.append(digest_chunks(b[i * rb : (i + full * c) * rb], c * rb))
            i += full * c
        rem = n - i
        if rem:
            _stream_update(self._lanes, self._pending, self._meta, b[i * rb :])
            self._fill = rem

    def finish(self) -> np.ndarray:
        """Every chunk's digest, the partial last chunk included."""
        if self._fill:
            self._close_chunk()
        return np.concatenate(self._done) if self._done else np.zeros(0, np.uint64)


def seal_manifest_text(text: str) -> str:
    """``text`` (``key=value`` lines) with the ``manifest_digest`` line appended."""
    return text + f"{MANIFEST_DIGEST_KEY}={digest_bytes(text.encode('utf-8'))}\n"


def manifest_digest_problem(raw: np.ndarray, manifest: Mapping[str, str]) -> str | None:
    """What is wrong with the manifest's own digest, if anything (None for a v1 manifest)."""
    version = manifest.get("format_version", "1")
    if MANIFEST_DIGEST_KEY not in manifest:
        if version == "1":
            return None  # written before checksums existed
        return f"manifest (format_version {version}) has no {MANIFEST_DIGEST_KEY} line"
    data = np.asarray(raw, np.uint8).tobytes()
    marker = f"\n{MANIFEST_DIGEST_KEY}=".encode()
    cut = data.rfind(marker)
    if cut < 0:
        return f"manifest's {MANIFEST_DIGEST_KEY} line is not the last line"
    body = data[: cut + 1]
    want = manifest[MANIFEST_DIGEST_KEY]
    got = digest_bytes(body)
    if got != want:
        return (f"manifest digest mismatch (stored {want}, computed {got}): the manifest "
                f"is corrupt")
    return None


@dataclass(frozen=True)
class ColumnDigests:
    """The digests of one column: digest ``k`` covers rows ``k*chunk_rows`` onwards."""

    chunk_rows: int
    digests: np.ndarray

    def rows(self, k: int, n_rows: int) -> tuple[int, int]:
        lo = k * self.chunk_rows
        return lo, min(n_rows, lo + self.chunk_rows)


def _dataset_digest_problem(f: h5py.File, name: str, want: str) -> str | None:
    obj = f.get(name)
    if not isinstance(obj, h5py.Dataset):
        return f"manifest records a digest of {name!r} but the file has no such dataset"
    try:
        arr = np.asarray(obj[()])
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return f"dataset {name!r} cannot be read: {type(exc).__name__}: {exc}"
    got = digest_bytes(arr)
    if got != want:
        return f"dataset {name!r} fails its checksum (stored {want}, computed {got})"
    return None


def load_digests(
    f: h5py.File, manifest: Mapping[str, str], columns: Mapping[str, object], n_rows: int,
    raw_manifest: np.ndarray | None,
) -> tuple[dict[str, ColumnDigests], list[str]]:
    """Check the manifest digest and every whole-dataset digest; load the column digests.

    Returns the per-column digests (empty when the store has none) and every problem found.
    """
    problems: list[str] = []
    if not manifest:
        return {}, problems
    if raw_manifest is not None:
        p = manifest_digest_problem(raw_manifest, manifest)
        if p:
            return {}, [p]
    for key, want in manifest.items():
        if key.startswith("digest."):
            p = _dataset_digest_problem(f, key[len("digest."):], want)
            if p:
                problems.append(p)
    algo = manifest.get("checksums", "none")
    out: dict[str, ColumnDigests] = {}
    if algo == "none":
        return out, problems
    if algo != ALGORITHM:
        problems.append(f"manifest checksums={algo!r}, this numbatraj knows {ALGORITHM!r}")
        return out, problems
    for name in columns:
        path = f"{CHECKSUM_GROUP}/{name}"
        if f"digest.{path}" not in manifest:
            problems.append(f"column {name!r} has no recorded digest of {path!r}")
            continue
        try:
            c = int(manifest.get(f"column.{name}.chunk_rows", ""))
        except ValueError:
            problems.append(f"column {name!r}: manifest chunk_rows is not an integer")
            continue
        obj = f.get(path)
        if not isinstance(obj, h5py.Dataset):
            continue  # reported by the digest check above
        digests = np.asarray(obj[()], np.uint64)
        want_n = -(-n_rows // c) if c > 0 else -1
        if c < 1 or digests.shape != (want_n,):
            problems.append(
                f"column {name!r}: {digests.shape[0] if digests.ndim == 1 else '?'} chunk "
                f"digests, expected {want_n} for {n_rows} rows of {c}"
            )
            continue
        out[name] = ColumnDigests(c, digests)
    return out, problems


def verify_chunks(
    name: str, cd: ColumnDigests, first_chunk: int, rows: np.ndarray, n_rows: int
) -> list[tuple[int, int, int]]:
    """Chunks of ``rows`` (which start at chunk ``first_chunk``'s first row and cover whole
    chunks) whose digest disagrees: ``[(chunk, first_row, stop_row), ...]``."""
    row_bytes = rows.nbytes // max(1, rows.shape[0]) if rows.shape[0] else 0
    got = digest_chunks(rows, cd.chunk_rows * row_bytes)
    want = cd.digests[first_chunk : first_chunk + got.size]
    bad = np.flatnonzero(got != want)
    return [(first_chunk + int(k), *cd.rows(first_chunk + int(k), n_rows)) for k in bad]


def _corrupt(where: str, name: str, bad: list[tuple[int, int, int]]) -> IntegrityError:
    spans = ", ".join(f"rows {lo}..{hi - 1} (chunk {k})" for k, lo, hi in bad[:8])
    more = f" and {len(bad) - 8} more chunk(s)" if len(bad) > 8 else ""
    return IntegrityError(
        f"{where}: column {name!r} {spans}{more} fail their checksum: the file is corrupt"
    )


#: ``read(out, lo, hi)``: rows ``lo:hi`` of one column into the C-contiguous ``out``.
RowReader = Callable[[np.ndarray, int, int], None]


#: ``read(out, k0, k1)``: stored chunks ``k0 .. k1-1`` of one column back to back into the
#: C-contiguous ``out``, returning their digests (uint64 ``(k1 - k0,)``) computed from the
#: bytes as they were copied.
ChunkReader = Callable[[np.ndarray, int, int], np.ndarray]


#: ``read(out, k, r0, r1)``: rows ``r0:r1`` of stored chunk ``k`` into ``out``, returning the
#: digest of the whole chunk.
ChunkPartReader = Callable[[np.ndarray, int, int, int], int]


def dataset_reader(ds: h5py.Dataset) -> RowReader:
    """The plain :data:`RowReader` of an HDF5 dataset (``read_direct``)."""

    def read(out: np.ndarray, lo: int, hi: int) -> None:
        ds.read_direct(out, source_sel=np.s_[lo:hi])

    return read


def _read(read: RowReader, out: np.ndarray, lo: int, hi: int, where: str, name: str) -> None:
    try:
        read(out, lo, hi)
    except (OSError, RuntimeError, KeyError, ValueError) as exc:
        raise IntegrityError(
            f"{where}: column {name!r} rows {lo}..{hi - 1} cannot be read: {exc}"
        ) from exc


def _read_chunks(read: ChunkReader, out: np.ndarray, cd: ColumnDigests, k0: int, k1: int,
                 n_rows: int, where: str, name: str) -> list[tuple[int, int, int]]:
    try:
        got = read(out, k0, k1)
    except (OSError, RuntimeError, KeyError, ValueError) as exc:
        lo, hi = cd.rows(k0, n_rows)[0], cd.rows(k1 - 1, n_rows)[1]
        raise IntegrityError(
            f"{where}: column {name!r} rows {lo}..{hi - 1} cannot be read: {exc}"
        ) from exc
    bad = np.flatnonzero(got != cd.digests[k0:k1])
    return [(k0 + int(k), *cd.rows(k0 + int(k), n_rows)) for k in bad]


def read_verified(
    read: RowReader, name: str, cd: ColumnDigests | None, n_rows: int,
    start: int, stop: int, out: np.ndarray, where: str,
    read_chunks: ChunkReader | None = None,
    read_part: ChunkPartReader | None = None,
) -> None:
    """Read rows ``start:stop`` with ``read`` into ``out`` and check every chunk they touch.

    ``read`` is how the store reads rows (``pread`` on raw chunks, or HDF5's
    ``read_direct``): every read path goes through here, so none bypasses the digests.
    Whole chunks are read straight into ``out`` and checked there; a chunk only partly
    inside the range is read whole into a scratch buffer first.  ``read_chunks``, when
    given, reads whole stored chunks and digests them in the same pass (the store's raw
    path); the digests are then checked without a second sweep over ``out``.  ``read_part``,
    when given, serves a chunk only partly inside the range: it digests the whole stored
    chunk and copies only the rows asked for, with no scratch buffer.  Raises
    :class:`IntegrityError` naming the column and rows of a chunk that fails (or that
    cannot be read or decoded).
    """
    if stop <= start:
        return
    if cd is None:
        _read(read, out, start, stop, where, name)
        return
    c = cd.chunk_rows
    k0, k1 = start // c, (stop - 1) // c
    ka = k0 if start == k0 * c else k0 + 1
    kb = k1 if min((k1 + 1) * c, n_rows) <= stop else k1 - 1
    bad: list[tuple[int, int, int]] = []
    for k in sorted({k0, k1} - set(range(ka, kb + 1))):
        lo, hi = cd.rows(k, n_rows)
        s, e = max(lo, start), min(hi, stop)
        if read_part is not None:
            # digest the whole chunk where it lies, copy only the rows asked for
            try:
                got = read_part(out[s - start : e - start], k, s - lo, e - lo)
            except (OSError, RuntimeError, KeyError, ValueError) as exc:
                raise IntegrityError(
                    f"{where}: column {name!r} rows {lo}..{hi - 1} cannot be read: {exc}"
                ) from exc
            if got != cd.digests[k]:
                bad.append((k, lo, hi))
            continue
        scratch = np.empty((hi - lo, *out.shape[1:]), out.dtype)
        if read_chunks is not None:
            bad += _read_chunks(read_chunks, scratch, cd, k, k + 1, n_rows, where, name)
        else:
            _read(read, scratch, lo, hi, where, name)
            bad += verify_chunks(name, cd, k, scratch, n_rows)
        out[s - start : e - start] = scratch[s - lo : e - lo]
    if ka <= kb:
        lo, hi = ka * c, min((kb + 1) * c, n_rows)
        part = out[lo - start : hi - start]
        if read_chunks is not None:
            bad += _read_chunks(read_chunks, part, cd, ka, kb + 1, n_rows, where, name)
        else:
            _read(read, part, lo, hi, where, name)
            bad += verify_chunks(name, cd, ka, part, n_rows)
    if bad:
        raise _corrupt(where, name, sorted(bad))
