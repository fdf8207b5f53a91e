"""Shared fixtures.  Tests under tests/cuda/ are marked ``cuda`` and run in their own pytest
process with NUMBA_ENABLE_CUDASIM=1 (see the Makefile), so the simulator never disturbs the
compiled host tests."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

_CUDA_DIR = Path(__file__).parent / "cuda"

# The subset `make test-min` runs against the minimum versions setup.cfg declares (marked
# `min`): the store, samplers and replay on the oldest numpy/numba/h5py, and every module
# that touches an extra's dependency (Parquet, video, the Hub, zarr, gymnasium, the catalog
# server and client).
_MIN_MODULES = {
    "test_cli.py",
    "data/test_store_roundtrip.py",
    "data/test_store_validation.py",
    "data/test_resident.py",
    "samplers/test_sumtree.py",
    "samplers/test_philox.py",
    "replay/test_store_replay.py",
    "replay/test_demo_file.py",
    "replay/test_checkpoint.py",
    "io/test_parquet_video.py",
    "io/test_archive.py",
    "lerobot/test_lerobot_import.py",
    "lerobot/test_lerobot_hub_cache.py",
    "lerobot/test_lerobot_push.py",
    "lerobot/test_lerobot_writer.py",
    "importers/test_diffusion_policy.py",
    "importers/test_minari.py",
    "gym/test_recorder.py",
    "gym/test_spaces.py",
    # the catalog service (starlette, uvicorn and its h11 protocol, anyio, sqlalchemy, boto3
    # against the S3 stand-in) and its client (requests, zstandard, python-dotenv)
    "catalog/test_service.py",
    "catalog/test_db.py",
    "catalog/test_objects.py",
    "catalog/test_keys_migrations.py",
    "catalog/test_winner.py",
    "catalog/test_recordings.py",
    "catalog/test_auth.py",
    "catalog/test_probes.py",
    "catalog/test_protocol.py",
    "remote/test_roundtrip.py",
    "remote/test_client_cli.py",
    "remote/test_artifacts.py",
    "remote/test_assets_pull.py",
    "remote/test_assets_kv.py",
    "remote/test_assets_source.py",
    "remote/test_multipart.py",
}


def _min_run(config: pytest.Config) -> bool:
    expr = str(config.getoption("markexpr", "") or "")
    return "min" in expr.replace("(", " ").replace(")", " ").split() and "not min" not in expr


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    # `-m min` runs in a venv without every extra (make test-min): modules outside the
    # subset are not even imported, so their optional imports cannot fail collection.
    if not _min_run(config) or collection_path.suffix != ".py":
        return None
    if not collection_path.name.startswith("test_"):
        return None
    try:
        rel = collection_path.relative_to(Path(__file__).parent).as_posix()
    except ValueError:
        return None
    return rel not in _MIN_MODULES or None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        path = Path(str(item.fspath))
        if _CUDA_DIR in path.parents:
            item.add_marker(pytest.mark.cuda)
        try:
            rel = path.relative_to(here).as_posix()
        except ValueError:
            continue
        if rel in _MIN_MODULES:
            item.add_marker(pytest.mark.min)


@pytest.fixture
def rng() -> np.random.Generator:
    """Seeded randomness for tests (never numpy's global state)."""
    return np.random.default_rng(20261129)


@pytest.fixture
def cudasim() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
