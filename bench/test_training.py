"""Train-ready window batches per second (issue 16): ACT-like and Diffusion-like windows.

Store: 20 episodes x 300 frames (``NUMBATRAJ_BENCH_SCALE`` scales the episode count), qpos
and action float32 (14,), two cameras 320x240 in one ``images`` column uint8
``(2, 3, 240, 320)``, with stats.  Batches of 32, shuffled, torch CPU tensors, state and
action normalised, images float32 in [0, 1] (what a LeRobot policy is fed).

Baseline in the same run: the same batch built the way a map-style dataset does it, one
sample at a time from the same resident arrays (NumPy fancy indexing per sample, the
normalisation per sample, ``torch.stack``).  LeRobot itself (``LeRobotDataset`` +
``DataLoader``) needs the compatibility venv of ``bench/lerobot_compat_check.py``; the
issue measured 230-300 samples/s there on this machine.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from bench.conftest import bench_scale
from numbatraj import ColumnSpec, TrajectoryStore, TrajectoryStoreWriter
from numbatraj.data.stats import compute_stats, stats_datasets

torch = pytest.importorskip("torch")
from numbatraj.training import BatchLoader  # noqa: E402

EPISODES = max(2, int(round(20 * bench_scale())))
FRAMES, H, W, B, FPS = 300, 240, 320, 32, 30
GROUP = "training batches, batch 32, 2 cameras 320x240, torch CPU, normalised (samples/s): "

WINDOWS = {
    "ACT-like (state, 2 images, 100-action chunk)": dict(
        deltas={"action": range(100)},
        columns=["observation.state", "observation.images.front", "observation.images.wrist"]),
    "Diffusion-like (2 obs frames, 16-step horizon)": dict(
        deltas={"observation.state": [-1, 0], "observation.images.front": [-1, 0],
                "observation.images.wrist": [-1, 0], "action": range(-1, 15)}),
}


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("train_bench") / "store.h5")
    rng = np.random.default_rng(0)
    cols = [ColumnSpec("qpos", np.float32, (14,)), ColumnSpec("action", np.float32, (14,)),
            ColumnSpec("images", np.uint8, (2, 3, H, W))]
    attrs = {"fps": FPS, "source_format": "lerobot v3.0", "cameras": "front,wrist"}
    frame = rng.integers(0, 256, (FRAMES, 2, 3, H, W), dtype=np.uint8)
    with TrajectoryStoreWriter(path, cols, attrs=attrs) as w:
        for _ in range(EPISODES):
            w.append_rows({"qpos": rng.normal(size=(FRAMES, 14)).astype(np.float32),
                           "action": rng.normal(size=(FRAMES, 14)).astype(np.float32),
                           "images": frame})
            w.end_episode()
    with TrajectoryStore(path) as s:
        stats = {c: compute_stats(s.load_column(c)) for c in ("qpos", "action")}
    with h5py.File(path, "r+") as f:  # until the writer's close(datasets=...) lands
        for name, value in stats_datasets(stats).items():
            f.create_dataset(name, data=value)
    return path


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
def test_training_batches(benchmark, ratios, store_path, name):
    kw = WINDOWS[name]
    loader = BatchLoader(store_path, B, normalize={"observation.state": "mean_std",
                                                   "action": "mean_std"},
                         images="float", output="torch", **kw)
    loader.next_batch()  # warm-up: compile / load from the kernel cache
    benchmark.pedantic(loader.next_batch, rounds=30, iterations=1, warmup_rounds=2)
    group = GROUP + name
    ratios.record(group, "numbatraj BatchLoader", benchmark, items=B)

    s = loader.store
    cols = {c: s.load_column(c) for c in ("qpos", "action", "images")}
    stats = {c: (s.stats(c)["mean"].astype(np.float32), s.stats(c)["std"].astype(np.float32))
             for c in ("qpos", "action")}
    d = kw["deltas"]
    arr = {k: np.asarray(list(v), np.int64) for k, v in d.items()}
    spec = [("observation.state", "qpos", None, arr.get("observation.state"), True),
            ("observation.images.front", "images", 0, arr.get("observation.images.front"), False),
            ("observation.images.wrist", "images", 1, arr.get("observation.images.wrist"), False),
            ("action", "action", None, arr["action"], True)]
    rng = np.random.default_rng(0)
    lengths = s.episode_lengths

    def naive():
        return _naive_batch(cols, stats, lengths, rng.integers(0, s.n_rows, B), spec)

    naive()
    import time

    t0 = time.perf_counter()
    for _ in range(5):
        naive()
    ratios.record(group, "per-sample NumPy + torch.stack", (time.perf_counter() - t0) / 5,
                  items=B, baseline=True)
    loader.close()
