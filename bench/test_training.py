"""Train-ready window batches per second (issue 16): ACT-like and Diffusion-like windows,
numbatraj's ``BatchLoader`` against LeRobot's ``LeRobotDataset`` + ``DataLoader``.

Dataset: a LeRobot v3.0 dataset written by ``LeRobotWriter`` (20 episodes x 300 frames at
30 fps, ``NUMBATRAJ_BENCH_SCALE`` scales the episode count; state and action float32 (14,);
two cameras 320x240 encoded with LeRobot's default codec, SVT-AV1), imported once into a
store with ``import_lerobot_v3`` (the one-off import time is reported).  Batches of 32,
shuffled, torch CPU tensors, images float32 in [0, 1] (what a LeRobot policy is fed); the
numbatraj batches are also normalised (LeRobot normalises later, in the policy's
preprocessor, so its side of the comparison does less work).

Baselines in the same run:

- LeRobot itself, ``LeRobotDataset(root, delta_timestamps=...)`` + ``torch.utils.data.
  DataLoader(batch_size=32, shuffle=True)`` with ``num_workers`` 0 and 2, LeRobot's default
  video backend (torchcodec when it imports, else PyAV).  Needs lerobot installed: run this
  file in the compatibility venv of ``make test-lerobot``
  (``build/venv-lerobot/bin/python -m pytest bench/test_training.py --benchmark-only -s``);
  elsewhere those rows are skipped and the per-sample baseline below is the reference.
- The same batch built the way a map-style dataset does it, one sample at a time from the
  same resident arrays (NumPy indexing per sample, normalisation per sample, ``torch.stack``).

Also reported: samples/s of each, the import time and the break-even number of epochs
(import time / (LeRobot's epoch time - numbatraj's epoch time)).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from bench.conftest import bench_scale

torch = pytest.importorskip("torch")
from numbatraj.training import BatchLoader  # noqa: E402

EPISODES = max(2, int(round(20 * bench_scale())))
FRAMES, H, W, B, FPS = 300, 240, 320, 32, 30
CAMERAS = ["front", "wrist"]
NAMES = [f"joint_{i}.pos" for i in range(14)]
GROUP = "training batches, batch 32, 2 cameras 320x240, torch CPU, shuffled (samples/s): "
#: batches timed per LeRobot configuration after ``LEROBOT_WARMUP`` untimed ones
LEROBOT_BATCHES, LEROBOT_WARMUP = 12, 2

WINDOWS = {
    "ACT-like (state, 2 images, 100-action chunk)": {"action": list(range(100))},
    "Diffusion-like (2 obs frames, 16-step horizon)": {
        "observation.state": [-1, 0], "observation.images.front": [-1, 0],
        "observation.images.wrist": [-1, 0], "action": list(range(-1, 15))},
}
COLUMNS = ["observation.state", "observation.images.front", "observation.images.wrist",
           "action"]

#: import time and per-window samples/s, for the break-even line
_FIGURES: dict[str, float] = {}


def _frame(cam: int, ep: int, k: int, base: np.ndarray) -> np.ndarray:
    """A textured scene with a moving object: decodes at a realistic cost."""
    img = np.roll(base, 3 * k + 40 * cam, axis=1).copy()
    x, y = (5 * k + 60 * cam + 7 * ep) % (W - 48), (2 * k + 30 * cam) % (H - 48)
    img[y : y + 48, x : x + 48] = (230, 200, 40) if cam == 0 else (30, 60, 220)
    return img


@pytest.fixture(scope="module")
def lerobot_root(tmp_path_factory) -> Path:
    from numbatraj.lerobot import LeRobotWriter

    root = tmp_path_factory.mktemp("train_bench") / "lerobot"
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    base = ((base.astype(np.uint16) + np.roll(base, 1, 0) + np.roll(base, 1, 1)) // 3
            ).astype(np.uint8)  # smoothed noise: texture a codec has to work for
    t0 = time.perf_counter()
    with LeRobotWriter(root, FPS, NAMES, NAMES, CAMERAS, H, W, robot_type="bench") as w:
        for ep in range(EPISODES):
            w.begin_episode("bench task")
            state = rng.normal(size=(FRAMES, 14)).astype(np.float32)
            action = rng.normal(size=(FRAMES, 14)).astype(np.float32)
            for k in range(FRAMES):
                w.add_frame(state[k], action[k],
                            {c: _frame(i, ep, k, base) for i, c in enumerate(CAMERAS)})
            w.end_episode()
    print(f"\nwrote the LeRobot dataset ({EPISODES} x {FRAMES} frames) in "
          f"{time.perf_counter() - t0:.1f} s")
    return root


@pytest.fixture(scope="module")
def store_path(lerobot_root, tmp_path_factory) -> str:
    from numbatraj.lerobot import import_lerobot_v3

    out = str(tmp_path_factory.mktemp("train_store") / "store.h5")
    t0 = time.perf_counter()
    import_lerobot_v3(lerobot_root, out, height=H, width=W, show_progress=False)
    _FIGURES["import"] = time.perf_counter() - t0
    print(f"import_lerobot_v3: {_FIGURES['import']:.1f} s for {EPISODES * FRAMES} frames")
    return out


def _seconds(deltas: dict[str, list[int]]) -> dict[str, list[float]]:
    return {k: [d / FPS for d in v] for k, v in deltas.items()}


@pytest.mark.parametrize("name", list(WINDOWS))
def test_numbatraj_batch_loader(benchmark, ratios, store_path, name):
    loader = BatchLoader(store_path, B, delta_timestamps=_seconds(WINDOWS[name]),
                         columns=COLUMNS, normalize={"observation.state": "mean_std",
                                                     "action": "mean_std"},
                         images="float", output="torch")
    loader.next_batch()  # warm-up: compile / load from the kernel cache
    benchmark.pedantic(loader.next_batch, rounds=30, iterations=1, warmup_rounds=2)
    ratios.record(GROUP + name, "numbatraj BatchLoader (normalised)", benchmark, items=B)
    _FIGURES[name] = B / benchmark.stats.stats.median
    loader.close()


def _naive_batch(cols, stats, lengths, cur, spec):
    """One sample at a time, the map-style way: clamp, pad, normalise, then torch.stack."""
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    samples = []
    for c in cur:
        k = int(np.searchsorted(starts, c, side="right")) - 1
        s, e = starts[k], starts[k] + lengths[k]
        item = {}
        for key, col, cam, deltas, norm in spec:
            q = np.clip(c + deltas, s, e - 1) if deltas is not None else c
            x = cols[col][q] if cam is None else cols[col][q, cam]
            if norm:
                x = (x - stats[col][0]) / (stats[col][1] + np.float32(1e-8))
            elif x.dtype == np.uint8:
                x = x.astype(np.float32) / np.float32(255)
            item[key] = torch.from_numpy(np.ascontiguousarray(x))
            if deltas is not None:
                item[key + "_is_pad"] = torch.from_numpy((c + deltas < s) | (c + deltas >= e))
        samples.append(item)
    return {k: torch.stack([s[k] for s in samples]) for k in samples[0]}


@pytest.mark.parametrize("name", list(WINDOWS))
def test_per_sample_numpy(benchmark, ratios, store_path, name):
    from numbatraj import TrajectoryStore

    with TrajectoryStore(store_path) as s:
        cols = {c: s.load_column(c) for c in ("qpos", "action", "images")}
        stats = {c: (s.stats(c)["mean"].astype(np.float32),
                     s.stats(c)["std"].astype(np.float32)) for c in ("qpos", "action")}
        lengths, n_rows = s.episode_lengths, s.n_rows
    arr = {k: np.asarray(v, np.int64) for k, v in WINDOWS[name].items()}
    spec = [("observation.state", "qpos", None, arr.get("observation.state"), True),
            ("observation.images.front", "images", 0, arr.get("observation.images.front"), False),
            ("observation.images.wrist", "images", 1, arr.get("observation.images.wrist"), False),
            ("action", "action", None, arr["action"], True)]
    rng = np.random.default_rng(0)
    benchmark.pedantic(lambda: _naive_batch(cols, stats, lengths, rng.integers(0, n_rows, B),
                                            spec), rounds=5, iterations=1, warmup_rounds=1)
    ratios.record(GROUP + name, "per-sample NumPy + torch.stack", benchmark, items=B,
                  baseline=not _has_lerobot())


def _has_lerobot() -> bool:
    try:
        import lerobot.datasets.lerobot_dataset  # noqa: F401
    except Exception:
        return False
    return True


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("name", list(WINDOWS))
def test_lerobot_dataset(benchmark, ratios, lerobot_root, store_path, name, workers):
    if not _has_lerobot():
        pytest.skip("lerobot is not installed: run this file in the venv of make test-lerobot")
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    os.environ["HF_HUB_OFFLINE"] = "1"
    ds = LeRobotDataset(repo_id="numbatraj/bench-train", root=lerobot_root,
                        delta_timestamps=_seconds(WINDOWS[name]))
    # forkserver: torchcodec's decoders fail in forked workers here ("Could not push packet
    # to decoder") once the parent process has decoded
    loader = torch.utils.data.DataLoader(
        ds, batch_size=B, shuffle=True, num_workers=workers,
        generator=torch.Generator().manual_seed(0),
        multiprocessing_context="forkserver" if workers else None)
    it = iter(loader)
    # the warm-up rounds take worker start-up and the first decodes; with workers the
    # rounds' mean is the steady rate (a prefetched batch can come back at once)
    benchmark.pedantic(lambda: next(it), rounds=LEROBOT_BATCHES, iterations=1,
                       warmup_rounds=LEROBOT_WARMUP)
    sec = benchmark.stats.stats.mean
    ours = _FIGURES.get(name)
    n = EPISODES * FRAMES
    note = f"{B / sec:,.0f} samples/s"
    if ours and "import" in _FIGURES and ours > B / sec:
        epochs = _FIGURES["import"] / (n * sec / B - n / ours)
        note += (f"; numbatraj {ours / (B / sec):.1f}x; import {_FIGURES['import']:.1f} s "
                 f"pays off after {epochs:.2f} epochs")
    ratios.record(GROUP + name, f"LeRobotDataset + DataLoader(num_workers={workers}), "
                  f"{getattr(ds, '_video_backend', '?')}", sec, items=B, baseline=workers == 2, note=note)
    print(f"\n{name}, LeRobot num_workers={workers}: {note}")
