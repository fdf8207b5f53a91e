"""End to end on loopback, as a user would: write a store, push, pull, reopen, verify."""

from __future__ import annotations

import importlib.util
import os
import socket
import time
from pathlib import Path

import numpy as np
import pytest
import requests

from numbatraj import TrajectoryStore, validate_store
from numbatraj.catalog import CatalogService
from numbatraj.errors import CatalogError
from numbatraj.io.atomic import part_path
from numbatraj.io.hashing import sha256_file
from numbatraj.remote import RemoteCatalog
from tests.catalog.conftest import Catalog
from tests.catalog.s3standin import S3StandIn


def _check_store(path: Path, cols: dict[str, np.ndarray]) -> None:
    assert validate_store(path).ok
    with TrajectoryStore(path) as s:
        assert s.n_rows == len(cols["state"]) and s.n_episodes == 3
        assert s.manifest.get("env_id") == "walker-walk"
        for name, arr in cols.items():
            np.testing.assert_array_equal(s.load_column(name), arr)


def _roundtrip(cat: RemoteCatalog, store: Path, cols: dict[str, np.ndarray], out: Path) -> None:
    row = cat.push(store, "walker-random", "v1", env_id="walker-walk", n_rows=3000, seed=7,
                   source_commit="abc123")
    assert row["status"] == "ready" and row["sha256"] == sha256_file(store)
    assert (row["seed"], row["source_commit"], row["n_rows"]) == (7, "abc123", 3000)
    res = cat.pull("walker-random", out)
    assert not res.cached and res.bytes_downloaded == os.path.getsize(store)
    assert not os.path.exists(part_path(out))
    _check_store(out, cols)
    again = cat.pull("walker-random", out, version="v1")
    assert again.cached and again.bytes_downloaded == 0


def test_file_backend_roundtrip(catalog: Catalog, store, tmp_path: Path) -> None:
    path, cols = store
    with catalog.client() as cat:
        before = catalog.service.object_bytes_served
        _roundtrip(cat, path, cols, tmp_path / "fresh" / "walker.h5")
        # one full body for the first pull, none for the second
        assert catalog.service.object_bytes_served - before == os.path.getsize(path)
        assert [r["status"] for r in cat.list()] == ["ready"]


def test_s3_backend_roundtrip(tmp_path: Path, store, monkeypatch) -> None:
    path, cols = store
    with S3StandIn("lab-datasets") as s3:
        for k, v in s3.credentials_env().items():
            monkeypatch.setenv(k, v)
        objects = f"s3://lab-datasets/numbatraj?endpoint={s3.endpoint}&region=auto"
        with CatalogService(f"sqlite:///{tmp_path}/c.db", objects) as svc:
            with RemoteCatalog(svc.url, svc.db.add_key("write")) as cat:
                _roundtrip(cat, path, cols, tmp_path / "fresh.h5")
                desc = cat.describe("walker-random")
        assert s3.bytes_served == os.path.getsize(path)  # the second pull read nothing
        (key,) = s3.objects
        assert key.startswith("numbatraj/datasets/walker-random/v1/") and len(key) > 60
        methods = [m for m, _ in s3.log]
        assert methods == ["PUT", "HEAD", "GET"]
        url = desc["download"]["url"]
        assert url.startswith(s3.endpoint) and "X-Amz-Signature=" in url
        assert "X-Amz-Algorithm=AWS4-HMAC-SHA256" in url and "%2Fauto%2Fs3%2F" in url


def test_s3_store_without_checksums_is_hashed_by_the_service(
    tmp_path: Path, store, monkeypatch
) -> None:
    path, cols = store
    with S3StandIn("lab", keep_checksums=False) as s3:
        for k, v in s3.credentials_env().items():
            monkeypatch.setenv(k, v)
        with CatalogService(f"sqlite:///{tmp_path}/c.db", f"s3://lab?endpoint={s3.endpoint}") as svc:
            with RemoteCatalog(svc.url, svc.db.add_key("write")) as cat:
                assert cat.push(path, "walker-random", "v1")["status"] == "ready"
                cat.pull("walker-random", tmp_path / "out.h5")
        # HEAD gave no checksum, so complete read the object once (GET without a signature
        # in the query: the service's own authenticated read), then the client's presigned GET
        methods = [m for m, _ in s3.log]
        assert methods == ["PUT", "HEAD", "GET", "GET"]
    _check_store(tmp_path / "out.h5", cols)


def test_empty_dataset_roundtrip(catalog: Catalog, tmp_path: Path) -> None:
    src = tmp_path / "empty.bin"
    src.write_bytes(b"")
    with catalog.client() as cat:
        row = cat.push(src, "empty", "v1")
        assert row["bytes"] == 0 and row["status"] == "ready"
        res = cat.pull("empty", tmp_path / "out.bin")
    assert (tmp_path / "out.bin").read_bytes() == b"" and res.record["bytes"] == 0


def test_stale_dest_is_refetched(catalog: Catalog, store, tmp_path: Path) -> None:
    path, cols = store
    out = tmp_path / "out.h5"
    with catalog.client() as cat:
        cat.push(path, "walker-random", "v1")
        out.write_bytes(b"not the dataset")
        res = cat.pull("walker-random", out)
    assert not res.cached
    _check_store(out, cols)


