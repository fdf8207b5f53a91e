"""API keys, roles, name validation and signed object URLs: every refusal has a test."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urlencode

import pytest
import requests

from numbatraj.catalog import FileObjects, S3Objects
from numbatraj.catalog.db import hash_key
from numbatraj.catalog.objects import MAX_EXPIRY_S
from numbatraj.errors import (
    CatalogAuthError,
    CatalogError,
    CatalogRequestError,
    DownloadError,
    NumbatrajError,
)
from numbatraj.io.download import fetch
from numbatraj.remote import RemoteCatalog
from tests.catalog.conftest import Catalog
from tests.catalog.s3standin import ACCESS_KEY, SECRET_KEY, S3StandIn

ROUTES = [
    ("GET", "/v1/datasets", None),
    ("GET", "/v1/datasets/walker", None),
    ("POST", "/v1/datasets", {"name": "walker", "version": "v1", "sha256": "0" * 64, "bytes": 1}),
    ("POST", "/v1/datasets/walker/v1/complete", None),
]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
@pytest.mark.parametrize("auth", [None, "Bearer", "Bearer ", "Bearer ntk_wrong", "Basic abc"])
def test_missing_or_wrong_key_is_401(catalog: Catalog, method, path, body, auth) -> None:
    headers = {} if auth is None else {"Authorization": auth}
    r = requests.request(method, catalog.url + path, json=body, headers=headers, timeout=10)
    assert r.status_code == 401, r.text
    assert "API key" in r.json()["error"]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES[2:])
def test_read_key_cannot_write(catalog: Catalog, method, path, body) -> None:
    r = requests.request(method, catalog.url + path, json=body, timeout=10,
                         headers={"Authorization": f"Bearer {catalog.read_key}"})
    assert r.status_code == 403 and "a read key cannot" in r.json()["error"]


def test_client_maps_auth_failures(catalog: Catalog, store, tmp_path: Path) -> None:
    path, _ = store
    with RemoteCatalog(catalog.url, "ntk_not-a-key") as bad, pytest.raises(CatalogAuthError) as ei:
        bad.list()
    assert "401" in str(ei.value) and isinstance(ei.value, PermissionError)
    with catalog.client(write=False) as reader:
        with pytest.raises(CatalogAuthError, match="403"):
            reader.push(path, "walker", "v1")
        assert reader.list() == []  # the refused push registered nothing
    with catalog.client() as writer:
        writer.push(path, "walker", "v1")
    with catalog.client(write=False) as reader:  # a read key can describe and pull
        assert reader.pull("walker", tmp_path / "w.h5").bytes_downloaded > 0


def test_keys_are_stored_hashed(catalog: Catalog) -> None:
    stored = {k.key_hash for k in catalog.service.db.keys()}
    assert catalog.read_key not in stored and hash_key(catalog.read_key) in stored
    raw = Path(catalog.service.db.path).read_bytes()  # type: ignore[attr-defined]
    assert catalog.write_key.encode() not in raw
    with pytest.raises(CatalogRequestError, match="role must be one of read, write, got 'admin'"):
        catalog.service.db.add_key("admin")


@pytest.mark.parametrize(
    "name", ["../etc", "a/b", "Walker", "", ".hidden", "x" * 129, "a..b", "a b", "é"]
)
def test_bad_names_never_reach_the_store(catalog: Catalog, name: str) -> None:
    with catalog.client() as cat, pytest.raises(CatalogRequestError, match="is not allowed"):
        cat.describe(name)
    body = {"name": name, "version": "v1", "sha256": "0" * 64, "bytes": 1}
    r = requests.post(catalog.url + "/v1/datasets", json=body, timeout=10,
                      headers={"Authorization": f"Bearer {catalog.write_key}"})
    assert r.status_code == 400 and "is not allowed" in r.json()["error"]


@pytest.mark.parametrize("version", ["../v1", "v1/x", "", "..", "v 1"])
def test_bad_versions_are_refused(catalog: Catalog, version: str) -> None:
    body = {"name": "walker", "version": version, "sha256": "0" * 64, "bytes": 1}
    r = requests.post(catalog.url + "/v1/datasets", json=body, timeout=10,
                      headers={"Authorization": f"Bearer {catalog.write_key}"})
    assert r.status_code == 400 and "is not allowed" in r.json()["error"]


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"sha256": "xyz"}, "sha256 must be 64 hex digits"),
        ({"bytes": -1}, "bytes must be a non-negative integer"),
        ({"bytes": "10"}, "bytes must be an integer"),
        ({"seed": 1.5}, "seed must be an integer"),
        ({"env_id": "a\nb"}, "env_id must be printable"),
    ],
)
def test_bad_register_fields(catalog: Catalog, patch, message) -> None:
    body = {"name": "walker", "version": "v1", "sha256": "0" * 64, "bytes": 1, **patch}
    r = requests.post(catalog.url + "/v1/datasets", json=body, timeout=10,
                      headers={"Authorization": f"Bearer {catalog.write_key}"})
    assert r.status_code == 400 and message in r.json()["error"]


def test_unknown_route_and_bad_json(catalog: Catalog) -> None:
    h = {"Authorization": f"Bearer {catalog.write_key}"}
    assert requests.get(catalog.url + "/v2/x", headers=h, timeout=10).status_code == 404
    r = requests.post(catalog.url + "/v1/datasets", data=b"{oops", headers=h, timeout=10)
    assert r.status_code == 400 and "not JSON" in r.json()["error"]
    assert requests.get(catalog.url + "/v1/health", timeout=10).json()["ok"] is True


def _registered(catalog: Catalog, store) -> tuple[str, dict]:
    path, _ = store
    with catalog.client() as cat:
        cat.push(path, "walker", "v1")
        return str(path), cat.describe("walker")


def test_signed_object_urls(catalog: Catalog, store, tmp_path: Path) -> None:
    path, desc = _registered(catalog, store)
    url = desc["download"]["url"]
    assert desc["download"]["expires_at"] > time.time()
    assert requests.get(url, timeout=10).content == Path(path).read_bytes()
    base, _, query = url.partition("?")
    tampered = [
        url.replace("sig=", "sig=0"),  # altered signature
        base + "?" + query.replace("expires=", "expires=9"),  # extended expiry
        base,  # no signature at all
        base.replace("/v1/", "/v2/") + "?" + query,  # another key, same signature
    ]
    for bad in tampered:
        r = requests.get(bad, timeout=10)
        assert r.status_code in (403, 404) and r.status_code != 200, bad
    with pytest.raises(DownloadError, match="403"):
        fetch(url.replace("sig=", "sig=0"), tmp_path / "x")
    assert not (tmp_path / "x").exists()
    r = requests.put(url, data=b"overwrite", timeout=10)  # a GET URL cannot upload
    assert r.status_code == 403


def test_expired_object_url(catalog: Catalog, store) -> None:
    _, desc = _registered(catalog, store)
    objects = catalog.service.objects
    assert isinstance(objects, FileObjects)
    key = desc["download"]["url"].split("/objects/")[1].split("?")[0]
    past = int(time.time()) - 10
    sig = objects._signature("GET", key, past)
    r = requests.get(f"{catalog.url}/objects/{key}?{urlencode({'expires': past, 'sig': sig})}",
                     timeout=10)
    assert r.status_code == 403 and "expired" in r.text


def test_object_paths_are_confined(tmp_path: Path) -> None:
    objects = FileObjects(str(tmp_path / "o"))
    for key in ["../../etc/passwd", "datasets/a/v1/../../x.bin", "datasets/a/v1/short.bin"]:
        with pytest.raises(CatalogRequestError, match="not one this catalog issues"):
            objects.path_of(key)


def test_s3_presign_expiry_is_capped(monkeypatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    s3 = S3Objects("b", endpoint_url="http://127.0.0.1:9", region="auto")
    p = s3.presign_get("datasets/a/v1/" + "0" * 32 + ".bin", 30 * 24 * 3600)
    assert f"X-Amz-Expires={MAX_EXPIRY_S}" in p.url
    assert abs(p.expires_at - (time.time() + MAX_EXPIRY_S)) < 60
    put = s3.presign_put("datasets/a/v1/" + "0" * 32 + ".bin", 60, "ab" * 32, 5)
    assert "x-amz-checksum-sha256" in put.url and "x-amz-checksum-sha256" in put.headers


def test_s3_refuses_tampered_and_wrong_digest(tmp_path: Path, store, monkeypatch) -> None:
    from numbatraj.catalog import CatalogService

    path, _ = store
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    with S3StandIn("lab") as s3, CatalogService(
        f"sqlite:///{tmp_path}/c.db", f"s3://lab?endpoint={s3.endpoint}"
    ) as svc, RemoteCatalog(svc.url, svc.db.add_key("write")) as cat:
        reg = cat.request("POST", "/v1/datasets", json={
            "name": "walker", "version": "v1", "sha256": "ab" * 32,
            "bytes": path.stat().st_size,
        })
        up = reg["upload"]
        body = path.read_bytes()
        r = requests.put(up["url"], data=body, headers=up["headers"], timeout=10)
        assert r.status_code == 400 and "BadDigest" in r.text  # the store checks the digest
        r = requests.put(up["url"], data=body, timeout=10)  # dropping the signed header
        assert r.status_code == 403
        r = requests.put(up["url"].replace("X-Amz-Expires=", "X-Amz-Expires=9"), data=body,
                         headers=up["headers"], timeout=10)
        assert r.status_code == 403 and "SignatureDoesNotMatch" in r.text
        with pytest.raises(CatalogError, match="stays pending: no object"):
            cat.request("POST", "/v1/datasets/walker/v1/complete")


def test_error_classes() -> None:
    assert issubclass(CatalogAuthError, CatalogError) and issubclass(CatalogError, NumbatrajError)
    assert issubclass(CatalogRequestError, ValueError)
