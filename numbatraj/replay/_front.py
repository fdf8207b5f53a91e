"""The replay core: what :class:`StoreReplay` (host) and :class:`StoreReplayGpu` (device)
share.  The two public classes derive from :class:`ReplayFront` and override only where the
data lives (host arrays or device arrays): the ``_write_*``, ``_draw``, ``_gather`` and
checkpoint hooks below.

Shared here: the construction checks, the ring state (cursor, size, n_demo, n_added), the
properties, ERE, the ``add`` / ``add_demos`` templates, the checks of ``sample_into``'s
outputs, the ``sample`` / ``sample_indices`` / ``sample_into`` templates, dump / from_store,
and the checkpoint (one format, one reader with every check: ``_checkpoint.py``).
"""

from __future__ import annotations

import abc
import math
import os
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar, TypeVar

import numpy as np

from numbatraj._checks import check_count, check_real, check_seed
from numbatraj.data.column import ColumnSpec
from numbatraj.data.index_batch import IndexBatch
from numbatraj.errors import IntegrityError, SamplerError, SchemaError
from numbatraj.replay import _checkpoint as ck
from numbatraj.replay import _draw, _store_io
from numbatraj.replay import _streams as _st
from numbatraj.replay.columns import Quantization, ReplayColumns

__all__ = ["ReplayFront"]

R = TypeVar("R", bound="ReplayFront")


_BLOCK_MIN = 1 << 20
#: Blocks at least this large are kept for reuse once nothing refers to them any more:
#: glibc serves them with a fresh ``mmap`` every time (its dynamic mmap threshold stops at
#: 32 MiB), so each new one costs page faults and zeroing.  Measured: a 43 MB frame-stack
#: draw (256 x 2 stacks of 4 3x84x84 frames) took 4.2 ms through ``sample()`` and 2.4 ms
#: through ``sample_into()``, the difference all in the fresh block.
_RECYCLE_MIN = 32 << 20
_SPARE_PER_SIZE = 2
_spares: dict[int, list[np.ndarray]] = {}
_spares_lock = threading.Lock()


def _block(total: int) -> np.ndarray:
    """A ``uint8`` block of ``total + 64`` bytes: a spare of that size nobody refers to any
    more (only this module holds it: the outputs carved from it are all gone), or a new one
    (remembered as a spare when large)."""
    if total + 64 < _RECYCLE_MIN:
        return np.empty(total + 64, dtype=np.uint8)
    with _spares_lock:
        kept = _spares.setdefault(total, [])
        for raw in kept:
            # references: the list, this loop's name, getrefcount's argument; every output
            # carved from the block holds one more (a view's base is its owner)
            if sys.getrefcount(raw) <= 3:
                return raw
        raw = np.empty(total + 64, dtype=np.uint8)
        if len(kept) < _SPARE_PER_SIZE:
            kept.append(raw)
        return raw


def output_plan(specs: Mapping[str, tuple[Any, tuple[int, ...]]]
                ) -> tuple[int, tuple[tuple[str, int, np.dtype, tuple[int, ...]], ...]]:
    """Where :func:`carve_outputs` puts each output: the block's bytes and ``(name, byte
    offset, dtype, shape)`` per array (64-byte aligned, disjoint).  A replay keeps the plan
    of each batch size it draws."""
    total = 0
    items = []
    for name, (dt, shape) in specs.items():
        dt = np.dtype(dt)
        items.append((name, total, dt, tuple(shape)))
        nbytes = math.prod(shape) * dt.itemsize  # math.prod: np.prod costs ~2 us
        total += (nbytes + 63) // 64 * 64
    return total, tuple(items)


def carve_outputs(plan: tuple[int, tuple[tuple[str, int, np.dtype, tuple[int, ...]], ...]]
                  ) -> dict[str, np.ndarray]:
    """New arrays as :func:`output_plan` placed them (see :func:`block_outputs`)."""
    total, items = plan
    if total < _BLOCK_MIN:  # small outputs: the heap reuses them anyway
        return {name: np.empty(shape, dtype=dt) for name, _, dt, shape in items}
    raw = _block(total)
    base = (-raw.ctypes.data) % 64
    return {name: np.ndarray(shape, dtype=dt, buffer=raw, offset=base + off)
            for name, off, dt, shape in items}


def block_outputs(specs: Mapping[str, tuple[Any, tuple[int, ...]]]) -> dict[str, np.ndarray]:
    """New arrays ``name -> np.empty(shape, dtype)`` carved out of one allocation (each
    64-byte aligned, C-contiguous, disjoint).

    Measured: two 5.4 MB outputs (256 pixel rows) allocated apart cost 1.1-1.9 ms of page
    faults per call, because glibc gives the freed pair back to the OS every time (their sum
    passes its trim threshold); one block of the same bytes is reused without faults
    (80 us to allocate and fill).  The arrays share that block's lifetime.  Blocks of 32 MiB
    and more are recycled once every array carved from them is gone (:func:`_block`): a
    batch the caller still holds is never reused.
    """
    return carve_outputs(output_plan(specs))


