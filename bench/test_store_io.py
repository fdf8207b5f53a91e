"""Store bulk I/O against raw files, in the same run (issue 2).

Append a walker-shaped store (default 10 M x 26 float32 = 1.04 GB) in 65,536-row appends and
compare with ``ndarray.tofile`` of the same bytes; stream the column back warm and compare
with ``np.fromfile``.  Both sides fsync before the clock stops (the writer fsyncs before its
atomic rename), and every round starts after ``os.sync()`` so neither side inherits the
other's dirty pages.  ``NUMBATRAJ_BENCH_SCALE`` scales the row count.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from bench.conftest import bench_scale
from numbatraj import ColumnSpec, TrajectoryStore, TrajectoryStoreWriter

ROWS = max(65_536, int(10_000_000 * bench_scale()))
DIM = 26
APPEND = 65_536
GROUP_W = f"write {ROWS:,} x {DIM} float32"
GROUP_R = f"warm read {ROWS:,} x {DIM} float32"


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    return rng.standard_normal((ROWS, DIM), dtype=np.float32)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("store_io")


def _fsync(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def _write_store(path, data) -> None:
    with TrajectoryStoreWriter(path, [ColumnSpec("state", np.float32, (DIM,))], overwrite=True) as w:
        for start in range(0, ROWS, APPEND):
            w.append("state", data[start : start + APPEND])
        w.end_episode()


def _write_raw(path, data) -> None:
    with open(path, "wb") as fh:
        for start in range(0, ROWS, APPEND):
            data[start : start + APPEND].tofile(fh)
    _fsync(path)


def test_write_raw_tofile(benchmark, ratios, data, workdir):
    path = workdir / "raw.bin"
    benchmark.pedantic(_write_raw, args=(path, data), setup=os.sync, rounds=3, iterations=1)
    ratios.record(GROUP_W, "ndarray.tofile (65,536-row pieces) + fsync", benchmark,
                  baseline=True, nbytes=data.nbytes)


def test_write_store(benchmark, ratios, data, workdir):
    path = workdir / "store.h5"
    benchmark.pedantic(_write_store, args=(path, data), setup=os.sync, rounds=3, iterations=1)
    with TrajectoryStore(path) as s:
        chunks = s.storage("state")["chunks"]
    ratios.record(GROUP_W, "TrajectoryStoreWriter.append + close", benchmark,
                  nbytes=data.nbytes, note=f"chunks {chunks}")


def test_read_raw_fromfile(benchmark, ratios, data, workdir):
    path = workdir / "raw.bin"
    if not path.exists():
        _write_raw(path, data)
    np.fromfile(path, dtype=np.float32)  # warm the page cache
    out = benchmark.pedantic(np.fromfile, args=(path,), kwargs={"dtype": np.float32},
                             rounds=5, iterations=1)
    assert out.size == data.size
    ratios.record(GROUP_R, "np.fromfile", benchmark, baseline=True, nbytes=data.nbytes)


def test_read_store_load_column(benchmark, ratios, data, workdir):
    path = workdir / "store.h5"
    if not path.exists():
        _write_store(path, data)
    with TrajectoryStore(path) as s:
        s.load_column("state")  # warm
        out = benchmark.pedantic(s.load_column, args=("state",), rounds=5, iterations=1)
    np.testing.assert_array_equal(out[-5:], data[-5:])
    ratios.record(GROUP_R, "TrajectoryStore.load_column", benchmark, nbytes=data.nbytes)
