"""Download throughput over loopback: fetch() against plain requests streaming to disk.

Same server (tests/httpfaults.py, mode ``ok``), same file, same run.  Baseline: requests
``iter_content`` written to a file, no hashing.  Also reported: the same loop with an inline
``hashlib.sha256`` (what verification costs without fetch's pipelining) and SHA-256 alone
over the payload in memory, which bounds any verified download on this machine.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import numpy as np
import pytest
import requests

from bench.conftest import Ratios, bench_scale
from numbatraj.io.download import fetch
from tests.httpfaults import FaultServer

N_BYTES = int((256 << 20) * bench_scale())
GROUP = f"download over loopback, {N_BYTES >> 20} MiB"


@pytest.fixture(scope="module")
def served():  # type: ignore[no-untyped-def]
    payload = np.random.default_rng(0).integers(0, 256, N_BYTES, dtype=np.uint8).tobytes()
    with FaultServer(payload) as srv:
        yield srv, hashlib.sha256(payload).hexdigest()


def _plain(url: str, dest: Path, hash_inline: bool, fsync: bool = False) -> None:
    h = hashlib.sha256()
    with requests.get(url, stream=True, timeout=60) as r, open(dest, "wb") as f:
        for chunk in r.iter_content(1 << 20):
            if hash_inline:
                h.update(chunk)
            f.write(chunk)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.unlink(dest)


def test_download_throughput(benchmark, ratios: Ratios, served, tmp_path: Path) -> None:
    srv, digest = served
    url = srv.url("ok")
    dest = tmp_path / "f.bin"

    def ours(**kw: int) -> None:
        fetch(url, dest, sha256=digest, size=N_BYTES, **kw)
        os.unlink(dest)

    fns = {
        "plain": lambda: _plain(url, dest, False),
        "plain+sha": lambda: _plain(url, dest, True),
        "plain+fsync": lambda: _plain(url, dest, False, fsync=True),
        "fetch": ours,
        "fetch-nosync": lambda: ours(sync_every=0),
    }
    runs: dict[str, list[float]] = {k: [] for k in fns}
    for f in fns.values():  # warm-up: connections, page cache, allocator
        f()
    for _ in range(5):  # interleaved so load on a shared machine hits all three alike
        for name, f in fns.items():
            t = time.perf_counter()
            f()
            runs[name].append(time.perf_counter() - t)
    benchmark.pedantic(ours, rounds=1, iterations=1)
    payload = srv.payload
    t = time.perf_counter()
    hashlib.sha256(payload).hexdigest()
    sha_s = time.perf_counter() - t
    med = {k: float(np.median(v)) for k, v in runs.items()}
    ratios.record(GROUP, "requests iter_content -> file", med["plain"], baseline=True,
                  nbytes=N_BYTES)
    ratios.record(GROUP, "requests + inline sha256", med["plain+sha"], nbytes=N_BYTES)
    ratios.record(GROUP, "requests -> file + fsync at the end", med["plain+fsync"],
                  nbytes=N_BYTES, note="what durability costs on this disk")
    ratios.record(GROUP, "numbatraj fetch (sha256, fsync+DONTNEED every 32 MiB)", med["fetch"],
                  nbytes=N_BYTES, note="target >= 0.8x speed")
    ratios.record(GROUP, "numbatraj fetch, sync_every=0 (final fsync only)",
                  med["fetch-nosync"], nbytes=N_BYTES)
    ratios.record(GROUP, "sha256 alone, in memory", sha_s, nbytes=N_BYTES,
                  note="upper bound for any verified download here")
    assert med["fetch"] > 0
