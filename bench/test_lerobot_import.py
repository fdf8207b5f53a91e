"""LeRobot v3.0 import throughput against PyAV decoding the same videos to rgb24 alone.

The issue's bound: the importer's overhead on top of decoding is at most 25%, i.e. its time
is at most 1.25x the baseline's.  A second reference row decodes the same way and writes the
frames' bytes to a flat file: the floor for anything that stores raw pixels.  Full size: two 320x240 AV1 cameras, 10 episodes of 60
frames (1,200 camera frames); NUMBATRAJ_BENCH_SCALE scales the episode count.
"""

from __future__ import annotations

import glob
import os

import av
import pytest

from bench.conftest import bench_scale
from numbatraj.lerobot.read import import_lerobot_v3
from tests.lerobot.lerobot_fixtures import CameraSpec, DatasetSpec, write_dataset

H, W = 240, 320
GROUP = "lerobot import, 320x240 AV1, 2 cameras (camera frames/s)"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    n_eps = max(3, round(10 * bench_scale()))
    length = 60
    cut = n_eps // 2
    spec = DatasetSpec(
        lengths=[length] * n_eps,
        cameras=[
            CameraSpec(
                name,
                codec="av1",
                width=W,
                height=H,
                texture=True,
                files=[list(range(cut)), list(range(cut, n_eps))],
                keys=[(0, 0), (0, 1)],
                gap=0,
            )
            for name in ("observation.images.front", "observation.images.wrist")
        ],
        data_files=[list(range(n_eps))],
        data_keys=[(0, 0)],
        meta_files=[list(range(n_eps))],
        meta_keys=[(0, 0)],
    )
    root = write_dataset(tmp_path_factory.mktemp("lerobot_bench") / "ds", spec)
    return root, n_eps * length * 2


def _decode_only(root: str) -> int:
    n = 0
    for path in sorted(glob.glob(os.path.join(root, "videos", "*", "*", "*.mp4"))):
        with av.open(path) as c:
            stream = c.streams.video[0]
            stream.thread_type = "AUTO"
            for frame in c.decode(stream):
                frame.to_ndarray(format="rgb24")
                n += 1
    return n


def test_decode_baseline(benchmark, ratios, dataset):
    root, frames = dataset
    assert _decode_only(root) == frames  # warm-up, and the baseline decodes what the import does
    benchmark.pedantic(_decode_only, args=(root,), rounds=5, iterations=1)
    ratios.record(GROUP, "PyAV decode to rgb24 alone", benchmark, baseline=True, items=frames)


def _decode_and_write_raw(root: str, path: str) -> int:
    """Decode as the baseline does and write every frame's bytes to one flat file: the floor
    any importer that stores raw pixels pays on this machine."""
    n = 0
    with open(path, "wb") as fh:
        for video in sorted(glob.glob(os.path.join(root, "videos", "*", "*", "*.mp4"))):
            with av.open(video) as c:
                stream = c.streams.video[0]
                stream.thread_type = "AUTO"
                for frame in c.decode(stream):
                    fh.write(frame.to_ndarray(format="rgb24").data)
                    n += 1
        fh.flush()
        os.fsync(fh.fileno())
    return n


def test_decode_and_raw_write_floor(benchmark, ratios, dataset, tmp_path):
    root, frames = dataset
    path = str(tmp_path / "frames.raw")
    assert _decode_and_write_raw(root, path) == frames
    benchmark.pedantic(_decode_and_write_raw, args=(root, path), rounds=5, iterations=1)
    ratios.record(
        GROUP,
        "decode + write the same bytes raw, fsync",
        benchmark,
        items=frames,
        note="floor for any importer storing raw pixels",
    )


def test_import(benchmark, ratios, dataset, tmp_path):
    root, frames = dataset
    out = str(tmp_path / "store.h5")
    import_lerobot_v3(root, out, height=H, width=W, show_progress=False)  # warm-up

    def run() -> None:
        import_lerobot_v3(root, out, height=H, width=W, show_progress=False, force=True)

    benchmark.pedantic(run, rounds=5, iterations=1)
    ratios.record(
        GROUP,
        "import_lerobot_v3 (no resize)",
        benchmark,
        items=frames,
        note="bound: time <= 1.25x baseline",
    )


def test_import_with_resize(benchmark, ratios, dataset, tmp_path):
    root, frames = dataset
    out = str(tmp_path / "store.h5")

    def run() -> None:
        import_lerobot_v3(root, out, height=120, width=160, show_progress=False, force=True)

    run()
    benchmark.pedantic(run, rounds=5, iterations=1)
    ratios.record(
        GROUP,
        "import_lerobot_v3 (resize to 160x120)",
        benchmark,
        items=frames,
        note="Pillow BILINEAR per frame",
    )
