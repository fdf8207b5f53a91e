"""Column sets and row generators shared by the replay tests."""

from __future__ import annotations

import numpy as np

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
