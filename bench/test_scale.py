"""Past one machine: ShardedReplay on a local Ray and RemoteStore over loopback, each against
its in-process baseline in the same run (issue 20).

* rows/s added through ``ShardedReplay`` by 2 writer actors in batches of 1,000, against the
  same batches added to one in-process ``StoreReplay``;
* learner ``sample(256)`` latency p50/p99 through 2 shards, against in-process ``sample``;
* Ray's bare actor call (a method that does nothing), measured in the same run;
* windows/s (1,024 rows, every column) from a ``RemoteStore`` over a loopback HTTP server,
  against the same windows from the local file.

Ray runs on 2 CPUs (``num_cpus=2``), loopback only: on a 2-core machine the writers, the
shards and the learner share both cores, so these are contention figures, not capacity.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from bench.conftest import bench_scale
from numbatraj import ColumnSpec, TrajectoryStore
from numbatraj.replay import StoreReplay

ray = pytest.importorskip("ray")

ROOT = str(Path(__file__).resolve().parents[1])
OBS, ACT, BATCH = 17, 6, 1000
ROWS = max(20_000, int(200_000 * bench_scale()))  # per writer
COLS = [
    ColumnSpec("obs", np.float32, (OBS,)),
    ColumnSpec("action", np.float32, (ACT,)),
    ColumnSpec("reward", np.float32, ()),
    ColumnSpec("next_obs", np.float32, (OBS,)),
    ColumnSpec("done", np.bool_, ()),
]
G_ADD = "ShardedReplay add, 2 writers x 1,000-row batches (rows/s)"
G_LAT = "learner sample(256) latency"
G_CALL = "Ray bare actor call (round trip)"
G_WIN = "windows of 1,024 rows, all columns (windows/s)"


def _batch(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.standard_normal((n, OBS), dtype=np.float32),
        "action": rng.standard_normal((n, ACT), dtype=np.float32),
        "reward": rng.standard_normal(n, dtype=np.float32),
        "next_obs": rng.standard_normal((n, OBS), dtype=np.float32),
        "done": rng.random(n) < 0.01,
    }


class BenchWriter:
    def run(self, replay, k: int, rows: int) -> float:
        b = _batch(BATCH, k)
        replay.add(writer=k, **b)  # warm: the first call pays for imports and connections
        t0 = time.perf_counter()
        for _ in range(rows // BATCH):
            replay.add(writer=k, **b)
        return time.perf_counter() - t0


@pytest.fixture(scope="module")
def ray_local():
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": ROOT}})
    yield
    ray.shutdown()


def test_sharded_add_and_sample(ray_local, ratios):
    from numbatraj.ray import ShardedReplay

    b = _batch(BATCH, 0)
    local = StoreReplay(COLS, 2 * ROWS + 2 * BATCH)
    local.add(**b)
    t0 = time.perf_counter()
    for _ in range(2 * ROWS // BATCH):
        local.add(**b)
    t_local = time.perf_counter() - t0
    ratios.record(G_ADD, "in-process StoreReplay.add", t_local, items=2 * ROWS,
                  baseline=True)

    replay = ShardedReplay(2, COLS, capacity=ROWS + BATCH, seed=0)
    actor = ray.remote(num_cpus=1)(BenchWriter)
    writers = [actor.remote() for _ in range(2)]
    ray.get([w.__ray_ready__.remote() for w in writers])
    t0 = time.perf_counter()
    secs = ray.get([w.run.remote(replay, k, ROWS) for k, w in enumerate(writers)])
    wall = time.perf_counter() - t0
    ratios.record(G_ADD, "ShardedReplay.add from 2 writer actors", wall, items=2 * ROWS,
                  note=f"per writer {ROWS / max(secs):,.0f} rows/s")

    for _ in range(20):
        local.sample(256)
        replay.sample(256)
    lat_local, lat = [], []
    for _ in range(300):
        t = time.perf_counter()
        local.sample(256)
        lat_local.append(time.perf_counter() - t)
        t = time.perf_counter()
        replay.sample(256)
        lat.append(time.perf_counter() - t)
    ratios.record(G_LAT, "in-process StoreReplay.sample p50", float(np.median(lat_local)),
                  baseline=True)
    ratios.record(G_LAT, "in-process StoreReplay.sample p99",
                  float(np.percentile(lat_local, 99)))
    ratios.record(G_LAT, "ShardedReplay.sample p50 (2 shards)", float(np.median(lat)))
    ratios.record(G_LAT, "ShardedReplay.sample p99 (2 shards)", float(np.percentile(lat, 99)))

    shard = replay.shards[0]
    ray.get(shard.ping.remote())
    calls = []
    for _ in range(300):
        t = time.perf_counter()
        ray.get(shard.ping.remote())
        calls.append(time.perf_counter() - t)
    ratios.record(G_CALL, "actor.ping.remote() + ray.get, p50", float(np.median(calls)),
                  baseline=True)
    ratios.record(G_CALL, "actor.ping.remote() + ray.get, p99", float(np.percentile(calls, 99)))
    replay.shutdown()
    for w in writers:
        ray.kill(w)


def test_remote_store_windows(tmp_path, ratios):
    from numbatraj.remote.store import RemoteStore
    from tests.remote.test_remote_store import RangeServer, _write

    path = tmp_path / "store.h5"
    _write(path, np.random.default_rng(0), n_eps=max(60, int(400 * bench_scale())))
    win = 1024
    with TrajectoryStore(path) as local:
        n = local.n_rows
        starts = list(range(0, n - win, win))
        names = list(local.columns)
        t0 = time.perf_counter()
        for s in starts:
            for c in names:
                local.read_range(c, s, s + win)
        t_local = time.perf_counter() - t0
    row_bytes = sum(c.row_bytes for c in COLS_OF(path))
    ratios.record(G_WIN, "local TrajectoryStore.read_range", t_local, items=len(starts),
                  baseline=True, note=f"{len(starts) * win * row_bytes / t_local / 2**20:,.0f}"
                                      " MiB/s")
    srv = RangeServer(path)
    try:
        with RemoteStore(srv.url()) as rs:
            t0 = time.perf_counter()
            for s in starts:
                rs.read_rows(s, s + win)
            t_remote = time.perf_counter() - t0
            ratios.record(G_WIN, "RemoteStore.read_rows over loopback HTTP", t_remote,
                          items=len(starts),
                          note=f"{len(srv.requests)} requests, "
                               f"{srv.bytes / t_remote / 2**20:,.0f} MiB/s on the wire")
    finally:
        srv.close()


def COLS_OF(path: Path) -> list[ColumnSpec]:  # noqa: N802
    with TrajectoryStore(path) as s:
        return list(s.columns.values())
