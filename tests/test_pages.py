"""numbatraj._pages: new large arrays prefaulted by a helper thread while they are filled."""

from __future__ import annotations

import ctypes
import errno
import sys
import threading

import numba
import numpy as np
import pytest

import numbatraj
import numbatraj._jit as J
import numbatraj._pages as P
from numbatraj import ColumnSpec, TrajectoryStore
from tests.data.store_helpers import write_store

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="MADV_POPULATE_WRITE is Linux's")


@pytest.fixture(autouse=True)
def _keep_populate_flag(monkeypatch):
    """A refusal seen by one test turns the helper off for the process: not across tests."""
    monkeypatch.setattr(P, "_populate_ok", P._populate_ok)


def _populate_works() -> bool:
    """Whether this kernel takes MADV_POPULATE_WRITE (Linux 5.14 and later)."""
    import mmap

    if P._libc_madvise() is None:
        return False
    m = mmap.mmap(-1, 2 * mmap.PAGESIZE)
    a = np.frombuffer(m, np.uint8)
    try:
        return P._madvise(a.ctypes.data, a.nbytes, P._MADV_POPULATE_WRITE) == 0
    finally:
        del a
        m.close()


needs_populate = pytest.mark.skipif(not _populate_works(),
                                    reason="this kernel does not take MADV_POPULATE_WRITE")


def _helpers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "numbatraj-prefault"]


def test_helper_follows_the_thread_policy(monkeypatch):
    """Below the floor never; by default when a core is free; never after
    set_num_threads(1); always after set_num_threads(n > 1); never once the kernel refused."""
    monkeypatch.setattr(P, "_populate_ok", True)
    big = P.FAULT_AHEAD_MIN_BYTES
    numbatraj.set_num_threads(None)
    monkeypatch.setattr(J, "free_cores", lambda: 1)
    assert P.helper_wanted(big) and not P.helper_wanted(big - 1)
    monkeypatch.setattr(J, "free_cores", lambda: 0)
    assert not P.helper_wanted(big)
    try:
        numbatraj.set_num_threads(1)
        monkeypatch.setattr(J, "free_cores", lambda: 1)
        assert not P.helper_wanted(big)
        if int(numba.config.NUMBA_NUM_THREADS) >= 2:  # type: ignore[attr-defined]
            numbatraj.set_num_threads(2)
            monkeypatch.setattr(J, "free_cores", lambda: 0)
            assert P.helper_wanted(big)
    finally:
        numbatraj.set_num_threads(None)
    monkeypatch.setattr(J, "free_cores", lambda: 1)
    monkeypatch.setattr(P, "_populate_ok", False)
    assert not P.helper_wanted(big)