class ReplayFront(abc.ABC):
    """Configuration, ring state and the templates of both replays (see the module doc).

    ``sample_into`` contract (host and device): ``outputs`` are the caller's arrays, filled
    in place and checked before anything is drawn; the returned :class:`IndexBatch` belongs
    to the replay, one per batch size, and its arrays are overwritten by the next draw of the
    same batch size (copy them to keep them).  Nothing is allocated once a batch size has
    been seen.
    """

    _KIND: ClassVar[str] = "StoreReplay"
    #: what the backend implements of the stream options: "n_envs", "next_of",
    #: "frame_stack" (constructor), "n_step" (sample), "sequences" (sample_sequences),
    #: "prioritized_sequences"
    _OPTIONS: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self,
        columns: Iterable[ColumnSpec],
        capacity: int,
        *,
        prioritized: bool = False,
        seed: int = 0,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
        quantize: Mapping[str, tuple[float, float]] | None = None,
        demo_capacity: int = 0,
        demo_fraction: float | None = None,
        n_envs: int = 1,
        next_of: Mapping[str, str] | None = None,
        frame_stack: Mapping[str, int] | None = None,
    ) -> None:
        self._cols = ReplayColumns(columns, quantize)
        cap = check_count("capacity", capacity)
        d = check_count("demo_capacity", demo_capacity, minimum=0)
        if d >= cap:
            raise SchemaError(
                f"demo_capacity {d} leaves no ring rows in a replay of capacity {cap}; "
                f"expected demo_capacity < capacity"
            )
        self._capacity, self._d, self._r = cap, d, cap - d
        specs = self._cols.specs
        self._streams = _st.stream_config(specs, self._cols.quant, self._r, n_envs, next_of,
                                          frame_stack)
        #: per-draw constants: whether n-step draws passed their schema checks once, and the
        #: outputs of a transition draw per (batch size or None, n-step or not)
        self._nstep_schema_ok = False
        self._out_cache: dict[tuple[int | None, bool], Any] = {}
        # sample_into's checks: the column names, and per batch size each output's
        # (name, dtype, shape)
        self._out_names = frozenset(self._cols.names)
        self._out_expect: dict[int, tuple[tuple[str, np.dtype, tuple[int, ...]], ...]] = {}
        st = self._streams
        asked = [o for o, on in (("n_envs", st.n_envs > 1), ("next_of", bool(st.next_of)),
                                 ("frame_stack", bool(st.frame_stack))) if on]
        missing = [o for o in asked if o not in self._OPTIONS]
        if missing:
            raise SchemaError(
                f"{self._KIND} does not support {' or '.join(missing)} yet (got "
                f"{st.to_json()}); StoreReplay does"
            )
        self._next_cols: ReplayColumns | None = None
        if self._streams.next_of:
            self._next_cols = ReplayColumns(
                [ColumnSpec(t, specs[src].dtype, specs[src].shape)
                 for t, src in self._streams.next_of.items()])
        #: columns whose set flag ends an episode
        self._end_names = tuple(c for c in ("done", "truncated")
                                if c in specs and specs[c].shape == ())
        #: does the first held row of each stream begin an episode (0: demos, 1 + e: env e)
        self._cut_first = np.ones(1 + self._streams.n_envs, dtype=np.bool_)
        self._side: _st.SideTable | None = None
        self._seed = check_seed(seed)
        self._prioritized = bool(prioritized)
        self._alpha = check_real("alpha", alpha, 0.0, False)
        self._beta = check_real("beta", beta, 0.0, False)
        self._eps = check_real("eps", eps, 0.0, True)
        self._fraction = _draw.check_fraction(demo_fraction)
        self._ere: _draw.EreConfig | None = None
        self._cursor = 0
        self._size = 0
        self._n_demo = 0
        self._n_added = 0
        #: (n_step, gamma) whose targets the rows keep (StoreReplay's ``n_step=``), or None
        self._kept: tuple[int, float] | None = None

    # ------------------------------------------------------------------ properties
    @property
    def columns(self) -> dict[str, ColumnSpec]:
        """The declared columns, by name."""
        return dict(self._cols.specs)

    @property
    def quantization(self) -> dict[str, Quantization]:
        """Quantised columns and their ranges."""
        return dict(self._cols.quant)

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def demo_capacity(self) -> int:
        return self._d

    @property
    def ring_capacity(self) -> int:
        """Rows the ring wraps over: ``capacity - demo_capacity``."""
        return self._r

    @property
    def size(self) -> int:
        """Online rows held (at most :attr:`ring_capacity`)."""
        return self._size

    @property
    def n_demo(self) -> int:
        """Demonstration rows held."""
        return self._n_demo

    @property
    def n_rows(self) -> int:
        """All rows that can be sampled: ``n_demo + size``."""
        return self._n_demo + self._size

    def __len__(self) -> int:
        return self.n_rows

    @property
    def cursor(self) -> int:
        """Ring slot the next online row goes to."""
        return self._cursor

    @property
    def n_added(self) -> int:
        """Online rows ever added (overwritten ones included)."""
        return self._n_added

    @property
    def prioritized(self) -> bool:
        return self._prioritized

    @property
    def n_envs(self) -> int:
        """Streams: every ``add`` writes one step (or ``T`` steps) of each."""
        return self._streams.n_envs

    @property
    def next_of(self) -> dict[str, str]:
        """Derived columns: target -> the column whose next row it is."""
        return dict(self._streams.next_of)

    @property
    def frame_stack(self) -> dict[str, int]:
        """Stacked columns and their depth."""
        return dict(self._streams.frame_stack)

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def demo_fraction(self) -> float | None:
        return self._fraction

    @property
    def alpha(self) -> float:
        return self._alpha

    @property
    def eps(self) -> float:
        return self._eps

    @property
    def beta(self) -> float:
        """IS-weight exponent (prioritized); assign to anneal it."""
        return self._get_beta()

    @beta.setter
    def beta(self, value: float) -> None:
        if not self._prioritized:
            raise SamplerError("beta applies to a prioritized replay (prioritized=True)")
        self._beta = check_real("beta", value, 0.0, False)
        self._beta_changed()

    def _get_beta(self) -> float:
        return self._beta

    def _beta_changed(self) -> None:  # noqa: B027 - an optional hook, empty by default
        """Backend hook: :attr:`beta` was assigned."""

    # ------------------------------------------------------------------ writes
    def add(self, **rows: Any) -> int:
        """Insert one row or a batch of ``n`` rows of every column into the ring.

        Parameters
        ----------
        **rows : array-like
            One entry per declared column: shape ``spec.shape`` (one row) or
            ``(n, *spec.shape)``, exactly the declared dtype (host arrays, or device arrays
            for :class:`StoreReplayGpu`).  When ``n`` exceeds the free space the ring wraps;
            when it exceeds the ring's capacity the newest rows win.  Every column is checked
            before any is written, so a failed add changes nothing.

        Returns
        -------
        int
            ``n``, the rows offered.
        """
        if self._streams.plain:
            arrays, n = self._cols.check_rows(rows)
            return self._add_rows(arrays, n)
        arrays, nx, n = self._check_stream_rows(rows, "add")
        return self._add_rows(arrays, n, nx)

    def _check_stream_rows(self, rows: dict[str, Any], what: str,
                           ) -> tuple[dict[str, Any], dict[str, Any] | None, int]:
        """Rows of the declared columns and of the ``next_of`` targets, flattened to
        ``(T * n_envs, *shape)`` (``add``) and checked, before anything is written."""
        nx_cols = self._next_cols
        nx: dict[str, Any] | None = None
        if nx_cols is not None:
            missing = [t for t in nx_cols.names if t not in rows]
            if missing:
                raise SchemaError(
                    f"{what}: missing {', '.join(map(repr, missing))}: a next_of target is "
                    f"given on every call (kept only where it cannot be derived)"
                )
            nx = {t: rows.pop(t) for t in nx_cols.names}
        e = self._streams.n_envs
        if e > 1 and what == "add":
            rows = self._flat_steps(rows, self._cols, e)
            if nx is not None and nx_cols is not None:
                nx = self._flat_steps(nx, nx_cols, e)
        arrays, n = self._cols.check_rows(rows, what)
        if nx is not None and nx_cols is not None:
            nx, m = nx_cols.check_rows(nx, what)
            if m != n:
                raise SchemaError(
                    f"{what}: the next_of targets have {m} rows, the columns {n}; every column "
                    f"needs the same number of rows"
                )
            nx = {t: (v.copy_to_host() if hasattr(v, "copy_to_host") else np.asarray(v)  # device
                      ).reshape(n, *nx_cols.specs[t].shape) for t, v in nx.items()}
        return arrays, nx, n

    @staticmethod
    def _flat_steps(rows: Mapping[str, Any], cols: ReplayColumns, e: int) -> dict[str, Any]:
        out = {}
        for name, v in rows.items():
            spec = cols.specs.get(name)
            if spec is None:
                out[name] = v  # check_rows names it
                continue
            a = v if hasattr(v, "__cuda_array_interface__") else np.asarray(v)
            shp = tuple(a.shape)
            nd = len(spec.shape)
            if shp[1:] == spec.shape and len(shp) == nd + 1 and shp[0] == e:
                out[name] = a
            elif len(shp) == nd + 2 and shp[1] == e and shp[2:] == spec.shape:
                out[name] = a.reshape(shp[0] * e, *spec.shape)
            else:
                raise SchemaError(
                    f"add: n_envs={e}, column {name!r} rows have shape {spec.shape}, got an "
                    f"array of shape {shp}; expected ({e}, *{spec.shape}) (one step of every "
                    f"env) or (T, {e}, *{spec.shape}); nothing was written"
                )
        return out

    def cut_first(self) -> np.ndarray:
        """bool ``(1 + n_envs,)``: whether the first held row of each stream (0: the demos,
        ``1 + e``: env ``e``) begins an episode; False once the ring overwrote the start of
        that stream's oldest episode (a dump lists it in ``ep_cut_start``)."""
        return self._cut_first.copy()

    def _set_cut_first(self, flags: np.ndarray) -> None:
        self._cut_first[:] = np.asarray(flags, dtype=np.bool_)

    def _ends_of(self, arrays: Mapping[str, Any], sel: np.ndarray, n: int) -> np.ndarray:
        """``done | truncated`` of batch rows ``sel`` (bool)."""
        f = np.zeros(sel.shape[0], dtype=np.bool_)
        for c in self._end_names:
            f |= np.asarray(arrays[c]).reshape(n)[sel].astype(np.bool_)
        return f

    def _end_flags(self, phys: np.ndarray) -> np.ndarray | None:
        """Backend: ``done | truncated`` of held physical rows (None: not tracked)."""
        return None

    def _end_flag_at(self, p: int) -> bool | None:
        """Backend: ``done | truncated`` of held physical row ``p`` (None: not tracked)."""
        return None

    def _oldest_slot(self) -> int:
        o = self._cursor - self._size
        return o + self._r if o < 0 else o

    def _logical_phys(self, logical: np.ndarray) -> np.ndarray:
        return self._d + (self._oldest_slot() + logical) % self._r

    def _note_cut(self, arrays: Mapping[str, Any], n: int) -> None:
        """Before a ring write that overwrites rows: whether each stream's new oldest row
        begins an episode (its overwritten predecessor ended one)."""
        r, e, size = self._r, self._streams.n_envs, self._size
        ov = size + n - r
        if ov <= 0 or not self._end_names:
            return
        if n > r:
            skip = n - r
            self._cut_first[1:] = self._ends_of(arrays, np.arange(skip - e, skip), n)
            return
        if e == 1:  # scalar reads: this runs on every add once the ring is full
            p = self._oldest_slot() + ov - 1
            one = self._end_flag_at(self._d + (p - r if p >= r else p))
            if one is not None:
                self._cut_first[1] = one
            return
        flags = self._end_flags(self._logical_phys(np.arange(ov - e, ov)))
        if flags is not None:
            self._cut_first[1:] = flags

    def _side_table(self) -> _st.SideTable:
        if self._side is None:
            specs = self._cols.specs
            self._side = _st.SideTable(self._capacity, {
                t: (specs[src].dtype, specs[src].shape)
                for t, src in self._streams.next_of.items()})
        return self._side

    def _side_before(self, n: int, cursor: int) -> None:
        """next_of: free the entries of the slots about to be written and of each stream's
        newest row that gets a successor and did not end an episode."""
        side = self._side_table()
        r, e, size = self._r, self._streams.n_envs, self._size
        k = min(n, r)
        side.release(self._d + (cursor + np.arange(n - k, n)) % r)
        if size:
            prev = self._logical_phys(np.arange(size - e, size))
            ends = self._end_flags(prev)
            side.release(prev if ends is None else prev[~ends])

    def _side_after(self, nx: Mapping[str, np.ndarray], arrays: Mapping[str, Any], n: int,
                    cursor: int) -> None:
        """next_of: keep the targets of the written rows that end an episode and of each
        stream's newest row."""
        r, e = self._r, self._streams.n_envs
        k = min(n, r)
        sel = np.arange(n - k, n)
        keep = self._ends_of(arrays, sel, n) | (sel >= n - e)
        sel = sel[keep]
        phys = self._d + (cursor + sel) % r
        self._side_table().keep(phys, {t: v[sel] for t, v in nx.items()})

    def _add_rows(self, arrays: dict[str, Any], n: int,
                  nx: dict[str, Any] | None = None) -> int:
        if n == 0:
            return 0
        cur = self._cursor
        if self._end_names:
            self._note_cut(arrays, n)
        if nx is not None:
            self._side_before(n, cur)
        self._write_ring(arrays, n, cur)
        if nx is not None:
            self._side_after(nx, arrays, n, cur)
        self._cursor = (cur + n) % self._r
        self._size = min(self._size + n, self._r)
        self._n_added += n
        self._ring_changed()
        return n

    def add_demos(self, **rows: Any) -> int:
        """Append demonstration rows to the pinned prefix (same checks as :meth:`add`).

        Raises :class:`SchemaError` (and writes nothing) when they do not fit in
        ``demo_capacity - n_demo`` free rows.
        """
        nx: dict[str, Any] | None = None
        if self._streams.plain:
            arrays, n = self._cols.check_rows(rows, "add_demos")
        else:
            arrays, nx, n = self._check_stream_rows(dict(rows), "add_demos")
        if n == 0:
            return 0
        free = self._d - self._n_demo
        if n > free:
            raise SchemaError(
                f"add_demos: {n} rows do not fit the demonstration prefix ({self._n_demo} of "
                f"demo_capacity {self._d} rows used, {free} free); nothing was written"
            )
        if nx is not None:
            side = self._side_table()
            nd = self._n_demo
            if nd:
                last = np.array([nd - 1], dtype=np.int64)
                ends = self._end_flags(last)
                side.release(last if ends is None else last[~ends])
        self._write_demos(arrays, n)
        if nx is not None:
            sel = np.arange(n)
            keep = self._ends_of(arrays, sel, n) | (sel == n - 1)
            self._side_table().keep(self._n_demo + sel[keep],
                                    {t: v[keep] for t, v in nx.items()})
        self._n_demo += n
        self._ring_changed()
        return n

    def load_demos(self, demo: Any) -> int:
        """Append the rows of a :class:`~numbatraj.replay.DemoFile` (or a path to one) to the
        pinned prefix.  Its columns must include every replay column with the same dtype and
        shape; extra columns (``intervention``) are ignored.  Returns the rows added."""
        from numbatraj.replay.demo_file import DemoFile

        f = demo if isinstance(demo, DemoFile) else DemoFile(os.fspath(demo))
        missing = [c for c in self._cols.names if c not in f.columns]
        if missing:
            raise SchemaError(
                f"load_demos: {f.path!r} has no column(s) {', '.join(map(repr, missing))}; "
                f"it holds {', '.join(f.columns)}"
            )
        return self.add_demos(**{c: f.column(c) for c in self._cols.names})

    @abc.abstractmethod
    def _write_ring(self, arrays: dict[str, Any], n: int, cursor: int) -> None:
        """Backend: ``n`` checked rows into ring slots ``cursor, cursor + 1, ...`` (the newest
        ``ring_capacity`` when more), noted in the sampler when prioritized."""

    @abc.abstractmethod
    def _write_demos(self, arrays: dict[str, Any], n: int) -> None:
        """Backend: ``n`` checked rows into physical rows ``[n_demo, n_demo + n)``."""

    def _ring_changed(self) -> None:  # noqa: B027 - an optional hook, empty by default
        """Backend hook: cursor, size or n_demo changed."""

    # ------------------------------------------------------------------ ERE
    def configure_ere(self, enabled: bool, eta: float = 0.996, c_min: int = 5000) -> None:
        """Turn Emphasizing Recent Experience on or off.

        When on, sampling needs ``k`` and ``K`` and draws online rows from the
        ``c_k = max(N * eta**(k * 1000 / K), c_min)`` most recent ones (``N`` = :attr:`size`,
        ``c_k <= N``).  Demonstrations are drawn only through ``demo_fraction``.
        """
        self._ere = _draw.check_ere(eta, c_min) if enabled else None

    @property
    def ere(self) -> _draw.EreConfig | None:
        """The ERE settings, or None when off."""
        return self._ere

    def ere_window(self, *, k: int, K: int) -> int:  # noqa: N803
        """``c_k`` for update ``k`` of ``K`` at the current size (ERE must be on)."""
        if self._ere is None:
            raise SamplerError("ERE is off; call configure_ere(True, ...) first")
        return _draw.ere_window(self._ere, self._size, k, K)

    # ------------------------------------------------------------------ sampling
    def sample_indices(self, batch_size: int, *, k: int | None = None,
                       K: int | None = None) -> IndexBatch:  # noqa: N803
        """Physical rows of one minibatch (with IS weights and stamps when prioritized).

        ``k``, ``K``: update ``k`` of ``K`` in the current phase, required when ERE is on.
        """
        b = check_count("batch_size", batch_size)
        batch = self._index_batch(b)
        self._check_drawable()
        self._draw(batch, k, K)
        return batch

    def sample(self, batch_size: int, *, k: int | None = None, K: int | None = None,  # noqa: N803
               n_step: int | None = None, gamma: float | None = None,
               ) -> tuple[dict[str, Any], IndexBatch]:
        """Draw a minibatch.

        Parameters
        ----------
        batch_size : int
            Rows (>= 1), drawn with replacement.
        k, K : int, optional, keyword-only
            Update ``k`` of ``K`` in the current phase; required when ERE is on.
        n_step, gamma : int, float, optional, keyword-only
            n-step targets: adds ``return`` (float32, ``sum_k gamma**k reward[t+k]`` for
            ``k < m``) and ``discount`` (float32, ``gamma**m``, 0 after a terminal ``done``),
            and every ``next_<x>`` column (stored or ``next_of``) is taken at row ``t+m-1``
            of the same stream; ``m <= n_step`` stops at an episode end (``done`` or
            ``truncated``) and at the stream's newest row (the write head: bootstrapped from
            what exists).  ``gamma`` defaults to 0.99.  On a replay built with
            ``n_step=`` (:class:`StoreReplay`), both default to the replay's, whose targets
            its rows keep (a draw with them reads those instead of walking each window).

        Returns
        -------
        dict of str to array
            Every column in new arrays, shape ``(batch_size, *spec.shape)``, declared dtype
            (float32 for a quantised column); ``next_of`` targets; frame-stacked columns
            ``(batch_size, depth, *spec.shape)``.
        IndexBatch
            Physical rows; with ``prioritized=True`` also ``weights`` float32 ``(B,)`` and
            ``stamps`` int64 ``(B,)`` for :meth:`update_priorities`.
        """
        ns = self._check_nstep(n_step, gamma)
        batch = self.sample_indices(batch_size, k=k, K=K)
        b = batch.batch_size
        if ns is None and self._streams.plain:
            out = self._new_outputs(b)
            self._gather(batch.indices, out, b)
            return out, batch
        out = self._new_outputs_ext(b, ns)
        self._gather_ext(batch.indices, out, b, ns)
        return out, batch

    def sample_into(self, outputs: Mapping[str, Any], batch_size: int, *, k: int | None = None,
                    K: int | None = None, n_step: int | None = None,  # noqa: N803
                    gamma: float | None = None) -> IndexBatch:
        """:meth:`sample` into caller-owned arrays.

        ``outputs[name]``: C-contiguous, writeable, shape ``(batch_size, *spec.shape)``, the
        sample dtype (float32 for a quantised column); numpy arrays for :class:`StoreReplay`,
        device arrays for :class:`StoreReplayGpu`.  Every column must be there; they are
        checked before anything is drawn, and filled in place.

        Returns the replay's own :class:`IndexBatch` for this batch size: its arrays are
        overwritten by the next draw of the same batch size (copy them to keep them).
        Nothing is allocated once a batch size has been seen.
        """
        b = check_count("batch_size", batch_size)
        ns = self._check_nstep(n_step, gamma)
        plain = ns is None and self._streams.plain
        # the checks hand back the arrays the kernels write through (a torch tensor's or a
        # DLPack exporter's view on the host, a CUDA-array-interface view on the device)
        if plain:
            outputs = self._check_outputs(outputs, b)
        else:
            outputs = self._check_outputs_ext(outputs, b, ns)
        batch = self._reused_batch(b)
        self._check_drawable()
        self._draw(batch, k, K)
        if plain:
            self._gather(batch.indices, outputs, b)
        else:
            self._gather_ext(batch.indices, outputs, b, ns)
        return batch

    def _check_nstep(self, n_step: int | None,
                     gamma: float | None) -> tuple[int, float] | None:
        if n_step is None:
            kept = self._kept
            if kept is None:
                return None
            n_step = kept[0]
            if gamma is None:
                return kept
        if gamma is None:
            gamma = 0.99 if self._kept is None else self._kept[1]
        if not self._nstep_schema_ok:
            self._check_nstep_schema()
        return check_count("n_step", n_step), check_real("gamma", gamma, 0.0, False)

    def _check_draw_nstep(self, n_step: Any, gamma: Any) -> tuple[int, float]:
        """The constructor's ``n_step`` / ``gamma`` (checked like a draw's, ``n_step`` at
        most :data:`_stream_kernels.KEPT_MAX_N`, the longest window a record's code holds)."""
        from numbatraj.replay._stream_kernels import KEPT_MAX_N

        n = check_count("n_step", n_step)
        if n > KEPT_MAX_N:
            raise SchemaError(f"n_step={n}: a replay is built for windows of up to "
                              f"{KEPT_MAX_N} steps (draw longer ones with sample(n_step=))")
        g = check_real("gamma", gamma, 0.0, False)
        self._check_nstep_schema()
        return n, g

    @property
    def n_step(self) -> tuple[int, float] | None:
        """``(n_step, gamma)`` the replay was built with (its draws' defaults; a
        :class:`StoreReplay`'s rows keep their targets), or None."""
        return self._kept

    def _check_nstep_schema(self) -> None:
        """The checks of an n-step draw that depend on the schema only (once per replay)."""
        if "n_step" not in self._OPTIONS:
            raise SamplerError(f"{self._KIND} does not support n_step yet; StoreReplay does")
        if "reward" not in self._cols.specs:
            raise SchemaError("n_step needs a 'reward' column (n-step returns sum it)")
        clash = [c for c in _st.NSTEP_OUTPUTS if c in self._cols.specs or
                 c in self._streams.next_of]
        if clash:
            raise SchemaError(
                f"n_step returns {_st.NSTEP_OUTPUTS}; the column {clash[0]!r} has that name"
            )
        self._nstep_schema_ok = True

    def _out_specs(self, ns: tuple[int, float] | None) -> dict[str, tuple[np.dtype, tuple]]:
        """Every output of a transition draw: ``(dtype, row shape)`` per name (computed
        once per replay and n-step or not; callers do not modify it)."""
        key = (None, ns is not None)
        out = self._out_cache.get(key)
        if out is None:
            out = self._out_cache[key] = self._out_specs_of(ns)
        return out  # type: ignore[no-any-return]

    def _out_specs_of(self, ns: tuple[int, float] | None) -> dict[str, tuple[np.dtype, tuple]]:
        fs = self._streams.frame_stack
        out: dict[str, tuple[np.dtype, tuple]] = {}
        for name, spec in self._cols.specs.items():
            shape = spec.shape if name not in fs else (fs[name], *spec.shape)
            out[name] = (self._cols.sample_dtype(name), shape)
        for t, src in self._streams.next_of.items():
            out[t] = out[src]
        if ns is not None:
            for c in _st.NSTEP_OUTPUTS:
                out[c] = (np.dtype(np.float32), ())
        return out

    def _new_outputs_ext(self, b: int, ns: tuple[int, float] | None) -> dict[str, Any]:
        """Backend: new arrays for every output of :meth:`_out_specs`."""
        key = (b, ns is not None)
        specs = self._out_cache.get(key)
        if specs is None:
            if len(self._out_cache) >= 16:  # batch sizes come and go: keep a few
                self._out_cache = {k: v for k, v in self._out_cache.items() if k[0] is None}
            specs = self._out_cache[key] = {n: (dt, (b, *shp))
                                            for n, (dt, shp) in self._out_specs(ns).items()}
        return block_outputs(specs)

    def _check_outputs_ext(self, outputs: Mapping[str, Any], b: int,
                           ns: tuple[int, float] | None) -> dict[str, Any]:
        specs = self._out_specs(ns)
        if set(outputs) != set(specs):
            raise SchemaError(
                f"sample_into: outputs has columns {sorted(outputs)}, expected {sorted(specs)}"
            )
        return {name: self._check_output(name, outputs[name], dt, (b, *shp))
                for name, (dt, shp) in specs.items()}

    @abc.abstractmethod
    def _gather_ext(self, idx: Any, outputs: Mapping[str, Any], b: int,
                    ns: tuple[int, float] | None) -> None:
        """Backend: a draw with streams, next_of, frame stacks or n-step targets."""

    # ------------------------------------------------------------------ sequences
    def sample_sequences(self, batch_size: int, T: int, *,  # noqa: N803
                         within_episode: bool = False) -> tuple[dict[str, Any], IndexBatch]:
        """Windows of ``T`` consecutive steps of one stream.

        Spanning (default, DreamerV3's): windows may cross episode boundaries, marked by
        ``is_first``; every window ends at or before its stream's newest row.  With
        ``within_episode=True`` a window starts at any held row and stops after its
        episode's last row (or at the write head); the rest is padding (the last row
        repeated) flagged by ``<col>_is_pad``.  ``is_first`` is True where a row begins an
        episode (from the stored ``done``/``truncated`` flags, not from the window start).

        Prioritized replays draw window starts in proportion to their priority (online
        windows only; spanning draws exclude demos) and :meth:`update_priorities` with a
        ``(B, T)`` TD error sets each start's priority to ``eta * max + (1 - eta) * mean``.

        Returns
        -------
        dict of str to array
            Every column (and ``next_of`` target) ``(B, T, *shape)``, ``is_first`` bool
            ``(B, T)``; with ``within_episode`` also ``<col>_is_pad`` bool ``(B, T)``.
        IndexBatch
            ``indices`` int64 ``(B, T)`` physical rows, ``is_first``; when prioritized
            ``weights`` and ``stamps`` of the window starts.
        """
        if "sequences" not in self._OPTIONS:
            raise SamplerError(
                f"{self._KIND}.sample_sequences is not supported yet; use StoreReplay (or "
                f"to_host())"
            )
        if self._prioritized and "prioritized_sequences" not in self._OPTIONS:
            raise SamplerError(
                f"{self._KIND}.sample_sequences on a prioritized replay (R2D2 window "
                f"priorities) is not supported yet; StoreReplay does"
            )
        b = check_count("batch_size", batch_size)
        t = check_count("T", T)
        self._check_drawable()
        longest = max(self._n_demo, self._size // self._streams.n_envs)
        if t > longest:
            raise SamplerError(
                f"sample_sequences: T={t} is longer than every stream (the longest holds "
                f"{longest} rows: {self._size // self._streams.n_envs} per env, {self._n_demo} "
                f"demos)"
            )
        return self._sample_sequences(b, t, bool(within_episode))

    @abc.abstractmethod
    def _sample_sequences(self, b: int, t: int,
                          within: bool) -> tuple[dict[str, Any], IndexBatch]:
        """Backend: the windows (host only so far)."""

    def _check_drawable(self) -> None:
        if self.n_rows == 0:
            raise SamplerError(
                "cannot sample: the replay is empty (no online or demonstration rows); "
                "add() rows first"
            )

    def _outputs_of(self, b: int) -> tuple[tuple[str, np.dtype, tuple[int, ...]], ...]:
        """``(name, dtype, shape)`` of every output of a plain draw of ``b`` rows (kept for
        a few batch sizes)."""
        want = self._out_expect.get(b)
        if want is None:
            if len(self._out_expect) >= 8:
                self._out_expect.clear()
            want = self._out_expect[b] = tuple(
                (name, self._cols.sample_dtype(name), (b, *spec.shape))
                for name, spec in self._cols.specs.items())
        return want

    def _check_outputs(self, outputs: Mapping[str, Any], b: int) -> dict[str, Any]:
        want = self._outputs_of(b)
        names = self._out_names
        keys = getattr(outputs, "keys", None)
        if keys is None:
            raise SchemaError(f"sample_into: outputs must be a mapping of column name to "
                              f"array, got {type(outputs).__name__}")
        if keys() != names and set(outputs) != names:  # dict keys compare as a set
            raise SchemaError(
                f"sample_into: outputs has columns {sorted(outputs)}, expected "
                f"{sorted(self._cols.names)}"
            )
        check = self._check_output
        return {name: check(name, outputs[name], dt, shape) for name, dt, shape in want}

    @abc.abstractmethod
    def _check_output(self, name: str, out: Any, dtype: np.dtype,
                      shape: tuple[int, ...]) -> Any:
        """Backend: one ``sample_into`` output checked (SchemaError naming
        ``outputs[name]``); returns the array the kernels write through."""

    @abc.abstractmethod
    def _index_batch(self, b: int) -> IndexBatch:
        """Backend: the IndexBatch :meth:`sample_indices` fills."""

    @abc.abstractmethod
    def _reused_batch(self, b: int) -> IndexBatch:
        """Backend: the replay's own IndexBatch for batch size ``b``."""

    @abc.abstractmethod
    def _new_outputs(self, b: int) -> dict[str, Any]:
        """Backend: new arrays for every column of ``b`` rows."""

    @abc.abstractmethod
    def _draw(self, batch: IndexBatch, k: int | None, K: int | None) -> None:  # noqa: N803
        """Backend: fill ``batch`` (a non-empty replay)."""

    @abc.abstractmethod
    def _gather(self, idx: Any, outputs: Mapping[str, Any], b: int) -> None:
        """Backend: rows ``idx`` of every column into ``outputs``."""

    def _need_prioritized(self) -> None:
        if not self._prioritized:
            raise SamplerError("update_priorities needs a prioritized replay (prioritized=True)")

    # ------------------------------------------------------------------ state
    def _config(self) -> dict[str, Any]:
        """The constructor's arguments and the ERE settings, as JSON."""
        ere = self._ere
        return {
            "kind": self._KIND,
            "columns": [{"name": s.name, "dtype": s.dtype.str, "shape": list(s.shape)}
                        for s in self._cols.specs.values()],
            "capacity": self._capacity,
            "demo_capacity": self._d,
            "prioritized": self._prioritized,
            "seed": self._seed,
            "alpha": self._alpha,
            "beta": self.beta,
            "eps": self._eps,
            "quantize": {n: [q.low, q.high] for n, q in self._cols.quant.items()},
            "demo_fraction": self._fraction,
            "ere": None if ere is None else {"eta": ere.eta, "c_min": ere.c_min},
            **self._streams.to_json(),
            **({} if self._kept is None else {"n_step": list(self._kept)}),
        }

    def _ring_state(self) -> ck.RingState:
        return ck.RingState(self._cursor, self._size, self._n_demo, self._n_added)

    def _set_ring_state(self, ring: ck.RingState) -> None:
        self._cursor, self._size = ring.cursor, ring.size
        self._n_demo, self._n_added = ring.n_demo, ring.n_added

    def state_dict(self) -> dict[str, Any]:
        """Everything :meth:`save` writes: ``config`` and ``state`` (JSON values: settings,
        ring state, streams), ``rows`` (column -> host copies of the demo and ring rows,
        storage dtype) and ``tree`` (the sampler's per-row arrays, or None)."""
        tree = self._tree_arrays()
        return {
            "config": self._config(),
            "state": {**self._ring_state().to_json(), **self._stream_state(),
                      "cut_first": self._cut_first.tolist()},
            "side": self._side_arrays(),
            "rows": {n: (np.array(dm), np.array(rg)) for n, dm, rg in self._saved_rows()},
            "tree": None if tree is None else {"leaves": tree.leaves.copy(),
                                               "stamps": tree.stamps.copy(),
                                               "present": tree.present.copy()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict` of a replay with the same columns and settings
        (``beta`` and ERE may differ: they are restored), with the checks of :meth:`load`."""
        cfg = dict(state["config"])
        mine = {k: v for k, v in self._config().items() if k not in ("beta", "ere")}
        if {k: v for k, v in cfg.items() if k not in ("beta", "ere")} != mine:
            raise SchemaError(
                f"load_state_dict: the state is for another replay configuration "
                f"({cfg.get('kind')}, capacity {cfg.get('capacity')}); expected {mine}"
            )
        where = f"{self._KIND}.load_state_dict"
        ere = cfg.get("ere")
        self.configure_ere(ere is not None, *(() if ere is None else (ere["eta"], ere["c_min"])))
        st = dict(state["state"])
        ring = ck.RingState.from_json(where, st, self._d, self._r)
        for name in self._cols.names:
            demo, rg = state["rows"][name]
            self._load_rows(name, np.asarray(demo), np.asarray(rg), ring)
        tree = None
        if self._prioritized:
            t = state["tree"]
            tree = ck.TreeArrays(np.asarray(t["leaves"], np.float64),
                                 np.asarray(t["stamps"], np.int64),
                                 np.asarray(t["present"], np.bool_))
            ck.check_priorities(where, tree.present, tree.leaves, self._d, ring.n_demo,
                                ring.size)
        self._restore(st, ring, tree, where)
        self._restore_streams(where, st, state.get("side"))

    def _side_arrays(self) -> dict[str, np.ndarray] | None:
        """The next_of side table: ``rows`` (physical) and each target's values."""
        if not self._streams.next_of:
            return None
        if self._side is None:
            self._side_table()
        assert self._side is not None
        rows, values = self._side.state()
        return {"rows": rows, **values}

    def _restore_streams(self, path: str, state: Mapping[str, Any],
                         side: Mapping[str, Any] | None) -> None:
        """Cut flags and the next_of side table of a checkpoint (checked)."""
        cut = state.get("cut_first")
        if cut is not None:
            c = np.asarray(cut, dtype=np.bool_)
            if c.shape != self._cut_first.shape:
                raise IntegrityError(
                    f"checkpoint {path!r}: cut_first has {c.shape[0]} entries, expected "
                    f"{self._cut_first.shape[0]} (1 + n_envs)"
                )
            self._cut_first[:] = c
        if not self._streams.next_of:
            return
        if side is None:
            raise IntegrityError(f"checkpoint {path!r}: no next_of side table")
        rows = np.asarray(side["rows"], dtype=np.int64)
        held = ck.held_rows(self._capacity, self._d, self._n_demo, self._size)
        if rows.ndim != 1 or (rows.size and (rows.min() < 0 or rows.max() >= self._capacity
                                              or not held[rows].all())):
            raise IntegrityError(
                f"checkpoint {path!r}: next_of side table rows are not held rows"
            )
        vals = {}
        for t, src in self._streams.next_of.items():
            v = np.asarray(side[t])
            spec = self._cols.specs[src]
            if v.shape != (rows.shape[0], *spec.shape) or v.dtype != spec.dtype:
                raise IntegrityError(
                    f"checkpoint {path!r}: side/{t} is {v.dtype} {v.shape}, expected "
                    f"{spec.dtype} {(rows.shape[0], *spec.shape)}"
                )
            vals[t] = v
        self._side = None
        self._side_table().keep(rows, vals)

    # ------------------------------------------------------------------ files
    def save(self, path: str | os.PathLike[str], *, checksums: bool = True) -> None:
        """Checkpoint everything (rows, ring state, priorities, streams) to ``path``
        (HDF5, written to ``<path>.tmp`` and renamed when complete).  ``checksums``
        (default) records the per-piece digests every load checks; ``False`` writes none
        (the file still loads, unchecked)."""
        state = {**self._ring_state().to_json(), **self._stream_state(),
                 "cut_first": self._cut_first.tolist()}
        ck.write_checkpoint(path, self._config(), state, self._saved_rows(), self._tree_arrays(),
                            self._side_arrays(), checksums=checksums)

    @classmethod
    def load(cls: type[R], path: str | os.PathLike[str]) -> R:
        """A replay restored from :meth:`save`: it samples exactly what the saved one would.

        Raises :class:`~numbatraj.errors.IntegrityError` for a file that is not a checkpoint
        of this class or does not hold together (see ``replay/_checkpoint.py``)."""
        path = os.fspath(path)
        with ck.open_checkpoint(path, cls._KIND) as (f, cfg, state):
            rep: R = ck.columns_from_config(path, cfg, cls)
            ring = ck.RingState.from_json(path, state, rep._d, rep._r)
            for name in rep._cols.names:
                shape = rep._cols.specs[name].shape
                dt = rep._cols.storage_dtype(name)
                demo = rep._row_buffer(name, 0, ring.n_demo, shape, dt)
                rg = rep._row_buffer(name, rep._d, ring.size, shape, dt)
                ck.read_rows(f, f"demo/{name}", demo, path)
                ck.read_rows(f, f"ring/{name}", rg, path)
                rep._load_rows(name, demo, rg, ring)
            tree = None
            if rep._prioritized:
                tree = ck.read_tree(f, path, rep._capacity, rep._d, ring,
                                    derive_present=cls._KIND == "StoreReplayGpu")
            rep._restore(state, ring, tree, path)
            side = None
            if rep._streams.next_of:
                side = ck.read_side(f, path)
            rep._restore_streams(path, state, side)
        return rep

    @abc.abstractmethod
    def _saved_rows(self) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
        """Backend: ``(column, demo rows, ring rows)`` host arrays of the storage dtype."""

    @abc.abstractmethod
    def _stream_state(self) -> dict[str, Any]:
        """Backend: the random streams and whatever else the backend keeps, as JSON."""

    @abc.abstractmethod
    def _tree_arrays(self) -> ck.TreeArrays | None:
        """Backend: the sampler's per-row arrays (prioritized), else None."""

    @abc.abstractmethod
    def _row_buffer(self, name: str, lo: int, n: int, shape: tuple[int, ...],
                    dtype: np.dtype) -> np.ndarray:
        """Backend: where a load reads rows ``[lo, lo + n)`` of ``name`` (``(n, *shape)``)."""

    @abc.abstractmethod
    def _load_rows(self, name: str, demo: np.ndarray, ring_rows: np.ndarray,
                   ring: ck.RingState) -> None:
        """Backend: place loaded rows (a no-op where :meth:`_row_buffer` gave storage)."""

    @abc.abstractmethod
    def _restore(self, state: dict[str, Any], ring: ck.RingState, tree: ck.TreeArrays | None,
                 path: str) -> None:
        """Backend: the streams and the tree (rebuilt by ``SumTree.load_leaves``), then the
        ring state."""

    def dump(self, path: str | os.PathLike[str], *, env_id: str | None = None,
             overwrite: bool = False, stats: bool = True) -> int:
        """Write every held row in time order into a trajectory store, episodes cut after
        each ``done`` or ``truncated`` row.  ``stats`` (default) records per-column
        statistics (``stats/<column>/``, :meth:`TrajectoryStore.stats`) of the numeric,
        non-image columns.  Returns the number of episodes."""
        return _store_io.dump_replay(self._host_rows(), path, env_id=env_id,
                                     overwrite=overwrite, stats=stats)

    @abc.abstractmethod
    def _host_rows(self) -> _store_io.HeldRows:
        """Backend: the rows as a host replay (itself, or a host copy)."""

    @classmethod
    def from_store(cls: type[R], store: Any, capacity: int, **kwargs: Any) -> R:
        """A replay with the store's columns, filled with its rows in order (the newest
        ``capacity`` win); ``kwargs`` go to the constructor."""
        rep: R = _store_io.replay_from_store(cls, store, capacity, **kwargs)
        return rep

    def __repr__(self) -> str:
        kind = "prioritized" if self._prioritized else "uniform"
        return (
            f"{self._KIND}(columns={list(self._cols.names)}, capacity={self._capacity}, "
            f"size={self._size}, n_demo={self._n_demo}, {kind})"
        )
