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
                  nbytes=N_BYTES, note="no target (see the pooch/hf comparison below)")
    ratios.record(GROUP, "numbatraj fetch, sync_every=0 (final fsync only)",
                  med["fetch-nosync"], nbytes=N_BYTES)
    ratios.record(GROUP, "sha256 alone, in memory", sha_s, nbytes=N_BYTES,
                  note="upper bound for any verified download here")
    assert med["fetch"] > 0


# -- a verified pull against the downloaders people already use (issue 19) ---------------


def test_verified_pull_vs_pooch_and_hf(benchmark, ratios: Ratios, served, tmp_path: Path
                                       ) -> None:
    """Same loopback server, same file, one run: numbatraj's verified ``fetch`` against
    ``pooch.retrieve(known_hash=...)`` (verifies after the download) and huggingface_hub's
    ``http_get`` (the downloader under ``hf_hub_download``; it checks the size only)."""
    pooch = pytest.importorskip("pooch")
    hf = pytest.importorskip("huggingface_hub.file_download")
    srv, digest = served
    url = srv.url("ok")
    group = f"verified pull vs pooch and huggingface_hub, {N_BYTES >> 20} MiB"

    def ours() -> None:
        fetch(url, tmp_path / "ours.bin", sha256=digest, size=N_BYTES, progress=False)
        os.unlink(tmp_path / "ours.bin")

    def with_pooch() -> None:
        pooch.retrieve(url, known_hash=f"sha256:{digest}", fname="p.bin", path=tmp_path,
                       progressbar=False)
        os.unlink(tmp_path / "p.bin")

    def with_hf() -> None:
        with open(tmp_path / "h.bin", "wb") as f:
            hf.http_get(url, f, expected_size=N_BYTES)
        os.unlink(tmp_path / "h.bin")

    fns = {"pooch": with_pooch, "hf": with_hf, "ours": ours}
    runs: dict[str, list[float]] = {k: [] for k in fns}
    for f in fns.values():
        f()
    for _ in range(5):
        for name, f in fns.items():
            t = time.perf_counter()
            f()
            runs[name].append(time.perf_counter() - t)
    benchmark.pedantic(ours, rounds=1, iterations=1)
    med = {k: float(np.median(v)) for k, v in runs.items()}
    ratios.record(group, "pooch.retrieve(known_hash=sha256)", med["pooch"], baseline=True,
                  nbytes=N_BYTES)
    ratios.record(group, "huggingface_hub http_get (size check only)", med["hf"],
                  nbytes=N_BYTES, note=f"{med['hf'] / med['ours']:.2f}x ours' time")
    ratios.record(group, "numbatraj fetch (sha256 verified)", med["ours"], nbytes=N_BYTES,
                  note="target >= 1.0x pooch and hf")


def test_parallel_ranged_pull_under_a_per_connection_cap(benchmark, ratios: Ratios,
                                                         tmp_path: Path) -> None:
    """A large object from a server that caps each connection (16 MiB/s, the fault
    server's ``throttle``): 4 parallel byte ranges against one verified stream."""
    from numbatraj.remote._transfers import parallel_fetch

    n = int((64 << 20) * bench_scale())
    payload = np.random.default_rng(1).integers(0, 256, n, dtype=np.uint8).tobytes()
    digest = hashlib.sha256(payload).hexdigest()
    group = f"pull of one {n >> 20} MiB object, 16 MiB/s per connection"
    with FaultServer(payload) as srv, requests.Session() as sess:
        url = srv.url("throttle", rate=16 << 20)

        def single() -> None:
            fetch(url, tmp_path / "s.bin", sha256=digest, size=n, progress=False)
            os.unlink(tmp_path / "s.bin")

        def parallel() -> None:
            assert parallel_fetch(sess, url, str(tmp_path / "p.bin"), digest, n,
                                  connections=4, progress=False)
            os.unlink(tmp_path / "p.bin")

        runs: dict[str, list[float]] = {"single": [], "parallel": []}
        for _ in range(3):
            for name, f in (("single", single), ("parallel", parallel)):
                t = time.perf_counter()
                f()
                runs[name].append(time.perf_counter() - t)
        benchmark.pedantic(parallel, rounds=1, iterations=1)
    med = {k: float(np.median(v)) for k, v in runs.items()}
    ratios.record(group, "one stream (fetch, verified)", med["single"], baseline=True,
                  nbytes=n)
    ratios.record(group, "4 parallel ranges (RemoteCatalog pull), verified", med["parallel"],
                  nbytes=n, note="target >= 1.5x")
