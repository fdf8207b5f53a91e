"""LeRobotWriter throughput against PyAV encoding the same frames alone, in the same run.

The issue's bound: the writer's overhead on top of encoding is at most 25%, i.e. its time is
at most 1.25x the baseline's.  Full size: two 320x240 cameras, AV1 (SVT-AV1, LeRobot's
settings: CRF 30, GOP 2, preset 12), 10 episodes of 60 frames (1,200 camera frames);
NUMBATRAJ_BENCH_SCALE scales the episode count.  The baseline encodes every episode of every
camera into its own mp4, as the checkpointing writer does, with the same encoder options.
"""

from __future__ import annotations

import itertools
import os
import shutil
from fractions import Fraction

import av
import numpy as np
import pytest

from bench.conftest import bench_scale
from numbatraj.lerobot.write import LeRobotWriter, codec_options, encoder_options

H, W, FPS, LENGTH = 240, 320, 30, 60
CAMERAS = ("front", "wrist")
ENCODER = "libsvtav1"
GROUP = "lerobot write, 320x240 AV1, 2 cameras (camera frames/s)"
_counter = itertools.count()


def _frames() -> dict[str, np.ndarray]:
    yy, xx = np.mgrid[0:H, 0:W]
    out = {}
    for c, cam in enumerate(CAMERAS):
        frames = np.empty((LENGTH, H, W, 3), np.uint8)
        for j in range(LENGTH):
            wave = 128 + 80 * np.sin((xx + 4 * j + 30 * c) / 17.0) * np.cos((yy - 3 * j) / 23.0)
            noise = np.random.default_rng((c, j)).integers(-6, 7, (H, W, 1))
            frames[j] = np.clip(wave[..., None] + noise + [0, 25, 50], 0, 255)
        out[cam] = frames
    return out


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    n_eps = max(2, round(10 * bench_scale()))
    return tmp_path_factory.mktemp("lerobot_write_bench"), n_eps, _frames()


def _encode_alone(root, n_eps: int, frames: dict[str, np.ndarray]) -> None:
    opts = {k: str(v) for k, v in encoder_options(ENCODER, codec_options(ENCODER)).items()}
    for ep in range(n_eps):
        for cam in CAMERAS:
            path = os.path.join(root, f"{cam}-{ep}.mp4")
            with av.open(path, "w") as container:
                stream = container.add_stream(ENCODER, rate=FPS, options=opts)
                stream.width, stream.height, stream.pix_fmt = W, H, "yuv420p"
                stream.time_base = Fraction(1, FPS)
                for j, img in enumerate(frames[cam]):
                    frame = av.VideoFrame.from_ndarray(img, format="rgb24")
                    frame.pts = j
                    frame.time_base = Fraction(1, FPS)
                    for packet in stream.encode(frame):
                        container.mux(packet)
                for packet in stream.encode():
                    container.mux(packet)


def _write(root, n_eps: int, frames: dict[str, np.ndarray], checkpoint: bool) -> None:
    state = np.linspace(-1, 1, 6, dtype=np.float32)
    action = np.linspace(1, -1, 6, dtype=np.float32)
    with LeRobotWriter(root, FPS, [f"q{i}" for i in range(6)], [f"a{i}" for i in range(6)],
                       CAMERAS, H, W, codec=ENCODER, checkpoint=checkpoint) as w:
        for _ in range(n_eps):
            w.begin_episode("pick the cube")
            for j in range(LENGTH):
                w.add_frame(state + j, action - j, {c: frames[c][j] for c in CAMERAS})
            w.end_episode()


def _fresh(base) -> str:
    path = os.path.join(base, f"run-{next(_counter)}")
    os.makedirs(path)
    return path


def _cleanup(base) -> None:
    for name in os.listdir(base):
        shutil.rmtree(os.path.join(base, name), ignore_errors=True)


def test_pyav_encode_alone(benchmark, ratios, workload):
    base, n_eps, frames = workload
    benchmark.pedantic(
        lambda root: _encode_alone(root, n_eps, frames),
        setup=lambda: ((_fresh(base),), {}), rounds=3, warmup_rounds=1,
    )
    _cleanup(base)
    n = n_eps * LENGTH * len(CAMERAS)
    ratios.record(GROUP, "PyAV encode alone", benchmark, items=n, baseline=True)


@pytest.mark.parametrize("checkpoint", [True, False], ids=["checkpoint", "streaming"])
def test_lerobot_writer(benchmark, ratios, workload, checkpoint):
    base, n_eps, frames = workload
    benchmark.pedantic(
        lambda root: _write(os.path.join(root, "ds"), n_eps, frames, checkpoint),
        setup=lambda: ((_fresh(base),), {}), rounds=3, warmup_rounds=1,
    )
    _cleanup(base)
    n = n_eps * LENGTH * len(CAMERAS)
    name = f"LeRobotWriter checkpoint={checkpoint}"
    ratios.record(GROUP, name, benchmark, items=n, note=f"{n_eps} episodes x {LENGTH} frames")
