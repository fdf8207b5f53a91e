"""CatalogDB: database URLs, transactions, the recording tables, and passwords kept out of
messages."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from numbatraj.catalog.db import DatasetRecord, SqliteCatalogDB, mask_password, open_db
from numbatraj.errors import CatalogRequestError
from tests.catalog.conftest import Catalog


def test_open_db_urls(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    db = open_db("sqlite:///rel/c.db")
    assert isinstance(db, SqliteCatalogDB) and db.path == "rel/c.db"
    db.close()
    db = open_db(f"sqlite:///{tmp_path}/abs.db")
    assert db.path == f"{tmp_path}/abs.db"  # type: ignore[attr-defined]
    db.close()
    with sqlite3.connect(tmp_path / "abs.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    for bad, why in [("mysql://x/y", "is not supported"), ("sqlite://", "names no file")]:
        with pytest.raises(CatalogRequestError, match=why) as ei:
            open_db(bad)
        msg = str(ei.value)  # the library names the URL, never a command-line flag
        assert msg.startswith(f"database URL {bad!r} ") and "--" not in msg


def _record(version: str) -> DatasetRecord:
    return DatasetRecord("ds", version, "ab" * 32, 1, None, None, None, None, "pending",
                         f"datasets/ds/{version}/{'0' * 32}.bin", 1.0, 1.0)


def test_transaction_commits_or_rolls_back_whole(tmp_path: Path) -> None:
    db = open_db(f"sqlite:///{tmp_path}/t.db")
    try:
        with db.transaction() as tx:
            assert tx.execute("INSERT INTO api_keys (key_hash, role, label, created_at) "
                              "VALUES (?, ?, ?, ?)", ("h1", "read", None, 1.0)) == 1
            assert tx.query("SELECT role FROM api_keys WHERE key_hash = ?", ("h1",)) == [
                ("read",)]
        with pytest.raises(RuntimeError, match="boom"), db.transaction() as tx:
            tx.execute("DELETE FROM api_keys")
            raise RuntimeError("boom")
        assert [k.key_hash for k in db.keys()] == ["h1"]  # the delete was rolled back
        # a transaction holds the connection: another thread's statement waits for it
        seen: list[int] = []
        with db.transaction() as tx:
            t = threading.Thread(target=lambda: seen.append(len(db.list_rows())))
            t.start()
            tx.execute("DELETE FROM artifacts")  # the datasets table of schema v1
            db_rows_before = seen[:]
        t.join()
        assert db_rows_before == [] and seen == [0]
        db.put_pending(_record("v1"))
        assert [r.version for r in db.list_rows("ds")] == ["v1"]
    finally:
        db.close()


def test_mark_blob_ready_leaves_a_ready_or_replaced_row(catalog: Catalog) -> None:
    db = catalog.service.db
    sha = "ab" * 32
    db.put_pending_blob("p", "d", sha, 3, "k1")
    b1 = db.blob("p", "d", sha)
    assert b1 is not None
    db.put_pending_blob("p", "d", sha, 3, "k2")
    assert not db.mark_blob_ready("p", "d", b1)
    b2 = db.blob("p", "d", sha)
    assert b2 is not None and b2.status == "pending"
    assert db.mark_blob_ready("p", "d", b2)
    assert not db.mark_blob_ready("p", "d", b2)  # already ready


def test_mask_password() -> None:
    assert mask_password("postgresql://u:s3cret@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert mask_password("postgres://h/db?password=s3cret&sslmode=require") == \
        "postgres://h/db?password=***&sslmode=require"
    for plain in ("postgresql://u@h/db", "sqlite:///x.db", "catalog.db"):
        assert mask_password(plain) == plain


def test_unsupported_db_url_error_masks_password() -> None:
    with pytest.raises(CatalogRequestError, match="is not supported") as ei:
        open_db("mysql://admin:s3cret@db.example/catalog")
    assert "s3cret" not in str(ei.value) and "admin:***@db.example" in str(ei.value)