def test_latest_ready_version_is_pulled(catalog: Catalog, store, tmp_path: Path, rng) -> None:
    from tests.catalog.conftest import write_store

    path, _ = store
    v2 = tmp_path / "v2.h5"
    cols2 = write_store(v2, rng, n_rows=900)
    with catalog.client() as cat:
        cat.push(path, "walker-random", "v1")
        cat.push(v2, "walker-random", "v2")
        res = cat.pull("walker-random", tmp_path / "latest.h5")
    assert res.record["version"] == "v2"
    _check_store(tmp_path / "latest.h5", cols2)


def _object_files(root: Path) -> list[str]:
    """Files under the object root (the upload handler may still be cleaning up: wait)."""
    deadline = time.monotonic() + 5
    while True:
        found = [f for _, _, fs in os.walk(root) for f in fs if f != ".signing-key"]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def _kill_upload_halfway(url: str, body: bytes) -> None:
    """Send a PUT that declares the whole body, send half of it, then drop the socket."""
    from urllib.parse import urlsplit

    u = urlsplit(url)
    with socket.create_connection((u.hostname, u.port)) as s:
        head = (
            f"PUT {u.path}?{u.query} HTTP/1.1\r\nHost: {u.netloc}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        s.sendall(head.encode() + body[: len(body) // 2])


def test_upload_killed_halfway_leaves_an_unusable_pending_row(
    catalog: Catalog, store, tmp_path: Path
) -> None:
    path, cols = store
    data = path.read_bytes()
    out = tmp_path / "out.h5"
    with catalog.client() as cat:
        reg = cat.request("POST", "/v1/datasets", json={
            "name": "walker-random", "version": "v1", "sha256": sha256_file(path),
            "bytes": len(data),
        })
        assert reg["status"] == "pending"
        _kill_upload_halfway(reg["upload"]["url"], data)
        with pytest.raises(CatalogError, match="v1' is pending"):
            cat.describe("walker-random", "v1")
        with pytest.raises(CatalogError, match="no ready version"):
            cat.pull("walker-random", out)
        assert not out.exists() and not os.path.exists(part_path(out))
        with pytest.raises(CatalogError, match="stays pending: no object was uploaded"):
            cat.request("POST", "/v1/datasets/walker-random/v1/complete")
        assert [r["status"] for r in cat.list()] == ["pending"]
        # nothing that looks complete was left in the object store either
        assert _object_files(tmp_path / "objects") == []
        # pushing again finishes the job
        assert cat.push(path, "walker-random", "v1")["status"] == "ready"
        cat.pull("walker-random", out)
    _check_store(out, cols)


def test_upload_of_other_bytes_is_refused_by_the_object_store(catalog: Catalog, store) -> None:
    path, _ = store
    data = path.read_bytes()
    with catalog.client() as cat:
        reg = cat.request("POST", "/v1/datasets", json={
            "name": "walker-random", "version": "v1", "sha256": sha256_file(path),
            "bytes": len(data),
        })
        forged = bytes(len(data))
        r = requests.put(reg["upload"]["url"], data=forged, timeout=10)
        assert r.status_code == 400 and "differs from the signed" in r.text
        with pytest.raises(CatalogError, match="stays pending"):
            cat.request("POST", "/v1/datasets/walker-random/v1/complete")


def test_ready_versions_are_immutable(catalog: Catalog, store, tmp_path: Path) -> None:
    path, _ = store
    other = tmp_path / "other.bin"
    other.write_bytes(b"different bytes")
    with catalog.client() as cat:
        first = cat.push(path, "walker-random", "v1")
        assert cat.push(path, "walker-random", "v1") == first  # same bytes: a no-op
        with pytest.raises(CatalogError, match="ready and immutable") as ei:
            cat.push(other, "walker-random", "v1")
        assert first["sha256"] in str(ei.value)
        assert cat.describe("walker-random", "v1")["sha256"] == first["sha256"]


def test_unknown_dataset_and_version(catalog: Catalog, store) -> None:
    path, _ = store
    with catalog.client() as cat:
        with pytest.raises(CatalogError, match="no dataset named 'nothing'"):
            cat.describe("nothing")
        cat.push(path, "walker-random", "v1")
        with pytest.raises(CatalogError, match="no dataset 'walker-random' version 'v9'"):
            cat.describe("walker-random", "v9")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(
    importlib.util.find_spec("moto") is None,
    reason="moto[server] is not installed: the moto ThreadedMotoServer round trip is skipped "
    "(the SigV4-checking stand-in test above covers the S3 backend)",
)
def test_moto_server_roundtrip(tmp_path: Path, store, monkeypatch) -> None:  # pragma: no cover
    import boto3
    from moto.server import ThreadedMotoServer

    path, cols = store
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(
            Bucket="lab"
        )
        objects = f"s3://lab?endpoint={endpoint}&region=us-east-1"
        with CatalogService(f"sqlite:///{tmp_path}/c.db", objects) as svc:
            with RemoteCatalog(svc.url, svc.db.add_key("write")) as cat:
                _roundtrip(cat, path, cols, tmp_path / "fresh.h5")
    finally:
        server.stop()
