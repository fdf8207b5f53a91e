"""The chunk digest kernels against the plain-Python reference, and the streaming digester."""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj.data.checksums import ChunkDigester, digest_bytes, digest_chunks
from tests.reference import digest_ref


@pytest.mark.parametrize("n", [0, 1, 7, 31, 32, 33, 63, 64, 65, 1000])
def test_digest_matches_reference(rng, n):
    data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
    assert digest_bytes(data) == f"{digest_ref(data):016x}"


def test_every_single_byte_flip_changes_the_digest(rng):
    data = bytearray(rng.integers(0, 256, 97, dtype=np.uint8).tobytes())
    base = digest_bytes(bytes(data))
    for pos in range(len(data)):
        for x in (1, 0x80, 0xFF):
            bad = bytearray(data)
            bad[pos] ^= x
            assert digest_bytes(bytes(bad)) != base


@pytest.mark.parametrize("row_bytes,chunk_rows", [(1, 64), (12, 7), (104, 32), (3, 1)])
def test_streaming_digester_equals_one_shot_whatever_the_split(rng, row_bytes, chunk_rows):
    n = 500
    rows = rng.integers(0, 256, (n, row_bytes), dtype=np.uint8)
    want = digest_chunks(rows, chunk_rows * row_bytes)
    for _ in range(5):
        d = ChunkDigester(chunk_rows, row_bytes)
        cuts = np.sort(rng.integers(0, n, 6))
        for a, b in zip([0, *cuts], [*cuts, n]):
            d.feed(rows[a:b])
        np.testing.assert_array_equal(d.finish(), want)


@pytest.mark.parametrize("chunk_bytes,total", [(64, 64 * 5), (96, 96 * 4 + 40), (40, 40 * 3 + 7),
                                               (7, 7 * 6 + 3)])
