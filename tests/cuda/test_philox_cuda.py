"""Philox4x32-10 as a CUDA device function: known answers and bit-equality with the host.

Runs in its own pytest process with NUMBA_ENABLE_CUDASIM=1 (tests/conftest.py marks it
``cuda``); on a GPU it checks the real device compile.
"""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj._cuda import cuda_available
from numbatraj.samplers import philox4x32_10
from tests.reference import philox4x32_10_ref
from tests.samplers.kat import PHILOX4X32_10_KAT

pytestmark = pytest.mark.skipif(
    not cuda_available(), reason="no CUDA device and NUMBA_ENABLE_CUDASIM is not 1"
)


def _device_blocks(counters: np.ndarray, keys: np.ndarray) -> np.ndarray:
    from numbatraj._cuda import get_cuda
    from numbatraj.samplers import _uniform_cuda

    cuda = get_cuda()
    c = cuda.to_device(np.ascontiguousarray(counters, dtype=np.uint64))
    k = cuda.to_device(np.ascontiguousarray(keys, dtype=np.uint64))
    out = cuda.device_array(c.shape, dtype=np.uint64)
    tpb = 64
    _uniform_cuda._philox_blocks_cuda[(c.shape[0] + tpb - 1) // tpb, tpb](c, k, out)
    return out.copy_to_host()


def test_known_answers_on_device():
    ctr = np.array([v[0] for v in PHILOX4X32_10_KAT])
    key = np.array([v[1] for v in PHILOX4X32_10_KAT])
    got = _device_blocks(ctr, key)
    for row, (_, _, expected) in zip(got, PHILOX4X32_10_KAT):
        assert tuple(int(x) for x in row) == expected


def test_device_equals_host_bit_for_bit(rng):
    n = 200
    ctr = rng.integers(0, 2**32, size=(n, 4), dtype=np.uint64)
    key = rng.integers(0, 2**32, size=(n, 2), dtype=np.uint64)
    ctr[:4] = [[0, 0, 0, 0], [2**32 - 1] * 4, [1, 0, 0, 0], [0, 0, 0, 1]]
    dev = _device_blocks(ctr, key)
    host = philox4x32_10(ctr, key)
    np.testing.assert_array_equal(dev, host.astype(np.uint64))
    for i in range(0, n, 37):
        assert tuple(int(x) for x in dev[i]) == philox4x32_10_ref(tuple(ctr[i]), tuple(key[i]))
