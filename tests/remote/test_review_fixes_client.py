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


_ = DeclarationError  # used by the credential tests below
