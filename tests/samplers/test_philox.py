"""Philox4x32-10 on the host: known answers, the counter convention, the bounded mapping."""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj.errors import SamplerError
from numbatraj.samplers import UniformDeviceSampler, _philox, philox4x32_10
from tests.reference import bounded_ref, philox4x32_10_ref, philox_rows_ref
from tests.samplers.kat import PHILOX4X32_10_KAT


@pytest.mark.parametrize("ctr,key,expected", PHILOX4X32_10_KAT)
def test_known_answers_host(ctr, key, expected):
    assert tuple(int(x) for x in philox4x32_10(ctr, key)) == expected
    # the scalar host kernel, the plain Python body and the reference agree too
    assert tuple(int(x) for x in _philox.philox4x32(*ctr, *key)) == expected
    body = _philox.philox4x32_10_py(*(np.uint64(x) for x in (*ctr, *key)))
    assert tuple(int(x) for x in body) == expected
    assert philox4x32_10_ref(ctr, key) == expected


def test_batched_blocks_match_reference(rng):
    ctr = rng.integers(0, 2**32, size=(64, 4), dtype=np.uint64)
    key = rng.integers(0, 2**32, size=(64, 2), dtype=np.uint64)
    out = philox4x32_10(ctr, key)
    assert out.dtype == np.uint32 and out.shape == (64, 4)
    for i in range(64):
        assert tuple(int(x) for x in out[i]) == philox4x32_10_ref(tuple(ctr[i]), tuple(key[i]))
    # one key broadcast against many counters
    one = philox4x32_10(ctr, key[0])
    assert tuple(int(x) for x in one[5]) == philox4x32_10_ref(tuple(ctr[5]), tuple(key[0]))


@pytest.mark.parametrize(
    "ctr,key,match",
    [
        ((0, 0, 0), (0, 0), "counter must have shape"),
        ((0, 0, 0, 0), (0, 0, 0), "key must have shape"),
        ((0, 0, 0, 2**32), (0, 0), r"counter word 3 is 4294967296"),
        ((0, 0, -1, 0), (0, 0), r"counter word 2 is -1"),
        ((0.5, 0, 0, 0), (0, 0), "unsigned 32-bit integers"),
        (np.zeros((3, 4), int), np.zeros((2, 2), int), "counter has 3 blocks but key has 2"),
    ],
)
def test_bad_counters_and_keys(ctr, key, match):
    with pytest.raises(SamplerError, match=match):
        philox4x32_10(ctr, key)


@pytest.mark.parametrize(
    "a,b",
    [(0, 0), (1, 1), (2**64 - 1, 2**64 - 1), (2**64 - 1, 1), (2**63, 3), (0xDEADBEEF12345678, 10**6)],
)
def test_mulhi64_exact(a, b):
    assert int(_philox.mulhi64(np.uint64(a), np.uint64(b))) == (a * b) >> 64
    assert int(_philox.mulhi64_py(np.uint64(a), np.uint64(b))) == (a * b) >> 64


def test_bounded_rows_kernel_matches_exact_integers(rng):
    raw = rng.integers(0, 2**64, size=500, dtype=np.uint64, endpoint=False)
    raw[:3] = [0, 2**64 - 1, 2**63]
    for lo, n in [(0, 1), (0, 7), (100, 2**20), (0, 2**62 + 12345)]:
        out = np.empty(raw.shape[0], dtype=np.int64)
        _philox._bounded_rows_cpu(raw, np.int64(lo), np.int64(n), out)
        assert out.tolist() == [lo + bounded_ref(int(w), n) for w in raw]
        assert out.min() >= lo and out.max() < lo + n


def test_counter_convention_pinned():
    """Lane in the counter's high words, draw number in the low words, key = seed; the index
    comes from output words 0 (low half) and 1 (high half) by multiply-high."""
    seed = 0x0123456789ABCDEF
    s = UniformDeviceSampler(1000, 5, seed, device=False)
    s.sample()
    second = s.sample().indices.copy()
    lane, draw = 3, 1
    x = philox4x32_10((draw, 0, lane, 0), (seed & 0xFFFFFFFF, seed >> 32))
    word = int(x[0]) | (int(x[1]) << 32)
    assert second[lane] == (word * 1000) >> 64
    assert second.tolist() == philox_rows_ref(seed, 1000, 5, 1).tolist()
    # the same numbers with lane and draw swapped come from a different block
    assert s.sample().indices.tolist() == philox_rows_ref(seed, 1000, 5, 2).tolist()
    assert philox_rows_ref(seed, 1000, 5, 1)[2] != philox_rows_ref(seed, 1000, 5, 2)[1]


def test_counter_high_words_carry():
    """Draw numbers and lanes past 2**32 reach the second counter word of their half."""
    seed = 7
    state = np.array([2**32 + 5, 0, 2**40], dtype=np.uint64)
    out = np.empty(3, dtype=np.int64)
    _philox._philox_rows_cpu(state, out, np.uint64(seed), np.uint64(0))
    assert out.tolist() == philox_rows_ref(seed, 2**40, 3, 2**32 + 5).tolist()
    assert int(state[0]) == 2**32 + 6
    lane = 2**33 + 1
    got = _philox.philox_index(np.uint64(9), np.uint64(lane), np.uint64(seed), np.uint64(0), np.uint64(50))
    x = philox4x32_10_ref((9, 0, lane & 0xFFFFFFFF, lane >> 32), (seed, 0))
    assert int(got) == bounded_ref(x[0] | (x[1] << 32), 50)
