"""Small stores for the training tests.

Stats are written with h5py after the store is published, under ``stats/<column>/<stat>``
(:func:`numbatraj.data.stats.stats_datasets`): the writer's ``close(datasets=...)`` is
landing on main separately; once it has, these helpers should write through it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import h5py
import numpy as np

from numbatraj import ColumnSpec, TrajectoryStore, TrajectoryStoreWriter
from numbatraj.data.stats import compute_stats, stats_datasets

CAMERAS = ("front", "wrist")


def make_store(path, lengths: Sequence[int] = (1, 2, 5, 23), *, seed: int = 0,
               lerobot: bool = True, stats: Sequence[str] = ("qpos", "action"),
               image_hw: tuple[int, int] = (4, 6), fps: float | None = 10.0) -> str:
    """A store with qpos (float32 (3,)), action (float32 (2,)), task_index (int32) and images
    (uint8 (2, 3, H, W)); rows hold random values.  ``lerobot`` records the LeRobot import's
    manifest attributes (source_format, cameras), ``fps`` the frame rate (None: none)."""
    rng = np.random.default_rng(seed)
    h, w = image_hw
    cols = [
        ColumnSpec("qpos", np.float32, (3,)),
        ColumnSpec("action", np.float32, (2,)),
        ColumnSpec("task_index", np.int32, ()),
        ColumnSpec("images", np.uint8, (len(CAMERAS), 3, h, w)),
    ]
    attrs: dict[str, object] = {}
    if fps is not None:
        attrs["fps"] = f"{fps:g}"
    if lerobot:
        attrs.update({"source_format": "lerobot v3.0", "cameras": ",".join(CAMERAS)})
    with TrajectoryStoreWriter(path, cols, attrs=attrs, overwrite=True) as wr:
        for n in lengths:
            wr.append_rows({
                "qpos": rng.normal(size=(n, 3)).astype(np.float32) * 3 + 1,
                "action": rng.normal(size=(n, 2)).astype(np.float32),
                "task_index": rng.integers(0, 3, n).astype(np.int32),
                "images": rng.integers(0, 256, (n, len(CAMERAS), 3, h, w), dtype=np.uint8),
            })
            wr.end_episode()
    if stats:
        with TrajectoryStore(path) as s:
            values = {c: compute_stats(s.load_column(c)) for c in stats}
        with h5py.File(path, "r+") as f:
            for name, arr in stats_datasets(values).items():
                f.create_dataset(name, data=arr)
    return str(path)


@contextlib.contextmanager
def force_parallel(threads: int = 2):
    """Run the parallel kernels whatever the batch size: numbatraj is serial by default
    (numbatraj.set_num_threads), and these tests need a parallel region to have run."""
    import numbatraj
    from numbatraj import _jit

    saved = _jit.PARALLEL_MIN_BYTES
    _jit.PARALLEL_MIN_BYTES = 0
    numbatraj.set_num_threads(threads)
    try:
        assert _jit.parallel_threads(1) == threads
        yield
    finally:
        numbatraj.set_num_threads(None)
        _jit.PARALLEL_MIN_BYTES = saved
