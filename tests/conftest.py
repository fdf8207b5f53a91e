"""Shared fixtures.  Tests under tests/cuda/ are marked ``cuda`` and run in their own pytest
process with NUMBA_ENABLE_CUDASIM=1 (see the Makefile), so the simulator never disturbs the
compiled host tests."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

_CUDA_DIR = Path(__file__).parent / "cuda"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _CUDA_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.cuda)


@pytest.fixture
def rng() -> np.random.Generator:
    """Seeded randomness for tests (never numpy's global state)."""
    return np.random.default_rng(20261129)


@pytest.fixture
def cudasim() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
