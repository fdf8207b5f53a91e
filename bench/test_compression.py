"""Compression policy, measured (issue 2): write MiB/s, read MiB/s and ratio per codec.

Three columns: a float32 state column (a smooth random walk, 26 wide, like joint states) and
uint8 pixel columns (3 x 84 x 84 frames of a moving block over a gradient), once with +-3
sensor noise on every pixel (a camera) and once without (a simulator render).
Every codec is compared with the uncompressed column in the same run.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from bench.conftest import bench_scale
from numbatraj import ColumnSpec, TrajectoryStore, TrajectoryStoreWriter

CODECS = [None, "gzip", "lz4", "zstd", "blosc"]
STATE_ROWS = max(4096, int(2_000_000 * bench_scale()))
PIXEL_ROWS = max(256, int(20_000 * bench_scale()))


def _state(n: int) -> np.ndarray:
    rng = np.random.default_rng(1)
    steps = rng.normal(0, 0.01, (n, 26)).astype(np.float32)
    return np.cumsum(steps, axis=0, dtype=np.float32)


def _pixels(n: int, noise: int = 3) -> np.ndarray:
    rng = np.random.default_rng(2)
    yy, xx = np.mgrid[0:84, 0:84]
    base = np.stack([xx * 2, yy * 2, (xx + yy)], 0).astype(np.int16)
    out = np.empty((n, 3, 84, 84), np.uint8)
    for i in range(n):
        img = base.copy()
        x0, y0 = (i * 3) % 70, (i * 5) % 70
        img[:, y0 : y0 + 14, x0 : x0 + 14] = np.array([200, 40, 40])[:, None, None]
        if noise:
            img += rng.integers(-noise, noise + 1, img.shape, dtype=np.int16)
        out[i] = np.clip(img, 0, 255)
    return out


COLUMNS = {
    "state float32 (26,)": ("state", np.float32, (26,), _state, STATE_ROWS),
    "camera pixels uint8 (3, 84, 84), +-3 noise": (
        "pixels", np.uint8, (3, 84, 84), _pixels, PIXEL_ROWS),
    "rendered pixels uint8 (3, 84, 84), no noise": (
        "pixels", np.uint8, (3, 84, 84), lambda n: _pixels(n, noise=0), PIXEL_ROWS),
}


@pytest.fixture(scope="module")
def arrays():
    return {k: v[3](v[4]) for k, v in COLUMNS.items()}


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c or "none")
@pytest.mark.parametrize("column", list(COLUMNS))
def test_codec(benchmark, ratios, tmp_path, arrays, column, codec):
    name, dtype, shape, _, _ = COLUMNS[column]
    data = arrays[column]
    path = tmp_path / f"{name}-{codec}.h5"
    spec = ColumnSpec(name, dtype, shape, compression=codec)

    def write():
        with TrajectoryStoreWriter(path, [spec], overwrite=True) as w:
            for start in range(0, len(data), 8192):
                w.append(name, data[start : start + 8192])
            w.end_episode()

    import time

    t0 = time.perf_counter()
    write()
    write_s = time.perf_counter() - t0
    with TrajectoryStore(path) as s:
        s.load_column(name)  # warm
        out = benchmark.pedantic(s.load_column, args=(name,), rounds=3, iterations=1)
        stored = s.storage(name)["stored_bytes"]
    np.testing.assert_array_equal(out, data)
    note = (f"write {data.nbytes / write_s / (1 << 20):,.0f} MiB/s, "
            f"ratio {data.nbytes / stored:.2f}, file {os.path.getsize(path) / (1 << 20):.1f} MiB")
    ratios.record(f"read {column}, by codec", codec or "none", benchmark,
                  baseline=codec is None, nbytes=data.nbytes, note=note)
