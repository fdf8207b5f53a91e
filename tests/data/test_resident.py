"""ResidentColumn host gather against tests.reference.gather_rows_ref."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numbatraj import (
    ColumnSpec,
    IndexBatch,
    RowIndexError,
    SchemaError,
    TrajectoryStore,
    TrajectoryStoreWriter,
)
from numbatraj.data import ResidentColumn
from numbatraj.data import _gather_kernels as K
from numbatraj.data import resident as R
from numbatraj.errors import DeviceUnavailableError
from tests.reference import first_outside_ref, gather_rows_ref

DTYPES = [
    np.bool_, np.int8, np.int16, np.int32, np.int64,
    np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64,
]
ROW_SHAPES = [(), (1,), (3,), (26,), (3, 5, 7)]


def make_column(rng: np.random.Generator, n: int, shape: tuple[int, ...], dtype) -> np.ndarray:
    dt = np.dtype(dtype)
    raw = rng.integers(0, 256, size=n * int(np.prod(shape, dtype=np.int64)) * dt.itemsize,
                       dtype=np.uint8)
    if dt.kind == "b":
        return (raw.reshape(n, *shape) & 1).astype(np.bool_)
    return raw.view(dt).reshape(n, *shape)  # every bit pattern, NaN payloads included


def adversarial(n: int) -> dict[str, np.ndarray]:
    return {
        "first": np.zeros(7, np.int64),
        "last": np.full(5, n - 1),
        "ends": np.array([0, n - 1, 0, n - 1]),
        "reversed": np.arange(n)[::-1].copy(),
        "duplicates": np.array([3, 3, 1, 3, 1, 1]) % n,
        "all_rows": np.arange(n),
        "single": np.array([n // 2]),
    }


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", ROW_SHAPES, ids=str)
def test_gather_matches_reference_every_dtype_and_shape(rng, dtype, shape):
    data = make_column(rng, 97, shape, dtype)
    col = ResidentColumn(data, "c")
    for name, idx in {**adversarial(97), "random": rng.integers(0, 97, 300)}.items():
        got = col.gather(idx)
        assert same_bits(got, gather_rows_ref(data, idx)), name


@pytest.fixture
def force_parallel(monkeypatch):
    """Every batch of a gather takes the parallel kernel (on every Numba thread)."""
    import numbatraj._jit as J

    monkeypatch.setattr(J, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(J, "_explicit", max(numba.get_num_threads(), 2))
    calls = []
    real = K.gather_rows_cpu
    monkeypatch.setattr(K, "gather_rows_cpu", lambda *a: calls.append(a[-1]) or real(*a))
    return calls


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.bool_, np.int16])
def test_parallel_path_and_out_reuse(rng, dtype, force_parallel):
    shape = (3, 84, 84) if dtype == np.uint8 else (26,)
    data = make_column(rng, 600 if dtype == np.uint8 else 5000, shape, dtype)
    col = ResidentColumn(data)
    b = 64 if dtype == np.uint8 else 4096
    out = np.empty((b, *shape), dtype)
    for _ in range(3):
        idx = rng.integers(0, len(data), b)
        res = col.gather(idx, out=out)
        assert res is out
        assert same_bits(out, gather_rows_ref(data, idx))
    if numba.get_num_threads() > 1:
        assert force_parallel, "the parallel kernel did not run"


# Rows of 1 word (plain loads), 2 words and many (memcpy), and counts around the prefetch
# distance (16 to 128 rows ahead), with a base offset: every specialisation of the kernels.
KERNEL_WIDTHS = [1, 2, 5, 13, 300]
KERNEL_COUNTS = [0, 1, 2, 15, 16, 17, 127, 128, 129, 1000]


@pytest.mark.parametrize("word", [np.uint64, np.uint32, np.uint16, np.uint8])
@pytest.mark.parametrize("w", KERNEL_WIDTHS)
def test_kernels_match_reference_with_a_base_offset(rng, word, w):
    src = rng.integers(0, 2**16, (30, w)).astype(word)
    base = 100
    for n in KERNEL_COUNTS:
        idx = np.concatenate([[100, 129, 129, 100], rng.integers(100, 130, n)])[:n]
        idx = idx.astype(np.int64)
        ref = gather_rows_ref(src, idx, base)
        out = np.zeros((n, w), word)
        K.gather_rows_serial_cpu(src, idx, base, out)
        assert np.array_equal(out, ref), ("serial", n)
        for parts in (0, 1, 2, 3, 7):  # 0 is clamped to one block
            out = np.zeros((n, w), word)
            K.gather_rows_cpu(src, idx, base, out, parts)
            assert np.array_equal(out, ref), ("parallel", n, parts)
        out = np.zeros((n, w), word)
        assert K.checked_gather_cpu(src, idx, base, 100, 130, out) == -1
        assert np.array_equal(out, ref), ("checked", n)


@pytest.mark.parametrize("w", KERNEL_WIDTHS)
def test_checked_kernel_writes_nothing_on_a_bad_index(rng, w):
    src = rng.integers(0, 2**16, (30, w)).astype(np.uint64)
    for n, pos in [(1, 0), (200, 0), (200, 199), (600, 256), (600, 300)]:
        idx = rng.integers(0, 30, n).astype(np.int64)
        idx[pos] = 30 if pos % 2 else -1
        out = np.full((n, w), 7, np.uint64)
        assert K.checked_gather_cpu(src, idx, 0, 0, 30, out) == first_outside_ref(idx, 0, 30)
        assert np.all(out == 7)


@pytest.mark.parametrize("row_bytes", [1, 8, 20, 104, 160, 2560, 21168])
def test_prefetch_distance_stays_in_its_measured_range(row_bytes):
    d = K.prefetch_distance(row_bytes)
    assert 16 <= d <= 128
    assert d == min(max(2560 // row_bytes, 16), 128)


def test_one_numba_thread_takes_the_serial_kernel(rng, monkeypatch):
    import numbatraj._jit as J

    monkeypatch.setattr(J, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(J, "_explicit", 2)
    data = make_column(rng, 5000, (26,), np.float32)
    col = ResidentColumn(data)
    idx = rng.integers(0, 5000, 4096)
    calls = []
    real = K.checked_gather_cpu
    monkeypatch.setattr(K, "checked_gather_cpu", lambda *a: calls.append(1) or real(*a))
    before = numba.get_num_threads()
    if before > 1:
        col.gather(idx)
        assert calls == []  # several threads, set_num_threads(n > 1): the parallel kernel
    numba.set_num_threads(1)
    try:
        got = col.gather(idx)
    finally:
        numba.set_num_threads(before)
    assert calls == [1]
    assert same_bits(got, gather_rows_ref(data, idx))


def test_nan_payloads_survive_bit_for_bit():
    bits = np.array([0x7FC00001, 0xFFC12345, 0x7F800001, 0x80000000], np.uint32)
    data = bits.view(np.float32).reshape(4, 1)
    got = ResidentColumn(data).gather(np.array([3, 2, 1, 0, 0]))
    assert got.view(np.uint32).ravel().tolist() == bits[[3, 2, 1, 0, 0]].tolist()


def test_sequence_indices_and_index_batch(rng):
    data = make_column(rng, 50, (4,), np.float32)
    col = ResidentColumn(data)
    idx = rng.integers(0, 50, (6, 5))
    ref = gather_rows_ref(data, idx)
    assert col.gather(idx).shape == (6, 5, 4)
    assert same_bits(col.gather(idx), ref)
    assert same_bits(col.gather(IndexBatch(idx)), ref)
    assert same_bits(col.gather(idx.astype(np.int32)), ref)
    assert same_bits(col.gather(idx.astype(np.uint16)), ref)
    assert same_bits(col.gather(list(idx[0])), ref[0])


def test_empty_batches(rng):
    col = ResidentColumn(make_column(rng, 10, (3,), np.float64))
    assert col.gather(np.zeros(0, np.int64)).shape == (0, 3)
    assert col.gather([]).shape == (0, 3)
    assert col.gather(np.zeros((0, 4), np.int64)).shape == (0, 4, 3)
    empty = ResidentColumn(np.zeros((0, 3), np.float32))
    assert empty.gather([]).shape == (0, 3)
    with pytest.raises(RowIndexError, match=r"index 0 at position 0 .*\[0, 0\)"):
        empty.gather([0])


@pytest.mark.parametrize(
    "bad_at, bad_value",
    [(0, -1), (255, 10), (256, 11), (257, -5), (999, 10**12), (500, np.iinfo(np.int64).min)],
)
@pytest.mark.parametrize("big", [False, True], ids=["serial", "parallel"])
def test_out_of_range_names_first_position_and_writes_nothing(rng, bad_at, bad_value, big,
                                                              monkeypatch):
    shape = (26,) if big else ()
    if big:
        import numbatraj._jit as J

        monkeypatch.setattr(J, "PARALLEL_MIN_BYTES", 0)
        monkeypatch.setattr(J, "_explicit", 2)
    col = ResidentColumn(make_column(rng, 10, shape, np.float32), "qpos")
    idx = rng.integers(0, 10, 1000)
    idx[bad_at] = bad_value
    idx[-1] = 10  # a later offender must not be the one reported
    if bad_at == 999:
        idx[-1] = bad_value
    out = np.full((1000, *shape), 7.5, np.float32)
    with pytest.raises(RowIndexError) as ei:
        col.gather(idx, out=out)
    msg = str(ei.value)
    assert f"index {bad_value} at position {bad_at}" in msg
    assert "[0, 10)" in msg and "'qpos'" in msg
    assert isinstance(ei.value, IndexError)
    assert np.all(out == 7.5)


def test_out_of_range_position_is_2d_for_sequences(rng):
    col = ResidentColumn(make_column(rng, 10, (2,), np.int32))
    idx = np.zeros((4, 3), np.int64)
    idx[2, 1] = 10
    with pytest.raises(RowIndexError, match=r"index 10 at position \(2, 1\)"):
        col.gather(idx)


def test_uint64_indices_beyond_int64_are_refused():
    col = ResidentColumn(np.zeros((4, 2), np.float32))
    with pytest.raises(RowIndexError, match="does not fit int64"):
        col.gather(np.array([1, 2**63 + 1], np.uint64))


@pytest.mark.parametrize(
    "idx, match",
    [
        (np.array([0.0, 1.0]), "indices must be integers, got dtype float64"),
        (np.array([True, False]), "indices must be integers, got dtype bool"),
        (np.zeros((2, 2, 2), np.int64), r"shape \(B,\) or \(B, T\)"),
        (np.int64(3), r"shape \(B,\) or \(B, T\)"),
    ],
)
def test_bad_indices(idx, match):
    with pytest.raises(SchemaError, match=match):
        ResidentColumn(np.zeros((4, 2), np.float32)).gather(idx)


def test_bad_out_arrays():
    col = ResidentColumn(np.zeros((4, 2), np.float32), "x")
    idx = np.array([0, 1, 2])
    with pytest.raises(SchemaError, match=r"out is float64 \(3, 2\), expected float32 \(3, 2\)"):
        col.gather(idx, out=np.empty((3, 2), np.float64))
    with pytest.raises(SchemaError, match=r"expected float32 \(3, 2\)"):
        col.gather(idx, out=np.empty((3, 3), np.float32))
    with pytest.raises(SchemaError, match="C-contiguous"):
        col.gather(idx, out=np.empty((2, 3), np.float32).T)
    ro = np.empty((3, 2), np.float32)
    ro.flags.writeable = False
    with pytest.raises(SchemaError, match="writeable"):
        col.gather(idx, out=ro)
    with pytest.raises(SchemaError, match="numpy array"):
        col.gather(idx, out=[[0, 0]] * 3)


def test_bad_column_arrays():
    with pytest.raises(SchemaError, match="leading row axis"):
        ResidentColumn(np.float32(1))
    with pytest.raises(SchemaError, match="not supported"):
        ResidentColumn(np.array(["a", "b"]))
    with pytest.raises(SchemaError, match="not supported"):
        ResidentColumn(np.zeros(3, np.complex64))


def test_non_contiguous_and_big_endian_columns_are_copied_once(rng):
    base = make_column(rng, 40, (6,), np.float32)
    col = ResidentColumn(base[:, ::2])
    assert col.data.flags.c_contiguous
    assert same_bits(col.gather([5, 0, 39]), base[[5, 0, 39], ::2])
    be = np.arange(12, dtype=">i4").reshape(6, 2)
    assert col.gather([1]).dtype == np.float32
    got = ResidentColumn(be).gather([5, 0])
    assert got.dtype == np.dtype("=i4") and got.tolist() == [[10, 11], [0, 1]]


def test_load_from_store(tmp_path, rng):
    path = tmp_path / "s.h5"
    state = rng.standard_normal((300, 26), dtype=np.float32)
    pix = rng.integers(0, 255, (300, 3, 8, 8), dtype=np.uint8)
    cols = [ColumnSpec("state", np.float32, (26,)), ColumnSpec("pix", np.uint8, (3, 8, 8))]
    with TrajectoryStoreWriter(path, cols) as w:
        for s in (0, 120):
            e = s + 120 if s == 0 else 300
            w.append_rows({"state": state[s:e], "pix": pix[s:e]})
            w.end_episode()
    with TrajectoryStore(path) as store:
        col = ResidentColumn.load(store, "state")
        img = ResidentColumn.load(store, "pix")
    assert (col.name, col.n_rows, col.row_shape, col.dtype) == ("state", 300, (26,), np.float32)
    assert len(img) == 300 and img.nbytes == pix.nbytes
    idx = rng.integers(0, 300, 500)
    assert same_bits(col.gather(idx), gather_rows_ref(state, idx))
    assert same_bits(img.gather(idx), gather_rows_ref(pix, idx))
    assert "ResidentColumn('state', float32 (26,), rows=300)" == repr(col)


@pytest.mark.parametrize("n", [0, 1, 255, 256, 257, 1000])
def test_first_outside_kernel_matches_reference(rng, n):
    idx = rng.integers(0, 50, n)
    assert K.first_outside_cpu(idx, 0, 50) == first_outside_ref(idx, 0, 50) == -1
    for pos in {0, n // 2, n - 1, 255, 256} & set(range(n)):
        bad = idx.copy()
        bad[pos] = 50
        bad[n - 1] = -1 if pos != n - 1 else bad[n - 1]
        assert K.first_outside_cpu(bad, 0, 50) == first_outside_ref(bad, 0, 50) == pos
    assert K.first_outside_cpu(idx, 10, 40) == first_outside_ref(idx, 10, 40)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 40),
    shape=st.sampled_from(ROW_SHAPES),
    dtype=st.sampled_from(DTYPES),
    raw_idx=st.lists(st.integers(-3, 45), max_size=60),
)
def test_gather_property(n, shape, dtype, raw_idx):
    data = make_column(np.random.default_rng(n), n, shape, dtype)
    col = ResidentColumn(data)
    idx = np.array(raw_idx, np.int64)
    if first_outside_ref(idx, 0, n) < 0:
        assert same_bits(col.gather(idx), gather_rows_ref(data, idx))
    else:
        k = first_outside_ref(idx, 0, n)
        with pytest.raises(RowIndexError, match=rf"index {idx[k]} at position {k} "):
            col.gather(idx)


def test_word_dtype():
    assert [R.word_dtype(b).itemsize for b in (104, 21168, 12, 6, 3, 1)] == [8, 8, 4, 2, 1, 1]


def test_import_is_lazy_about_cuda_and_first_gather_works():
    code = (
        "import sys, numpy as np, numbatraj\n"
        "from numbatraj.data import ResidentColumn\n"
        "assert 'numbatraj.data._gather_kernels' not in sys.modules, 'kernels loaded at import'\n"
        "c = ResidentColumn(np.arange(20, dtype=np.float32).reshape(10, 2))\n"
        "assert c.gather([9, 0]).tolist() == [[18, 19], [0, 1]]\n"
        "assert 'numba.cuda' not in sys.modules, 'numba.cuda imported by the host path'\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


def test_device_request_without_a_device_raises_clearly():
    from numbatraj._cuda import cuda_available

    if cuda_available():
        pytest.skip("a CUDA device (or the simulator) is available here")
    col = ResidentColumn(np.zeros((4, 2), np.float32))
    with pytest.raises(DeviceUnavailableError, match="CUDA"):
        col.to_device()
    with pytest.raises(DeviceUnavailableError):
        col.gather_device(np.array([0]))
    assert not col.on_device


def test_set_num_threads_policy(monkeypatch):
    import numbatraj
    import numbatraj._jit as J

    top = numba.config.NUMBA_NUM_THREADS
    for bad in (0, top + 1, 1.5, True, "2"):
        with pytest.raises(ValueError, match=r"expected an int in \[1, "):
            numbatraj.set_num_threads(bad)
    try:
        numbatraj.set_num_threads(1)
        assert numba.get_num_threads() == 1 and J.parallel_threads(1 << 40) == 1
        numbatraj.set_num_threads(top)
        assert J.parallel_threads(J.PARALLEL_MIN_BYTES - 1) == 1
        assert J.parallel_threads(J.PARALLEL_MIN_BYTES) == top  # explicit: whatever the load
        numbatraj.set_num_threads(None)
        assert J._explicit is None and numba.get_num_threads() == top
        assert J.parallel_threads(1 << 40) == 1  # the default: serial, whatever the size
    finally:
        numbatraj.set_num_threads(None)




def test_auto_policy_follows_the_free_cores(monkeypatch, rng):
    """The default's memory-bound gathers take ``1 + free_cores()`` threads (at most
    Numba's), from PARALLEL_MIN_BYTES up; our own workers spinning after a region do not
    count as load; ``set_num_threads(1)`` and a non-auto caller stay serial."""
    import time

    import numbatraj
    import numbatraj._jit as J

    top = int(numba.get_num_threads())
    numbatraj.set_num_threads(None)
    monkeypatch.setattr(J, "_CORES", 4)
    monkeypatch.setattr(J, "_last_region", [float("-inf"), 1.0])
    monkeypatch.setattr(J, "_verdict", {"k": True})  # threads won for kind "k"
    for running in (1, 2, 3, 4, 9):
        monkeypatch.setattr(J, "_running_now", lambda r=running: r)
        free = max(4 - running, 0)
        assert J.free_cores() == free
        assert J.parallel_threads(1 << 30, auto="k") == min(top, 1 + free)
        assert J.parallel_threads(J.PARALLEL_MIN_BYTES - 1, auto="k") == 1
        assert J.parallel_threads(1 << 30) == 1  # not an auto caller: the digests, say
    monkeypatch.setattr(J, "_running_now", lambda: 3)
    monkeypatch.setattr(J, "_last_region", [time.monotonic(), 2.0])
    assert J.free_cores() == 2  # one of the 3 is our worker, spinning after the region
    monkeypatch.setattr(J, "_last_region", [time.monotonic() - 1.0, 2.0])
    assert J.free_cores() == 1  # long after: all 3 are load
    monkeypatch.setattr(J, "_running_now", lambda: None)
    assert J.free_cores() == 0  # no /proc/loadavg: serial
    monkeypatch.setattr(J, "_running_now", lambda: 1)
    try:
        numbatraj.set_num_threads(1)
        assert J.parallel_threads(1 << 30, auto="k") == 1
    finally:
        numbatraj.set_num_threads(None)
    if top < 2:
        return
    # a gather by default, cores free, threads measured faster: the parallel kernel
    monkeypatch.setattr(J, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(J, "_verdict", {"column gather": True})
    calls = []
    real = K.gather_rows_cpu
    monkeypatch.setattr(K, "gather_rows_cpu", lambda *a: calls.append(a[-1]) or real(*a))
    data = make_column(rng, 3000, (26,), np.float32)
    idx = rng.integers(0, 3000, 4096)
    assert same_bits(ResidentColumn(data).gather(idx), gather_rows_ref(data, idx))
    assert calls == [top]


@pytest.mark.parametrize("threads_win", [True, False])
def test_auto_calibration_keeps_threads_only_where_they_win(monkeypatch, threads_win):
    """While a kind's verdict is open its calls alternate threaded and serial; after
    AUTO_TRIALS of each (the first AUTO_WARMUP of each side not counted) the threads stay
    (lower-quartile time per byte AUTO_MIN_GAIN faster) or go until AUTO_RETRY_S has passed, when
    the kind calibrates again, the wait doubling at each loss; a serial call on a busy
    machine is not taken as a trial."""
    import numbatraj
    import numbatraj._jit as J

    numbatraj.set_num_threads(None)
    monkeypatch.setattr(J, "_verdict", {})
    monkeypatch.setattr(J, "_trials", {})
    monkeypatch.setattr(J, "_retry_at", {})
    monkeypatch.setattr(J, "_retry_wait", {})
    clock = [1000.0]
    monkeypatch.setattr(J, "_clock", lambda: clock[0])
    # 4 calls a side, 2 of them warm-up: the verdict rests on the 2 kept, so a warm-up
    # call that counted would flip it
    monkeypatch.setattr(J, "AUTO_TRIALS", 4)
    monkeypatch.setattr(J, "AUTO_WARMUP", 2)
    monkeypatch.setattr(J, "_CORES", 2)
    monkeypatch.setattr(J, "_last_region", [float("-inf"), 1.0])
    monkeypatch.setattr(J, "numba_threads", lambda: 2)  # what parallel_threads asks
    nb = J.PARALLEL_MIN_BYTES
    monkeypatch.setattr(J, "_running_now", lambda: 2)  # busy: serial, no trial
    assert J.parallel_threads(nb, auto="x") == 1
    J.note_time("x", 1, 1.0, nb)
    assert J._trials["x"] == ([], [])
    monkeypatch.setattr(J, "_running_now", lambda: 1)  # idle from here
    assert J.calibrating("x", nb) and not J.calibrating("x", nb - 1)

    def calibrate(win: bool, warm: float) -> list[int]:
        got = []
        for i in range(2 * J.AUTO_TRIALS):
            th = J.parallel_threads(nb, auto="x")
            got.append(th)
            fast = (th > 1) == win
            # the warm-up calls say the opposite, slowly: they must not count
            t = (0.5 if fast else 1.0) if i >= 2 * J.AUTO_WARMUP else (warm if th > 1 else 1.0)
            J.note_time("x", th, t, nb)
        return got

    assert calibrate(threads_win, 0.1 if not threads_win else 9.0) == [2, 1] * J.AUTO_TRIALS
    assert J.auto_verdicts() == {"x": threads_win}
    assert not J.calibrating("x", nb)  # decided: the callers stop timing
    assert {J.parallel_threads(nb, auto="x") for _ in range(5)} == {2 if threads_win else 1}
    J.note_time("x", 1, 9.0, nb)  # after the verdict: ignored
    assert J.auto_verdicts() == {"x": threads_win}
    clock[0] += J.AUTO_RETRY_S + 1.0
    if threads_win:  # a won verdict stays (the free cores still decide each call)
        assert J.parallel_threads(nb, auto="x") == 2 and J.auto_verdicts() == {"x": True}
        return
    clock[0] -= 2.0
    assert J.parallel_threads(nb, auto="x") == 1 and not J.calibrating("x", nb)
    clock[0] += 2.0  # the wait is over: calibrating again, and this time the threads win
    assert calibrate(True, 9.0) == [2, 1] * J.AUTO_TRIALS
    assert J.auto_verdicts() == {"x": True}
    # a second loss waits twice as long
    J._reopen("x")
    calibrate(False, 0.1)
    assert J.auto_verdicts() == {"x": False}
    clock[0] += 2 * J.AUTO_RETRY_S - 1.0
    assert J.parallel_threads(nb, auto="x") == 1
    clock[0] += 2.0
    assert J.parallel_threads(nb, auto="x") == 2 and J.calibrating("x", nb)


def test_free_cores_sees_busy_processes():
    """With a busy loop per core plus one running, the run queue leaves no core free, so
    the default gathers stay serial."""
    import time

    import numbatraj._jit as J

    if J._running_now() is None:
        pytest.skip("no /proc/loadavg")
    n = J._CORES + 1
    code = "import time\nt = time.monotonic() + 20\nwhile time.monotonic() < t:\n    pass\n"
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]
    try:
        deadline = time.monotonic() + 15
        seen = []
        while time.monotonic() < deadline:
            seen.append(J.free_cores())
            if len(seen) >= 50 and all(v == 0 for v in seen[-50:]):
                break
            time.sleep(0.01)
        assert seen[-50:] == [0] * 50, seen[-50:]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


# ------------------------------------------------------------------ caller buffers: torch, DLPack
def test_gather_writes_into_torch_and_dlpack_buffers(rng):
    torch = pytest.importorskip("torch", reason="torch is not installed (numbatraj[torch])")
    data = rng.standard_normal((100, 3)).astype(np.float32)
    col = ResidentColumn(data)
    idx = np.array([5, 0, 99, 5])
    out = torch.zeros((4, 3), dtype=torch.float32)
    res = col.gather(idx, out=out)
    np.testing.assert_array_equal(out.numpy(), data[idx])  # written in place
    assert res.ctypes.data == out.data_ptr()

    class Exporter:  # any host DLPack exporter
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    buf = np.zeros((4, 3), np.float32)
    col.gather(idx, out=Exporter(buf))
    np.testing.assert_array_equal(buf, data[idx])


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda t: t.zeros((4, 3), dtype=t.float64), "out is float64 (4, 3), expected float32"),
        (lambda t: t.zeros((4, 2), dtype=t.float32), "expected float32 (4, 3)"),
        (lambda t: t.zeros((4, 3), dtype=t.float32, requires_grad=True), "requires grad"),
        (lambda t: t.zeros((3, 4), dtype=t.float32).T, "contiguous"),
        (lambda t: "not a buffer", "must be a numpy array, a torch CPU tensor"),
    ],
)
def test_gather_refuses_bad_torch_buffers(make, needle, rng):
    torch = pytest.importorskip("torch", reason="torch is not installed (numbatraj[torch])")
    col = ResidentColumn(rng.standard_normal((100, 3)).astype(np.float32))
    out = make(torch)
    before = out.clone() if isinstance(out, torch.Tensor) else None
    with pytest.raises(SchemaError, match=re.escape(needle)):
        col.gather(np.array([1, 2, 3, 4]), out=out)
    if before is not None:
        assert torch.equal(out.detach(), before.detach())  # nothing written


def test_reused_out_is_rechecked_on_every_call(rng):
    """The same ``out`` passed again takes the fast path (its word view kept): each call
    still equals the reference, and an ``out`` changed in place since the last call (made
    read-only, reshaped) or indices of another length or dtype get the full checks."""
    data = make_column(rng, 500, (3, 4), np.float32)
    col = ResidentColumn(data, "obs")
    out = np.empty((16, 3, 4), np.float32)
    for _ in range(5):
        idx = rng.integers(0, 500, 16)
        assert col.gather(idx, out=out) is out
        np.testing.assert_array_equal(out.view(np.uint32), gather_rows_ref(data, idx).view(np.uint32))
    with pytest.raises(SchemaError, match="out is float32"):
        col.gather(rng.integers(0, 500, 8), out=out)  # another batch size
    with pytest.raises(RowIndexError, match="position 3"):
        col.gather(np.array([0, 1, 2, 500] + [0] * 12), out=out)
    before = out.copy()
    out.flags.writeable = False
    with pytest.raises(SchemaError, match="writeable"):
        col.gather(rng.integers(0, 500, 16), out=out)
    np.testing.assert_array_equal(out, before)  # nothing written
    out.flags.writeable = True
    out.shape = (16, 12)
    with pytest.raises(SchemaError, match=r"\(16, 12\)"):
        col.gather(rng.integers(0, 500, 16), out=out)
    out.shape = (16, 3, 4)
    idx = rng.integers(0, 500, 16).astype(np.int32)  # not int64: converted, same result
    col.gather(idx, out=out)
    np.testing.assert_array_equal(out, data[idx])
    other = np.empty_like(out)
    col.gather(idx, out=other)  # another out replaces the kept one
    np.testing.assert_array_equal(other, data[idx])
    np.testing.assert_array_equal(col.gather(idx, out=out), data[idx])
