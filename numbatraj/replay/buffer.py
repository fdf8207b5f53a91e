"""StoreReplay: declared columns in a host ring, plus one sampler (uniform or prioritized).

The configuration, ring state, checks and templates are the replay core's
(``_front.ReplayFront``); this module holds where the host keeps the data: one record per
row, and the sampler that owns the population and its random streams.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from numbatraj.data.column import ColumnSpec
from numbatraj.data.index_batch import IndexBatch
from numbatraj.errors import IntegrityError, SchemaError
from numbatraj.replay import _checkpoint as ck
from numbatraj.replay import _draw
from numbatraj.replay import _quantize_kernels as _qk
from numbatraj.replay import _ring_kernels as _rk
from numbatraj.replay._front import ReplayFront
from numbatraj.replay._split import window_start_py
from numbatraj.replay.columns import ReplayColumns
from numbatraj.samplers import PrioritizedSampler, UniformSampler

__all__ = ["StoreReplay"]


_RECORD_GATHER_MAX = 1 << 16  # rows; larger gathers go column by column (no scratch)


def _record_layout(cols: ReplayColumns) -> tuple[int, dict[str, tuple[int, np.dtype]]]:
    """Record size (a multiple of 8 bytes) and each column's ``(byte offset, word dtype)``.

    Columns go widest word first, so every offset is a multiple of the column's word size
    (and of its item size): the word and element views are aligned.
    """
    items = []
    for name in cols.names:
        nbytes = cols.row_elems(name) * cols.storage_dtype(name).itemsize
        items.append((name, nbytes, _rk.word_dtype(nbytes) if nbytes else np.dtype(np.uint8)))
    order = sorted(range(len(items)), key=lambda k: -items[k][2].itemsize)
    off = 0
    where = {}
    for k in order:
        name, nbytes, wdt = items[k]
        where[name] = (off, wdt)
        off += nbytes
    return max(8, (off + 7) // 8 * 8), where


def _view(raw: np.ndarray, shape: tuple[int, ...], dtype: np.dtype, offset: int,
          row_bytes: int) -> np.ndarray:
    """``shape`` array of ``dtype`` at byte ``offset`` of every row of the uint8 ``raw``
    ``(n, row_bytes)``: rows ``row_bytes`` apart, C order inside a row."""
    dtype = np.dtype(dtype)
    inner = [dtype.itemsize] * (len(shape) - 1)
    for k in range(len(shape) - 2, 0, -1):
        inner[k - 1] = inner[k] * shape[k + 1]
    return np.ndarray(shape, dtype=dtype, buffer=raw, offset=offset,
                      strides=(row_bytes, *inner))


class StoreReplay(ReplayFront):
    """An online replay buffer: any declared column set, a ring, and one sampler.

    Parameters
    ----------
    columns : iterable of ColumnSpec
        The row layout, e.g. ``obs`` float32 (17,), ``action`` float32 (6,), ``reward``
        float32 (), ``next_obs`` float32 (17,), ``done`` bool ().
    capacity : int
        Rows held in total, the demonstration prefix included.
    prioritized : bool
        Draw rows in proportion to ``priority**alpha`` (a :class:`PrioritizedSampler`) with IS
        weights; otherwise uniformly (a :class:`UniformSampler`).
    seed : int
        Seed of the sampler's streams (a prioritized sampler draws restricted ranges, the
        ERE window and the demo split, from a second stream of the same seed).
    alpha, beta, eps : float
        Prioritization exponent, IS-weight exponent, priority offset (prioritized only).
    quantize : mapping of str to (low, high), optional
        Float columns stored as uint8 codes of ``[low, high]`` and sampled as float32.
    demo_capacity : int
        Rows ``[0, demo_capacity)`` are a pinned demonstration prefix, filled by
        :meth:`add_demos` and never overwritten; the ring wraps over the other rows.
    demo_fraction : float, optional
        Fixed share of every minibatch drawn from the demonstrations (rounded); ``None``
        draws demos and online rows as one population.

    Notes
    -----
    ``add`` validates every column before writing any, so a failed add changes nothing.
    The arrays ``sample`` and ``sample_indices`` return are new; ``sample_into`` fills
    caller-owned ones and returns the replay's own :class:`IndexBatch` for that batch size,
    refilled by the next ``sample_into`` of the same size (the contract of both replays).
    """

    _KIND = "StoreReplay"

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
    ) -> None:
        super().__init__(
            columns, capacity, prioritized=prioritized, seed=seed, alpha=alpha, beta=beta,
            eps=eps, quantize=quantize, demo_capacity=demo_capacity,
            demo_fraction=demo_fraction,
        )
        cap = self._capacity
        self._sampler: PrioritizedSampler | UniformSampler
        if self._prioritized:
            self._per: PrioritizedSampler | None = PrioritizedSampler(
                cap, self._alpha, self._beta, self._eps, self._seed
            )
            self._uni: UniformSampler | None = None
            self._sampler = self._per
        else:
            self._per = None
            self._uni = self._sampler = UniformSampler(0, self._seed)
        self._data: dict[str, np.ndarray] = {}
        self._rows2d: dict[str, np.ndarray] = {}  # (capacity, elements per row), storage dtype
        self._words: dict[str, np.ndarray] = {}  # (capacity, words per row), for gathers
        self._plan: dict[str, tuple[Any, ...]] = {}
        self._items: dict[str, np.ndarray] = {}  # (capacity,) rows as opaque V<bytes> items
        # Every physical row is one record holding all of its columns (widest words first,
        # so each column starts on its word size; the record padded to 8 bytes): a sampled
        # row is then 3-4 cache lines in one page instead of one or two lines per column.
        self._layout = _record_layout(self._cols)
        self._row_bytes = rb = self._layout[0]
        #: uint64 (capacity, row_bytes / 8): the row records
        self._rec = np.zeros((cap, rb // 8), dtype=np.uint64)
        raw = self._rec.view(np.uint8)
        for name, spec in self._cols.specs.items():
            off, wdt = self._layout[1][name]
            sdt = self._cols.storage_dtype(name)
            q = self._cols.quant.get(name)
            e = self._cols.row_elems(name)
            arr = _view(raw, (cap, *spec.shape), sdt, off, rb)
            self._rows2d[name] = _view(raw, (cap, e), sdt, off, rb)
            if q is None:
                self._plan[name] = (None, e, wdt)
                n_w = e * sdt.itemsize // wdt.itemsize
                self._words[name] = _view(raw, (cap, n_w), wdt, off, rb)
                self._items[name] = _view(raw, (cap,), np.dtype(f"V{e * sdt.itemsize}"), off, rb)
            else:
                self._plan[name] = (q, e, None)
            self._data[name] = arr
        self._gather_work: dict[int, tuple[Any, ...]] = {}
        #: (name, destination, quantisation) of every column with elements: the (capacity,)
        #: ``V<row bytes>`` item view, or for a quantised column its (capacity, e) codes
        self._put_plan = tuple(
            (n, self._items[n] if n in self._items else self._rows2d[n],
             self._cols.quant.get(n))
            for n in self._cols.names
            if self._cols.row_elems(n)
        )
        #: storage of every column in declaration order, for one-row adds (None when a
        #: column is quantised: those go through the kernels)
        self._one_plan: tuple[np.ndarray, ...] | None = (
            None if self._cols.quant else tuple(self._data[n] for n in self._cols.names)
        )
        self._into: dict[int, IndexBatch] = {}  # batch size -> the batch sample_into refills

    # ------------------------------------------------------------------ properties
    @property
    def sampler(self) -> PrioritizedSampler | UniformSampler:
        """The index policy (:class:`UniformSampler` or :class:`PrioritizedSampler`); it owns
        the population (every held row) and the random streams."""
        return self._sampler

    def _get_beta(self) -> float:
        return self._per.beta if self._per is not None else self._beta

    def _beta_changed(self) -> None:
        if self._per is not None:
            self._per.beta = self._beta

    def storage(self, name: str) -> np.ndarray:
        """Read-only view of column ``name``'s physical rows ``(capacity, *shape)`` (uint8
        codes for a quantised column)."""
        if name not in self._data:
            raise SchemaError(f"no column {name!r}; columns: {', '.join(self._cols.names)}")
        v = self._data[name].view()
        v.flags.writeable = False
        return v

    # ------------------------------------------------------------------ writes
    def _put(self, arrays: dict[str, np.ndarray], base: int, cap: int, cur: int) -> None:
        """Rows of every column into ring slots ``cur``, ``cur + 1``, ... (mod ``cap``) after
        physical row ``base``: the slots of ``_ring_kernels.ring_put_cpu`` (the newest
        ``cap`` rows of a larger batch), as at most two runs per column.

        A column's rows are strided in the row records; each row goes as one opaque item
        (numpy ``V<row bytes>``), a byte copy per row, measured faster than a kernel loop
        or numpy's element-wise strided copy.  Quantised columns go through
        ``ring_put_quantize_cpu``.
        """
        n = -1
        for name, dst, q in self._put_plan:
            src = arrays[name]
            if q is not None:
                _qk.ring_put_quantize_cpu(self._rows2d[name], src.ravel(), base, cap, cur,
                                          q.low, q.high, q.scale)
                continue
            items = src.reshape(-1).view(dst.dtype)  # a copy only if src was strided
            if n < 0:
                n = items.shape[0]
                skip = _rk.ring_skip_py(n, cap)
                pos = _rk.ring_slot_py(cur, skip, cap)
                first = min(n - skip, cap - pos)
                a = base + pos
            if skip == 0 and first == n:
                dst[a : a + n] = items
            else:
                dst[a : a + first] = items[skip : skip + first]
                if skip + first < n:
                    dst[base : base + n - skip - first] = items[skip + first :]

    def add(self, **rows: Any) -> int:
        """Insert one row or a batch of rows (see :meth:`ReplayFront.add`); one checked row
        takes a fast path of numpy item copies."""
        plan = self._one_plan
        if plan is not None:
            one = self._cols.single_row(rows)
            if one is not None:
                return self._add_one(plan, one)
        arrays, n = self._cols.check_rows(rows)
        return self._add_rows(arrays, n)

    def _write_ring(self, arrays: dict[str, Any], n: int, cursor: int) -> None:
        r = self._r
        self._put(arrays, self._d, r, cursor)
        if self._per is not None:
            slots = np.empty(min(n, r), dtype=np.int64)
            _rk.ring_slots_cpu(self._d, r, cursor, n, slots)
            self._per.note_added(slots)

    def _write_demos(self, arrays: dict[str, Any], n: int) -> None:
        self._put(arrays, self._n_demo, n, 0)
        if self._per is not None:
            self._per.note_added(np.arange(self._n_demo, self._n_demo + n, dtype=np.int64))

    def _add_one(self, plan: tuple[np.ndarray, ...], values: list[Any]) -> int:
        """One checked row (:meth:`ReplayColumns.single_row`) into ring slot ``cursor``.

        A row is a few dozen bytes: numpy's same-dtype item assignment copies them bit for
        bit in a fraction of a microsecond, less than one kernel dispatch per column costs.
        """
        cur = self._cursor
        pos = self._d + cur
        for dst, v in zip(plan, values):
            dst[pos] = v
        if self._per is not None:
            self._per.note_added(np.array([pos], dtype=np.int64))
        r = self._r
        self._cursor = cur + 1 if cur + 1 < r else 0
        if self._size < r:
            self._size += 1
        self._n_added += 1
        return 1

    # ------------------------------------------------------------------ sampling
    def _new_batch(self, b: int) -> IndexBatch:
        if self._prioritized:
            return IndexBatch(
                np.empty(b, dtype=np.int64),
                weights=np.empty(b, dtype=np.float32),
                stamps=np.empty(b, dtype=np.int64),
            )
        return IndexBatch(np.empty(b, dtype=np.int64))

    def _index_batch(self, b: int) -> IndexBatch:
        return self._new_batch(b)

    def _reused_batch(self, b: int) -> IndexBatch:
        """The IndexBatch :meth:`sample_into` refills for batch size ``b``."""
        batch = self._into.get(b)
        if batch is None:
            if len(self._into) >= 8:
                self._into.clear()
            batch = self._new_batch(b)
            self._into[b] = batch
        return batch

    def _draw(self, batch: IndexBatch, k: int | None, K: int | None) -> None:  # noqa: N803
        """Fill ``batch``'s arrays (indices; weights and stamps when prioritized) through the
        sampler: the whole population, or restricted ranges (the demo split, the ERE
        window), mapped from the ring's logical rows to physical rows."""
        idx = batch.indices
        b = idx.shape[0]
        ere = self._ere
        c = self._size if ere is None else _draw.ere_window(ere, self._size, k, K)
        m = _draw.split_batch(b, self._n_demo, self._size, self._fraction, ere is not None)
        per, uni = self._per, self._uni
        if per is not None:
            if m < 0:
                per.sample_into(idx, batch.weights, batch.stamps)
                return
            w, st = batch.weights, batch.stamps
            if m:
                per.sample_ranges_into(idx[:m], w[:m], st[:m], 0, self._n_demo)
            if b - m:
                lo0, hi0, lo1, hi1 = _draw.window_ranges(self._d, self._r, self._cursor, c)
                per.sample_ranges_into(idx[m:], w[m:], st[m:], lo0, hi0, lo1, hi1)
            return
        assert uni is not None
        n = self._n_demo + self._size
        if uni.n_rows != n:  # the population (every held row) grew since the last draw
            uni.n_rows = n
        if m < 0:
            uni.sample_into(idx)
            start = window_start_py(self._cursor, self._size, self._r)
            _rk.ring_physical_cpu(idx, self._n_demo, self._d, self._r, start, idx)
            return
        if m:
            uni.sample_range_into(idx[:m], 0, self._n_demo)
        if b - m:
            part = idx[m:]
            uni.sample_range_into(part, 0, c)
            _rk.ring_physical_cpu(part, 0, self._d, self._r,
                                  window_start_py(self._cursor, c, self._r), part)

    def _gather_buffers(self, b: int) -> tuple[Any, ...]:
        """Records scratch (b, row words) and each column's view of it, reused per size."""
        w = self._gather_work.get(b)
        if w is None:
            if len(self._gather_work) >= 4:
                self._gather_work.clear()
            recs = np.empty((b, self._row_bytes // 8), dtype=np.uint64)
            raw = recs.view(np.uint8)
            cols = {}
            for name in self._cols.names:
                q, e, wdt = self._plan[name]
                off = self._layout[1][name][0]
                if q is None:
                    n_w = e * self._cols.storage_dtype(name).itemsize // wdt.itemsize
                    cols[name] = _view(raw, (b, n_w), wdt, off, self._row_bytes)
                else:
                    cols[name] = _view(raw, (b, e), np.dtype(np.uint8), off, self._row_bytes)
            w = self._gather_work[b] = (recs, cols, np.arange(b, dtype=np.int64))
        return w

    def _gather(self, idx: np.ndarray, outputs: Mapping[str, np.ndarray],
                b: int | None = None) -> None:
        b = idx.shape[0]
        if b == 0:
            return
        if b > _RECORD_GATHER_MAX:  # e.g. rows() of the whole buffer: column by column
            for name, out in outputs.items():
                q, e, wdt = self._plan[name]
                if not e:
                    continue
                if q is None:
                    _rk.gather_rows_cpu(self._words[name], idx, out.reshape(b, e).view(wdt))
                else:
                    _qk.gather_dequantize_cpu(self._rows2d[name], idx, q.low, q.step,
                                              out.reshape(b, e))
            return
        recs, cols, ident = self._gather_buffers(b)
        _rk.gather_rows_cpu(self._rec, idx, recs)  # whole records: the scattered reads
        for name, out in outputs.items():  # then each column out of them, from cache
            q, e, wdt = self._plan[name]
            if not e:
                continue
            if q is None:
                _rk.copy_rows_cpu(cols[name], out.reshape(b, e).view(wdt))
            else:
                _qk.gather_dequantize_cpu(cols[name], ident, q.low, q.step, out.reshape(b, e))

    def _new_outputs(self, b: int) -> dict[str, np.ndarray]:
        return {
            n: np.empty((b, *s.shape), dtype=self._cols.sample_dtype(n))
            for n, s in self._cols.specs.items()
        }

    def _check_output(self, name: str, out: Any, dtype: np.dtype,
                      shape: tuple[int, ...]) -> None:
        if not isinstance(out, np.ndarray) or out.dtype != dtype or out.shape != shape:
            got = f"{out.dtype} {out.shape}" if isinstance(out, np.ndarray) else type(out).__name__
            raise SchemaError(
                f"sample_into: outputs[{name!r}] is {got}, expected {dtype.name} {shape}"
            )
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise SchemaError(f"sample_into: outputs[{name!r}] must be C-contiguous, writeable")

    def update_priorities(self, batch: IndexBatch | Any, priorities: Any) -> int:
        """Feed new priorities back for a sampled batch (e.g. ``|TD error|``).

        Rows overwritten since they were sampled (stale generation stamp) are skipped.
        Returns how many were skipped.  Only for ``prioritized=True``.
        """
        self._need_prioritized()
        assert self._per is not None
        return int(self._per.update_priorities(batch, priorities))

    # ------------------------------------------------------------------ reading back
    def time_order(self) -> np.ndarray:
        """Physical rows of every held row in time order: demos, then online oldest first
        (int64, ``(n_rows,)``)."""
        out = np.empty(self.n_rows, dtype=np.int64)
        _rk.time_order_cpu(self._n_demo, self._d, self._r, self._size, self._cursor, out)
        return out

    def rows(self, indices: Any = None) -> dict[str, np.ndarray]:
        """Rows at physical ``indices`` (default: all in time order), dequantised."""
        idx = self.time_order() if indices is None else np.asarray(indices, dtype=np.int64)
        if idx.ndim != 1 or (idx.size and (idx.min() < 0 or idx.max() >= self._capacity)):
            raise SchemaError(f"rows: indices must be 1-D in [0, {self._capacity})")
        out = {
            n: np.empty((idx.shape[0], *s.shape), dtype=self._cols.sample_dtype(n))
            for n, s in self._cols.specs.items()
        }
        self._gather(np.ascontiguousarray(idx), out, idx.shape[0])
        return out

    # ------------------------------------------------------------------ checkpoints
    def _saved_rows(self) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
        d, nd, size = self._d, self._n_demo, self._size
        for name in self._cols.names:
            data = self._data[name]
            yield name, data[:nd], data[d : d + size]

    def _stream_state(self) -> dict[str, Any]:
        st = self._sampler.state_dict()
        for key in ("leaves", "stamps", "present"):
            st.pop(key, None)
        return {"sampler": st}

    def _tree_arrays(self) -> ck.TreeArrays | None:
        if self._per is None:
            return None
        st = self._per.state_dict()
        return ck.TreeArrays(st["leaves"], st["stamps"], st["present"])

    def _row_buffer(self, name: str, lo: int, n: int, shape: tuple[int, ...],
                    dtype: np.dtype) -> np.ndarray:
        return self._data[name][lo : lo + n]  # straight into the row records

    def _load_rows(self, name: str, demo: np.ndarray, ring_rows: np.ndarray,
                   ring: ck.RingState) -> None:
        for lo, rows in ((0, demo), (self._d, ring_rows)):
            dest = self._data[name][lo : lo + rows.shape[0]]
            if not np.may_share_memory(dest, rows):
                dest[...] = rows

    def _restore(self, state: dict[str, Any], ring: ck.RingState, tree: ck.TreeArrays | None,
                 path: str) -> None:
        try:
            sampler_state = dict(state["sampler"])
        except (KeyError, TypeError, ValueError) as exc:
            raise IntegrityError(f"checkpoint {path!r}: unreadable sampler state: {exc!r}") from exc
        if tree is not None:
            sampler_state.update(leaves=tree.leaves, stamps=tree.stamps, present=tree.present)
            if "range_generator" not in sampler_state and "generator" in state:
                # files written before the restricted draws moved into the sampler kept
                # their stream as the replay's own generator
                sampler_state["range_generator"] = state["generator"]
        self._sampler.load_state_dict(sampler_state)
        self._set_ring_state(ring)
        if self._per is not None:
            self._beta = self._per.beta

    def _host_rows(self) -> StoreReplay:
        return self

    @classmethod
    def from_spaces(cls, observation_space: Any, action_space: Any, capacity: int, *,
                    next_obs: bool = True, **kwargs: Any) -> StoreReplay:
        """A replay for a Gymnasium env: columns from its spaces
        (:func:`numbatraj.data.spaces.columns_from_spaces`: obs, action, reward, done,
        truncated) plus ``next_obs`` (``next_obs.<key>`` for Dict / Tuple) unless
        ``next_obs=False``; ``kwargs`` go to the constructor."""
        from numbatraj.data.spaces import columns_from_spaces, space_columns

        extra = {c.name: (c.dtype, c.shape)
                 for c in (space_columns(observation_space, "next_obs") if next_obs else [])}
        return cls(columns_from_spaces(observation_space, action_space, extra=extra),
                   capacity, **kwargs)
