"""Column sets and row generators shared by the replay tests."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from numbatraj.data import ColumnSpec


def sac_columns(obs: int = 3, act: int = 2) -> list[ColumnSpec]:
    return [
        ColumnSpec("obs", np.float32, (obs,)),
        ColumnSpec("action", np.float32, (act,)),
        ColumnSpec("reward", np.float32, ()),
        ColumnSpec("next_obs", np.float32, (obs,)),
        ColumnSpec("done", np.bool_, ()),
    ]


def rows(start: int, n: int, obs: int = 3, act: int = 2) -> dict[str, np.ndarray]:
    """``n`` rows whose every value encodes its row number (``start + i``)."""
    t = np.arange(start, start + n, dtype=np.float32)
    return {
        "obs": np.repeat(t[:, None], obs, 1) + np.arange(obs, dtype=np.float32) / 10,
        "action": np.repeat(-t[:, None], act, 1),
        "reward": t * 0.5,
        "next_obs": np.repeat(t[:, None] + 1, obs, 1),
        "done": (np.arange(start, start + n) % 7) == 6,
    }


def row_ids(batch: dict[str, np.ndarray]) -> np.ndarray:
    """The row numbers encoded by :func:`rows`."""
    return batch["reward"].astype(np.float64) * 2


@contextlib.contextmanager
def parallel_kernel_spy(monkeypatch: Any, module: Any, kernel: str, floor: str,
                        value: Any) -> Iterator[list[int]]:
    """``numbatraj.set_num_threads(NUMBA_NUM_THREADS)`` with ``numbatraj._jit.<floor>`` set
    to ``value`` (the bytes from which a kernel goes parallel), and every call of the
    parallel kernel ``module.<kernel>`` still run but recorded: yields the list of the
    calls' part counts (their last argument).  Skips with one Numba thread."""
    import numba

    import numbatraj
    import numbatraj._jit as J

    top = int(numba.config.NUMBA_NUM_THREADS)
    if top < 2:
        pytest.skip("one Numba thread: no parallel path to take")
    calls: list[int] = []
    real = getattr(module, kernel)
    monkeypatch.setattr(module, kernel, lambda *a: calls.append(a[-1]) or real(*a))
    monkeypatch.setattr(J, floor, value)
    numbatraj.set_num_threads(top)
    try:
        yield calls
    finally:
        numbatraj.set_num_threads(None)
