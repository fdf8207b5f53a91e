"""Disk versus resident: the table that is the reason residency exists.

A walker-shaped store (default 10 M rows x 26 float32 = 1.04 GB; ``NUMBATRAJ_BENCH_SCALE``
scales it) is written through the append path, streamed back, and one 4096-row minibatch per
round is assembled four ways: a read per row from disk, 64-row groups from disk, one
contiguous slab from disk, and a gather from the resident column.  Disk patterns read through
h5py, with the page cache warm and, where ``posix_fadvise`` exists, cold (the file's pages are
evicted before every round).  Every round draws fresh random indices.

Also here, against ``np.take`` in the same run: the resident host gather for 4096 x 26 float32
rows of the 10 M-row column and for uint8 3 x 84 x 84 image rows; and a chunking sweep (rows
per chunk x HDF5 chunk-cache size) behind the store's default chunking.  The module writes
``bench/results/disk_vs_resident.{json,md,png}`` through ``bench/report.py``.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numba
import numpy as np
import pytest

from bench.conftest import RESULTS, bench_scale
from bench.report import (
    BATCH,
    GROUP,
    PATTERNS,
    drop_page_cache,
    machine,
    read_groups,
    read_per_row,
    read_slab,
    warm_page_cache,
    write_report,
)
from numbatraj import ColumnSpec, TrajectoryStore, TrajectoryStoreWriter
from numbatraj.data import ResidentColumn
from numbatraj.data.writer import default_chunk_rows
from numbatraj.io.hdf5 import open_h5_read

SCALE = bench_scale()
N_ROWS = max(100_000, int(10_000_000 * SCALE))
IMG_ROWS = max(2_000, int(50_000 * SCALE))
SWEEP_ROWS = max(100_000, int(1_000_000 * SCALE))
ROW = (26,)
ROW_BYTES = 26 * 4
CHUNK_CACHE = 16 << 20  # TrajectoryStore's default per-dataset chunk cache
DISK = "disk vs resident (walker, 4096-row minibatch)"
_RES: dict[str, Any] = {"meta": {}, "seconds": {k: {} for k in PATTERNS}}


def write_walker(path: str, n_rows: int, chunk_rows: int | None = None) -> float:
    """Write a 26-float32 ``state`` column in 65,536-row appends; seconds spent in the writer."""
    rng = np.random.default_rng(0)
    blocks = [rng.standard_normal((65536, 26), dtype=np.float32) for _ in range(3)]
    chunks = {"state": chunk_rows} if chunk_rows else None
    spent = 0.0
    w = TrajectoryStoreWriter(path, [ColumnSpec("state", np.float32, ROW)], overwrite=True,
                              chunk_rows=chunks)
    for k, start in enumerate(range(0, n_rows, 65536)):
        n = min(65536, n_rows - start)
        block = blocks[k % 3][:n]
        t0 = time.perf_counter()
        w.append("state", block)
        if (start + n) % 100_000 < n or start + n == n_rows:  # ~100k-row episodes
            w.end_episode()
        spent += time.perf_counter() - t0
    t0 = time.perf_counter()
    w.close()
    return spent + time.perf_counter() - t0


class Disk:
    """An h5py handle on the store file that a cold round can drop and reopen."""

    def __init__(self, path: str, cache_bytes: int = CHUNK_CACHE) -> None:
        self.path, self.cache_bytes = path, cache_bytes
        self.f = open_h5_read(path, chunk_cache_bytes=cache_bytes)
        self.ds = self.f["state"]

    def reopen(self, cold: bool) -> None:
        self.f.close()
        if cold:
            drop_page_cache(self.path)
        self.f = open_h5_read(self.path, chunk_cache_bytes=self.cache_bytes)
        self.ds = self.f["state"]

    def close(self) -> None:
        self.f.close()


@pytest.fixture(scope="module")
def walker(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("walker") / "walker.h5")
    write_s = write_walker(path, N_ROWS)
    os.sync()  # no writeback of the fresh file competing with the timed rounds
    with TrajectoryStore(path) as store:
        storage = store.storage("state")
        col = ResidentColumn.load(store, "state")  # also warms the page cache
    chunk_rows = storage["chunks"][0]
    _RES["meta"] = {
        "rows": N_ROWS, "row": "26 float32", "nbytes": N_ROWS * ROW_BYTES, "scale": SCALE,
        "chunk_rows": chunk_rows, "chunk_bytes": chunk_rows * ROW_BYTES,
        "chunk_cache_bytes": CHUNK_CACHE, "compression": storage["compression"],
        "machine": machine(), "write_seconds": write_s,
        "cold_note": "" if hasattr(os, "posix_fadvise") else
        "Cold rows were not measured: this platform has no posix_fadvise.",
    }
    disk = Disk(path)
    yield {"path": path, "col": col, "disk": disk, "write_s": write_s}
    disk.close()
    os.remove(path)
    if all("warm" in _RES["seconds"][k] for k in PATTERNS):
        for p in write_report(_RES, RESULTS):  # the run's directory (make bench: one per
            # thread setting)
            print(f"\nwrote {p}")


def _check_disk_matches_resident(walker) -> None:
    rng = np.random.default_rng(1)
    idx = rng.integers(0, N_ROWS, 64)
    out = np.empty((64, 26), np.float32)
    read_per_row(walker["disk"].ds, idx, out)
    assert np.array_equal(out, walker["col"].gather(idx))


def test_store_write_and_stream_back(benchmark, ratios, walker):
    group = f"walker store I/O ({N_ROWS:,} x 26 float32)"
    nbytes = N_ROWS * ROW_BYTES
    path = walker["path"]
    buf = np.empty((N_ROWS, 26), np.float32)

    def stream_back():
        with TrajectoryStore(path) as s:
            s.read_range("state", 0, N_ROWS, out=buf)

    benchmark.pedantic(stream_back, rounds=3, warmup_rounds=1, iterations=1)
    src = walker["col"].data
    t_copy = min(_timed(lambda: np.copyto(buf, src)) for _ in range(3))
    ratios.record(group, "np.copyto of the column (memcpy)", t_copy, baseline=True, nbytes=nbytes)
    ratios.record(group, "write, append path (65,536-row appends)", walker["write_s"], nbytes=nbytes)
    ratios.record(group, "stream back, page cache warm (read_range)", benchmark, nbytes=nbytes)
    assert np.array_equal(buf[:1000], src[:1000])


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


@pytest.mark.parametrize("cache", ["warm", "cold"])
@pytest.mark.parametrize("pattern", ["per_row", "groups", "slab"])
def test_disk_patterns(benchmark, ratios, walker, pattern, cache):
    if cache == "cold" and not hasattr(os, "posix_fadvise"):
        pytest.skip("no posix_fadvise: cannot evict the page cache here")
    _check_disk_matches_resident(walker)
    disk: Disk = walker["disk"]
    rng = np.random.default_rng(2)
    out = np.empty((BATCH, 26), np.float32)

    def setup():
        if cache == "cold":
            disk.reopen(cold=True)
        if pattern == "per_row":
            return (disk.ds, rng.integers(0, N_ROWS, BATCH), out), {}
        if pattern == "groups":
            return (disk.ds, rng.integers(0, N_ROWS - GROUP, BATCH // GROUP), out), {}
        return (disk.ds, int(rng.integers(0, N_ROWS - BATCH)), out), {}

    if cache == "warm":
        warm_page_cache(disk.path)  # a cold test before this one evicted the file's pages
    fn = {"per_row": read_per_row, "groups": read_groups, "slab": read_slab}[pattern]
    rounds = {"per_row": 3, "groups": 20, "slab": 50}[pattern]
    benchmark.pedantic(fn, setup=setup, rounds=rounds, warmup_rounds=1, iterations=1)
    if cache == "cold":
        warm_page_cache(disk.path)
        disk.reopen(cold=False)
    ratios.record(DISK, f"{PATTERNS[pattern][0]} ({cache} page cache)", benchmark,
                  note=f"chunks {_RES['meta']['chunk_rows']} rows, cache 16 MiB")
    _RES["seconds"][pattern][cache] = benchmark.stats.stats.median


# ---------------------------------------------------------------------- gather vs np.take
@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(4)
    return ResidentColumn(rng.integers(0, 256, (IMG_ROWS, 3, 84, 84), dtype=np.uint8), "pixels")


@pytest.mark.parametrize("how", ["np.take", "ResidentColumn.gather", "gather, 1 Numba thread"])
@pytest.mark.parametrize("kind", ["float32 26", "uint8 3x84x84"])
def test_gather_vs_take(benchmark, ratios, walker, images, kind, how):
    col: ResidentColumn = walker["col"] if kind == "float32 26" else images
    out = np.empty((BATCH, *col.row_shape), col.dtype)
    rng = np.random.default_rng(5)
    data = col.data

    def take(idx, out):
        np.take(data, idx, axis=0, out=out)

    fn = take if how == "np.take" else col.gather
    rounds = 300 if kind == "float32 26" else 20
    threads = numba.get_num_threads()
    if how.endswith("1 Numba thread"):
        numba.set_num_threads(1)  # the serial kernel: what a shared-core process should use
    try:
        benchmark.pedantic(fn, setup=lambda: ((rng.integers(0, col.n_rows, BATCH), out), {}),
                           rounds=rounds, warmup_rounds=2, iterations=1)
    finally:
        numba.set_num_threads(threads)
    group = f"host gather {BATCH} x {kind} from {col.n_rows:,} rows (fresh indices)"
    ratios.record(group, how, benchmark, baseline=how == "np.take", nbytes=out.nbytes,
                  note="bounds check included" if how != "np.take" else "")


def test_resident_gather(benchmark, ratios, walker):
    # On a machine whose cores are busy with other processes the parallel gather can wait a
    # scheduler tick for its second thread (70 us became 7.9 ms on the shared 2-core machine
    # in some runs); compare with test_gather_vs_take, and see docs/residency.md.
    col: ResidentColumn = walker["col"]
    rng = np.random.default_rng(3)
    out = np.empty((BATCH, 26), np.float32)
    benchmark.pedantic(col.gather, setup=lambda: ((rng.integers(0, N_ROWS, BATCH), out), {}),
                       rounds=300, warmup_rounds=3, iterations=1)
    ratios.record(DISK, PATTERNS["resident"][0], benchmark, baseline=True)
    _RES["seconds"]["resident"]["warm"] = benchmark.stats.stats.median


# ---------------------------------------------------------------------- chunking sweep
_SWEEP_STORES: dict[int, tuple[str, float]] = {}


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    yield tmp_path_factory.mktemp("sweep")
    for path, _ in _SWEEP_STORES.values():
        os.remove(path)
    _SWEEP_STORES.clear()


def _sweep_store(sweep_dir, chunk_rows: int) -> tuple[str, float]:
    """The sweep store with ``chunk_rows`` rows per chunk (written once) and its write time."""
    if chunk_rows not in _SWEEP_STORES:
        path = str(sweep_dir / f"sweep_{chunk_rows}.h5")
        _SWEEP_STORES[chunk_rows] = (path, write_walker(path, SWEEP_ROWS, chunk_rows))
    return _SWEEP_STORES[chunk_rows]


DEFAULT_CHUNK = default_chunk_rows(ROW_BYTES)


@pytest.mark.parametrize("pattern", ["per_row", "groups"])
@pytest.mark.parametrize("cache_mib", [1, 16])
@pytest.mark.parametrize("chunk_rows", sorted({256, DEFAULT_CHUNK, 16384, 65536}))
def test_chunking_sweep(benchmark, ratios, sweep_dir, chunk_rows, cache_mib, pattern):
    path, write_s = _sweep_store(sweep_dir, chunk_rows)
    disk = Disk(path, cache_mib << 20)
    rng = np.random.default_rng(6)
    out = np.empty((BATCH, 26), np.float32)
    n = SWEEP_ROWS
    if pattern == "per_row":
        fn, setup, rounds = read_per_row, lambda: ((disk.ds, rng.integers(0, n, BATCH), out), {}), 3
    else:
        fn, rounds = read_groups, 10
        setup = lambda: ((disk.ds, rng.integers(0, n - GROUP, BATCH // GROUP), out), {})  # noqa: E731
    try:
        benchmark.pedantic(fn, setup=setup, rounds=rounds, warmup_rounds=1, iterations=1)
    finally:
        disk.close()
    group = f"chunking sweep, {SWEEP_ROWS:,}-row walker store, warm page cache"
    tag = " (default)" if chunk_rows == DEFAULT_CHUNK else ""
    ratios.record(
        group, f"{PATTERNS[pattern][0]}: {chunk_rows} rows/chunk{tag}, cache {cache_mib} MiB",
        benchmark, baseline=(chunk_rows, cache_mib, pattern) == (DEFAULT_CHUNK, 16, "per_row"),
        note=f"write {SWEEP_ROWS * ROW_BYTES / write_s / (1 << 20):,.0f} MiB/s",
    )
