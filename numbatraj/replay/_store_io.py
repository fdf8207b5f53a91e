"""Replay <-> trajectory store: dump the rows in time order, fill a replay from a store.

A dump writes the demonstration rows, then the online rows oldest first, and closes an
episode after every row whose ``done`` or ``truncated`` is set and after the last demo row
when online rows follow (the demo prefix never runs into the first online episode); rows
after the last such cut form a final, unfinished episode, recorded as
``attr.last_episode_open=1``.  Quantised
columns are written dequantised, in their declared dtype.  Rows are written in blocks, so
a dump needs memory for one block, not for the buffer.

A dump also records per-column statistics (:mod:`numbatraj.data.stats`: ``stats/<column>/``
``mean``, ``std``, ``min``, ``max``, ``q01``, ``q99``, ``count``, read back by
:meth:`~numbatraj.TrajectoryStore.stats`) of every numeric column that is not an image
(``uint8`` with two or more row dimensions), computed over the dumped rows (bool columns
as 0/1), one column at a time from the written file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import numpy as np

from numbatraj.data.column import ColumnSpec
from numbatraj.data.stats import compute_stats, stats_datasets
from numbatraj.data.store import TrajectoryStore
from numbatraj.data.store_stats import stats_columns
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
    def n_envs(self) -> int: ...
    @property
    def next_of(self) -> dict[str, str]: ...
    @property
    def seed(self) -> int: ...
    def time_order(self) -> np.ndarray: ...
    def storage(self, name: str) -> np.ndarray: ...
    def rows(self, indices: Any = None) -> dict[str, np.ndarray]: ...
    def cut_first(self) -> np.ndarray: ...


class _Fillable(Protocol):
    @property
    def columns(self) -> dict[str, ColumnSpec]: ...
    @property
    def ring_capacity(self) -> int: ...
    @property
    def demo_capacity(self) -> int: ...
    @property
    def n_envs(self) -> int: ...
    @property
    def next_of(self) -> dict[str, str]: ...
    def add(self, **rows: Any) -> int: ...
    def add_demos(self, **rows: Any) -> int: ...
    def _set_cut_first(self, flags: np.ndarray) -> None: ...


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


def _ints(values: list[int]) -> str:
    return ",".join(str(v) for v in values)


def _parse_ints(text: str | None) -> list[int]:
    return [int(v) for v in text.split(",") if v] if text else []


def dump_replay(rep: HeldRows, path: str | os.PathLike[str], *, env_id: str | None,
                overwrite: bool, stats: bool = True) -> int:
    """Each stream's episodes in time order: the demos (stream -1), then env 0, 1, ...

    The manifest records ``attr.ep_stream`` (stream id per episode), ``attr.ep_cut_start``
    (episodes whose start the ring overwrote), ``attr.ep_open`` (episodes still running),
    ``attr.n_envs`` and, for one stream, ``attr.last_episode_open``.
    """
    if rep.n_rows == 0:
        raise SchemaError("dump: the replay holds no rows; a store needs at least one episode")
    order = rep.time_order()
    nd, e = rep.n_demo, rep.n_envs
    cut_first = rep.cut_first()
    cut_cols = [c for c in ("done", "truncated") if c in rep.columns
                and rep.columns[c].shape == ()]
    streams: list[tuple[int, np.ndarray]] = []
    if nd:
        streams.append((-1, order[:nd]))
    online = order[nd:]
    for k in range(e):
        if online[k::e].size:
            streams.append((k, online[k::e]))
    ep_stream: list[int] = []
    ep_cut: list[int] = []
    ep_open: list[int] = []
    plan: list[tuple[np.ndarray, np.ndarray]] = []
    for sid, rows in streams:
        flags = np.zeros(rows.shape[0], dtype=np.bool_)
        for c in cut_cols:
            flags |= rep.storage(c)[rows].astype(np.bool_)
        is_open = not flags[-1] and not (sid < 0 and online.size)
        if sid >= 0 and not cut_first[1 + sid]:
            ep_cut.append(len(ep_stream))
        lengths = episode_ends(flags)
        ep_stream.extend([sid] * lengths.shape[0])
        if is_open:
            ep_open.append(len(ep_stream) - 1)
        plan.append((rows, lengths))
    columns = dict(rep.columns)
    for t, src in rep.next_of.items():
        spec = rep.columns[src]
        columns[t] = ColumnSpec(t, spec.dtype, spec.shape)
    attrs = {"source": "StoreReplay", "n_envs": e, "ep_stream": _ints(ep_stream),
             "ep_cut_start": _ints(ep_cut), "ep_open": _ints(ep_open),
             "last_episode_open": int(bool(ep_open) and ep_open[-1] == len(ep_stream) - 1)}
    with TrajectoryStoreWriter(path, columns.values(), env_id=env_id, seed=rep.seed,
                               attrs=attrs, overwrite=overwrite) as w:
        for rows, lengths in plan:
            ep = 0
            left = int(lengths[0])
            for s in range(0, rows.shape[0], BLOCK_ROWS):
                block = rows[s : s + BLOCK_ROWS]
                got = rep.rows(block)
                got = {n: a.astype(columns[n].dtype, copy=False) for n, a in got.items()}
                pos = 0
                while pos < block.shape[0]:
                    take = min(left, block.shape[0] - pos)
                    w.append_rows({n: a[pos : pos + take] for n, a in got.items()})
                    pos += take
                    left -= take
                    if left == 0:
                        w.end_episode()
                        ep += 1
                        if ep < lengths.shape[0]:
                            left = int(lengths[ep])
        n = rep.n_rows
        if stats and n:
            per: dict[str, dict[str, np.ndarray]] = {}
            for name in stats_columns(columns):
                col = w.read_range(name, 0, n)
                per[name] = compute_stats(col.view(np.uint8) if col.dtype == np.bool_ else col)
            w.close(datasets=stats_datasets(per))
    return len(ep_stream)


def replay_from_store(cls: Callable[..., F], store: Any, capacity: int, **kwargs: Any) -> F:
    """A replay filled from a store.  A store dumped with streams (``attr.ep_stream``) is
    re-interleaved: stream -1 goes to the demo prefix when the replay has one, env streams
    (of equal length) as ``(T, n_envs)`` steps, the newest that fit; ``ep_cut_start``
    comes back as the streams' cut flags."""
    own = not isinstance(store, TrajectoryStore)
    st = TrajectoryStore(os.fspath(store)) if own else store
    try:
        man = st.manifest
        ep_stream = _parse_ints(man.get("attr.ep_stream"))
        if ep_stream and "n_envs" not in kwargs:
            kwargs["n_envs"] = int(man.get("attr.n_envs", "1"))
        targets = set(kwargs.get("next_of") or {})
        specs = [c for c in st.columns.values() if c.name not in targets]
        rep = cls(specs, capacity, **kwargs)
        names = list(rep.columns) + list(rep.next_of)
        if not ep_stream or (rep.n_envs == 1 and -1 not in ep_stream):
            _fill_flat(rep, st, names, 0, st.n_rows)
            if ep_stream and 0 in _parse_ints(man.get("attr.ep_cut_start")) and \
                    st.n_rows <= rep.ring_capacity:
                rep._set_cut_first(np.array([True, False]))
            return rep
        _fill_streams(rep, st, names, ep_stream, _parse_ints(man.get("attr.ep_cut_start")))
    finally:
        if own:
            st.close()
    return rep


