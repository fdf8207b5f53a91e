"""The staged add's per-column moves (``_ring_kernels._stage_column``: one case per width
class, chosen once per column) against plain NumPy slicing, for every width from 1 to 200
bytes at every alignment of the ring."""

import numpy as np
import pytest

from numbatraj.replay import _ring_kernels as rk


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("shift", [0, 3, 40])
def test_stage_put_every_width(stream, shift):
    rng = np.random.default_rng(11)
    widths = list(range(1, 201))
    offs, o = [], 0
    for k, w in enumerate(widths):
        offs.append(o)
        o += w + k % 2  # a padding byte after every other column
    row_bytes = (o + 7) // 8 * 8
    n = 5
    cols = [rng.integers(0, 256, (n, w), dtype=np.uint8) for w in widths]
    want = np.zeros((n, row_bytes), dtype=np.uint8)
    for c, off in zip(cols, offs):
        want[:, off : off + c.shape[1]] = c
    ring = np.full(shift + (n + 2) * row_bytes, 0x5A, dtype=np.uint8)
    scratch = np.zeros(n * row_bytes, dtype=np.uint8)
    d = shift + row_bytes
    rk.stage_put_cpu(ring, d, row_bytes, tuple(c.ravel() for c in cols),
                     np.array(offs, dtype=np.int64), np.array(widths, dtype=np.int64), n,
                     scratch, stream)
    np.testing.assert_array_equal(ring[d : d + n * row_bytes].reshape(n, row_bytes), want)
    assert (ring[:d] == 0x5A).all() and (ring[d + n * row_bytes :] == 0x5A).all()
