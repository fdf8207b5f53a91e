"""fetch() against loopback fault servers: one test per failure mode, secrets kept out of
messages, and a part file left by an earlier version of the resource never completed with
its bytes."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numbatraj.errors import DownloadError, IntegrityError, NumbatrajError
from numbatraj.io.atomic import PartFile, part_path
from numbatraj.io.download import FetchResult, fetch, redact_text, redact_url
from numbatraj.io.hashing import sha256_file
from tests.httpfaults import FaultServer
from tests.io._stale_server import StaleServer

N_BYTES = 300_000
FAST = {"backoff": 0.01, "rate_window": 5.0}


@pytest.fixture(scope="module")
def payload() -> bytes:
    return np.random.default_rng(99).integers(0, 256, N_BYTES, dtype=np.uint8).tobytes()


@pytest.fixture(scope="module")
def digest(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


@pytest.fixture
def srv(payload: bytes):  # type: ignore[no-untyped-def]
    with FaultServer(payload) as s:
        yield s


def _nothing_complete(dest: str) -> None:
    assert not os.path.exists(dest), "a failed fetch left a file under the final name"


def test_plain_fetch(srv: FaultServer, tmp_path, payload: bytes, digest: str) -> None:
    dest = str(tmp_path / "sub" / "f.bin")
    res = fetch(srv.url("ok"), dest, sha256=digest, size=len(payload))
    assert isinstance(res, FetchResult)
    assert open(dest, "rb").read() == payload
    assert not os.path.exists(part_path(dest))
    assert (res.sha256, res.size, res.bytes_downloaded, res.requests) == (digest, N_BYTES, N_BYTES, 1)
    assert srv.requests[0]["accept_encoding"] == "identity"
    assert srv.requests[0]["range"] is None


def test_headers_are_sent_but_range_and_encoding_are_ours(srv: FaultServer, tmp_path) -> None:
    hdr = {"Authorization": "Bearer tok", "Accept-Encoding": "gzip", "Range": "bytes=5-"}
    fetch(srv.url("ok"), tmp_path / "f", headers=hdr)
    sent = srv.requests[0]
    assert (sent["authorization"], sent["accept_encoding"], sent["range"]) == (
        "Bearer tok", "identity", None,
    )


def test_matching_dest_moves_no_bytes(srv: FaultServer, tmp_path, payload, digest) -> None:
    dest = tmp_path / "f"
    dest.write_bytes(payload)
    res = fetch(srv.url("ok"), dest, sha256=digest)
    assert (res.bytes_downloaded, res.requests) == (0, 0)
    assert srv.requests == []


def test_stale_dest_is_replaced(srv: FaultServer, tmp_path, payload, digest) -> None:
    dest = tmp_path / "f"
    dest.write_bytes(b"old contents")
    fetch(srv.url("ok"), dest, sha256=digest)
    assert dest.read_bytes() == payload


def test_dropped_connection_resumes_by_range(srv, tmp_path, payload, digest) -> None:
    dest = tmp_path / "f"
    res = fetch(srv.url("drop", at=100_000, times=1), dest, sha256=digest, **FAST)
    assert dest.read_bytes() == payload
    assert [r["range"] for r in srv.requests] == [None, "bytes=100000-"]
    assert res.bytes_downloaded == N_BYTES and res.requests == 2


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(1, N_BYTES - 1), min_size=1, max_size=3, unique=True))
def test_any_number_of_drops_anywhere(payload, digest, tmp_path_factory, cuts) -> None:
    dest = tmp_path_factory.mktemp("drops") / "f"
    with FaultServer(payload) as srv:
        for at in sorted(cuts):  # the part file carries over between runs
            with pytest.raises(DownloadError):
                fetch(srv.url("drop", at=at), dest, sha256=digest, retries=0, **FAST)
            assert os.path.getsize(part_path(dest)) == at
            _nothing_complete(str(dest))
        res = fetch(srv.url("ok"), dest, sha256=digest)
    assert dest.read_bytes() == payload
    assert res.resumed_from == max(cuts) and res.bytes_downloaded == N_BYTES - max(cuts)


def test_retries_are_bounded_and_part_survives_for_next_run(srv, tmp_path, payload, digest) -> None:
    dest = tmp_path / "f"
    with pytest.raises(DownloadError, match="failed after 3 attempts") as ei:
        fetch(srv.url("drop", each=20_000), dest, sha256=digest, retries=2, **FAST)
    assert "127.0.0.1" in str(ei.value) and part_path(dest) in str(ei.value)
    _nothing_complete(str(dest))
    assert [r["range"] for r in srv.requests] == [None, "bytes=20000-", "bytes=40000-"]
    assert os.path.getsize(part_path(dest)) == 60_000
    res = fetch(srv.url("ok"), dest, sha256=digest)
    assert srv.requests[-1]["range"] == "bytes=60000-"
    assert res.resumed_from == 60_000 and dest.read_bytes() == payload


def test_server_ignoring_range_restarts_from_zero(srv, tmp_path, payload, digest) -> None:
    dest = tmp_path / "f"
    with open(part_path(dest), "wb") as f:
        f.write(b"\x00" * 1234)  # whatever sits there must not survive a 200
    res = fetch(srv.url("ignore-range"), dest, sha256=digest)
    assert srv.requests[0]["range"] == "bytes=1234-"
    assert dest.read_bytes() == payload and res.requests == 1


def test_trickle_is_a_dead_connection(srv, tmp_path, digest) -> None:
    dest = tmp_path / "f"
    with pytest.raises(DownloadError, match="too slow"):
        fetch(srv.url("trickle", interval=0.02), dest, sha256=digest, retries=0,
              min_rate=1024, rate_window=0.3)
    _nothing_complete(str(dest))


def test_trickle_then_recovery(srv, tmp_path, payload, digest) -> None:
    dest = tmp_path / "f"
    res = fetch(srv.url("trickle", interval=0.02, times=1), dest, sha256=digest,
                min_rate=1024, rate_window=0.3, backoff=0.01)
    assert dest.read_bytes() == payload and res.requests == 2
    assert srv.requests[1]["range"] is not None  # the trickled bytes were kept


def test_stall_resumes_after_read_timeout(srv, tmp_path, payload, digest) -> None:
    dest = tmp_path / "f"
    fetch(srv.url("stall", after=777, times=1), dest, sha256=digest,
          rate_window=0.3, backoff=0.01)
    assert dest.read_bytes() == payload
    assert [r["range"] for r in srv.requests] == [None, "bytes=777-"]


def test_wrong_bytes_name_both_digests_and_delete_part(srv, tmp_path, payload, digest) -> None:
    dest = tmp_path / "f"
    bad = bytearray(payload)
    bad[N_BYTES // 2] ^= 0xFF
    with pytest.raises(IntegrityError) as ei:
        fetch(srv.url("wrong-bytes"), dest, sha256=digest)
    msg = str(ei.value)
    assert digest in msg and hashlib.sha256(bad).hexdigest() in msg
    assert not os.path.exists(part_path(dest))
    _nothing_complete(str(dest))


def test_complete_part_is_verified_not_refetched(srv, tmp_path, payload, digest) -> None:
    dest = tmp_path / "f"
    with open(part_path(dest), "wb") as f:
        f.write(payload)
    res = fetch(srv.url("ok"), dest, sha256=digest, size=N_BYTES)
    assert (res.requests, res.bytes_downloaded) == (0, 0) and dest.read_bytes() == payload


def test_416_for_a_complete_part_of_unknown_size(srv, tmp_path, payload, digest) -> None:
    dest = tmp_path / "f"
    with open(part_path(dest), "wb") as f:
        f.write(payload)
    res = fetch(srv.url("always-416"), dest, sha256=digest)
    assert res.requests == 1 and res.bytes_downloaded == 0
    assert srv.requests[0]["range"] == f"bytes={N_BYTES}-"
    assert dest.read_bytes() == payload


def test_416_for_an_oversized_part_restarts(srv, tmp_path, payload, digest) -> None:
    dest = tmp_path / "f"
    with open(part_path(dest), "wb") as f:
        f.write(payload + b"extra")
    res = fetch(srv.url("ok"), dest, sha256=digest, backoff=0.01)
    assert [r["range"] for r in srv.requests] == [f"bytes={N_BYTES + 5}-", None]
    assert dest.read_bytes() == payload and res.requests == 2


def test_oversized_part_with_known_size_restarts_without_asking(srv, tmp_path, payload, digest):
    dest = tmp_path / "f"
    with open(part_path(dest), "wb") as f:
        f.write(payload + b"extra")
    fetch(srv.url("ok"), dest, sha256=digest, size=N_BYTES)
    assert [r["range"] for r in srv.requests] == [None]
    assert dest.read_bytes() == payload


@pytest.mark.parametrize("retry_after", ["0.2", "1"])
def test_503_retry_after_is_honoured(srv, tmp_path, payload, digest, retry_after) -> None:
    dest = tmp_path / "f"
    res = fetch(srv.url("busy", times=2, retry_after=retry_after), dest, sha256=digest,
                backoff=0.0)
    assert res.requests == 3 and dest.read_bytes() == payload


def test_retry_after_beyond_budget_fails_at_once(srv, tmp_path, digest) -> None:
    dest = tmp_path / "f"
    with pytest.raises(DownloadError, match=r"Retry-After: 3600") as ei:
        fetch(srv.url("busy", retry_after=3600), dest, sha256=digest, max_wait=5)
    assert "max_wait=5" in str(ei.value) and len(srv.requests) == 1
    _nothing_complete(str(dest))


def test_gzip_encoding_is_refused(srv, tmp_path, digest) -> None:
    dest = tmp_path / "f"
    with pytest.raises(DownloadError, match="Content-Encoding: gzip"):
        fetch(srv.url("gzip"), dest, sha256=digest)
    assert len(srv.requests) == 1
    _nothing_complete(str(dest))
    assert os.path.getsize(part_path(dest)) == 0


def test_expired_url_403_is_not_retried(srv, tmp_path, digest) -> None:
    dest = tmp_path / "f"
    url = srv.url("expired", **{"X-Amz-Signature": "deadbeef"})
    with pytest.raises(DownloadError) as ei:
        fetch(url, dest, sha256=digest)
    msg = str(ei.value)
    assert "403" in msg and "expired" in msg and srv.base + "/expired" in msg
    assert "deadbeef" not in msg  # the signature is not leaked into logs
    assert len(srv.requests) == 1
    _nothing_complete(str(dest))


@pytest.mark.parametrize("fault", [{"shift": 1}, {"shift": -7}, {"total": N_BYTES + 5}])
def test_wrong_content_range_is_refused(srv, tmp_path, payload, digest, fault) -> None:
    dest = tmp_path / "f"
    with open(part_path(dest), "wb") as f:
        f.write(payload[:1000])
    res = fetch(srv.url("bad-range", **fault), dest, sha256=digest, backoff=0.01)
    assert [r["range"] for r in srv.requests] == ["bytes=1000-", None]
    assert dest.read_bytes() == payload and res.requests == 2


def test_wrong_content_range_without_recovery_fails(srv, tmp_path, digest) -> None:
    dest = tmp_path / "f"
    with open(part_path(dest), "wb") as f:
        f.write(b"x" * 1000)
    with pytest.raises(DownloadError, match="refused a 206"):
        fetch(srv.url("bad-range", shift=1), dest, sha256=digest, retries=0)
    _nothing_complete(str(dest))


def test_size_contradiction_is_an_error(srv, tmp_path) -> None:
    dest = tmp_path / "f"
    with pytest.raises(DownloadError, match=f"has {N_BYTES} bytes, expected {N_BYTES - 1}"):
        fetch(srv.url("ok"), dest, size=N_BYTES - 1)
    _nothing_complete(str(dest))


def test_404_names_url_and_status(srv, tmp_path) -> None:
    with pytest.raises(DownloadError, match=r"HTTP 404 .*/no-such-mode"):
        fetch(srv.url("no-such-mode"), tmp_path / "f")


def test_unreachable_server(tmp_path) -> None:
    with FaultServer(b"") as s:
        url = s.url("ok")
    with pytest.raises(DownloadError, match="failed after 2 attempts"):
        fetch(url, tmp_path / "f", retries=1, backoff=0.01, connect_timeout=1)


def test_small_sync_interval_and_progress_bar(srv, tmp_path, payload, digest, capsys) -> None:
    dest = tmp_path / "f"
    fetch(srv.url("ok"), dest, sha256=digest, sync_every=4096, chunk_size=8192, progress=True)
    assert dest.read_bytes() == payload
    assert "f" in capsys.readouterr().err


def test_bad_arguments(tmp_path) -> None:
    with pytest.raises(ValueError, match="sha256 must be 64 hex digits, got 'abc'"):
        fetch("http://127.0.0.1:9/x", tmp_path / "f", sha256="abc")
    with pytest.raises(ValueError, match="size must be >= 0"):
        fetch("http://127.0.0.1:9/x", tmp_path / "f", size=-1)


def test_errors_are_numbatraj_and_builtin() -> None:
    assert issubclass(DownloadError, NumbatrajError) and issubclass(DownloadError, OSError)


def test_redact_url() -> None:
    assert redact_url("https://h/a/b?X-Amz-Signature=s") == "https://h/a/b?..."
    assert redact_url("http://h:1/p") == "http://h:1/p"


def test_partfile_hashes_resumed_content(tmp_path) -> None:
    dest = tmp_path / "p"
    with PartFile(dest, sync_every=3) as p:
        p.write(b"hello ")
    with PartFile(dest) as p:
        assert p.size == 6
        p.write(b"world")
        assert p.hexdigest() == hashlib.sha256(b"hello world").hexdigest()
        p.truncate()
        p.write(b"x")
        p.commit()
    assert dest.read_bytes() == b"x" and sha256_file(dest) == hashlib.sha256(b"x").hexdigest()
    with PartFile(dest, keep_existing=False) as p:
        p.write(b"abc")
        p.discard()
    assert not os.path.exists(part_path(dest)) and dest.read_bytes() == b"x"
    with pytest.raises(ValueError, match="already closed"):
        p.write(b"y")


def test_disk_error_is_raised_not_retried(srv, tmp_path, digest, monkeypatch) -> None:
    import errno

    import numbatraj.io.atomic as atomic

    real_write = os.write
    written = [0]

    def full_disk(fd: int, data) -> int:  # type: ignore[no-untyped-def]
        if written[0] > 100_000:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real_write(fd, data)
        written[0] += n
        return n

    monkeypatch.setattr(atomic.os, "write", full_disk)
    dest = tmp_path / "f"
    with pytest.raises(OSError, match="No space left") as ei:
        fetch(srv.url("ok"), dest, sha256=digest, chunk_size=16384)
    assert not isinstance(ei.value, DownloadError)  # a disk problem is not a network retry
    assert len(srv.requests) == 1
    _nothing_complete(str(dest))


def test_background_partfile_matches_direct(tmp_path, payload) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    with PartFile(a, background=True, sync_every=50_000) as pa, PartFile(b) as pb:
        for i in range(0, len(payload), 7919):
            pa.write(payload[i : i + 7919])
            pb.write(payload[i : i + 7919])
        assert pa.size == pb.size == len(payload)
        assert pa.hexdigest() == pb.hexdigest() == hashlib.sha256(payload).hexdigest()
        pa.truncate()
        pa.write(b"abc")
        pa.commit()
        pb.commit()
    assert a.read_bytes() == b"abc" and b.read_bytes() == payload


def test_background_partfile_batches_small_writes(tmp_path, payload) -> None:
    """Small chunks are handed to the hash and write threads in batches: a digest, a
    truncate or a close in the middle of a batch still sees every accepted byte, and a
    caller reusing its buffer after write() does not change what was accepted."""
    dest = tmp_path / "f"
    buf = bytearray(1000)
    expect = bytearray()
    with PartFile(dest, background=True, sync_every=4096) as p:
        for i in range(300):
            buf[:] = bytes([i % 251]) * len(buf)
            p.write(buf)  # type: ignore[arg-type]
            expect += buf
            if i == 123:
                assert p.hexdigest() == hashlib.sha256(expect).hexdigest()
        assert p.size == len(expect)
    assert (tmp_path / "f.part").read_bytes() == bytes(expect)  # close flushed the tail
    with PartFile(dest, background=True) as p:  # resumed: hashes what is there
        assert p.size == len(expect)
        p.write(payload[:10])
        expect += payload[:10]
        assert p.hexdigest() == hashlib.sha256(expect).hexdigest()
        p.commit()
    assert dest.read_bytes() == bytes(expect)


# -- helpers for the secrets and stale-part tests ---------------------------------------

OLD = b"O" * 5000
NEW = bytes(range(256)) * 20  # 5120 bytes
QUIET = {"backoff": 0.01, "progress": False}


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
            fetch(s.url("drop", each=1000, sig="SECRET"), tmp_path / "f", retries=1, **QUIET)
    assert "SECRET" not in str(ei.value)


# -- stale part files ----------------------------------------------------------------------


def test_leftover_part_without_validator_and_sha256_restarts_once(tmp_path) -> None:
    dest = tmp_path / "f"
    with open(part_path(dest), "wb") as f:
        f.write(OLD[:3000])  # an interrupted pull of the previous version
    with StaleServer(NEW, etag=False) as srv:
        res = fetch(srv.url(), dest, sha256=_sha(NEW), size=len(NEW), **QUIET)
        assert [r for r, _ in srv.requests] == ["bytes=3000-", None]
    assert dest.read_bytes() == NEW and res.resumed_from == 3000
    assert not os.path.exists(part_path(dest)) and not os.path.exists(_meta(dest))


def test_leftover_part_without_validator_or_sha256_is_not_resumed(tmp_path) -> None:
    dest = tmp_path / "f"
    with open(part_path(dest), "wb") as f:
        f.write(OLD[:3000])
    with StaleServer(NEW, etag=False) as srv:
        res = fetch(srv.url(), dest, size=len(NEW), **QUIET)
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
            fetch(srv.url(), dest, retries=0, **QUIET)
        assert os.path.getsize(part_path(dest)) == 3000
        with open(_meta(dest), encoding="utf-8") as f:
            assert list(json.load(f)) == [validator]
        old_validator = next(iter(srv.validators().values()))
        srv.cut = None
        srv.payload = NEW  # a new version is published under the same URL
        res = fetch(srv.url(), dest, sha256=_sha(NEW) if sha else None, size=len(NEW), **QUIET)
        assert srv.requests[-1] == ("bytes=3000-", old_validator)
        assert len(srv.requests) == 2  # the 200 restarted at once: no digest round trip
    assert dest.read_bytes() == NEW and res.requests == 1
    assert not os.path.exists(_meta(dest))


def test_unchanged_resource_is_resumed(tmp_path) -> None:
    dest = tmp_path / "f"
    with StaleServer(NEW) as srv:
        srv.cut = 2000
        with pytest.raises(DownloadError):
            fetch(srv.url(), dest, retries=0, **QUIET)
        srv.cut = None
        res = fetch(srv.url(), dest, size=len(NEW), **QUIET)
        assert srv.requests[-1][0] == "bytes=2000-" and srv.requests[-1][1]
    assert dest.read_bytes() == NEW and res.resumed_from == 2000
    assert res.bytes_downloaded == len(NEW) - 2000


def test_206_with_another_etag_is_refused(tmp_path) -> None:
    dest = tmp_path / "f"
    with StaleServer(OLD, if_range=False) as srv:  # ignores If-Range, but tells its ETag
        srv.cut = 3000
        with pytest.raises(DownloadError):
            fetch(srv.url(), dest, retries=0, **QUIET)
        srv.cut = None
        srv.payload = NEW
        res = fetch(srv.url(), dest, size=len(NEW), **QUIET)
        assert [r for r, _ in srv.requests[1:]] == ["bytes=3000-", None]
    assert dest.read_bytes() == NEW and res.sha256 == _sha(NEW)


def test_wrong_digest_after_restart_still_raises(tmp_path) -> None:
    from numbatraj.errors import IntegrityError

    dest = tmp_path / "f"
    with open(part_path(dest), "wb") as f:
        f.write(OLD[:3000])
    with StaleServer(NEW, etag=False) as srv:
        with pytest.raises(IntegrityError):
            fetch(srv.url(), dest, sha256=_sha(OLD), **QUIET)
        assert [r for r, _ in srv.requests] == ["bytes=3000-", None]
    assert not os.path.exists(part_path(dest))
