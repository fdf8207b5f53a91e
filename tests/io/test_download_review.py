"""Review fixes in :mod:`numbatraj.io.download`: secrets kept out of messages, and a part
file left by an earlier version of the resource never completed with its bytes."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from numbatraj.errors import DownloadError
from numbatraj.io.atomic import part_path
from numbatraj.io.download import fetch, redact_text, redact_url
from tests.httpfaults import FaultServer
from tests.io._stale_server import StaleServer

OLD = b"O" * 5000
NEW = bytes(range(256)) * 20  # 5120 bytes
FAST = {"backoff": 0.01, "progress": False}


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _meta(dest) -> str:
    return part_path(dest) + ".meta"


# -- secrets in messages -----------------------------------------------------------------


def test_redact_url_drops_userinfo_query_and_fragment() -> None:
    out = redact_url("https://user:pw@Host.example:8443/a?x=1#frag")
    assert out == "https://host.example:8443/a?..."
    assert "pw" not in out and "user" not in out and "x=1" not in out
    assert redact_url("https://user:pw@host/a?x=1") == "https://host/a?..."
    assert redact_url("http://[::1]:9/p") == "http://[::1]:9/p"


def test_redact_text_covers_urls_and_request_paths() -> None:
    text = ("HTTPConnectionPool(host='h', port=1): Max retries exceeded with url: "
            "/f?X-Amz-Signature=SECRET (Caused by x); see https://u:pw@h/f?sig=SECRET2 now")
    out = redact_text(text)
    assert "SECRET" not in out and "pw" not in out and "/f?..." in out
    url = "https://h/f?X-Amz-Signature=SECRET3"
    assert "SECRET3" not in redact_text("X-Amz-Signature=SECRET3 was refused", url)


def test_unreachable_server_message_has_no_signature(tmp_path) -> None:
    with FaultServer(b"") as s:
        url = s.url("ok", **{"X-Amz-Signature": "SECRET", "X-Amz-Credential": "AKIAXYZ"})
    with pytest.raises(DownloadError) as ei:
        fetch(url, tmp_path / "f", retries=1, backoff=0.01, connect_timeout=1)
    msg = str(ei.value)
    assert "failed after 2 attempts" in msg and "127.0.0.1" in msg
    assert "SECRET" not in msg and "AKIAXYZ" not in msg


def test_dropped_connection_message_has_no_signature(tmp_path) -> None:
    with FaultServer(b"x" * 50_000) as s:
        with pytest.raises(DownloadError) as ei:
            fetch(s.url("drop", each=1000, sig="SECRET"), tmp_path / "f", retries=1, **FAST)
    assert "SECRET" not in str(ei.value)


# -- stale part files ----------------------------------------------------------------------


def test_leftover_part_without_validator_and_sha256_restarts_once(tmp_path) -> None:
    dest = tmp_path / "f"
    with open(part_path(dest), "wb") as f:
        f.write(OLD[:3000])  # an interrupted pull of the previous version
    with StaleServer(NEW, etag=False) as srv:
        res = fetch(srv.url(), dest, sha256=_sha(NEW), size=len(NEW), **FAST)
        assert [r for r, _ in srv.requests] == ["bytes=3000-", None]
    assert dest.read_bytes() == NEW and res.resumed_from == 3000
    assert not os.path.exists(part_path(dest)) and not os.path.exists(_meta(dest))


def test_leftover_part_without_validator_or_sha256_is_not_resumed(tmp_path) -> None:
    dest = tmp_path / "f"
    with open(part_path(dest), "wb") as f:
        f.write(OLD[:3000])
    with StaleServer(NEW, etag=False) as srv:
        res = fetch(srv.url(), dest, size=len(NEW), **FAST)
        assert srv.requests == [(None, None)]
    assert dest.read_bytes() == NEW and res.resumed_from == 0 and res.sha256 == _sha(NEW)


@pytest.mark.parametrize("sha", [True, False])
@pytest.mark.parametrize("validator", ["etag", "last_modified"])
def test_changed_resource_answers_if_range_with_200(tmp_path, sha, validator) -> None:
    dest = tmp_path / "f"
    kw = {"etag": validator == "etag", "last_modified": validator == "last_modified"}
    with StaleServer(OLD, **kw) as srv:
        srv.cut = 3000
        with pytest.raises(DownloadError):
            fetch(srv.url(), dest, retries=0, **FAST)
        assert os.path.getsize(part_path(dest)) == 3000
        with open(_meta(dest), encoding="utf-8") as f:
            assert list(json.load(f)) == [validator]
        old_validator = next(iter(srv.validators().values()))
        srv.cut = None
        srv.payload = NEW  # a new version is published under the same URL
        res = fetch(srv.url(), dest, sha256=_sha(NEW) if sha else None, size=len(NEW), **FAST)
        assert srv.requests[-1] == ("bytes=3000-", old_validator)
        assert len(srv.requests) == 2  # the 200 restarted at once: no digest round trip
    assert dest.read_bytes() == NEW and res.requests == 1
    assert not os.path.exists(_meta(dest))


def test_unchanged_resource_is_resumed(tmp_path) -> None:
    dest = tmp_path / "f"
    with StaleServer(NEW) as srv:
        srv.cut = 2000
        with pytest.raises(DownloadError):
            fetch(srv.url(), dest, retries=0, **FAST)
        srv.cut = None
        res = fetch(srv.url(), dest, size=len(NEW), **FAST)
        assert srv.requests[-1][0] == "bytes=2000-" and srv.requests[-1][1]
    assert dest.read_bytes() == NEW and res.resumed_from == 2000
    assert res.bytes_downloaded == len(NEW) - 2000


def test_206_with_another_etag_is_refused(tmp_path) -> None:
    dest = tmp_path / "f"
    with StaleServer(OLD, if_range=False) as srv:  # ignores If-Range, but tells its ETag
        srv.cut = 3000
        with pytest.raises(DownloadError):
            fetch(srv.url(), dest, retries=0, **FAST)
        srv.cut = None
        srv.payload = NEW
        res = fetch(srv.url(), dest, size=len(NEW), **FAST)
        assert [r for r, _ in srv.requests[1:]] == ["bytes=3000-", None]
    assert dest.read_bytes() == NEW and res.sha256 == _sha(NEW)


def test_wrong_digest_after_restart_still_raises(tmp_path) -> None:
    from numbatraj.errors import IntegrityError

    dest = tmp_path / "f"
    with open(part_path(dest), "wb") as f:
        f.write(OLD[:3000])
    with StaleServer(NEW, etag=False) as srv:
        with pytest.raises(IntegrityError):
            fetch(srv.url(), dest, sha256=_sha(OLD), **FAST)
        assert [r for r, _ in srv.requests] == ["bytes=3000-", None]
    assert not os.path.exists(part_path(dest))
