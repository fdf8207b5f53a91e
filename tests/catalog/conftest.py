"""Fixtures for the catalog tests (and the client's, in tests/remote): a running service on
127.0.0.1 and a small store."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from numbatraj import ColumnSpec, TrajectoryStoreWriter
from numbatraj.catalog import CatalogService
from numbatraj.remote import RemoteCatalog


@dataclass
class Catalog:
    service: CatalogService
    read_key: str
    write_key: str

    @property
    def url(self) -> str:
        return self.service.url

    def client(self, write: bool = True, **kwargs: object) -> RemoteCatalog:
        key = self.write_key if write else self.read_key
        return RemoteCatalog(self.url, key, **kwargs)  # type: ignore[arg-type]


def write_store(path: Path, rng: np.random.Generator, n_rows: int = 3000) -> dict[str, np.ndarray]:
    """A small walker-shaped store in 3 episodes; returns the columns written."""
    cols = {
        "state": rng.standard_normal((n_rows, 26), dtype=np.float32),
        "action": rng.uniform(-1, 1, (n_rows, 6)).astype(np.float32),
        "reward": rng.random(n_rows, dtype=np.float32),
    }
    specs = [
        ColumnSpec("state", np.float32, (26,)),
        ColumnSpec("action", np.float32, (6,)),
        ColumnSpec("reward", np.float32),
    ]
    cuts = [0, n_rows // 3, 2 * n_rows // 3, n_rows]
    with TrajectoryStoreWriter(path, specs, env_id="walker-walk", seed=7) as w:
        for a, b in zip(cuts[:-1], cuts[1:]):
            w.append_rows({k: v[a:b] for k, v in cols.items()})
            w.end_episode()
    return cols


def racing_check(catalog: Catalog, again: Any) -> Any:
    """Wrap ``objects.check`` so ``again()`` runs between the check and the DB update."""
    orig = catalog.service.objects.check

    def check(key: str, sha: str, n: int) -> str | None:
        out = orig(key, sha, n)
        again()
        return out

    return check


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    svc = CatalogService(
        f"sqlite:///{tmp_path}/catalog.db", f"file://{tmp_path}/objects"
    ).start()
    try:
        yield Catalog(svc, svc.db.add_key("read", "tests"), svc.db.add_key("write", "tests"))
    finally:
        svc.stop()


@pytest.fixture
def store(tmp_path: Path, rng: np.random.Generator) -> tuple[Path, dict[str, np.ndarray]]:
    path = tmp_path / "walker.h5"
    return path, write_store(path, rng)


@pytest.fixture
def pg_catalog(tmp_path: Path) -> Iterator[Catalog]:
    """A catalog on the PostgreSQL server of ``NUMBATRAJ_TEST_POSTGRES_URL``, in a schema of
    its own (skipped without one, except under CI, where it fails)."""
    from tests.catalog.pg import pg_schema_url

    with pg_schema_url() as url:
        svc = CatalogService(url, f"file://{tmp_path}/objects").start()
        try:
            yield Catalog(svc, svc.db.add_key("read"), svc.db.add_key("write"))
        finally:
            svc.stop()
