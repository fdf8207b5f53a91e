"""Checksum cost, in one run (issue 15): appends and load_column with checksums on against
the same with ``checksums=False``, and HDF5's fletcher32 filter measured beside them (the
alternative the issue asked to compare).  ``NUMBATRAJ_BENCH_SCALE`` scales the rows
(default 4 M x 26 float32 = 416 MB).  Target: both ratios >= 0.9.
"""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

from bench.conftest import bench_scale
from numbatraj import ColumnSpec, TrajectoryStore, TrajectoryStoreWriter

ROWS = max(65_536, int(4_000_000 * bench_scale()))
DIM = 26
APPEND = 65_536
GROUP_W = f"append {ROWS:,} x {DIM} float32 (checksums)"
GROUP_R = f"load_column {ROWS:,} x {DIM} float32 (checksums)"


@pytest.fixture(scope="module")
def data():
    return np.random.default_rng(0).standard_normal((ROWS, DIM), dtype=np.float32)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("integrity")


def _write(path, data, checksums):
    with TrajectoryStoreWriter(path, [ColumnSpec("state", np.float32, (DIM,))],
                               overwrite=True, checksums=checksums) as w:
        for s in range(0, ROWS, APPEND):
            w.append("state", data[s : s + APPEND])
        w.end_episode()


def _write_fletcher(path, data):
    if os.path.exists(path):
        os.remove(path)
    with h5py.File(path, "w", libver=("v110", "v110")) as f:
        ds = f.create_dataset("state", shape=(0, DIM), maxshape=(None, DIM), chunks=(2048, DIM),
                              dtype=np.float32, fletcher32=True)
        for s in range(0, ROWS, APPEND):
            e = min(ROWS, s + APPEND)
            ds.resize(e, axis=0)
            ds.write_direct(data[s:e], dest_sel=np.s_[s:e])
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def test_append(benchmark, ratios, data, workdir):
    """The three writers in interleaved rounds (``os.sync()`` untimed before each call): the
    disk's writeback varies far more between rounds than the digest costs, so separately
    timed runs gave anything from 0.47x to 1.7x for the same code."""
    from bench.report import interleaved

    for c in (False, True):
        _write(workdir / f"s-{c}.h5", data[:APPEND], c)  # warm: compile the digest kernel
    fns = {"off": lambda: _write(workdir / "s-False.h5", data, False),
           "on": lambda: _write(workdir / "s-True.h5", data, True),
           "fletcher32": lambda: _write_fletcher(workdir / "f32.h5", data)}
    med = interleaved(fns, os.sync, 7)
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)  # the rows below are the figures
    ratios.record(GROUP_W, "TrajectoryStoreWriter checksums=False", med["off"], baseline=True,
                  nbytes=data.nbytes)
    ratios.record(GROUP_W, "TrajectoryStoreWriter checksums=True", med["on"],
                  nbytes=data.nbytes)
    ratios.record(GROUP_W, "h5py fletcher32 filter (not used)", med["fletcher32"],
                  nbytes=data.nbytes)


@pytest.mark.parametrize("checksums", [False, True], ids=["off", "on"])
def test_load_column(benchmark, ratios, data, workdir, checksums):
    path = workdir / f"s-{checksums}.h5"
    if not path.exists() or TrajectoryStore(path).n_rows != ROWS:
        _write(path, data, checksums)
    with TrajectoryStore(path) as s:
        s.load_column("state")  # warm
        out = benchmark.pedantic(s.load_column, args=("state",), rounds=5, iterations=1)
    np.testing.assert_array_equal(out[-3:], data[-3:])
    ratios.record(GROUP_R, f"TrajectoryStore.load_column checksums={checksums}", benchmark,
                  baseline=not checksums, nbytes=data.nbytes)


def test_load_fletcher32(benchmark, ratios, data, workdir):
    path = workdir / "f32.h5"
    if not path.exists():
        _write_fletcher(path, data)
    out = np.empty_like(data)
    with h5py.File(path, "r", rdcc_nbytes=16 << 20, rdcc_nslots=10007) as f:
        f["state"].read_direct(out)
        benchmark.pedantic(f["state"].read_direct, args=(out,), rounds=5, iterations=1)
    ratios.record(GROUP_R, "h5py fletcher32 filter (not used)", benchmark, nbytes=data.nbytes)
