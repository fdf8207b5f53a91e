"""Catalog load: requests/s and p99 latency of ``describe`` with 64 concurrent clients on
loopback, SQLite and PostgreSQL (``NUMBATRAJ_TEST_POSTGRES_URL``), 1 and 2 uvicorn workers.

The service runs as ``numbatraj catalog serve`` in its own process(es); the load generator
is bounded (64 threads x a fixed number of requests, each with its own kept-alive session),
so a run stops by itself.  The baseline row is the same generator against ``/v1/health``
with its database and object-store checks, which every request of a healthy catalog pays.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import requests

from bench.conftest import Ratios, bench_scale
from numbatraj.catalog import open_db
from numbatraj.remote import RemoteCatalog

CLIENTS = 64
PER_CLIENT = max(10, int(60 * bench_scale()))
PG = os.environ.get("NUMBATRAJ_TEST_POSTGRES_URL", "")


@contextmanager
def _served(db: str, objects: str, workers: int) -> Iterator[str]:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen(
        [sys.executable, "-m", "numbatraj", "catalog", "serve", "--db", db, "--objects",
         objects, "--port", "0", "--workers", str(workers)],
        stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        m = re.search(r"on (http://\S+)", proc.stdout.readline())
        assert m
        url = m.group(1)
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(url + "/v1/health", timeout=5).ok:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, "service did not start"
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _load(url: str, path: str, key: str) -> tuple[float, np.ndarray]:
    """(wall seconds, latencies) of CLIENTS x PER_CLIENT GETs of ``path``."""
    lat: list[list[float]] = [[] for _ in range(CLIENTS)]
    barrier = threading.Barrier(CLIENTS + 1)
    errors: list[str] = []

    def client(i: int) -> None:
        with requests.Session() as s:
            s.headers["Authorization"] = f"Bearer {key}"
            s.get(url + path, timeout=60)  # connect outside the timed part
            barrier.wait()
            for _ in range(PER_CLIENT):
                t = time.perf_counter()
                r = s.get(url + path, timeout=60)
                lat[i].append(time.perf_counter() - t)
                if r.status_code != 200:
                    errors.append(f"{r.status_code} {r.text[:100]}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join(timeout=600)
    wall = time.perf_counter() - t0
    assert not errors, errors[:3]
    return wall, np.concatenate([np.asarray(x) for x in lat])


def _databases(tmp_path: Path) -> list[tuple[str, str]]:
    out = [("SQLite", f"sqlite:///{tmp_path}/load.db")]
    if PG:
        import psycopg

        schema = f"load_{secrets.token_hex(4)}"
        with psycopg.connect(PG, autocommit=True) as admin:
            admin.execute(f"CREATE SCHEMA {schema}")
        sep = "&" if "?" in PG else "?"
        out.append(("PostgreSQL", f"{PG}{sep}options=-csearch_path%3D{schema}"))
    return out


@pytest.mark.parametrize("workers", [1, 2])
def test_describe_under_64_clients(benchmark, ratios: Ratios, tmp_path: Path,
                                   workers: int) -> None:
    group = f"catalog describe, {CLIENTS} clients x {PER_CLIENT} requests, {workers} worker(s)"
    data = tmp_path / "d.bin"
    data.write_bytes(b"x" * 4096)
    first = True
    for label, db_url in _databases(tmp_path):
        db = open_db(db_url)
        key = db.add_key("write")
        db.close()
        with _served(db_url, f"file://{tmp_path}/objects-{label}", workers) as url:
            with RemoteCatalog(url, key) as cat:
                cat.push(data, "walker", "v1")
            if first:
                wall, lat = _load(url, "/v1/health", key)
                ratios.record(group, f"/v1/health (database ping + object check), {label}",
                              wall, items=lat.size, baseline=True,
                              note=f"p99 {np.percentile(lat, 99) * 1e3:.1f} ms")
                first = False
            wall, lat = _load(url, "/v1/datasets/walker", key)
            ratios.record(group, f"describe on {label}", wall, items=lat.size,
                          note=f"p50 {np.percentile(lat, 50) * 1e3:.1f} ms, "
                          f"p99 {np.percentile(lat, 99) * 1e3:.1f} ms")
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
