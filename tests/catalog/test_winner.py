"""Exactly one winner: of 16 concurrent pushes of different bytes to one name + version,
one completes (200) and every other is refused with 409 naming the winner's digest;
identical bytes are an idempotent no-op.  On SQLite and on PostgreSQL."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

import pytest

from numbatraj.errors import CatalogError
from tests.catalog.conftest import Catalog


def _race(catalog: Catalog, files: list[Path], name: str) -> tuple[list[Any], list[Any]]:
    barrier = threading.Barrier(len(files))
    won: list[Any] = []
    lost: list[Any] = []
    lock = threading.Lock()

    def push(f: Path) -> None:
        with catalog.client() as cat:
            barrier.wait()
            try:
                row = cat.push(f, name, "v1")
                with lock:
                    won.append((f, row))
            except CatalogError as exc:
                with lock:
                    lost.append((f, exc))

    threads = [threading.Thread(target=push, args=(f,)) for f in files]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return won, lost


def _check_one_winner(catalog: Catalog, tmp_path: Path, n: int = 16) -> None:
    files = []
    for i in range(n):
        f = tmp_path / f"push{i}.bin"
        f.write_bytes(bytes([i]) * (50_000 + i))
        files.append(f)
    won, lost = _race(catalog, files, "contested")
    assert len(won) == 1, [str(e) for _, e in lost]
    assert len(lost) == n - 1
    winner_file, row = won[0]
    digest = hashlib.sha256(winner_file.read_bytes()).hexdigest()
    assert row["sha256"] == digest and row["status"] == "ready"
    for _, exc in lost:
        assert getattr(exc, "status", None) == 409, exc
        assert digest in str(exc), exc  # every loser is told which bytes were kept
    with catalog.client() as cat:
        assert cat.describe("contested", "v1")["sha256"] == digest
        got = cat.pull("contested", tmp_path / "got.bin")
    assert Path(got.path).read_bytes() == winner_file.read_bytes()
    # identical bytes: every one of 8 concurrent pushes returns the same ready row
    same = [winner_file] * 8
    won2, lost2 = _race(catalog, same, "contested")
    assert not lost2 and {r["sha256"] for _, r in won2} == {digest}
    shared = tmp_path / "shared.bin"
    shared.write_bytes(b"same bytes" * 1000)
    won3, lost3 = _race(catalog, [shared] * 8, "same-from-start")
    assert not lost3 and len({r["sha256"] for _, r in won3}) == 1


def test_16_concurrent_pushes_one_winner_sqlite(catalog: Catalog, tmp_path: Path) -> None:
    _check_one_winner(catalog, tmp_path)


def test_16_concurrent_pushes_one_winner_postgres(pg_catalog: Catalog, tmp_path: Path) -> None:
    _check_one_winner(pg_catalog, tmp_path)


def test_complete_is_tied_to_the_registration(catalog: Catalog, tmp_path: Path) -> None:
    cat = catalog.client()
    a, b = b"A" * 100, b"B" * 100
    fa = tmp_path / "a"
    fa.write_bytes(a)
    reg_a = cat.request("POST", "/v1/datasets", json={
        "name": "ds", "version": "v1", "sha256": hashlib.sha256(a).hexdigest(), "bytes": 100})
    reg_b = cat.request("POST", "/v1/datasets", json={
        "name": "ds", "version": "v1", "sha256": hashlib.sha256(b).hexdigest(), "bytes": 100})
    assert reg_a["token"] != reg_b["token"]
    cat.upload(str(fa), reg_a["upload"])
    route = "/v1/datasets/ds/v1/complete"
    with pytest.raises(CatalogError, match="has that token"):
        cat.request("POST", route, json={"token": "upl_forged"})
    with pytest.raises(CatalogError, match="is not the registered"):
        cat.request("POST", route, json={"token": reg_a["token"],
                                         "sha256": hashlib.sha256(b).hexdigest()})
    with pytest.raises(CatalogError, match="stays pending: no object"):
        cat.request("POST", route, json={"token": reg_b["token"]})
    row = cat.request("POST", route, json={"token": reg_a["token"]})
    assert row["sha256"] == hashlib.sha256(a).hexdigest()
    with pytest.raises(CatalogError, match=f"ready with sha256 {row['sha256']}"):
        cat.request("POST", route, json={"token": reg_b["token"]})
