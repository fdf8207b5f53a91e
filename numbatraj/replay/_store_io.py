"""Replay <-> trajectory store: dump the rows in time order, fill a replay from a store.

A dump writes the demonstration rows, then the online rows oldest first, and closes an
episode after every row whose ``done`` or ``truncated`` is set and after the last demo row
when online rows follow (the demo prefix never runs into the first online episode); rows
after the last such cut form a final, unfinished episode, recorded as
``attr.last_episode_open=1``.  Quantised
columns are written dequantised, in their declared dtype.  Rows are written in blocks, so
a dump needs memory for one block, not for the buffer.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import numpy as np

from numbatraj.data.column import ColumnSpec
from numbatraj.data.store import TrajectoryStore
from numbatraj.data.writer import TrajectoryStoreWriter
from numbatraj.errors import SchemaError

__all__ = ["BLOCK_ROWS", "HeldRows", "dump_replay", "episode_ends", "replay_from_store"]


class HeldRows(Protocol):
    """What a dump reads from a host replay."""

    @property
    def columns(self) -> dict[str, ColumnSpec]: ...
    @property
    def n_rows(self) -> int: ...
    @property
    def n_demo(self) -> int: ...
    @property
    def seed(self) -> int: ...
    def time_order(self) -> np.ndarray: ...
    def storage(self, name: str) -> np.ndarray: ...
    def rows(self, indices: Any = None) -> dict[str, np.ndarray]: ...


class _Fillable(Protocol):
    @property
    def columns(self) -> dict[str, ColumnSpec]: ...
    @property
    def ring_capacity(self) -> int: ...
    def add(self, **rows: Any) -> int: ...


F = TypeVar("F", bound=_Fillable)

#: Rows moved per block by dump and from_store.
BLOCK_ROWS = 1 << 16


def episode_ends(flags: np.ndarray) -> np.ndarray:
    """Lengths of the episodes cut after each true entry of ``flags`` (bool ``(n,)``); a
    trailing run without a true entry is one more episode."""
    ends = np.flatnonzero(flags) + 1
    if not ends.size or ends[-1] != flags.shape[0]:
        ends = np.append(ends, flags.shape[0])
    return np.diff(np.concatenate(([0], ends))).astype(np.int64)


def dump_replay(rep: HeldRows, path: str | os.PathLike[str], *, env_id: str | None,
                overwrite: bool) -> int:
    if rep.n_rows == 0:
        raise SchemaError("dump: the replay holds no rows; a store needs at least one episode")
    order = rep.time_order()
    cut_cols = [c for c in ("done", "truncated") if c in rep.columns]
    flags = np.zeros(order.shape[0], dtype=np.bool_)
    for c in cut_cols:
        flags |= rep.storage(c)[order].astype(np.bool_)
    if 0 < rep.n_demo < order.shape[0]:
        flags[rep.n_demo - 1] = True  # the demo prefix ends where the online rows begin
    lengths = episode_ends(flags)
    open_last = not flags[-1]
    attrs = {"source": "StoreReplay", "last_episode_open": int(open_last)}
    with TrajectoryStoreWriter(path, rep.columns.values(), env_id=env_id, seed=rep.seed,
                               attrs=attrs, overwrite=overwrite) as w:
        ep = 0
        left = int(lengths[0])
        for s in range(0, order.shape[0], BLOCK_ROWS):
            block = order[s : s + BLOCK_ROWS]
            rows = rep.rows(block)
            rows = {n: a.astype(rep.columns[n].dtype, copy=False) for n, a in rows.items()}
            pos = 0
            while pos < block.shape[0]:
                take = min(left, block.shape[0] - pos)
                w.append_rows({n: a[pos : pos + take] for n, a in rows.items()})
                pos += take
                left -= take
                if left == 0:
                    w.end_episode()
                    ep += 1
                    if ep < lengths.shape[0]:
                        left = int(lengths[ep])
    return int(lengths.shape[0])


def replay_from_store(cls: Callable[..., F], store: Any, capacity: int, **kwargs: Any) -> F:
    own = not isinstance(store, TrajectoryStore)
    st = TrajectoryStore(os.fspath(store)) if own else store
    try:
        rep = cls(list(st.columns.values()), capacity, **kwargs)
        n = st.n_rows
        first = max(0, n - rep.ring_capacity)  # older rows would be overwritten
        for s in range(first, n, BLOCK_ROWS):
            e = min(s + BLOCK_ROWS, n)
            rep.add(**{name: st.read_range(name, s, e) for name in rep.columns})
    finally:
        if own:
            st.close()
    return rep
