"""Chunk digest kernels: a 64-bit checksum of a byte range, one per stored chunk.

``nbh64`` (version 1): four lanes of ``lane = (lane ^ word) * P`` over little-endian
64-bit words (32 bytes per step), the tail bytes folded into the first lane the same way, the
lanes combined with the length and finished with the splitmix64 avalanche.  Each step is a
bijection of the lane for a fixed word, so any change confined to one word of a lane
changes the digest with certainty (every single-bit and single-byte flip is caught); two
changes cancel with probability about 2**-64.  Not a cryptographic hash: it guards against
corruption, not against an adversary.  Plain NumPy reference: ``tests.reference.digest_ref``.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from numbatraj._jit import njit_kernel, njit_parallel
from numbatraj._memops import STREAM_STORES, address, copy_bytes, copy_line_nt, store_fence

_P = np.uint64(0x100000001B3)
_S0 = np.uint64(0x9E3779B97F4A7C15)
_S1 = np.uint64(0xC2B2AE3D27D4EB4F)
_S2 = np.uint64(0x165667B19E3779F9)
_S3 = np.uint64(0x27D4EB2F165667C5)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@numba.njit(cache=True, nogil=True, inline="always")
def _blocks(words, b0, b1, a0, a1, a2, a3):  # type: ignore[no-untyped-def]
    """The four lanes after 32-byte blocks ``[b0, b1)`` of ``words`` (uint64)."""
    for i in range(b0, b1):
        a0 = (a0 ^ words[4 * i]) * _P
        a1 = (a1 ^ words[4 * i + 1]) * _P
        a2 = (a2 ^ words[4 * i + 2]) * _P
        a3 = (a3 ^ words[4 * i + 3]) * _P
    return a0, a1, a2, a3


@numba.njit(cache=True, nogil=True, inline="always")
def _finish(buf, lo, hi, a0, a1, a2, a3, n):  # type: ignore[no-untyped-def]
    """The digest of ``n`` bytes whose whole blocks gave the lanes ``a0 .. a3`` and whose tail
    is ``buf[lo:hi]``: the tail folded into the first lane, the lanes combined with the
    length, the splitmix64 avalanche."""
    for j in range(lo, hi):
        a0 = (a0 ^ np.uint64(buf[j])) * _P
    h = a0 ^ (a1 * np.uint64(3)) ^ (a2 * np.uint64(5)) ^ (a3 * np.uint64(7))
    h ^= np.uint64(n)
    h = (h ^ (h >> np.uint64(30))) * _M1
    h = (h ^ (h >> np.uint64(27))) * _M2
    return h ^ (h >> np.uint64(31))


@njit_kernel
def _digest_range_cpu(buf, lo, hi):  # type: ignore[no-untyped-def]
    n_blocks = (hi - lo) // 32
    a0, a1, a2, a3 = _S0, _S1, _S2, _S3
    if n_blocks:
        words = buf[lo : lo + n_blocks * 32].view(np.uint64)
        a0, a1, a2, a3 = _blocks(words, 0, n_blocks, a0, a1, a2, a3)
    return _finish(buf, lo + n_blocks * 32, hi, a0, a1, a2, a3, hi - lo)


@njit_kernel
def _digest_chunks_cpu(buf, chunk_bytes, out):  # type: ignore[no-untyped-def]
    n = buf.size
    for k in range(out.size):
        lo = k * chunk_bytes
        out[k] = _digest_range_cpu(buf, lo, min(n, lo + chunk_bytes))


@njit_parallel
def _digest_chunks_par(buf, chunk_bytes, out):  # type: ignore[no-untyped-def]
    n = buf.size
    for k in prange(out.size):
        lo = k * chunk_bytes
        out[k] = _digest_range_cpu(buf, lo, min(n, lo + chunk_bytes))


@njit_kernel
def _stream_reset(lanes, meta):  # type: ignore[no-untyped-def]
    lanes[0] = _S0
    lanes[1] = _S1
    lanes[2] = _S2
    lanes[3] = _S3
    meta[0] = 0  # pending bytes
    meta[1] = 0  # total length


@njit_kernel
def _stream_update(lanes, pending, meta, buf):  # type: ignore[no-untyped-def]
    """Feed ``buf`` to a digest in progress (state: ``lanes``, ``pending``, ``meta``); the
    result equals :func:`_digest_range_cpu` over all bytes fed, however they were split."""
    a0 = lanes[0]
    a1 = lanes[1]
    a2 = lanes[2]
    a3 = lanes[3]
    npend = meta[0]
    i = 0
    n = buf.size
    if npend:
        take = min(32 - npend, n)
        for k in range(take):
            pending[npend + k] = buf[k]
        npend += take
        i = take
        if npend == 32:
            w = pending.view(np.uint64)
            a0 = (a0 ^ w[0]) * _P
            a1 = (a1 ^ w[1]) * _P
            a2 = (a2 ^ w[2]) * _P
            a3 = (a3 ^ w[3]) * _P
            npend = 0
    n_blocks = (n - i) // 32
    if n_blocks:
        words = buf[i : i + n_blocks * 32].view(np.uint64)
        for b in range(n_blocks):
            a0 = (a0 ^ words[4 * b]) * _P
            a1 = (a1 ^ words[4 * b + 1]) * _P
            a2 = (a2 ^ words[4 * b + 2]) * _P
            a3 = (a3 ^ words[4 * b + 3]) * _P
        i += n_blocks * 32
    for k in range(i, n):
        pending[npend] = buf[k]
        npend += 1
    lanes[0] = a0
    lanes[1] = a1
    lanes[2] = a2
    lanes[3] = a3
    meta[0] = npend
    meta[1] += n


@njit_kernel
def _stream_final(lanes, pending, meta):  # type: ignore[no-untyped-def]
    a0 = lanes[0]
    for k in range(meta[0]):
        a0 = (a0 ^ np.uint64(pending[k])) * _P
    h = a0 ^ (lanes[1] * np.uint64(3)) ^ (lanes[2] * np.uint64(5)) ^ (lanes[3] * np.uint64(7))
    h ^= np.uint64(meta[1])
    h = (h ^ (h >> np.uint64(30))) * _M1
    h = (h ^ (h >> np.uint64(27))) * _M2
    return h ^ (h >> np.uint64(31))


@njit_kernel
def _copy_digest_chunks(src, offsets, k0, k1, chunk_bytes, total_bytes, dst, digests):  # type: ignore[no-untyped-def]
    """Copy stored chunks ``k0 .. k1-1`` (chunk ``k``: ``min(chunk_bytes, total_bytes -
    k*chunk_bytes)`` bytes at ``src[offsets[k]:]``) back to back into ``dst`` and set
    ``digests[k - k0]`` to each chunk's digest (equal to :func:`_digest_range_cpu` of the
    copied bytes), in one pass: every word is digested as it is copied, so the bytes are
    read from memory once (a copy followed by a digest pass reads them twice)."""
    pos = 0
    for k in range(k0, k1):
        n = min(chunk_bytes, total_bytes - k * chunk_bytes)
        so = offsets[k]
        n_blocks = n // 32
        a0, a1, a2, a3 = _S0, _S1, _S2, _S3
        if n_blocks:
            w = src[so : so + n_blocks * 32].view(np.uint64)
            d = dst[pos : pos + n_blocks * 32].view(np.uint64)
            for i in range(n_blocks):
                x0 = w[4 * i]
                x1 = w[4 * i + 1]
                x2 = w[4 * i + 2]
                x3 = w[4 * i + 3]
                d[4 * i] = x0
                d[4 * i + 1] = x1
                d[4 * i + 2] = x2
                d[4 * i + 3] = x3
                a0 = (a0 ^ x0) * _P
                a1 = (a1 ^ x1) * _P
                a2 = (a2 ^ x2) * _P
                a3 = (a3 ^ x3) * _P
        for j in range(n_blocks * 32, n):
            dst[pos + j] = src[so + j]
        digests[k - k0] = _finish(src, so + n_blocks * 32, so + n, a0, a1, a2, a3, n)
        pos += n


#: Reads of at least this many bytes (:func:`copy_digest_chunks`) go to the caller's array
#: with streaming stores.  A read that large does not stay in a core's cache for its caller
#: anyway, and ordinary stores first read every destination line from memory.  Measured on
#: the Intel Xeon VM (2 MiB L2 a core), 213 KB chunks of a warm store at random places, one
#: process, interleaved (ordinary / streaming, then each followed by a NumPy sum over the
#: result): 0.4 MiB 82 / 125 us, 108 / 172; 1.6 MiB 336 / 454, 515 / 649; 6.5 MiB
#: 1,360 / 1,285, 1,961 / 1,681; 26 MiB 5,713 / 4,579, 8,558 / 6,823; 104 MiB 23.5 / 15.4 ms,
#: 31.5 / 25.6 ms.  Between 1.6 and 6.5 MiB the streaming copy starts to win, with or
#: without a reader after it.
STREAM_MIN_BYTES = 4 << 20


def _cpu_vendor() -> str:
    """``vendor_id`` of ``/proc/cpuinfo`` (``GenuineIntel``, ``AuthenticAMD``), or ""."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
                if not line.strip():  # the first processor's block is enough
                    break
    except OSError:
        pass
    return ""


