"""Review fixes in the catalog service: completion races, the signing key, info.json
templates, and passwords kept out of messages."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from numbatraj.errors import CatalogError
from numbatraj.remote import _recording_db as R

from .conftest import Catalog


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _racing_check(catalog: Catalog, again: Any) -> Any:
    """Wrap ``objects.check`` so ``again()`` runs between the check and the DB update."""
    orig = catalog.service.objects.check

    def check(key: str, sha: str, n: int) -> str | None:
        out = orig(key, sha, n)
        again()
        return out

    return check


# -- 1. a completion racing a second registration ---------------------------------------------


def test_dataset_complete_racing_reregistration_is_409(
    catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cat = catalog.client()
    data = b"A" * 1000
    f = tmp_path / "a.bin"
    f.write_bytes(data)
    reg = cat._call("POST", "/v1/datasets", json={
        "name": "ds", "version": "v1", "sha256": _sha(data), "bytes": len(data)})
    cat._upload(str(f), reg["upload"])
    other = b"B" * 7

    def again() -> None:
        cat._call("POST", "/v1/datasets", json={
            "name": "ds", "version": "v1", "sha256": _sha(other), "bytes": len(other)})

    monkeypatch.setattr(catalog.service.objects, "check", _racing_check(catalog, again))
    with pytest.raises(CatalogError, match=r"'ds' version 'v1' was registered again") as ei:
        cat._call("POST", "/v1/datasets/ds/v1/complete")
    assert getattr(ei.value, "status", None) == 409
    rec = catalog.service.db.get("ds", "v1")
    assert rec is not None and rec.status == "pending" and rec.sha256 == _sha(other)
    monkeypatch.undo()
    # the new registration completes once its own object is there
    f.write_bytes(other)
    reg2 = cat._call("POST", "/v1/datasets", json={
        "name": "ds", "version": "v1", "sha256": _sha(other), "bytes": len(other)})
    cat._upload(str(f), reg2["upload"])
    assert cat._call("POST", "/v1/datasets/ds/v1/complete")["status"] == "ready"


def test_blob_complete_racing_reoffer_is_409(
    catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cat = catalog.client()
    data = b"C" * 500
    sha = _sha(data)
    f = tmp_path / "c.bin"
    f.write_bytes(data)
    offer = {"path": "data/x.bin", "sha256": sha, "bytes": len(data)}
    base = "/v1/recordings/proj/set1"
    out = cat._call("POST", f"{base}/offer", json=offer)
    assert out["state"] == "upload"
    cat._upload(str(f), out["upload"])
    first = R.blob(catalog.service.db, "proj", "set1", sha)
    assert first is not None

    def again() -> None:  # a second offer swaps the pending row's object key
        assert cat._call("POST", f"{base}/offer", json=offer)["state"] == "upload"

    monkeypatch.setattr(catalog.service.objects, "check", _racing_check(catalog, again))
    with pytest.raises(CatalogError, match=r"offered again") as ei:
        cat._call("POST", f"{base}/blobs/{sha}/complete")
    assert getattr(ei.value, "status", None) == 409
    b = R.blob(catalog.service.db, "proj", "set1", sha)
    assert b is not None and b.status == "pending" and b.object_key != first.object_key


def test_mark_blob_ready_leaves_a_ready_or_replaced_row(catalog: Catalog) -> None:
    db = catalog.service.db
    sha = "ab" * 32
    R.put_pending_blob(db, "p", "d", sha, 3, "k1")
    b1 = R.blob(db, "p", "d", sha)
    assert b1 is not None
    R.put_pending_blob(db, "p", "d", sha, 3, "k2")
    assert not R.mark_blob_ready(db, "p", "d", b1)
    b2 = R.blob(db, "p", "d", sha)
    assert b2 is not None and b2.status == "pending"
    assert R.mark_blob_ready(db, "p", "d", b2)
    assert not R.mark_blob_ready(db, "p", "d", b2)  # already ready


# -- 2. the embedded object store's signing key -----------------------------------------------


@pytest.mark.parametrize("content", [b"", b"short"])
def test_short_signing_key_is_refused(tmp_path: Path, content: bytes) -> None:
    from numbatraj.errors import IntegrityError
    from numbatraj.remote.objects import FileObjects

    (tmp_path / ".signing-key").write_bytes(content)
    with pytest.raises(IntegrityError, match=r"\.signing-key holds \d+ bytes"):
        FileObjects(str(tmp_path))


def test_signing_key_is_made_once_and_shared(tmp_path: Path) -> None:
    import os
    import threading

    from numbatraj.remote.objects import FileObjects

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


# -- 3. path templates in an uploaded info.json -----------------------------------------------

BAD_TEMPLATES = [
    ("data_path", "data/{episode_index}.parquet", "unknown field"),
    ("data_path", "data/chunk-{chunk_index:03d", "unmatched '{'"),
    ("data_path", 7, "not a non-empty string"),
    ("data_path", "data/{chunk_index:0999999999d}/{file_index}.parquet", "format spec"),
    ("data_path", "data/{chunk_index!r}/{file_index}.parquet", "conversion"),
    ("data_path", "data/{chunk_index.real}.parquet", "unknown field"),
    ("data_path", "data/{video_key}/{file_index}.parquet", "unknown field"),
    ("video_path", "videos/{video_key:>9999999}/{file_index}.mp4", "format spec"),
    ("video_path", "videos/{chunk_index:{file_index}}.mp4", "format spec"),
    ("video_path", ["videos"], "not a non-empty string"),
]


def _info_and_table(
    key: str | None = None, tpl: Any = None, chunk: list[Any] | None = None
) -> tuple[bytes, dict[str, bytes]]:
    import io
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.remote.test_recording_sync import CAM

    info: dict[str, Any] = {
        "codebase_version": "v3.0", "total_episodes": 2, "total_frames": 6,
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
        "features": {CAM: {"dtype": "video"}},
    }
    if key is not None:
        info[key] = tpl
    buf = io.BytesIO()
    pq.write_table(pa.table({
        "data/chunk_index": chunk if chunk is not None else [0, 0], "data/file_index": [0, 0],
        f"videos/{CAM}/chunk_index": [0, 0], f"videos/{CAM}/file_index": [0, 1],
    }), buf)
    return json.dumps(info).encode(), {"meta/episodes/chunk-000/file-000.parquet": buf.getvalue()}


def test_good_templates_name_the_files() -> None:
    from numbatraj.lerobot.schema import named_files
    from tests.remote.test_recording_sync import CAM

    info, tables = _info_and_table()
    assert named_files(info, tables) == {
        "data/chunk-000/file-000.parquet",
        f"videos/{CAM}/chunk-000/file-000.mp4", f"videos/{CAM}/chunk-000/file-001.mp4",
    }
    info, tables = _info_and_table("data_path", "data/{chunk_index}-{file_index:9d}.parquet")
    assert "data/0-        0.parquet" in named_files(info, tables)


@pytest.mark.parametrize(("key", "tpl", "why"), BAD_TEMPLATES)
def test_bad_template_is_an_integrity_error(key: str, tpl: Any, why: str) -> None:
    from numbatraj.errors import IntegrityError
    from numbatraj.lerobot.schema import named_files

    info, tables = _info_and_table(key, tpl)
    with pytest.raises(IntegrityError) as ei:
        named_files(info, tables)
    msg = str(ei.value)
    assert "meta/info.json" in msg and key in msg and repr(tpl) in msg and why in msg


@pytest.mark.parametrize("cell", [None, 1.5, -1])
def test_bad_index_cell_is_an_integrity_error(cell: Any) -> None:
    from numbatraj.errors import IntegrityError
    from numbatraj.lerobot.schema import named_files

    info, tables = _info_and_table(chunk=[0, cell])
    with pytest.raises(IntegrityError, match=r"'data/chunk_index' row \d is .*not a non-neg"):
        named_files(info, tables)


def _push_raw(catalog: Catalog, files: dict[str, bytes]) -> Any:
    """Offer, upload and complete ``files`` one by one, then commit them; the commit answer."""
    import requests

    hdr = {"Authorization": f"Bearer {catalog.write_key}"}
    base = f"{catalog.url}/v1/recordings/p/d"
    entries = {}
    for rel, data in files.items():
        entry = {"sha256": _sha(data), "bytes": len(data)}
        ans = requests.post(f"{base}/offer", json={"path": rel, **entry}, headers=hdr,
                            timeout=10).json()
        if ans["state"] == "upload":
            up = ans["upload"]
            r = requests.request(up["method"], up["url"], data=data,
                                 headers=up.get("headers") or {}, timeout=10)
            assert r.status_code < 300, r.text
            r = requests.post(f"{base}/blobs/{entry['sha256']}/complete", headers=hdr,
                              timeout=10)
            assert r.status_code == 200, r.text
        entries[rel] = entry
    return requests.post(f"{base}/commit", json={"files": entries}, headers=hdr, timeout=10)


@pytest.mark.parametrize(("key", "tpl", "why"), BAD_TEMPLATES[:4])
def test_service_refuses_bad_template_with_409(
    catalog: Catalog, key: str, tpl: Any, why: str
) -> None:
    info, tables = _info_and_table(key, tpl)
    r = _push_raw(catalog, {"meta/info.json": info, **tables})
    assert r.status_code == 409, r.text
    msg = r.json()["error"]
    assert "meta/info.json" in msg and repr(tpl) in msg and why in msg


# -- 4. a database password stays out of messages ---------------------------------------------


def test_mask_password() -> None:
    from numbatraj.remote.db import mask_password

    assert mask_password("postgresql://u:s3cret@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert mask_password("postgres://h/db?password=s3cret&sslmode=require") == \
        "postgres://h/db?password=***&sslmode=require"
    for plain in ("postgresql://u@h/db", "sqlite:///x.db", "catalog.db"):
        assert mask_password(plain) == plain


def test_unsupported_db_url_error_masks_password() -> None:
    from numbatraj.errors import CatalogRequestError
    from numbatraj.remote.db import open_db

    with pytest.raises(CatalogRequestError, match="is not supported") as ei:
        open_db("mysql://admin:s3cret@db.example/catalog")
    assert "s3cret" not in str(ei.value) and "admin:***@db.example" in str(ei.value)


def test_serve_banner_masks_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from numbatraj.remote import _cli, service

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
