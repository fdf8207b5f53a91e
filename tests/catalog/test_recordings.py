"""The recording routes: a completion racing a second offer, and the info.json path
templates the service checks before it commits."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from numbatraj.errors import CatalogError
from tests.catalog.conftest import Catalog, racing_check


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- a completion racing a second offer ------------------------------------------------------


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
    out = cat.request("POST", f"{base}/offer", json=offer)
    assert out["state"] == "upload"
    cat.upload(str(f), out["upload"])
    first = catalog.service.db.blob("proj", "set1", sha)
    assert first is not None

    def again() -> None:  # a second offer swaps the pending row's object key
        assert cat.request("POST", f"{base}/offer", json=offer)["state"] == "upload"

    monkeypatch.setattr(catalog.service.objects, "check", racing_check(catalog, again))
    with pytest.raises(CatalogError, match=r"offered again") as ei:
        cat.request("POST", f"{base}/blobs/{sha}/complete")
    assert getattr(ei.value, "status", None) == 409
    b = catalog.service.db.blob("proj", "set1", sha)
    assert b is not None and b.status == "pending" and b.object_key != first.object_key


# -- path templates in an uploaded info.json -----------------------------------------------

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
