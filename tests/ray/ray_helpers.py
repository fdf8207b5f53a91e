"""Writer actors and row batches shared by the Ray tests (imported by Ray's workers too)."""

from __future__ import annotations

import time

import numpy as np


def batch(writer: int, start: int, n: int) -> dict[str, np.ndarray]:
    """Rows ``start..start+n`` of ``writer``: ids ``writer * 1e6 + row``, obs a function of
    the id, so any sampled row can be checked against what was added."""
    ids = writer * 10**6 + np.arange(start, start + n, dtype=np.int64)
    obs = (ids[:, None] * np.array([1, 2, 3, 4])).astype(np.float32) % 65521
    return {"obs": obs, "id": ids}


def check_rows(data: dict[str, np.ndarray]) -> None:
    want = (data["id"][:, None] * np.array([1, 2, 3, 4])).astype(np.float32) % 65521
    np.testing.assert_array_equal(data["obs"], want)


class Writer:
    """A writer actor body: adds ``rows`` rows in batches to shard ``k``."""

    def run(self, replay, k, rows, batch_rows, sleep_s, timeout=None):
        t0 = time.monotonic()
        for start in range(0, rows, batch_rows):
            replay.add(writer=k, timeout=timeout, **batch(k, start, batch_rows))
            if sleep_s:
                time.sleep(sleep_s)
        return time.monotonic() - t0
