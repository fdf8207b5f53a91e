"""Device gather equals host gather bit for bit (CUDA simulator in CI, a GPU when present).

Runs in its own pytest process with NUMBA_ENABLE_CUDASIM=1 (tests/conftest.py marks it
``cuda``).  Launches stay near a thousand threads: the simulator runs each as a Python thread.
"""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj import (
    ColumnSpec,
    IndexBatch,
    RowIndexError,
    SchemaError,
    TrajectoryStore,
    TrajectoryStoreWriter,
)
from numbatraj._cuda import cuda_available
from numbatraj.data import ResidentColumn, WindowedColumn
from tests.reference import first_outside_ref, gather_rows_ref

pytestmark = pytest.mark.skipif(
    not cuda_available(), reason="no CUDA device and NUMBA_ENABLE_CUDASIM is not 1"
)

N = 40


def _column(dtype, shape, n=N, seed=0):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    raw = rng.integers(0, 256, n * int(np.prod(shape, dtype=np.int64)) * dt.itemsize, np.uint8)
    if dt.kind == "b":
        return (raw & 1).astype(np.bool_).reshape(n, *shape)
    return raw.view(dt).reshape(n, *shape)  # every bit pattern, NaNs included


ADVERSARIAL = {
    "first": [0, 0, 0],
    "last": [N - 1, N - 1],
    "duplicates": [5, 5, 7, 5, 7],
    "reversed": list(range(N - 1, -1, -1)),
    "all_same": [13] * 9,
    "ends": [0, N - 1, 0, N - 1],
}


@pytest.mark.parametrize(
    "dtype, shape",
    [
        (np.float32, (26,)),  # 13 uint64 words
        (np.float32, ()),  # uint32 words
        (np.float16, (3,)),  # uint16 words
        (np.uint8, (3, 5, 5)),  # uint8 words (75 bytes)
        (np.bool_, (2,)),
        (np.float64, (2, 3)),
        (np.int16, ()),
    ],
    ids=str,
)
def test_device_equals_host_bit_for_bit(dtype, shape):
    from numba import cuda

    data = _column(dtype, shape)
    col = ResidentColumn(data, "c")
    for name, idx in ADVERSARIAL.items():
        idx = np.asarray(idx, np.int64)
        host = col.gather(idx)
        dev = col.gather_device(cuda.to_device(idx)).copy_to_host()
        assert dev.tobytes() == host.tobytes() == gather_rows_ref(data, idx).tobytes(), name
        assert dev.dtype == host.dtype and dev.shape == host.shape
    assert col.on_device


def test_device_out_reuse_sequences_and_index_batch():
    from numba import cuda

    data = _column(np.float32, (6,))
    col = ResidentColumn(data).to_device()
    idx = np.random.default_rng(1).integers(0, N, (8, 4))
    d_idx = cuda.to_device(idx)
    out = cuda.device_array((8, 4, 6), np.float32)
    assert col.gather_device(IndexBatch(d_idx), out) is out
    assert out.copy_to_host().tobytes() == col.gather(idx).tobytes()
    # host indices are copied to the device first
    assert col.gather_device(idx).copy_to_host().tobytes() == col.gather(idx).tobytes()
    assert col.gather_device(np.zeros(0, np.int64)).shape == (0, 6)


@pytest.mark.parametrize("pos, value", [(0, -1), (6, N), (11, 10**9)])
def test_device_out_of_range_raises_and_writes_nothing(pos, value):
    from numba import cuda

    col = ResidentColumn(_column(np.float32, (3,)), "qvel")
    idx = np.arange(12, dtype=np.int64)
    idx[pos] = value
    if pos < 11:
        idx[11] = -7  # a later offender is not the one reported
    assert first_outside_ref(idx, 0, N) == pos
    out = cuda.to_device(np.full((12, 3), 9.0, np.float32))
    with pytest.raises(RowIndexError, match=rf"index {value} at position {pos} .*\[0, {N}\)"):
        col.gather_device(cuda.to_device(idx), out)
    assert np.all(out.copy_to_host() == 9.0)


def test_device_argument_errors():
    from numba import cuda

    col = ResidentColumn(_column(np.float32, (3,)))
    with pytest.raises(SchemaError, match="device indices must be int64"):
        col.gather_device(cuda.to_device(np.zeros(3, np.int32)))
    with pytest.raises(SchemaError, match=r"out is float64 \(3, 3\), expected float32 \(3, 3\)"):
        col.gather_device(np.zeros(3, np.int64), cuda.device_array((3, 3), np.float64))
    with pytest.raises(SchemaError, match="out must be a device array"):
        col.gather_device(np.zeros(3, np.int64), np.zeros((3, 3), np.float32))
    with pytest.raises(SchemaError, match="device array; use gather_device"):
        col.gather(cuda.to_device(np.zeros(3, np.int64)))


def test_to_device_refreshes_the_mirror():
    data = _column(np.int32, (2,)).copy()
    col = ResidentColumn(data).to_device()
    data[3] = [11, 12]
    assert col.gather_device(np.array([3])).copy_to_host().tolist() != [[11, 12]]
    col.to_device()
    assert col.gather_device(np.array([3])).copy_to_host().tolist() == [[11, 12]]
    col.release_device()
    assert not col.on_device


def test_windowed_device_gather_follows_the_window(tmp_path):
    rng = np.random.default_rng(3)
    state = rng.standard_normal((103, 5), dtype=np.float32)
    path = tmp_path / "w.h5"
    with TrajectoryStoreWriter(path, [ColumnSpec("state", np.float32, (5,))]) as w:
        w.append("state", state)
        w.end_episode()
    with TrajectoryStore(path) as store:
        win = WindowedColumn.make(store, "state", 25)
        while True:
            start, stop = win.window
            idx = np.concatenate([[start, stop - 1], rng.integers(start, stop, 10)])
            dev = win.gather_device(idx).copy_to_host()
            assert dev.tobytes() == win.gather(idx).tobytes() == state[idx].tobytes()
            with pytest.raises(RowIndexError, match="never refill"):
                win.gather_device(np.array([start, stop]))
            if not win.advance():
                break
        assert win.window == (100, 103)