#: Whether reads of :data:`STREAM_MIN_BYTES` and more take the streaming kernel: on Intel
#: x86-64 only, by measurement on the two kinds of machine this project runs on.  On the
#: Intel Xeon VM the ordinary one-pass kernel read every destination line before writing
#: it, and copy and digest did not overlap (the table above: 104 MiB 23.5 ms ordinary
#: against 15.4 ms streaming).  On the AMD EPYC VM (Zen 4, 2 MiB of L2 a core, stop 46)
#: the ordinary kernel is the faster one from 25 MiB up: random slabs of a 10 M x 26
#: float32 column, one process, interleaved rounds, three runs, ordinary / streaming:
#: 25 MiB 2.2-3.8 / 2.4-5.1 ms, 99 MiB 8.1-13.3 / 10.0-18.6 ms, the whole 0.99 GiB column
#: 89-95 / 110-133 ms (with a NumPy sum over the result after each read too: 146-152 /
#: 181-192 ms); at 4 MiB even.  A whole column into a fresh array (``load_column(name)``,
#: the pages faulted in by the copy) 179 against 195 ms.  Other vendors keep the ordinary
#: kernel, which is correct everywhere.
STREAM_READS = STREAM_STORES and _cpu_vendor() == "GenuineIntel"

#: Bytes of a chunk the streaming kernel copies before it digests them: read back from L1.
#: (1 KiB and 4 KiB measured alike on a 1.04 GB column, 161-164 ms; 16 KiB 181 ms.)
STREAM_PIECE_BYTES = 4096