def _fill_flat(rep: _Fillable, st: Any, names: list[str], lo: int, hi: int) -> None:
    first = max(lo, hi - rep.ring_capacity)  # older rows would be overwritten
    for s in range(first, hi, BLOCK_ROWS):
        e = min(s + BLOCK_ROWS, hi)
        rep.add(**{name: st.read_range(name, s, e) for name in names})


def _fill_streams(rep: _Fillable, st: Any, names: list[str], ep_stream: list[int],
                  ep_cut: list[int]) -> None:
    lengths = np.asarray(st.episode_lengths, dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    if len(ep_stream) != lengths.shape[0]:
        raise SchemaError(
            f"from_store: attr.ep_stream lists {len(ep_stream)} episodes, the store has "
            f"{lengths.shape[0]}"
        )
    ids = np.asarray(ep_stream)
    demo = np.flatnonzero(ids < 0)
    if demo.size:
        lo, hi = int(offsets[demo[0]]), int(offsets[demo[-1] + 1])
        if rep.demo_capacity:
            rep.add_demos(**{n: st.read_range(n, lo, hi) for n in names})
        elif rep.n_envs == 1:
            _fill_flat(rep, st, names, lo, hi)
        else:
            raise SchemaError("from_store: the store holds demo episodes (stream -1); give the "
                              "replay a demo_capacity")
    e = rep.n_envs
    env_ids = sorted(set(ids[ids >= 0].tolist()))
    if not env_ids:
        return
    if env_ids != list(range(e)):
        raise SchemaError(f"from_store: the store's streams are {env_ids}, the replay has "
                          f"n_envs={e}")
    spans = []
    for k in range(e):
        eps = np.flatnonzero(ids == k)
        spans.append((int(offsets[eps[0]]), int(offsets[eps[-1] + 1]), int(eps[0])))
    n_steps = {hi - lo for lo, hi, _ in spans}
    if len(n_steps) != 1:
        raise SchemaError(f"from_store: the streams have {sorted(n_steps)} rows; n_envs "
                          f"streams hold equal step counts")
    steps = n_steps.pop()
    keep = min(steps, rep.ring_capacity // e)
    skip = steps - keep
    cut = np.ones(1 + e, dtype=np.bool_)
    for k, (lo, _hi, first_ep) in enumerate(spans):
        if skip:
            prev = lo + skip - 1
            cut[1 + k] = any(bool(st.read_range(c, prev, prev + 1)[0])
                             for c in ("done", "truncated") if c in st.columns)
        else:
            cut[1 + k] = first_ep not in ep_cut
    for s in range(skip, steps, BLOCK_ROWS):
        t = min(BLOCK_ROWS, steps - s)
        rows = {}
        for n in names:
            parts = [st.read_range(n, lo + s, lo + s + t) for lo, _, _ in spans]
            rows[n] = np.stack(parts, axis=1) if e > 1 else parts[0]  # (T, E, *shape)
        rep.add(**rows)
    rep._set_cut_first(cut)
