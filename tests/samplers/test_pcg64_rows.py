"""The fused PCG64 row kernel against plain Python: numpy's own ``random_raw`` words, integer
arithmetic for the bounded rows, ``physical_row_py`` for a replay's ring mapping."""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj._jit import njit_kernel
from numbatraj.replay._ring_kernels import physical_row_py
from numbatraj.samplers._pcg64 import (
    LANES,
    NO_SPLIT,
    RawWords,
    _state_words,
    mul_full,
    pcg64_rows_cpu,
    words_rows_cpu,
)

# batch sizes around the lanes' blocks: none, fewer than two blocks, a tail of each length
SIZES = [0, 1, 2, LANES - 1, LANES, LANES + 1, 2 * LANES - 1, 2 * LANES, 2 * LANES + 1,
         2 * LANES + 3, 4099]
# (lo, n, ring) with ring (n_demo, ring_base, ring_cap, start) or None for no mapping
CASES = [
    (0, 10**6, None),
    (3, 1, None),  # one row: every word maps to lo
    (40, 10, None),
    (0, 2**40, None),  # a population past 32 bits: the high half of n matters
    (0, 2**63 - 1, None),
    (0, 1000, (100, 128, 900, 850)),  # demo prefix, ring after a gap, wrapping window
    (0, 900, (0, 0, 900, 0)),
    (0, 5, (0, 7, 5, 4)),
    (0, 2**33, (2**31, 2**31 + 64, 2**33 - 2**31, 2**32)),
]


def _ref_rows(words: np.ndarray, lo: int, n: int, ring: tuple[int, int, int, int] | None
              ) -> list[int]:
    rows = [lo + ((int(w) * n) >> 64) for w in words]
    if ring is None:
        return rows
    nd, base, cap, start = ring
    return [int(physical_row_py(j, nd, base, cap, start)) for j in rows]


def _mapping(ring: tuple[int, int, int, int] | None) -> tuple[int, int, int, int]:
    if ring is None:
        return NO_SPLIT, 0, 0, 0
    nd, base, cap, start = ring
    return nd, base + start - nd, base + cap, cap


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**64 - 1])
@pytest.mark.parametrize("lo, n, ring", CASES)
def test_fused_rows_equal_numpy_words_mapped_in_python(seed, lo, n, ring):
    g, twin = np.random.PCG64(seed), np.random.PCG64(seed)
    st = _state_words(g)
    split, shift, top, cap = _mapping(ring)
    for b in SIZES:
        out = np.full(b + 1, -7, dtype=np.int64)  # one guard entry past the batch
        pcg64_rows_cpu(st, lo, n, split, shift, top, cap, out[:b])
        words = twin.random_raw(b)
        assert out[:b].tolist() == _ref_rows(words, lo, n, ring), b
        assert out[b] == -7
        words_out = np.empty(b, dtype=np.int64)
        words_rows_cpu(words, lo, n, split, shift, top, cap, words_out)
        assert words_out.tolist() == out[:b].tolist()
    # the generator itself advanced exactly past the words drawn
    assert g.random_raw() == twin.random_raw()


def test_raw_words_rows_with_and_without_the_state_kernel():
    for bitgen in (np.random.PCG64(5), np.random.Philox(5)):
        twin = type(bitgen)(5)
        words = RawWords(np.random.Generator(bitgen))
        assert (words._state is not None) == isinstance(bitgen, np.random.PCG64)
        out = np.empty(37, dtype=np.int64)
        words.rows(out, 0, 1000, *_mapping((10, 16, 990, 500)))
        assert out.tolist() == _ref_rows(twin.random_raw(37), 0, 1000, (10, 16, 990, 500))
        words.rows(out, 2, 9)
        assert out.tolist() == _ref_rows(twin.random_raw(37), 2, 9, None)


@njit_kernel
def _mul_both(a, b):  # type: ignore[no-untyped-def]
    return mul_full(a, b)


@pytest.mark.parametrize("a, b", [
    (0, 0), (1, 2**64 - 1), (2**64 - 1, 2**64 - 1), (2**63, 2), (2**32, 2**32),
    (4865540595714422341, 2549297995355413924), (0xDEADBEEFCAFEBABE, 0x0123456789ABCDEF),
])
def test_mul_full_is_the_128_bit_product(a, b):
    lo, hi = _mul_both(np.uint64(a), np.uint64(b))
    assert (int(hi) << 64) | int(lo) == a * b
