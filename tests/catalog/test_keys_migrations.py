"""Key management (add, list, revoke: 401 from the next request) and schema migrations
(a catalog made by the first release upgrades in place)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import requests

from numbatraj.catalog import CatalogService, open_db
from numbatraj.catalog.db import hash_key
from numbatraj.catalog.migrations import MIGRATIONS
from numbatraj.cli import main
from numbatraj.errors import CatalogRequestError


def test_keys_add_list_revoke(tmp_path: Path, capsys) -> None:
    db = f"sqlite:///{tmp_path}/k.db"
    assert main(["catalog", "keys", "add", "--db", db, "--role", "write", "--label", "ci"]) == 0
    key = capsys.readouterr().out.strip()
    assert key.startswith("ntk_")
    assert main(["catalog", "add-key", "--db", db, "--role", "read"]) == 0  # the alias
    reader = capsys.readouterr().out.strip()
    assert main(["catalog", "keys", "list", "--db", db, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [k["role"] for k in listed] == ["write", "read"]
    assert set(listed[0]) == {"id", "role", "label", "created", "last_used", "revoked"}
    assert listed[0]["label"] == "ci" and listed[0]["revoked"] is None
    assert key not in json.dumps(listed) and hash_key(key) not in json.dumps(listed)
    assert main(["catalog", "keys", "list", "--db", db]) == 0
    table = capsys.readouterr().out
    assert listed[0]["id"] in table and "ci" in table
    with CatalogService(db, f"file://{tmp_path}/objects") as svc:
        h = {"Authorization": f"Bearer {key}"}
        assert requests.get(svc.url + "/v1/datasets", headers=h, timeout=10).status_code == 200
        assert main(["catalog", "keys", "revoke", "--db", db, listed[0]["id"]]) == 0
        assert "revoked" in capsys.readouterr().out
        r = requests.get(svc.url + "/v1/datasets", headers=h, timeout=10)
        assert r.status_code == 401 and "revoked" in r.json()["error"]
        h2 = {"Authorization": f"Bearer {reader}"}  # the other key is untouched
        assert requests.get(svc.url + "/v1/datasets", headers=h2, timeout=10).ok
    assert main(["catalog", "keys", "list", "--db", db, "--json"]) == 0
    after = json.loads(capsys.readouterr().out)
    assert after[0]["revoked"] is not None and after[0]["last_used"] is not None
    assert main(["catalog", "keys", "revoke", "--db", db, "nope"]) == 1
    assert "no API key with id 'nope'" in capsys.readouterr().err


# -- migrations -----------------------------------------------------------------------------

#: The tables exactly as the first release (schema without versions) created them.
_FIRST_RELEASE = MIGRATIONS[0].statements


def _first_release_db(path: Path) -> str:
    conn = sqlite3.connect(path)
    for stmt in _FIRST_RELEASE:
        conn.execute(stmt)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(
        "INSERT INTO datasets VALUES ('walker', 'v1', ?, 5, 'walker-walk', 10, 7, 'abc', "
        "'ready', 'datasets/walker/v1/" + "0" * 32 + ".bin', 1.0, 2.0)", ("ab" * 32,))
    conn.execute(
        "INSERT INTO datasets VALUES ('walker', 'v2', ?, 5, NULL, NULL, NULL, NULL, "
        "'pending', 'datasets/walker/v2/" + "1" * 32 + ".bin', 3.0, 3.0)", ("cd" * 32,))
    key = "ntk_old-key"
    conn.execute("INSERT INTO api_keys VALUES (?, 'write', 'old', 1.0)", (hash_key(key),))
    conn.commit()
    conn.close()
    return key


def test_a_first_release_catalog_upgrades_in_place(tmp_path: Path, capsys) -> None:
    path = tmp_path / "old.db"
    key = _first_release_db(path)
    db = open_db(f"sqlite:///{path}")
    try:
        assert db.migrated == [1, 2] and db.schema_version == MIGRATIONS[-1].version
        rec = db.get("walker", "v1")
        assert rec is not None and rec.kind == "dataset" and rec.seed == 7
        assert rec.status == "ready" and rec.sha256 == "ab" * 32
        assert [r.version for r in db.list_rows("walker")] == ["v1", "v2"]
        assert db.role_of(key) == "write"
    finally:
        db.close()
    again = open_db(f"sqlite:///{path}")  # a second open applies nothing
    assert again.migrated == []
    again.close()
    assert main(["catalog", "migrate", "--db", f"sqlite:///{path}"]) == 0
    assert f"schema version {MIGRATIONS[-1].version}" in capsys.readouterr().out
    # the upgraded catalog serves the old rows and keys
    objects = tmp_path / "objects" / "datasets" / "walker" / "v1"
    objects.mkdir(parents=True)
    (objects / ("0" * 32 + ".bin")).write_bytes(b"hello")
    with CatalogService(f"sqlite:///{path}", f"file://{tmp_path}/objects") as svc:
        r = requests.get(svc.url + "/v1/datasets/walker?version=v1", timeout=10,
                         headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200 and r.json()["seed"] == 7
        assert requests.get(r.json()["download"]["url"], timeout=10).content == b"hello"


def test_a_failed_migration_leaves_the_previous_version(tmp_path: Path, monkeypatch) -> None:
    from numbatraj.catalog import migrations

    path = tmp_path / "old.db"
    _first_release_db(path)
    broken = migrations.Migration(2, "broken", migrations.MIGRATIONS[1].statements[:3]
                                  + ("CREATE TABLE nonsense (",))
    monkeypatch.setattr(migrations, "MIGRATIONS", (migrations.MIGRATIONS[0], broken))
    with pytest.raises(Exception, match="syntax error|incomplete input"):
        open_db(f"sqlite:///{path}")
    conn = sqlite3.connect(path)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "datasets" in tables and "artifacts" not in tables  # step 2 rolled back whole
    assert conn.execute("SELECT MAX(version) FROM schema_versions").fetchone()[0] == 1
    conn.close()


def test_revoking_an_unknown_key_lists_the_valid_ids(tmp_path: Path) -> None:
    db = open_db(f"sqlite:///{tmp_path}/k.db")
    try:
        db.add_key("read")
        with pytest.raises(CatalogRequestError, match="active ids: [0-9a-f]{12}"):
            db.revoke_key("000000000000")
    finally:
        db.close()