def test_copy_digest_chunks_equals_a_copy_and_the_reference_digest(rng, chunk_bytes, total):
    """The one-pass copy + digest of the store's raw read path: chunks at scattered (and
    unaligned) offsets, a shorter last chunk; bytes equal a plain slice copy, digests equal
    the plain-Python nbh64 of each chunk."""
    from numbatraj.data._digest_kernels import _copy_digest_chunks

    n_chunks = -(-total // chunk_bytes)
    src = rng.integers(0, 256, n_chunks * chunk_bytes * 3 + 13, dtype=np.uint8)
    offsets = np.sort(rng.choice(np.arange(0, src.size - chunk_bytes, chunk_bytes + 3),
                                 n_chunks, replace=False)).astype(np.int64) + 5
    for k0, k1 in [(0, n_chunks), (1, n_chunks), (0, 1), (n_chunks - 1, n_chunks)]:
        want_bytes = b"".join(
            src[o : o + min(chunk_bytes, total - k * chunk_bytes)].tobytes()
            for k, o in zip(range(k0, k1), offsets[k0:k1]))
        dst = np.zeros(len(want_bytes), np.uint8)
        got = np.zeros(k1 - k0, np.uint64)
        _copy_digest_chunks(src, offsets, k0, k1, chunk_bytes, total, dst, got)
        assert dst.tobytes() == want_bytes
        pos = 0
        for k in range(k0, k1):
            n = min(chunk_bytes, total - k * chunk_bytes)
            assert int(got[k - k0]) == digest_ref(want_bytes[pos : pos + n])
            pos += n


@pytest.mark.skipif(not __import__("numbatraj._memops", fromlist=["x"]).STREAM_STORES,
                    reason="streaming stores are x86-64 only")
@pytest.mark.parametrize("chunk_bytes,total", [(64, 64 * 5), (200, 200 * 3 + 9), (7, 7 * 6 + 3),
                                               (9000, 9000 * 3 + 4100), (4096, 4096 * 2)])
@pytest.mark.parametrize("shift", [0, 1, 13, 32, 63])
def test_streaming_copy_digest_equals_the_reference(rng, chunk_bytes, total, shift):
    """The streaming kernel (whole aligned lines with streaming stores, edges copied, each
    piece digested after it is copied): a destination at every alignment, chunks shorter
    than a line, longer than a piece, a short last chunk; bytes equal a slice copy, digests
    the plain-Python nbh64 and the ordinary kernel's."""
    from numbatraj.data._digest_kernels import _copy_digest_chunks, _copy_digest_chunks_stream

    n_chunks = -(-total // chunk_bytes)
    src = rng.integers(0, 256, n_chunks * (chunk_bytes + 3) * 2 + 64, dtype=np.uint8)
    offsets = np.sort(rng.choice(np.arange(0, src.size - chunk_bytes, chunk_bytes + 3),
                                 n_chunks, replace=False)).astype(np.int64) + 5
    for k0, k1 in [(0, n_chunks), (1, n_chunks), (n_chunks - 1, n_chunks)]:
        want_bytes = b"".join(
            src[o : o + min(chunk_bytes, total - k * chunk_bytes)].tobytes()
            for k, o in zip(range(k0, k1), offsets[k0:k1]))
        room = np.full(len(want_bytes) + 128, 0xAB, np.uint8)
        lead = (-room.ctypes.data) % 64 + shift  # the destination starts `shift` past a line
        dst = room[lead : lead + len(want_bytes)]
        got = np.zeros(k1 - k0, np.uint64)
        _copy_digest_chunks_stream(src, offsets, k0, k1, chunk_bytes, total, dst, got)
        assert dst.tobytes() == want_bytes
        assert (room[:lead] == 0xAB).all() and (room[lead + len(want_bytes):] == 0xAB).all()
        plain = np.zeros(k1 - k0, np.uint64)
        _copy_digest_chunks(src, offsets, k0, k1, chunk_bytes, total,
                            np.empty(len(want_bytes), np.uint8), plain)
        np.testing.assert_array_equal(got, plain)
        pos = 0
        for k in range(k0, k1):
            n = min(chunk_bytes, total - k * chunk_bytes)
            assert int(got[k - k0]) == digest_ref(want_bytes[pos : pos + n])
            pos += n


def test_copy_digest_chunks_streams_from_its_floor(monkeypatch, rng):
    """The wrapper takes the streaming kernel for destinations of STREAM_MIN_BYTES and more
    where streaming reads are on (STREAM_READS), the ordinary one below and elsewhere."""
    import numbatraj.data._digest_kernels as DK

    calls: list[str] = []
    monkeypatch.setattr(DK, "_copy_digest_chunks", lambda *a: calls.append("plain"))
    monkeypatch.setattr(DK, "_copy_digest_chunks_stream", lambda *a: calls.append("stream"))
    monkeypatch.setattr(DK, "STREAM_MIN_BYTES", 100)
    offsets = np.zeros(1, np.int64)
    for on in (True, False):
        monkeypatch.setattr(DK, "STREAM_READS", on)
        for n in (99, 100):
            DK.copy_digest_chunks(np.zeros(n, np.uint8), offsets, 0, 1, n, n,
                                  np.zeros(n, np.uint8), np.zeros(1, np.uint64))
    assert calls == ["plain", "stream", "plain", "plain"]


def test_streaming_reads_follow_the_cpu_vendor(monkeypatch, tmp_path):
    """STREAM_READS: streaming stores (x86-64) and an Intel CPU; the vendor is read from
    /proc/cpuinfo's first block, and a missing or odd file reads as no vendor."""
    import builtins

    import numbatraj.data._digest_kernels as DK

    assert DK.STREAM_READS == (DK.STREAM_STORES and DK._cpu_vendor() == "GenuineIntel")
    real_open = builtins.open
    fake = tmp_path / "cpuinfo"
    for text, want in [("processor\t: 0\nvendor_id\t: GenuineIntel\n\n", "GenuineIntel"),
                       ("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags : x\n", "AuthenticAMD"),
                       ("processor\t: 0\n\nvendor_id\t: GenuineIntel\n", ""),
                       ("", "")]:
        fake.write_text(text)
        monkeypatch.setattr(builtins, "open", lambda p, *a, **k: real_open(
            fake if p == "/proc/cpuinfo" else p, *a, **k))
        assert DK._cpu_vendor() == want, text
    monkeypatch.setattr(builtins, "open", lambda p, *a, **k: real_open(
        tmp_path / "absent" if p == "/proc/cpuinfo" else p, *a, **k))
    assert DK._cpu_vendor() == ""
