"""Asset packs end to end against loopback servers: https, hf and catalog providers."""

from __future__ import annotations

import argparse
import errno
import hashlib
import os
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from numbatraj.cli import assets as _cli_assets
from numbatraj.io.archive import COMPLETE_MARKER
from numbatraj.remote import ENV_KEY, ENV_URL
from numbatraj.remote import assets as assets_mod
from numbatraj.remote._assets_kv import parse_assets_kv
from numbatraj.remote.assets import declared_packs, pack_status, pull_packs, where_packs
from tests.catalog.conftest import Catalog
from tests.io.test_archive import GOOD, HOSTILE, _sym, write_archive
from tests.remote.test_assets_source import write_kv


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FileServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:  # noqa: N802 - base class name
        srv = self.server
        auth = self.headers.get("Authorization")
        with srv.lock:
            srv.log.append((self.path, auth))
        body = srv.files.get(self.path)
        need = srv.tokens.get(self.path)
        if body is not None and need is not None and auth != f"Bearer {need}":
            status, body = 401, b"bad token"
        elif body is None:
            status, body = 404, b"no such file"
        else:
            status = 200
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class FileServer(ThreadingHTTPServer):
    """Serves ``files`` on 127.0.0.1; a path in ``tokens`` needs that bearer."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.files: dict[str, bytes] = {}
        self.tokens: dict[str, str] = {}
        self.log: list[tuple[str, str | None]] = []
        self.lock = threading.Lock()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"

    def hits(self, path: str) -> int:
        return sum(p == path for p, _ in self.log)


@pytest.fixture
def server() -> Iterator[FileServer]:
    srv = FileServer()
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A clean credential environment, the cache under tmp_path, cwd = the project root."""
    for k in ("HF_TOKEN", "HF_TOKEN_PATH", "HF_ENDPOINT", ENV_URL, ENV_KEY, "ROBOT_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("NUMBATRAJ_CACHE", str(tmp_path / "cache"))
    (tmp_path / "proj").mkdir()
    monkeypatch.chdir(tmp_path / "proj")
    return os.environ  # type: ignore[return-value]


def archive_bytes(tmp_path: Path, name: str, members: list[Any] = GOOD) -> bytes:
    return write_archive(tmp_path / name, members).read_bytes()


def declare(path: Path, *packs: dict[str, str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join("\n".join(f"{k}={v}" for k, v in p.items()) for p in packs))
    return path


def pack(name: str, data: bytes, dest: str, **kw: str) -> dict[str, str]:
    d = {"pack": name, "provider": "https", "sha256": hashlib.sha256(data).hexdigest(),
         "bytes": str(len(data)), "dest": dest}
    d.update(kw)
    return d


def run_cli(*argv: str) -> int:
    p = argparse.ArgumentParser()
    _cli_assets.register(p.add_subparsers(dest="command"))
    args = p.parse_args(["assets", *argv])
    return int(args.func(args))


def tree_files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != COMPLETE_MARKER
    }


EXPECTED = {
    "meshes/table.obj": b"v 0 0 0\n" * 100,
    "textures/wood.png": bytes(range(256)) * 40,
    "bin/tool": b"#!/bin/sh\n",
}


def test_https_and_hf_end_to_end(
    tmp_path: Path, server: FileServer, env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    zst = archive_bytes(tmp_path, "a.tar.zst")
    gz = archive_bytes(tmp_path, "b.tar.gz", [("robot.urdf", None, b"<robot/>")])
    plain = archive_bytes(tmp_path, "c.tar.gz", [("x.txt", None, b"x")])
    server.files.update({"/pub/a.tar.zst": zst, "/priv/b.tar.gz": gz, "/hf/a.tar.zst": zst,
                         "/pub/c.tar.gz": plain})
    server.tokens["/priv/b.tar.gz"] = "s3cret"
    server.tokens["/hf/a.tar.zst"] = "hf_abc"
    proj = Path.cwd()
    declare(proj / "envs/table/assets.kv",
            pack("table@v1", zst, "assets", url=server.url("/pub/a.tar.zst")),
            pack("plain@v1", plain, "plain", url=server.url("/pub/c.tar.gz")))
    declare(proj / "envs/robot/assets.kv",
            pack("robot@v2", gz, "assets", url=server.url("/priv/b.tar.gz"),
                 token_env="ROBOT_TOKEN"),
            pack("hfcopy@v1", zst, "hf-assets", provider="hf", url=server.url("/hf/a.tar.zst")))
    monkeypatch.setenv("ROBOT_TOKEN", "s3cret")
    monkeypatch.setenv("HF_ENDPOINT", server.url(""))  # the loopback server is the hf mirror
    (tmp_path / "hf-home").mkdir()
    (tmp_path / "hf-home" / "token").write_text("hf_abc\n")  # what `hf auth login` saves

    assert run_cli("status") == 1
    assert "0 of 4 packs present" in capsys.readouterr().out
    with pytest.raises(NotADirectoryError, match="--root nowhere is not a directory"):
        run_cli("pull", "--root", "nowhere")
    assert run_cli("where") == 0
    out = capsys.readouterr().out
    assert "bearer from $ROBOT_TOKEN (set)" in out and "s3cret" not in out
    assert "hf CLI token" in out and "hf_abc" not in out

    assert run_cli("pull") == 0
    assert tree_files(proj / "envs/table/assets") == EXPECTED
    assert tree_files(proj / "envs/robot/hf-assets") == EXPECTED
    assert tree_files(proj / "envs/robot/assets") == {"robot.urdf": b"<robot/>"}
    sent = dict(server.log)
    assert sent["/pub/c.tar.gz"] is None  # no credential on a plain https pack
    assert sent["/priv/b.tar.gz"] == "Bearer s3cret"
    assert sent["/hf/a.tar.zst"] == "Bearer hf_abc"
    # same bytes under two URLs: one download (the cache is keyed by sha256)
    assert server.hits("/pub/a.tar.zst") + server.hits("/hf/a.tar.zst") == 1
    assert "table@v1 -> envs/table/assets (0 bytes fetched, 3 linked)" in capsys.readouterr().out
    cache = tmp_path / "cache" / "assets" / hashlib.sha256(zst).hexdigest() / "tree"
    for dest in ("envs/table/assets", "envs/robot/hf-assets"):
        a = (proj / dest / "meshes/table.obj").stat()
        assert a.st_ino == (cache / "meshes/table.obj").stat().st_ino  # hard link, same inode
    assert not any(p.is_symlink() for p in proj.rglob("*"))

    n = len(server.log)
    assert run_cli("pull") == 0  # second pull moves nothing
    assert len(server.log) == n
    assert capsys.readouterr().out.count("present  ") == 4
    assert run_cli("status") == 0

    monkeypatch.setenv("HF_TOKEN", "hf_env")  # HF_TOKEN wins over the CLI's file
    server.tokens["/hf/a.tar.zst"] = "hf_env"
    assert run_cli("pull", "robot", "--force") == 0
    assert server.log[-1] == ("/hf/a.tar.zst", "Bearer hf_env")
    assert server.hits("/pub/c.tar.gz") == 1  # --force limited to matching assets.kv
    assert tree_files(proj / "envs/robot/hf-assets") == EXPECTED


def test_catalog_provider_presigned_get_without_key(
    tmp_path: Path, catalog: Catalog, env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = archive_bytes(tmp_path, "c.tar.zst")
    arc = tmp_path / "c.tar.zst"
    with catalog.client() as cat:
        cat.push(arc, "table-assets", "v3")
    monkeypatch.setenv(ENV_URL, catalog.url)
    monkeypatch.setenv(ENV_KEY, catalog.read_key)
    kv = declare(Path.cwd() / "assets.kv", pack("table@v3", data, "meshes", provider="catalog",
                                                 id="table-assets@v3"))
    seen: list[tuple[str, Any]] = []
    real = assets_mod.fetch

    def spy(url: str, dest: str, **kw: Any) -> Any:
        seen.append((url, kw.get("headers")))
        return real(url, dest, **kw)

    monkeypatch.setattr(assets_mod, "fetch", spy)
    packs, bad = declared_packs(Path.cwd())
    assert bad == []
    (res,) = pull_packs(packs)
    assert res.state == "pulled", res.error
    assert res.downloaded == len(data) and res.linked == 3
    assert tree_files(Path.cwd() / "meshes") == EXPECTED
    ((url, headers),) = seen
    assert "/objects/" in url and "sig=" in url and headers is None  # no API key on the GET
    assert catalog.service.object_bytes_served == len(data)
    (_, where, cred), = where_packs(packs)
    assert where == f"{catalog.url}/v1/datasets/table-assets?version=v3"
    assert "presigned GET carries no credential" in cred

    # the catalog holds other bytes than declared: refused before any transfer
    kv.write_text(kv.read_text().replace("dest=meshes", "dest=other"))
    wrong = kv.read_text().replace(hashlib.sha256(data).hexdigest(), "0" * 64)
    kv.write_text(wrong)
    (res,) = pull_packs(declared_packs(Path.cwd())[0])
    assert res.state == "failed" and "catalog table-assets v3 holds" in (res.error or "")
    assert len(seen) == 1 and not (Path.cwd() / "other").exists()


def test_one_failure_does_not_stop_the_others(
    tmp_path: Path, server: FileServer, env: dict[str, str], capsys: pytest.CaptureFixture[str],
) -> None:
    good = archive_bytes(tmp_path, "g.tar.gz")
    evil = archive_bytes(tmp_path, "e.tar.zst", [*GOOD, ("meshes/link", _sym, b"")])
    server.files.update({"/g.tar.gz": good, "/e.tar.zst": evil, "/w.tar.gz": good})
    proj = Path.cwd()
    declare(proj / "a/assets.kv", pack("evil@v1", evil, "assets", url=server.url("/e.tar.zst")))
    declare(proj / "b/assets.kv",
            pack("lost@v1", good, "lost", url=server.url("/missing.tar.gz")),
            pack("nokey@v1", good, "nokey", url=server.url("/g.tar.gz"), token_env="ROBOT_TOKEN"))
    bad_sha = pack("wrong@v1", good, "wrong", url=server.url("/w.tar.gz"))
    bad_sha["sha256"] = "f" * 64
    declare(proj / "c/assets.kv", bad_sha)
    declare(proj / "d/assets.kv", pack("fine@v1", good, "assets", url=server.url("/g.tar.gz")))
    (proj / "e").mkdir()
    (proj / "e/assets.kv").write_text("pack=broken\n")
    assert run_cli("pull") == 1
    err = capsys.readouterr().err
    assert "'meshes/link' is a symbolic link" in err and "evil@v1" in err
    assert "HTTP 404" in err and "/missing.tar.gz" in err
    assert "$ROBOT_TOKEN, which is not set" in err
    assert "sha256 mismatch" in err
    assert "e/assets.kv:1: pack: 'broken' is not NAME@VERSION" in err
    assert "5 failed: evil@v1, lost@v1, nokey@v1, wrong@v1, " in err
    assert tree_files(proj / "d/assets") == EXPECTED  # the good pack still landed
    for d in ("a/assets", "b/lost", "b/nokey", "c/wrong"):
        assert not (proj / d).exists()  # nothing lands in a failed pack's dest
    assert sorted(os.listdir(proj / "a")) == ["assets.kv"]


def test_copy_when_a_hard_link_is_impossible(
    tmp_path: Path, server: FileServer, env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = archive_bytes(tmp_path, "x.tar.zst")
    server.files["/x.tar.zst"] = data
    kv = declare(Path.cwd() / "assets.kv", pack("x@v1", data, "assets",
                                                 url=server.url("/x.tar.zst")))

    def no_link(*a: Any, **k: Any) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(assets_mod.os, "link", no_link)
    (res,) = pull_packs(declared_packs(kv.parent)[0])
    assert (res.state, res.linked, res.copied) == ("pulled", 0, 3), res.error
    cache = tmp_path / "cache/assets" / hashlib.sha256(data).hexdigest() / "tree"
    placed = Path.cwd() / "assets/meshes/table.obj"
    assert placed.stat().st_ino != (cache / "meshes/table.obj").stat().st_ino
    assert tree_files(Path.cwd() / "assets") == EXPECTED


@pytest.mark.skipif(
    not os.path.isdir("/dev/shm") or os.stat("/dev/shm").st_dev == os.stat("/tmp").st_dev,
    reason="needs /dev/shm on another filesystem than /tmp",
)
def test_copy_across_real_filesystems(
    tmp_path: Path, server: FileServer, env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = archive_bytes(tmp_path, "y.tar.gz")
    server.files["/y.tar.gz"] = data
    shm = Path("/dev/shm") / f"numbatraj-test-{os.getpid()}-{tmp_path.name}"
    monkeypatch.setenv("NUMBATRAJ_CACHE", str(shm))
    try:
        kv = declare(Path.cwd() / "assets.kv", pack("y@v1", data, "assets",
                                                     url=server.url("/y.tar.gz")))
        (res,) = pull_packs(declared_packs(kv.parent)[0])
        assert (res.state, res.linked, res.copied) == ("pulled", 0, 3), res.error
        assert tree_files(Path.cwd() / "assets") == EXPECTED
    finally:
        shutil.rmtree(shm, ignore_errors=True)


def test_states_foreign_dest_and_new_version(
    tmp_path: Path, server: FileServer, env: dict[str, str],
) -> None:
    v1 = archive_bytes(tmp_path, "v1.tar.gz", [("a.txt", None, b"one")])
    v2 = archive_bytes(tmp_path, "v2.tar.gz", [("b.txt", None, b"two")])
    server.files.update({"/v1.tar.gz": v1, "/v2.tar.gz": v2})
    kv = declare(Path.cwd() / "assets.kv", pack("p@v1", v1, "assets",
                                                 url=server.url("/v1.tar.gz")))
    (Path.cwd() / "assets").mkdir()
    (Path.cwd() / "assets/mine.txt").write_text("hand placed")
    (decl,) = declared_packs(kv.parent)[0]
    assert pack_status(decl).state == "foreign"
    (res,) = pull_packs([decl])
    assert res.state == "failed" and "not placed by numbatraj" in (res.error or "")
    assert (Path.cwd() / "assets/mine.txt").read_text() == "hand placed"
    (res,) = pull_packs([decl], force=True)
    assert res.state == "pulled" and tree_files(Path.cwd() / "assets") == {"a.txt": b"one"}
    assert pack_status(decl).state == "present"
    declare(kv, pack("p@v2", v2, "assets", url=server.url("/v2.tar.gz")))
    (decl2,) = declared_packs(kv.parent)[0]
    assert pack_status(decl2).state == "stale"
    assert pull_packs([decl2])[0].state == "pulled"
    assert tree_files(Path.cwd() / "assets") == {"b.txt": b"two"}
    shutil.rmtree(Path.cwd() / "assets")
    assert pack_status(decl2).state == "cached"
    n = len(server.log)
    assert pull_packs([decl2])[0].downloaded == 0 and len(server.log) == n


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_pack_is_refused_and_dest_stays_empty(
    tmp_path: Path, server: FileServer, env: dict[str, str], kind: str,
) -> None:
    member, why = HOSTILE[kind]
    evil = archive_bytes(tmp_path, "evil.tar.zst", [*GOOD, member])
    server.files["/evil.tar.zst"] = evil
    kv = declare(Path.cwd() / "env/assets.kv",
                 pack("evil@v1", evil, "assets", url=server.url("/evil.tar.zst")))
    (res,) = pull_packs(declared_packs(kv.parent)[0])
    assert res.state == "failed" and why in (res.error or "") and repr(member[0]) in res.error
    assert sorted(os.listdir(kv.parent)) == ["assets.kv"]  # nothing lands in dest
    entry = tmp_path / "cache/assets" / hashlib.sha256(evil).hexdigest()
    assert not (entry / "tree").exists()  # and no extracted tree is left to trust


def test_hf_pull_to_a_foreign_host_sends_nothing(tmp_path: Path) -> None:

    seen: list[str | None] = []

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        kv = write_kv(tmp_path, "hf", f"http://127.0.0.1:{srv.server_port}/steal")
        (res,) = pull_packs(parse_assets_kv(kv), cache=str(tmp_path / "c"),
                            env={"HF_TOKEN": "hf_SECRET"}, env_file=None,
                            fetch_options={"retries": 0, "progress": False})
    finally:
        srv.shutdown()
        srv.server_close()
    assert res.state == "failed" and "127.0.0.1" in (res.error or "") and seen == []
