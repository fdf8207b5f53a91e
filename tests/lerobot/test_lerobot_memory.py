"""Peak memory of import_lerobot_v3 does not grow with the dataset's length.

Two datasets differ only in length (12x).  Each is imported in a fresh process that reports
its peak resident set and the peak of Python-tracked allocations (NumPy arrays included).
If the importer held the image column, the long import would need about 160 MiB more.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.lerobot.lerobot_fixtures import CameraSpec, DatasetSpec, write_dataset

_CHILD = r"""
import json, resource, sys, tracemalloc
from numbatraj.lerobot.read import import_lerobot_v3
import_lerobot_v3(sys.argv[1], sys.argv[2] + ".warm.h5", height=96, width=128, show_progress=False)
tracemalloc.start()
import_lerobot_v3(sys.argv[1], sys.argv[2], height=96, width=128, show_progress=False)
peak = tracemalloc.get_traced_memory()[1]
print(json.dumps({"rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "traced": peak}))
"""


def _spec(n_eps: int, length: int) -> DatasetSpec:
    third = max(1, n_eps // 3)
    groups = [list(range(0, third)), list(range(third, 2 * third)), list(range(2 * third, n_eps))]
    half = n_eps // 2
    return DatasetSpec(
        lengths=[length] * n_eps,
        cameras=[
            CameraSpec(
                "cam_a",
                codec="h264",
                width=64,
                height=48,
                files=groups,
                keys=[(0, 0), (0, 1), (1, 0)],
                gap=1,
            ),
            CameraSpec(
                "cam_b",
                codec="h264",
                width=64,
                height=48,
                files=[list(range(n_eps))],
                keys=[(0, 0)],
            ),
        ],
        data_files=[list(range(half)), list(range(half, n_eps))],
        data_keys=[(0, 0), (0, 1)],
        meta_files=[list(range(n_eps))],
        meta_keys=[(0, 0)],
    )


def _peak(tmp_path, name, spec):
    root = write_dataset(tmp_path / name, spec)
    out = str(tmp_path / f"{name}.h5")
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    r = subprocess.run(
        [sys.executable, "-c", _CHILD, root, out],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), out


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_length(tmp_path):
    short, _ = _peak(tmp_path, "short", _spec(6, 30))  # 180 frames
    long, out = _peak(tmp_path, "long", _spec(24, 90))  # 2160 frames
    image_column = 2160 * 2 * 3 * 96 * 128  # ~159 MiB
    from numbatraj.data.store import TrajectoryStore

    with TrajectoryStore(out) as s:
        assert s.n_rows == 2160 and s.spec("images").row_bytes * 2160 == image_column
    rss_growth = (long["rss_kib"] - short["rss_kib"]) * 1024
    traced_growth = long["traced"] - short["traced"]
    # Generous bounds, still far below the column the importer must not hold.
    assert rss_growth < image_column / 8, (short, long)
    assert traced_growth < image_column / 32, (short, long)
    assert long["traced"] < 24 << 20, long
