"""Review fixes: secrets kept out of upload errors, credentials only to the hosts and
schemes they belong to, and ``watch`` surviving any failed pass."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import requests

from numbatraj.errors import DeclarationError, DownloadError, IntegrityError
from numbatraj.remote.recording import PassResult, RecordingSync
from tests.remote.conftest import Catalog
from tests.remote.test_recording_sync import write_fake

# -- watch -------------------------------------------------------------------------------


def test_watch_logs_a_malformed_template_and_goes_on(
    tmp_path: Path, catalog: Catalog, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "projects/lab/datasets/bad"
    write_fake(root, 2)
    info = json.loads((root / "meta/info.json").read_text())
    info["video_path"] = "videos/{video_key}/{os.environ}.mp4"
    (root / "meta/info.json").write_text(json.dumps(info))
    sync = RecordingSync(catalog.client(), "lab", "bad", root, settle_s=0.01)
    seen: list[PassResult] = []
    with caplog.at_level(logging.WARNING, logger="numbatraj.remote.recording"):
        summary = sync.watch(0.01, max_cycles=2, on_pass=seen.append)
    assert summary.cycles == 2 and len(summary.errors) == 2 and not summary.interrupted
    assert all(r.note.startswith("error: ") for r in seen)
    assert "video_path" in summary.errors[0]
    assert sum("push pass" in r.getMessage() for r in caplog.records) == 2


@pytest.mark.parametrize("exc", [
    IntegrityError("meta/info.json video_path is bad"),
    KeyError("state"),
    ValueError("boom"),
    requests.ConnectionError("url: /up?X-Amz-Signature=SECRET"),
])
def test_watch_survives_any_error_and_redacts(tmp_path: Path, catalog: Catalog, exc,
                                              monkeypatch) -> None:
    root = tmp_path / "projects/lab/datasets/ok"
    write_fake(root, 1)
    sync = RecordingSync(catalog.client(), "lab", "ok", root, settle_s=0.01)
    real = sync.push_pass
    calls = []

    def flaky() -> PassResult:
        calls.append(1)
        if len(calls) == 1:
            raise exc
        return real()

    monkeypatch.setattr(sync, "push_pass", flaky)
    summary = sync.watch(0.01, max_cycles=2)
    assert summary.cycles == 2 and len(summary.errors) == 1 and summary.commits == 1
    assert "SECRET" not in summary.errors[0]


def test_watch_still_stops_on_ctrl_c(tmp_path: Path, catalog: Catalog, monkeypatch) -> None:
    sync = RecordingSync(catalog.client(), "lab", "x", tmp_path / "x", settle_s=0.01)

    def interrupt() -> PassResult:
        raise KeyboardInterrupt

    monkeypatch.setattr(sync, "push_pass", interrupt)
    assert sync.watch(0.01, max_cycles=3).interrupted


# -- secrets in upload errors ------------------------------------------------------------


def _dead_url() -> str:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}/bucket/obj?X-Amz-Signature=SECRET&X-Amz-Credential=AKIAQ"


def test_client_upload_error_has_no_signature(tmp_path: Path, catalog: Catalog) -> None:
    f = tmp_path / "blob"
    f.write_bytes(b"x" * 100)
    with pytest.raises(DownloadError) as ei:
        catalog.client()._upload(str(f), {"url": _dead_url(), "method": "PUT"})
    msg = str(ei.value)
    assert "failed" in msg and "SECRET" not in msg and "AKIAQ" not in msg


def test_recording_upload_error_has_no_signature(tmp_path: Path, catalog: Catalog) -> None:
    from numbatraj.remote._recording_scan import FileStat

    root = tmp_path / "r"
    root.mkdir()
    f = root / "blob"
    f.write_bytes(b"x" * 100)
    sync = RecordingSync(catalog.client(), "lab", "r", root)
    with open(f, "rb") as fh:
        import os

        st = FileStat.of(os.fstat(fh.fileno()))
        with pytest.raises(DownloadError) as ei:
            sync._put("blob", fh, st, {"url": _dead_url()})
    assert "SECRET" not in str(ei.value) and "AKIAQ" not in str(ei.value)


def test_catalog_unreachable_error_has_no_password() -> None:
    from numbatraj.errors import CatalogError
    from numbatraj.remote import RemoteCatalog

    url = _dead_url().split("/bucket")[0].replace("http://", "http://admin:hunter2@")
    cat = RemoteCatalog(url, "k", timeout=2)
    with pytest.raises(CatalogError) as ei:
        cat.describe("x", None)
    assert "hunter2" not in str(ei.value)


# -- credentials only to their hosts, never over plain http --------------------------------

SHA = "0" * 64


def _kv(tmp_path: Path, provider: str, url: str, extra: str = "") -> Path:
    kv = tmp_path / "assets.kv"
    kv.write_text(f"# packs\npack=x@v1\nprovider={provider}\nurl={url}\nsha256={SHA}\n"
                  f"bytes=1\ndest=assets\n{extra}")
    return kv


def _resolve(kv: Path, env: dict[str, str]):
    from numbatraj.remote._assets_kv import parse_assets_kv
    from numbatraj.remote._assets_source import resolve_source

    (decl,) = parse_assets_kv(kv)
    return resolve_source(decl, env=env, env_file=None)


def test_token_env_over_plain_http_is_refused_at_parse(tmp_path: Path) -> None:
    from numbatraj.remote._assets_kv import parse_assets_kv

    kv = _kv(tmp_path, "https", "http://assets.example.com/a.tar.zst", "token_env=T\n")
    with pytest.raises(DeclarationError) as ei:
        parse_assets_kv(kv)
    msg = str(ei.value)
    assert f"{kv}:4: url:" in msg and "plain http" in msg and "assets.example.com" in msg
    # https, or http to a loopback mirror, still work
    for url in ("https://assets.example.com/a", "http://127.0.0.1:8/a", "http://localhost/a"):
        src = _resolve(_kv(tmp_path, "https", url, "token_env=T\n"), {"T": "tok"})
        assert src.headers == {"Authorization": "Bearer tok"}
    # no credential: plain http stays allowed
    assert _resolve(_kv(tmp_path, "https", "http://assets.example.com/a"), {}).headers == {}


def test_hf_token_only_to_huggingface_hosts(tmp_path: Path) -> None:
    env = {"HF_TOKEN": "hf_SECRET", "HF_HOME": str(tmp_path / "none")}
    for url in ("https://huggingface.co/datasets/o/r/resolve/main/a.tar.zst",
                "https://cdn-lfs.huggingface.co/x"):
        assert _resolve(_kv(tmp_path, "hf", url), env).headers == {
            "Authorization": "Bearer hf_SECRET"}
    kv = _kv(tmp_path, "hf", "https://evil.example.net/steal")
    with pytest.raises(DeclarationError) as ei:
        _resolve(kv, env)
    msg = str(ei.value)
    assert f"{kv}:2:" in msg and "evil.example.net" in msg and "hf_SECRET" not in msg
    with pytest.raises(DeclarationError, match="evil.example.net"):
        _resolve(_kv(tmp_path, "hf", "https://huggingface.co.evil.example.net/x"), env)
    # a mirror named by HF_ENDPOINT gets the token; plain http to it only on loopback
    mirror = {**env, "HF_ENDPOINT": "https://hf-mirror.example.org"}
    assert _resolve(_kv(tmp_path, "hf", "https://hf-mirror.example.org/a"), mirror).headers
    local = {**env, "HF_ENDPOINT": "http://127.0.0.1:9999"}
    assert _resolve(_kv(tmp_path, "hf", "http://127.0.0.1:9999/a"), local).headers
    plain = {**env, "HF_ENDPOINT": "http://hf-mirror.example.org"}
    with pytest.raises(DeclarationError, match="plain http"):
        _resolve(_kv(tmp_path, "hf", "http://hf-mirror.example.org/a"), plain)
    with pytest.raises(DeclarationError, match="plain http"):
        _resolve(_kv(tmp_path, "hf", "http://huggingface.co/a"), env)
    # without a token nothing is sent, so any host is fine (public files)
    anon = {"HF_HOME": str(tmp_path / "none")}
    assert _resolve(_kv(tmp_path, "hf", "http://evil.example.net/a"), anon).headers == {}


def test_hf_pull_to_a_foreign_host_sends_nothing(tmp_path: Path) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from numbatraj.remote._assets_kv import parse_assets_kv
    from numbatraj.remote.assets import pull_packs

    seen: list[str | None] = []

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a: object) -> None:
            pass

    srv = HTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        kv = _kv(tmp_path, "hf", f"http://127.0.0.1:{srv.server_port}/steal")
        (res,) = pull_packs(parse_assets_kv(kv), cache=str(tmp_path / "c"),
                            env={"HF_TOKEN": "hf_SECRET"}, env_file=None,
                            fetch_options={"retries": 0, "progress": False})
    finally:
        srv.shutdown()
        srv.server_close()
    assert res.state == "failed" and "127.0.0.1" in (res.error or "") and seen == []


def test_where_shows_a_refused_hf_token(tmp_path: Path) -> None:
    from numbatraj.remote._assets_kv import parse_assets_kv
    from numbatraj.remote._assets_source import describe_source

    (decl,) = parse_assets_kv(_kv(tmp_path, "hf", "https://evil.example.net/x"))
    _, cred = describe_source(decl, env={"HF_TOKEN": "hf_SECRET"}, env_file=None)
    assert cred.startswith("REFUSED") and "hf_SECRET" not in cred
