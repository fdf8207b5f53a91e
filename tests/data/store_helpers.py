"""Small builders shared by the store tests."""

from __future__ import annotations

import os

import numpy as np

from numbatraj import ColumnSpec, TrajectoryStoreWriter

WALKER = [
    ColumnSpec("state", np.float32, (26,)),
    ColumnSpec("action", np.float32, (6,)),
    ColumnSpec("reward", np.float32),
    ColumnSpec("done", np.bool_),
]


def random_rows(spec: ColumnSpec, n: int, rng: np.random.Generator) -> np.ndarray:
    shape = (n, *spec.shape)
    dt = spec.dtype
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)


def write_store(
    path: str | os.PathLike[str],
    columns: list[ColumnSpec],
    lengths: list[int],
    rng: np.random.Generator,
    *,
    append_rows: int = 1000,
    **kwargs: object,
) -> dict[str, np.ndarray]:
    """Write a store with the given episode lengths; returns the expected column contents."""
    expected = {c.name: random_rows(c, int(sum(lengths)), rng) for c in columns}
    with TrajectoryStoreWriter(path, columns, **kwargs) as w:  # type: ignore[arg-type]
        row = 0
        for length in lengths:
            for start in range(row, row + length, append_rows):
                stop = min(row + length, start + append_rows)
                for c in columns:
                    w.append(c.name, expected[c.name][start:stop])
            row += length
            w.end_episode()
    return expected
