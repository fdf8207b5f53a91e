"""Multipart pushes (more than 5 parts, small parts) against the file backend and moto's
S3 server, a push killed after some parts that resumes, and parallel ranged pulls."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from numbatraj.catalog import CatalogService
from numbatraj.errors import IntegrityError
from numbatraj.remote import RemoteCatalog
from numbatraj.remote._transfers import parallel_fetch
from tests.catalog.conftest import Catalog
from tests.httpfaults import FaultServer

PART = 4096


@pytest.fixture
def small_parts(tmp_path: Path, monkeypatch) -> Iterator[Catalog]:
    monkeypatch.setenv("NUMBATRAJ_CACHE", str(tmp_path / "cache"))
    svc = CatalogService(f"sqlite:///{tmp_path}/c.db", f"file://{tmp_path}/objects",
                         min_part_bytes=1024).start()
    try:
        yield Catalog(svc, svc.db.add_key("read"), svc.db.add_key("write"))
    finally:
        svc.stop()


def _client(url: str, key: str, **kw: Any) -> RemoteCatalog:
    opts: dict[str, Any] = {"multipart_threshold": 1, "part_size": PART, "workers": 3,
                            "parallel_threshold": 10_000, "progress": False}
    return RemoteCatalog(url, key, **{**opts, **kw})


class _CountingSession(requests.Session):
    """Counts part PUTs; raises ``crash`` after ``crash_after`` of them (a killed push)."""

    def __init__(self, crash_after: int | None = None) -> None:
        super().__init__()
        self.part_puts = 0
        self.crash_after = crash_after

    def request(self, method: str, url: str, *a: Any, **kw: Any) -> Any:  # type: ignore[override]
        if method == "PUT" and ("upload=" in url or "uploadId=" in url):
            if self.crash_after is not None and self.part_puts >= self.crash_after:
                raise KeyboardInterrupt("killed mid-push")
            self.part_puts += 1
        return super().request(method, url, *a, **kw)


def _data(n: int = PART * 7 + 123) -> bytes:
    return hashlib.sha256(b"seed").digest() * (n // 32) + b"x" * (n % 32)


def _roundtrip(url: str, key: str, tmp_path: Path) -> None:
    data = _data()
    src = tmp_path / "big.bin"
    src.write_bytes(data)
    with _client(url, key) as cat:
        counting = _CountingSession()
        cat.transfers = counting
        row = cat.push(src, "big", "v1")
        assert row["status"] == "ready" and row["sha256"] == hashlib.sha256(data).hexdigest()
        assert counting.part_puts == 8  # > 5 parts
        got = cat.pull("big", tmp_path / "got.bin")
        assert (tmp_path / "got.bin").read_bytes() == data and got.bytes_downloaded == len(data)


def test_multipart_file_backend(small_parts: Catalog, tmp_path: Path) -> None:
    _roundtrip(small_parts.url, small_parts.write_key, tmp_path)
    assert not os.listdir(tmp_path / "objects" / ".multipart")  # parts joined and removed


def test_killed_push_resumes_with_the_missing_parts(small_parts: Catalog, tmp_path: Path) -> None:
    data = _data()
    src = tmp_path / "big.bin"
    src.write_bytes(data)
    with _client(small_parts.url, small_parts.write_key, workers=1) as cat:
        cat.transfers = _CountingSession(crash_after=3)
        with pytest.raises(KeyboardInterrupt):
            cat.push(src, "big", "v1")
    sidecars = list((tmp_path / "cache" / "pushes").glob("*.json"))
    assert len(sidecars) == 1
    assert small_parts.service.db.get("big", "v1").status == "pending"  # type: ignore[union-attr]
    with _client(small_parts.url, small_parts.write_key) as cat:  # a fresh process's client
        counting = _CountingSession()
        cat.transfers = counting
        row = cat.push(src, "big", "v1")
        assert row["status"] == "ready"
        assert counting.part_puts == 8 - 3  # only the parts the killed push had not stored
        cat.pull("big", tmp_path / "got.bin")
    assert (tmp_path / "got.bin").read_bytes() == data
    assert not list((tmp_path / "cache" / "pushes").glob("*.json"))  # sidecar removed


def test_multipart_abort_and_small_part_refused(small_parts: Catalog) -> None:
    with small_parts.client() as cat:
        body = {"name": "x", "version": "v1", "sha256": "ab" * 32, "bytes": 10_000}
        r = requests.post(small_parts.url + "/v1/datasets", timeout=10,
                          json={**body, "part_size": 10},
                          headers={"Authorization": f"Bearer {small_parts.write_key}"})
        assert r.status_code == 400 and "part_size must be at least 1024" in r.json()["error"]
        reg = cat.request("POST", "/v1/datasets", json={**body, "part_size": 2048})
        assert reg["upload"] == {"multipart": True, "part_size": 2048, "parts": 5}
        parts = cat.request("POST", "/v1/datasets/x/v1/parts",
                            json={"token": reg["token"], "parts": [1, 5]})
        assert [p["bytes"] for p in parts["parts"]] == [2048, 10_000 - 4 * 2048]
        assert cat.request("POST", "/v1/datasets/x/v1/abort", json={"token": reg["token"]})
        r2 = requests.put(parts["parts"][0]["url"], data=b"x" * 2048, timeout=10)
        assert r2.status_code == 404  # the upload is gone


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(importlib.util.find_spec("moto") is None, reason="moto[server] missing")
def test_multipart_moto_server(tmp_path: Path, monkeypatch) -> None:
    import boto3
    import moto.s3.models
    from moto.server import ThreadedMotoServer

    monkeypatch.setattr(moto.s3.models, "S3_UPLOAD_PART_MIN_SIZE", 1024)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("NUMBATRAJ_CACHE", str(tmp_path / "cache"))
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(
            Bucket="lab")
        objects = f"s3://lab?endpoint={endpoint}&region=us-east-1"
        with CatalogService(f"sqlite:///{tmp_path}/c.db", objects, min_part_bytes=1024) as svc:
            _roundtrip(svc.url, svc.db.add_key("write"), tmp_path)
            assert requests.get(svc.url + "/v1/health", timeout=10).json()["ok"] is True
    finally:
        server.stop()


# -- parallel ranged pulls ----------------------------------------------------------------


def test_parallel_ranged_pull(tmp_path: Path) -> None:
    data = os.urandom(300_000)
    sha = hashlib.sha256(data).hexdigest()
    with FaultServer(data) as srv, requests.Session() as sess:
        assert parallel_fetch(sess, srv.url("throttle", rate=10 << 20), str(tmp_path / "a"),
                              sha, len(data), connections=4, progress=False)
        assert (tmp_path / "a").read_bytes() == data
        ranges = [r["range"] for r in srv.requests]
        assert len(ranges) == 4 and all(r.startswith("bytes=") for r in ranges)
        # a server that ignores Range: nothing written, the caller streams it instead
        assert not parallel_fetch(sess, srv.url("ignore-range"), str(tmp_path / "b"), sha,
                                  len(data), connections=4, progress=False)
        assert not (tmp_path / "b").exists()
        with pytest.raises(IntegrityError):
            parallel_fetch(sess, srv.url("wrong-bytes"), str(tmp_path / "c"), sha, len(data),
                           connections=4, progress=False)
        assert not (tmp_path / "c").exists()
        # a connection dropped mid-range is resumed where it stopped
        assert parallel_fetch(sess, srv.url("drop", at=100_000, times=1),
                              str(tmp_path / "d"), sha, len(data), connections=2,
                              progress=False, backoff=0.01)
        assert (tmp_path / "d").read_bytes() == data


def test_pull_uses_ranges_for_a_large_object(small_parts: Catalog, tmp_path: Path) -> None:
    data = os.urandom(50_000)
    (tmp_path / "x.bin").write_bytes(data)
    with _client(small_parts.url, small_parts.write_key) as cat:
        cat.push(tmp_path / "x.bin", "large", "v1")
        res = cat.pull("large", tmp_path / "y.bin")
    assert (tmp_path / "y.bin").read_bytes() == data and res.bytes_downloaded == len(data)
