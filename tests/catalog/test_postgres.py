"""The catalog on PostgreSQL: the same flows as on SQLite, against a real server.

Runs when ``NUMBATRAJ_TEST_POSTGRES_URL`` names a server (``.ci/run`` starts one when the
machine has PostgreSQL) and psycopg is installed; each test gets its own schema.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from numbatraj.catalog import CatalogService, open_db
from numbatraj.catalog.db import PostgresCatalogDB
from numbatraj.errors import CatalogAuthError, CatalogError, CatalogRequestError
from numbatraj.remote import RemoteCatalog
from tests.catalog.conftest import Catalog

URL = os.environ.get("NUMBATRAJ_TEST_POSTGRES_URL", "")
try:
    import psycopg  # type: ignore[import-not-found]
except ModuleNotFoundError:
    psycopg = None


def test_postgres_needs_psycopg() -> None:
    if psycopg is not None:
        pytest.skip("psycopg is installed")
    with pytest.raises(CatalogRequestError, match="needs the psycopg package"):
        open_db("postgresql://u:p@127.0.0.1:1/db")


needs_pg = pytest.mark.skipif(
    not URL or psycopg is None,
    reason="no PostgreSQL: set NUMBATRAJ_TEST_POSTGRES_URL and install psycopg",
)


@pytest.fixture
def pg_catalog(tmp_path: Path) -> Iterator[Catalog]:
    schema = f"nt_{secrets.token_hex(6)}"
    with psycopg.connect(URL, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in URL else "?"
    db = open_db(f"{URL}{sep}options=-csearch_path%3D{schema}")
    assert isinstance(db, PostgresCatalogDB)
    svc = CatalogService(db, f"file://{tmp_path}/objects").start()
    try:
        yield Catalog(svc, db.add_key("read"), db.add_key("write"))
    finally:
        svc.stop()
        with psycopg.connect(URL, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


@needs_pg
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


@needs_pg
def test_pg_keys_and_roles(pg_catalog: Catalog, store) -> None:
    path, _ = store
    r = requests.get(pg_catalog.url + "/v1/datasets", timeout=10,
                     headers={"Authorization": "Bearer ntk_nope"})
    assert r.status_code == 401
    with pg_catalog.client(write=False) as reader, pytest.raises(CatalogAuthError, match="403"):
        reader.push(path, "walker", "v1")
    with RemoteCatalog(pg_catalog.url, pg_catalog.write_key) as writer:
        assert writer.list() == []
