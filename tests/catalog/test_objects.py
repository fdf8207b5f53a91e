"""Object backends: the embedded store's signing key, reads, and object store URLs."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest
import requests

from numbatraj.catalog.objects import FileObjects, ObjectBackend, S3Objects, open_objects
from numbatraj.errors import CatalogRequestError, IntegrityError
from tests.catalog.s3standin import ACCESS_KEY, SECRET_KEY, S3StandIn


@pytest.mark.parametrize("content", [b"", b"short"])
def test_short_signing_key_is_refused(tmp_path: Path, content: bytes) -> None:

    (tmp_path / ".signing-key").write_bytes(content)
    with pytest.raises(IntegrityError, match=r"\.signing-key holds \d+ bytes"):
        FileObjects(str(tmp_path))

def test_signing_key_is_made_once_and_shared(tmp_path: Path) -> None:

    root = tmp_path / "objects"
    got: list[bytes] = []
    barrier = threading.Barrier(8)

    def start() -> None:
        barrier.wait()
        got.append(FileObjects(str(root)).secret)

    threads = [threading.Thread(target=start) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and len(set(got)) == 1 and len(got[0]) >= 32
    assert (root / ".signing-key").read_bytes() == got[0]
    assert FileObjects(str(root)).secret == got[0]
    assert sorted(os.listdir(root)) == [".signing-key"]  # no temporary file left
    assert (os.stat(root / ".signing-key").st_mode & 0o777) == 0o600



KEY = "datasets/ds/v1/" + "0" * 32 + ".bin"


def test_both_backends_read_an_object(tmp_path: Path, monkeypatch) -> None:
    files = FileObjects(str(tmp_path / "o"))
    path = Path(files.path_of(KEY))
    path.parent.mkdir(parents=True)
    path.write_bytes(b"meta")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    with S3StandIn("lab") as s3:
        bucket = S3Objects("lab", prefix="p", endpoint_url=s3.endpoint)
        put = bucket.presign_put(KEY, 60, hashlib.sha256(b"meta").hexdigest(), 4)
        assert requests.put(put.url, data=b"meta", headers=put.headers, timeout=10).ok
        backends: list[ObjectBackend] = [files, bucket]
        assert [b.read(KEY) for b in backends] == [b"meta", b"meta"]


@pytest.mark.parametrize(("url", "why"), [
    ("file://", "names no directory"),
    ("s3://", "names no bucket"),
    ("s3://b?colour=red", "unknown parameter(s) colour; valid: endpoint, region, addressing"),
    ("ftp://h/x", "is not supported"),
])
def test_object_store_urls_are_named_not_flagged(url: str, why: str) -> None:
    with pytest.raises(CatalogRequestError) as ei:
        open_objects(url)
    msg = str(ei.value)
    assert msg.startswith(f"object store URL {url!r}") and why in msg and "--" not in msg