@needs_populate
@pytest.mark.parametrize("nbytes", [1, 4095, 4096, 3 * 4096 + 17, 5 << 20])
def test_prefault_makes_pages_present_and_keeps_every_byte(monkeypatch, nbytes):
    """The helper's range: whole pages inside the array only (the edges are the writer's),
    piece by piece from the end; bytes already written stay as they were."""
    monkeypatch.setattr(P, "FAULT_AHEAD_PIECE_BYTES", 8192)
    calls: list[tuple[int, int]] = []
    real = P._madvise

    def spy(a, n, advice):  # type: ignore[no-untyped-def]
        calls.append((a, n))
        return real(a, n, advice)

    monkeypatch.setattr(P, "_madvise", spy)
    room = np.full(nbytes + 3 * 4096, 7, np.uint8)
    arr = room[100 : 100 + nbytes]
    arr[:] = np.arange(nbytes) % 251
    want = arr.copy()
    P._prefault_backwards(arr.ctypes.data, arr.nbytes, [False])
    assert np.array_equal(arr, want) and (room[:100] == 7).all()
    lo, hi = arr.ctypes.data, arr.ctypes.data + nbytes
    for a, n in calls:
        assert a % 4096 == 0 and n % 4096 == 0 and 0 < n <= 8192
        assert lo <= a and a + n <= hi
    # the pieces tile the whole pages inside, from the end backwards
    first = -(-lo // 4096) * 4096
    last = hi // 4096 * 4096
    assert sum(n for _, n in calls) == max(last - first, 0)
    assert [a for a, _ in calls] == sorted((a for a, _ in calls), reverse=True)
    if calls:
        assert calls[0][0] + calls[0][1] == last and calls[-1][0] == first


def test_a_stop_request_ends_the_helper_between_pieces(monkeypatch):
    monkeypatch.setattr(P, "FAULT_AHEAD_PIECE_BYTES", 4096)
    stop = [False]
    calls = []

    def one_then_stop(a, n, advice):  # type: ignore[no-untyped-def]
        calls.append(a)
        stop[0] = True
        return 0

    monkeypatch.setattr(P, "_madvise", one_then_stop)
    arr = np.zeros(64 * 4096, np.uint8)
    P._prefault_backwards(arr.ctypes.data, arr.nbytes, stop)
    assert len(calls) == 1


def test_a_refused_advice_turns_the_helper_off(monkeypatch):
    """EINVAL (a kernel before 5.14) stops this helper and every later one; another error
    stops only this one; either way the array is still filled by the writer."""
    monkeypatch.setattr(P, "_populate_ok", True)

    def refuse(code):  # type: ignore[no-untyped-def]
        def fn(a, n, advice):  # type: ignore[no-untyped-def]
            ctypes.set_errno(code)
            return -1
        return fn

    arr = np.zeros(16 * 4096, np.uint8)
    monkeypatch.setattr(P, "_madvise", refuse(errno.ENOMEM))
    P._prefault_backwards(arr.ctypes.data, arr.nbytes, [False])
    assert P._populate_ok
    monkeypatch.setattr(P, "_madvise", refuse(errno.EINVAL))
    P._prefault_backwards(arr.ctypes.data, arr.nbytes, [False])
    assert not P._populate_ok


@pytest.mark.parametrize("helper", [True, False])
def test_filled_returns_what_fill_wrote_and_joins_its_helper(monkeypatch, helper):
    monkeypatch.setattr(P, "helper_wanted", lambda n: helper)
    seen = []

    def fill(o):  # type: ignore[no-untyped-def]
        seen.append(len(_helpers()))
        o[:] = np.arange(o.size, dtype=np.float32).reshape(o.shape)

    got = P.filled((1000, 7), np.float32, fill)
    assert got.shape == (1000, 7) and got.dtype == np.float32
    assert np.array_equal(got.ravel(), np.arange(7000, dtype=np.float32))
    if not helper:  # with one, it may have finished before fill looked
        assert seen == [0]
    assert _helpers() == []


def test_an_error_in_fill_propagates_after_the_helper_stopped(monkeypatch):
    monkeypatch.setattr(P, "helper_wanted", lambda n: True)

    def fill(o):  # type: ignore[no-untyped-def]
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        P.filled((1 << 20,), np.uint8, fill)
    assert _helpers() == []


@linux_only
@pytest.mark.parametrize("kernel", ["as it is", "refusing the advice"])
def test_store_reads_into_new_arrays_through_the_helper(monkeypatch, tmp_path, rng, kernel):
    """load_column() and read_range() without out=: the same bytes with the helper on
    every new array (the floor at one byte) as with it off, checksums checked; on a kernel
    that refuses the advice, the first helper turns the rest off and the reads still hold."""
    works = _populate_works()
    if kernel != "as it is":
        P._libc_madvise()

        def refuse(a, n, advice):  # type: ignore[no-untyped-def]
            ctypes.set_errno(errno.EINVAL)
            return -1

        monkeypatch.setattr(P, "_madvise", refuse)
        works = False
    path = tmp_path / "s.h5"
    cols = [ColumnSpec("state", np.float32, (26,)), ColumnSpec("flag", np.uint8),
            ColumnSpec("zpix", np.uint8, (3, 5), compression="gzip")]
    data = write_store(path, cols, [1700, 3300], rng,
                       chunk_rows={"state": 256, "flag": 1000, "zpix": 300})
    monkeypatch.setattr(P, "FAULT_AHEAD_MIN_BYTES", 1)
    monkeypatch.setattr(P, "FAULT_AHEAD_PIECE_BYTES", 4096)
    monkeypatch.setattr(P, "_populate_ok", True)
    monkeypatch.setattr(J, "free_cores", lambda: 1)
    started = []
    real_start = threading.Thread.start

    def start(self):  # type: ignore[no-untyped-def]
        if self.name == "numbatraj-prefault":
            started.append(self)
        return real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    with TrajectoryStore(path) as s:
        for name, want in data.items():
            assert np.array_equal(s.load_column(name), want)
            assert np.array_equal(s.read_range(name, 13, 4099), want[13:4099])
            assert s.read_range(name, 7, 7).shape[0] == 0
    # a helper for every read but the empty one (where the kernel refuses the advice, the
    # first helper turns the rest off: the bytes above are then the writer's alone)
    assert len(started) == (2 * len(cols) if works else 1)
    assert _helpers() == []
