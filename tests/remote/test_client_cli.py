"""RemoteCatalog.from_env, the dotenv reader, the database URLs, and the commands."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from numbatraj.cli import main
from numbatraj.errors import CatalogError, CatalogRequestError
from numbatraj.remote import ENV_KEY, ENV_URL, RemoteCatalog, open_db, read_dotenv
from numbatraj.remote.db import SqliteCatalogDB
from tests.remote.conftest import Catalog


@pytest.fixture
def clean_env(monkeypatch, tmp_path: Path) -> Path:
    monkeypatch.delenv(ENV_URL, raising=False)
    monkeypatch.delenv(ENV_KEY, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_from_env_names_the_missing_key(clean_env: Path, monkeypatch) -> None:
    with pytest.raises(CatalogRequestError, match=f"{ENV_URL} is not set"):
        RemoteCatalog.from_env()
    monkeypatch.setenv(ENV_URL, "http://127.0.0.1:1")
    with pytest.raises(CatalogRequestError, match=f"{ENV_KEY} is not set .*\\.env"):
        RemoteCatalog.from_env()
    monkeypatch.setenv(ENV_KEY, "")
    with pytest.raises(CatalogRequestError, match=f"{ENV_KEY} is empty"):
        RemoteCatalog.from_env()
    monkeypatch.setenv(ENV_KEY, "   ")
    with pytest.raises(CatalogRequestError, match=f"{ENV_KEY} is empty"):
        RemoteCatalog.from_env()


def test_empty_key_is_refused_directly() -> None:
    with pytest.raises(CatalogRequestError, match="bare 'Authorization: Bearer'"):
        RemoteCatalog("http://127.0.0.1:1", "")


def test_dotenv_file_and_precedence(clean_env: Path, monkeypatch) -> None:
    (clean_env / ".env").write_text(
        f"# catalog\nexport {ENV_URL}='http://127.0.0.1:5'\n{ENV_KEY}=\"from-file\"\n"
        "JUNK LINE\n"
    )
    assert read_dotenv(clean_env / ".env") == {ENV_URL: "http://127.0.0.1:5", ENV_KEY: "from-file"}
    cat = RemoteCatalog.from_env()
    assert cat.url == "http://127.0.0.1:5"
    assert cat._session.headers["Authorization"] == "Bearer from-file"
    monkeypatch.setenv(ENV_KEY, "from-env")
    assert RemoteCatalog.from_env()._session.headers["Authorization"] == "Bearer from-env"
    (clean_env / "other.env").write_text(f"{ENV_URL}=http://127.0.0.1:6\n{ENV_KEY}=\n")
    monkeypatch.delenv(ENV_KEY)
    with pytest.raises(CatalogRequestError, match=f"{ENV_KEY} is empty .*other.env"):
        RemoteCatalog.from_env("other.env")


def test_unreachable_catalog(catalog: Catalog) -> None:
    url = catalog.url
    catalog.service.stop()
    catalog.service.stop = lambda: None  # type: ignore[method-assign]
    with RemoteCatalog(url, catalog.read_key, timeout=2) as cat:
        with pytest.raises(CatalogError, match="unreachable"):
            cat.list()


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
    for bad in ["mysql://x/y", "sqlite://"]:
        with pytest.raises(CatalogRequestError, match="--db"):
            open_db(bad)


def test_commands_against_a_served_catalog(tmp_path: Path, store, monkeypatch, capsys) -> None:
    path, _ = store
    db = f"sqlite:///{tmp_path}/cli.db"
    assert main(["catalog", "add-key", "--db", db, "--role", "write", "--label", "ci"]) == 0
    key = capsys.readouterr().out.strip()
    assert key.startswith("ntk_")
    proc = subprocess.Popen(
        [sys.executable, "-m", "numbatraj", "catalog", "serve", "--db", db,
         "--objects", f"file://{tmp_path}/objects", "--port", "0"],
        stdout=subprocess.PIPE, text=True, cwd=os.getcwd(),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
        assert m, line
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv(ENV_URL, m.group(1))
        monkeypatch.setenv(ENV_KEY, key)
        assert main(["remote", "push", str(path), "walker-random", "v1",
                     "--source-commit", "deadbeef"]) == 0
        assert "walker-random v1: ready" in capsys.readouterr().out
        assert main(["remote", "list"]) == 0
        out = capsys.readouterr().out
        assert re.search(r"walker-random\s+v1\s+ready\s+\d+\s+walker-walk\s+3000\s+7", out), out
        assert main(["remote", "describe", "walker-random"]) == 0
        assert '"source_commit": "deadbeef"' in capsys.readouterr().out
        assert main(["remote", "pull", "walker-random", "got.h5"]) == 0
        assert "bytes fetched" in capsys.readouterr().out
        assert main(["remote", "pull", "walker-random", "got.h5"]) == 0
        assert "nothing moved" in capsys.readouterr().out
        assert (tmp_path / "got.h5").read_bytes() == path.read_bytes()
        assert main(["remote", "describe", "nothing-here"]) == 1
        assert "no dataset named 'nothing-here'" in capsys.readouterr().err
        monkeypatch.setenv(ENV_KEY, "ntk_wrong")
        assert main(["remote", "list"]) == 1
        assert "401" in capsys.readouterr().err
    finally:
        proc.terminate()
        proc.wait(timeout=10)
