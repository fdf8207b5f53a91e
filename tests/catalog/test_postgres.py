"""The catalog on PostgreSQL: the same flows as on SQLite, against a real server.

Runs when ``NUMBATRAJ_TEST_POSTGRES_URL`` names a server (``.ci/run`` installs and starts
one) and psycopg is installed; each test gets its own schema.  Under ``CI`` a missing
server fails these tests instead of skipping them (tests/catalog/pg.py).
"""

from __future__ import annotations

import subprocess
import time

import pytest
import requests

from numbatraj.catalog import open_db
from numbatraj.catalog.db import PostgresCatalogDB
from numbatraj.errors import CatalogAuthError, CatalogError, CatalogRequestError
from numbatraj.remote import RemoteCatalog
from tests.catalog.conftest import Catalog
from tests.catalog.pg import RESTART, URL

try:
    import psycopg  # type: ignore[import-not-found]
except ModuleNotFoundError:
    psycopg = None


def test_postgres_needs_psycopg() -> None:
    if psycopg is not None:
        pytest.skip("psycopg is installed")
    with pytest.raises(CatalogRequestError, match="needs the psycopg package"):
        open_db("postgresql://u:p@127.0.0.1:1/db")


def test_pg_roundtrip_pending_and_immutability(pg_catalog: Catalog, store, tmp_path) -> None:
    path, _ = store
    with pg_catalog.client() as cat:
        reg = cat.request("POST", "/v1/datasets", json={
            "name": "walker", "version": "v1", "sha256": "ab" * 32, "bytes": 10,
        })
        assert reg["status"] == "pending"
        with pytest.raises(CatalogError, match="is pending"):
            cat.describe("walker", "v1")
        row = cat.push(path, "walker", "v1", env_id="walker-walk", n_rows=3000, seed=7)
        assert row["status"] == "ready" and row["seed"] == 7
        res = cat.pull("walker", tmp_path / "out.h5")
        assert (tmp_path / "out.h5").read_bytes() == path.read_bytes()
        assert res.bytes_downloaded == path.stat().st_size
        assert cat.pull("walker", tmp_path / "out.h5").cached
        (tmp_path / "x").write_bytes(b"x")
        with pytest.raises(CatalogError, match="immutable"):
            cat.push(tmp_path / "x", "walker", "v1")
        cat.push(tmp_path / "x", "walker", "v2")
        assert [r["version"] for r in cat.list("walker")] == ["v1", "v2"]
        assert cat.describe("walker")["version"] == "v2"


def test_pg_keys_and_roles(pg_catalog: Catalog, store) -> None:
    path, _ = store
    r = requests.get(pg_catalog.url + "/v1/datasets", timeout=10,
                     headers={"Authorization": "Bearer ntk_nope"})
    assert r.status_code == 401
    with pg_catalog.client(write=False) as reader, pytest.raises(CatalogAuthError, match="403"):
        reader.push(path, "walker", "v1")
    with RemoteCatalog(pg_catalog.url, pg_catalog.write_key) as writer:
        assert writer.list() == []


def _restart_postgres() -> str:
    """Restart the server (``NUMBATRAJ_TEST_POSTGRES_RESTART``), or, without that command,
    kill every other backend: to the pool both look like a server that went away."""
    if RESTART:
        subprocess.run(RESTART, shell=True, check=True, timeout=120,
                       stdout=subprocess.DEVNULL)
        return "restarted"
    import psycopg

    with psycopg.connect(URL, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'")
    return "backends terminated"


def test_pg_restart_mid_test(pg_catalog: Catalog, store, tmp_path) -> None:
    path, _ = store
    assert isinstance(pg_catalog.service.db, PostgresCatalogDB)
    with pg_catalog.client() as cat:
        cat.push(path, "walker", "v1")
        for _ in range(5):  # fill the pool with connections the restart will kill
            assert cat.describe("walker")["version"] == "v1"
        how = _restart_postgres()
        deadline = time.monotonic() + 60
        while True:  # the service was not restarted: its pool reconnects by itself
            try:
                assert cat.describe("walker")["version"] == "v1"
                break
            except CatalogError as exc:
                assert getattr(exc, "status", None) == 503, exc
                assert time.monotonic() < deadline, f"no recovery 60 s after {how}"
                time.sleep(0.5)
        for _ in range(20):
            assert cat.describe("walker")["version"] == "v1"
        (tmp_path / "v2.bin").write_bytes(b"after the restart")
        assert cat.push(tmp_path / "v2.bin", "walker", "v2")["status"] == "ready"
        health = requests.get(pg_catalog.url + "/v1/health", timeout=10).json()
        assert health["ok"] is True and health["database"] == "ok"
