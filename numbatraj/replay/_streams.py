"""Streams, ``next_of`` and frame stacks: the configuration and the side table.

:class:`StreamConfig` holds what the replay options add to the column set (checked once, at
construction).  :class:`SideTable` keeps, for a ``next_of`` target, the values that cannot
be derived from the next row of the same stream: the final observation of an episode that
ended (``done`` or ``truncated``) and the newest row of each stream.  It is a pool of rows
(grown by doubling, slots reused through a free stack) and a per-physical-row slot number
(-1: derived).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from numbatraj._checks import check_count
from numbatraj.data.column import ColumnSpec
from numbatraj.errors import SchemaError

__all__ = ["SideTable", "StreamConfig", "stream_config"]

#: Names ``sample(..., n_step=n)`` adds to the outputs.
NSTEP_OUTPUTS = ("return", "discount")


@dataclass(frozen=True)
class StreamConfig:
    """``n_envs``, the ``next_of`` targets (target -> source) and the frame stacks
    (column -> depth) of a replay."""

    n_envs: int = 1
    next_of: dict[str, str] = field(default_factory=dict)
    frame_stack: dict[str, int] = field(default_factory=dict)

    @property
    def plain(self) -> bool:
        """No option set: today's single-stream transitions."""
        return self.n_envs == 1 and not self.next_of and not self.frame_stack

    def to_json(self) -> dict[str, Any]:
        return {"n_envs": self.n_envs, "next_of": dict(self.next_of),
                "frame_stack": dict(self.frame_stack)}


def stream_config(specs: Mapping[str, ColumnSpec], quantized: Any, ring_capacity: int,
                  n_envs: int, next_of: Mapping[str, str] | None,
                  frame_stack: Mapping[str, int] | None) -> StreamConfig:
    """Check the stream options against the declared columns (SchemaError, nothing built)."""
    e = check_count("n_envs", n_envs)
    if ring_capacity % e:
        raise SchemaError(
            f"n_envs={e} must divide the ring capacity (capacity - demo_capacity = "
            f"{ring_capacity}): every add writes whole steps of all envs"
        )
    nx: dict[str, str] = {}
    for target, source in dict(next_of or {}).items():
        if target in specs:
            raise SchemaError(
                f"next_of target {target!r} is also a declared column; a next_of target is "
                f"derived, not stored (drop it from columns)"
            )
        if source not in specs:
            raise SchemaError(
                f"next_of[{target!r}] = {source!r} is not a declared column; declared columns: "
                f"{', '.join(specs)}"
            )
        if source in quantized:
            raise SchemaError(
                f"next_of[{target!r}]: the source column {source!r} is quantised; next_of "
                f"needs a column stored in its declared dtype"
            )
        nx[str(target)] = str(source)
    fs: dict[str, int] = {}
    for name, depth in dict(frame_stack or {}).items():
        if name not in specs:
            raise SchemaError(
                f"frame_stack names column {name!r}, which is not declared; declared columns: "
                f"{', '.join(specs)}"
            )
        fs[name] = check_count(f"frame_stack[{name!r}]", depth)
    if fs and "done" not in specs and "truncated" not in specs:
        raise SchemaError(
            "frame_stack needs episode boundaries: declare a 'done' or 'truncated' column"
        )
    return StreamConfig(e, nx, fs)


class SideTable:
    """Rows of ``next_of`` targets that cannot be derived (see the module doc).

    Parameters
    ----------
    capacity : int
        Physical rows of the replay.
    specs : mapping of target name to (dtype, row shape)
    """

    def __init__(self, capacity: int, specs: Mapping[str, tuple[np.dtype, tuple[int, ...]]]):
        #: pool slot of every physical row, -1 where the value is derived (int32: 4 bytes
        #: per row beside a row's observation)
        self.slot: np.ndarray = np.full(capacity, -1,
                                        dtype=np.int32 if capacity < 2**31 else np.int64)
        self._specs = dict(specs)
        self.pool = {t: np.empty((16, *shp), dtype=dt) for t, (dt, shp) in self._specs.items()}
        self._free = np.arange(15, -1, -1, dtype=np.int64)
        self._n_free = 16

    @property
    def n_kept(self) -> int:
        """Rows held in the table."""
        return self._free.shape[0] - self._n_free

    def release(self, rows: np.ndarray) -> None:
        """Rows ``rows`` (physical) no longer need an entry (overwritten, or derivable)."""
        s = self.slot[rows]
        s = s[s >= 0]
        if s.size:
            s = np.unique(s)
            self._free[self._n_free : self._n_free + s.size] = s
            self._n_free += s.size
        self.slot[rows] = -1

    def keep(self, rows: np.ndarray, values: Mapping[str, np.ndarray]) -> None:
        """Entries for physical ``rows`` (distinct) from ``values[target]`` ``(k, *shape)``."""
        k = rows.shape[0]
        if not k:
            return
        self.release(rows)
        while self._n_free < k:
            self._grow()
        slots = self._free[self._n_free - k : self._n_free][::-1].copy()
        self._n_free -= k
        for t, pool in self.pool.items():
            pool[slots] = values[t]
        self.slot[rows] = slots.astype(self.slot.dtype)

    def _grow(self) -> None:
        old = self._free.shape[0]
        for t in self.pool:
            p = self.pool[t]
            new = np.empty((2 * old, *p.shape[1:]), dtype=p.dtype)
            new[:old] = p
            self.pool[t] = new
        free = np.empty(2 * old, dtype=np.int64)
        free[: self._n_free] = self._free[: self._n_free]
        extra = np.arange(2 * old - 1, old - 1, -1, dtype=np.int64)
        free[self._n_free : self._n_free + old] = extra
        self._n_free += old
        self._free = free

    def state(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Rows with an entry (physical, int64) and their values per target (copies)."""
        rows = np.flatnonzero(self.slot >= 0).astype(np.int64)
        s = self.slot[rows].astype(np.int64)
        return rows, {t: p[s] for t, p in self.pool.items()}
