"""The dataset routes: a completion racing a second registration stays pending."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from numbatraj.errors import CatalogError
from tests.catalog.conftest import Catalog, racing_check


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_dataset_complete_racing_reregistration_is_409(
    catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cat = catalog.client()
    data = b"A" * 1000
    f = tmp_path / "a.bin"
    f.write_bytes(data)
    reg = cat.request("POST", "/v1/datasets", json={
        "name": "ds", "version": "v1", "sha256": _sha(data), "bytes": len(data)})
    cat.upload(str(f), reg["upload"])
    other = b"B" * 7

    def again() -> None:
        cat.request("POST", "/v1/datasets", json={
            "name": "ds", "version": "v1", "sha256": _sha(other), "bytes": len(other)})

    monkeypatch.setattr(catalog.service.objects, "check", racing_check(catalog, again))
    with pytest.raises(CatalogError, match=r"'ds' version 'v1' was registered again") as ei:
        cat.request("POST", "/v1/datasets/ds/v1/complete")
    assert getattr(ei.value, "status", None) == 409
    rec = catalog.service.db.get("ds", "v1")
    assert rec is not None and rec.status == "pending" and rec.sha256 == _sha(other)
    monkeypatch.undo()
    # the new registration completes once its own object is there
    f.write_bytes(other)
    reg2 = cat.request("POST", "/v1/datasets", json={
        "name": "ds", "version": "v1", "sha256": _sha(other), "bytes": len(other)})
    cat.upload(str(f), reg2["upload"])
    assert cat.request("POST", "/v1/datasets/ds/v1/complete")["status"] == "ready"
