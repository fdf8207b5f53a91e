"""RemoteCatalog.from_env, the dotenv reader, secrets kept out of client errors, and the
commands."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from numbatraj.cli import main
from numbatraj.errors import CatalogError, CatalogRequestError, DownloadError
from numbatraj.remote import ENV_KEY, ENV_URL, RemoteCatalog, read_dotenv
from tests.catalog.conftest import Catalog


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


def test_dotenv_follows_python_dotenv(clean_env: Path) -> None:
    (clean_env / ".env").write_text(
        "A=v # a note\nB='v # kept'\nC=\"two words\"\nD=${A}\nexport E = e\nBARE\n"
    )
    # python-dotenv's rule: an unquoted value ends at " #" (the hand-written parser kept it)
    assert read_dotenv(clean_env / ".env") == {
        "A": "v", "B": "v # kept", "C": "two words", "D": "${A}", "E": "e"}
    assert read_dotenv(clean_env / "absent.env") == {}


def test_unreachable_catalog(catalog: Catalog) -> None:
    url = catalog.url
    catalog.service.stop()
    catalog.service.stop = lambda: None  # type: ignore[method-assign]
    with RemoteCatalog(url, catalog.read_key, timeout=2) as cat:
        with pytest.raises(CatalogError, match="unreachable"):
            cat.list()


def dead_url() -> str:
    """A URL on a closed loopback port, its query holding fake presign secrets."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}/bucket/obj?X-Amz-Signature=SECRET&X-Amz-Credential=AKIAQ"


def test_client_upload_error_has_no_signature(tmp_path: Path, catalog: Catalog) -> None:
    f = tmp_path / "blob"
    f.write_bytes(b"x" * 100)
    with pytest.raises(DownloadError) as ei:
        catalog.client().upload(str(f), {"url": dead_url(), "method": "PUT"})
    msg = str(ei.value)
    assert "failed" in msg and "SECRET" not in msg and "AKIAQ" not in msg


def test_catalog_unreachable_error_has_no_password() -> None:
    url = dead_url().split("/bucket")[0].replace("http://", "http://admin:hunter2@")
    cat = RemoteCatalog(url, "k", timeout=2)
    with pytest.raises(CatalogError) as ei:
        cat.describe("x", None)
    assert "hunter2" not in str(ei.value)


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


def test_serve_banner_masks_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from numbatraj.catalog import service
    from numbatraj.cli import catalog as _cli

    class FakeService:
        url = "http://127.0.0.1:1"

        def __init__(self, db: str, objects: str, **kw: Any) -> None:
            self.objects = argparse.Namespace(description=objects)

        def serve_forever(self) -> None:
            raise KeyboardInterrupt

        def stop(self) -> None:
            pass

    monkeypatch.setattr(service, "CatalogService", FakeService)
    args = argparse.Namespace(
        db="postgresql://cat:s3cret@db.example:5432/catalog", objects="file:///tmp/o",
        host="127.0.0.1", port=0, public_url=None, get_expiry=60, put_expiry=60,
        verbose=False,
    )
    assert _cli._cmd_serve(args) == 0
    out = capsys.readouterr().out
    assert "s3cret" not in out and "db=postgresql://cat:***@db.example:5432/catalog" in out