# x86-64 only (the streaming store and its fence): compiled where STREAM_STORES holds
@njit_kernel
def _copy_digest_chunks_stream(src, offsets, k0, k1, chunk_bytes,  # type: ignore[no-untyped-def]
                               total_bytes, dst, digests):
    """:func:`_copy_digest_chunks` with streaming stores: each chunk's destination goes as
    whole 64-byte aligned lines (the edges ordinary copies), :data:`STREAM_PIECE_BYTES` at
    a time, and each piece's bytes are then digested from the source while they are in L1.
    The same blocks in the same order as :func:`_digest_range_cpu`: the same digests."""
    base = address(dst)
    pos = 0
    for k in range(k0, k1):
        n = min(chunk_bytes, total_bytes - k * chunk_bytes)
        so = offsets[k]
        h = min((-(base + pos)) & 63, n)  # bytes before the first aligned line of the chunk
        if h:
            copy_bytes(dst, pos, src, so, h)
        end = h + (((n - h) >> 6) << 6)  # after the last whole line
        n_blocks = n // 32
        w = src[so : so + n_blocks * 32].view(np.uint64)
        a0, a1, a2, a3 = _S0, _S1, _S2, _S3
        q = h
        done = 0  # blocks digested
        while q < end:
            e = min(q + STREAM_PIECE_BYTES, end)
            for o in range(q, e, 64):
                copy_line_nt(dst, pos + o, src, so + o)
            a0, a1, a2, a3 = _blocks(w, done, e // 32, a0, a1, a2, a3)
            done = e // 32
            q = e
        if end < n:
            copy_bytes(dst, pos + end, src, so + end, n - end)
        a0, a1, a2, a3 = _blocks(w, done, n_blocks, a0, a1, a2, a3)
        digests[k - k0] = _finish(src, so + n_blocks * 32, so + n, a0, a1, a2, a3, n)
        pos += n
    store_fence()


def copy_digest_chunks(src: np.ndarray, offsets: np.ndarray, k0: int, k1: int,
                       chunk_bytes: int, total_bytes: int, dst: np.ndarray,
                       digests: np.ndarray) -> None:
    """:func:`_copy_digest_chunks`, through :func:`_copy_digest_chunks_stream` when ``dst``
    holds :data:`STREAM_MIN_BYTES` or more on a machine where streaming wins
    (:data:`STREAM_READS`)."""
    if STREAM_READS and dst.size >= STREAM_MIN_BYTES:
        _copy_digest_chunks_stream(src, offsets, k0, k1, chunk_bytes, total_bytes, dst,
                                   digests)
    else:
        _copy_digest_chunks(src, offsets, k0, k1, chunk_bytes, total_bytes, dst, digests)
