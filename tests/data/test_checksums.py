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
