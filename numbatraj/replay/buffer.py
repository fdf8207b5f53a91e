"""StoreReplay: declared columns in a host ring, plus one sampler (uniform or prioritized)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from numbatraj.data.column import ColumnSpec
from numbatraj.data.index_batch import IndexBatch
from numbatraj.errors import SamplerError, SchemaError
from numbatraj.replay import _draw
from numbatraj.replay import _per_kernels as _pk
from numbatraj.replay import _quantize_kernels as _qk
from numbatraj.replay import _ring_kernels as _rk
from numbatraj.replay.columns import Quantization, ReplayColumns
from numbatraj.samplers import PrioritizedSampler, UniformSampler
from numbatraj.samplers._args import check_count, check_seed

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


class StoreReplay:
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
        Seed of the sampler's stream (and of the replay's own stream for restricted
        prioritized draws).
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
    The arrays ``sample`` returns are new; ``sample_into`` fills caller-owned ones and returns
    an :class:`IndexBatch` it reuses on every call of the same batch size.
    """

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
        self._cols = ReplayColumns(columns, quantize)
        cap = check_count("capacity", capacity)
        d = check_count("demo_capacity", demo_capacity, minimum=0)
        if d >= cap:
            raise SchemaError(
                f"demo_capacity {d} leaves no ring rows in a replay of capacity {cap}; "
                f"expected demo_capacity < capacity"
            )
        self._capacity, self._d, self._r = cap, d, cap - d
        self._seed = check_seed(seed)
        self._prioritized = bool(prioritized)
        self._hyper = {"alpha": alpha, "beta": beta, "eps": eps}
        self._fraction = _draw.check_fraction(demo_fraction)
        self._sampler: Any
        if self._prioritized:
            self._sampler = PrioritizedSampler(cap, alpha, beta, eps, self._seed)
        else:
            self._sampler = UniformSampler(0, self._seed)
        self._gen = np.random.Generator(np.random.PCG64([self._seed, 1]))
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
        self._cursor = 0
        self._size = 0
        self._n_demo = 0
        self._n_added = 0
        self._ere: _draw.EreConfig | None = None
        self._into: dict[int, IndexBatch] = {}  # batch size -> the batch sample_into refills
        self._work: dict[int, tuple[np.ndarray, np.ndarray]] = {}

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
    def seed(self) -> int:
        return self._seed

    @property
    def demo_fraction(self) -> float | None:
        return self._fraction

    @property
    def sampler(self) -> Any:
        """The index policy (:class:`UniformSampler` or :class:`PrioritizedSampler`)."""
        return self._sampler

    @property
    def beta(self) -> float:
        """IS-weight exponent (prioritized); assign to anneal it."""
        return float(self._sampler.beta if self._prioritized else self._hyper["beta"])

    @beta.setter
    def beta(self, value: float) -> None:
        if not self._prioritized:
            raise SamplerError("beta applies to a prioritized replay (prioritized=True)")
        self._sampler.beta = value

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
        """Insert one row or a batch of ``n`` rows of every column into the ring.

        Parameters
        ----------
        **rows : array-like
            One entry per declared column: shape ``spec.shape`` (one row) or
            ``(n, *spec.shape)``, exactly the declared dtype.  When ``n`` exceeds the free
            space the ring wraps; when it exceeds the ring's capacity the newest rows win.

        Returns
        -------
        int
            ``n``, the rows offered.
        """
        plan = self._one_plan
        if plan is not None:
            one = self._cols.single_row(rows)
            if one is not None:
                return self._add_one(plan, one)
        arrays, n = self._cols.check_rows(rows)
        if n == 0:
            return 0
        r, cur = self._r, self._cursor
        self._put(arrays, self._d, r, cur)
        if self._prioritized:
            slots = np.empty(min(n, r), dtype=np.int64)
            _rk.ring_slots_cpu(self._d, r, cur, n, slots)
            self._sampler.note_added(slots)
        self._cursor = (cur + n) % r
        self._size = min(self._size + n, r)
        self._n_added += n
        return n

    def _add_one(self, plan: tuple[np.ndarray, ...], values: list[Any]) -> int:
        """One checked row (:meth:`ReplayColumns.single_row`) into ring slot ``cursor``.

        A row is a few dozen bytes: numpy's same-dtype item assignment copies them bit for
        bit in a fraction of a microsecond, less than one kernel dispatch per column costs.
        """
        cur = self._cursor
        pos = self._d + cur
        for dst, v in zip(plan, values):
            dst[pos] = v
        if self._prioritized:
            self._sampler.note_added(np.array([pos], dtype=np.int64))
        r = self._r
        self._cursor = cur + 1 if cur + 1 < r else 0
        if self._size < r:
            self._size += 1
        self._n_added += 1
        return 1

    def add_demos(self, **rows: Any) -> int:
        """Append demonstration rows to the pinned prefix (same checks as :meth:`add`).

        Raises :class:`SchemaError` (and writes nothing) when they do not fit in
        ``demo_capacity - n_demo`` free rows.
        """
        arrays, n = self._cols.check_rows(rows, "add_demos")
        if n == 0:
            return 0
        free = self._d - self._n_demo
        if n > free:
            raise SchemaError(
                f"add_demos: {n} rows do not fit the demonstration prefix ({self._n_demo} of "
                f"demo_capacity {self._d} rows used, {free} free); nothing was written"
            )
        self._put(arrays, self._n_demo, n, 0)
        if self._prioritized:
            self._sampler.note_added(np.arange(self._n_demo, self._n_demo + n, dtype=np.int64))
        self._n_demo += n
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

    # ------------------------------------------------------------------ ERE
    def configure_ere(self, enabled: bool, eta: float = 0.996, c_min: int = 5000) -> None:
        """Turn Emphasizing Recent Experience on or off.

        When on, :meth:`sample` needs ``k`` and ``K`` and draws online rows from the
        ``c_k = max(N * eta**(k * 1000 / K), c_min)`` most recent ones (``N`` = :attr:`size`,
        ``c_k <= N``).  Demonstrations are drawn only through ``demo_fraction``.
        """
        self._ere = _draw.check_ere(eta, c_min) if enabled else None

    @property
    def ere(self) -> _draw.EreConfig | None:
        """The ERE settings, or None when off."""
        return self._ere

    def ere_window(self, k: int, K: int) -> int:
        """``c_k`` for update ``k`` of ``K`` at the current size (ERE must be on)."""
        if self._ere is None:
            raise SamplerError("ERE is off; call configure_ere(True, ...) first")
        return _draw.ere_window(self._ere, self._size, k, K)

    # ------------------------------------------------------------------ sampling
    def sample_indices(
        self, batch_size: int, k: int | None = None, K: int | None = None
    ) -> IndexBatch:
        """Physical rows of one minibatch (with IS weights and stamps when prioritized), in
        new arrays."""
        b = check_count("batch_size", batch_size)
        if self._prioritized:
            batch = IndexBatch(
                np.empty(b, dtype=np.int64),
                weights=np.empty(b, dtype=np.float32),
                stamps=np.empty(b, dtype=np.int64),
            )
        else:
            batch = IndexBatch(np.empty(b, dtype=np.int64))
        self._draw_into(batch, k, K)
        return batch

    def _reused_batch(self, b: int) -> IndexBatch:
        """The IndexBatch :meth:`sample_into` refills for batch size ``b``."""
        batch = self._into.get(b)
        if batch is None:
            if len(self._into) >= 8:
                self._into.clear()
            if self._prioritized:
                batch = IndexBatch(
                    np.empty(b, dtype=np.int64),
                    weights=np.empty(b, dtype=np.float32),
                    stamps=np.empty(b, dtype=np.int64),
                )
            else:
                batch = IndexBatch(np.empty(b, dtype=np.int64))
            self._into[b] = batch
        return batch

    def _buffers(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Uniforms (B,) and scratch (2, B) of restricted prioritized draws, reused."""
        w = self._work.get(b)
        if w is None:
            if len(self._work) >= 8:
                self._work.clear()
            w = self._work[b] = (np.empty(b), np.empty((2, b)))
        return w

    def _draw_into(self, batch: IndexBatch, k: int | None, K: int | None) -> None:  # noqa: N803
        """Fill ``batch``'s arrays (indices; weights and stamps when prioritized)."""
        idx = batch.indices
        b = idx.shape[0]
        if self.n_rows == 0:
            raise SamplerError(
                "cannot sample: the replay is empty (no online or demonstration rows); "
                "add() rows first"
            )
        c = self._size if self._ere is None else self.ere_window(k, K)  # type: ignore[arg-type]
        m = _draw.split_batch(b, self._n_demo, self._size, self._fraction, self._ere is not None)
        if m < 0 and self._prioritized:
            self._sampler.sample_into(idx, batch.weights, batch.stamps)
            return
        if m < 0:
            self._sampler.sample_into(idx, n_rows=self.n_rows)
            start = (self._cursor - self._size) % self._r
            _rk.ring_physical_cpu(idx, self._n_demo, self._d, self._r, start, idx)
            return
        if not self._prioritized:
            if m:
                self._sampler.sample_into(idx[:m], n_rows=self._n_demo)
            if b - m:
                part = idx[m:]
                self._sampler.sample_into(part, n_rows=c)
                _rk.ring_physical_cpu(part, 0, self._d, self._r, (self._cursor - c) % self._r,
                                      part)
            return
        weights = batch.weights
        t = self._sampler.tree
        beta = self._sampler.beta
        u, scratch = self._buffers(b)
        self._gen.random(out=u)  # the same stream as drawing m, then b - m, uniforms
        if m:
            _pk.sample_ranges_cpu(t.sums, t.mins, t.n_leaves_padded, u[:m], beta,
                                  0, self._n_demo, 0, 0, idx[:m], weights[:m], scratch[:, :m])
        if b - m:
            lo0, hi0, lo1, hi1 = _draw.window_ranges(self._d, self._r, self._cursor, c)
            _pk.sample_ranges_cpu(t.sums, t.mins, t.n_leaves_padded, u[m:], beta, lo0, hi0,
                                  lo1, hi1, idx[m:], weights[m:], scratch[:, m:])
        self._sampler.generation(idx, out=batch.stamps)

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

    def _gather(self, idx: np.ndarray, outputs: Mapping[str, np.ndarray]) -> None:
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

    def sample(
        self, batch_size: int, k: int | None = None, K: int | None = None
    ) -> tuple[dict[str, np.ndarray], IndexBatch]:
        """Draw a minibatch.

        Parameters
        ----------
        batch_size : int
            Rows (>= 1), drawn with replacement.
        k, K : int, optional
            Update ``k`` of ``K`` in the current phase; required when ERE is on.

        Returns
        -------
        dict of str to ndarray
            Every column, shape ``(batch_size, *spec.shape)``, declared dtype (float32 for
            a quantised column).
        IndexBatch
            Physical rows; with ``prioritized=True`` also ``weights`` float32 ``(B,)`` and
            ``stamps`` int64 ``(B,)`` for :meth:`update_priorities`.
        """
        batch = self.sample_indices(batch_size, k, K)
        b = batch.batch_size
        out = {
            n: np.empty((b, *s.shape), dtype=self._cols.sample_dtype(n))
            for n, s in self._cols.specs.items()
        }
        self._gather(batch.indices, out)
        return out, batch

    def sample_into(
        self,
        outputs: Mapping[str, np.ndarray],
        batch_size: int,
        k: int | None = None,
        K: int | None = None,
    ) -> IndexBatch:
        """:meth:`sample` into caller-owned arrays: ``outputs[name]`` C-contiguous, writeable,
        shape ``(batch_size, *spec.shape)``, the sample dtype.  Every column must be there;
        they are checked before anything is drawn.

        Nothing is allocated once a batch size has been seen: the returned
        :class:`IndexBatch` and its arrays belong to the replay and are refilled by the next
        ``sample_into`` of the same batch size (copy them to keep them).
        """
        b = check_count("batch_size", batch_size)
        if set(outputs) != set(self._cols.names):
            raise SchemaError(
                f"sample_into: outputs has columns {sorted(outputs)}, expected "
                f"{sorted(self._cols.names)}"
            )
        for name, spec in self._cols.specs.items():
            o = outputs[name]
            dt, shape = self._cols.sample_dtype(name), (b, *spec.shape)
            if not isinstance(o, np.ndarray) or o.dtype != dt or o.shape != shape:
                got = f"{o.dtype} {o.shape}" if isinstance(o, np.ndarray) else type(o).__name__
                raise SchemaError(
                    f"sample_into: outputs[{name!r}] is {got}, expected {dt.name} {shape}"
                )
            if not o.flags.c_contiguous or not o.flags.writeable:
                raise SchemaError(f"sample_into: outputs[{name!r}] must be C-contiguous, writeable")
        batch = self._reused_batch(b)
        self._draw_into(batch, k, K)
        self._gather(batch.indices, outputs)
        return batch

    def update_priorities(self, batch: IndexBatch | Any, priorities: Any) -> int:
        """Feed new priorities back for a sampled batch (e.g. ``|TD error|``).

        Rows overwritten since they were sampled (stale generation stamp) are skipped.
        Returns how many were skipped.  Only for ``prioritized=True``.
        """
        if not self._prioritized:
            raise SamplerError("update_priorities needs a prioritized replay (prioritized=True)")
        return int(self._sampler.update_priorities(batch, priorities))

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
        self._gather(np.ascontiguousarray(idx), out)
        return out

    # ------------------------------------------------------------------ files
    def save(self, path: str | os.PathLike[str]) -> None:
        """Checkpoint everything (rows, cursor, size, priorities, streams) to ``path``
        (HDF5, written to ``<path>.tmp`` and renamed when complete)."""
        from numbatraj.replay._checkpoint import save_replay

        save_replay(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> StoreReplay:
        """A replay restored from :meth:`save`: it samples exactly what the saved one would."""
        from numbatraj.replay._checkpoint import load_replay

        return load_replay(cls, path)

    def dump(self, path: str | os.PathLike[str], *, env_id: str | None = None,
             overwrite: bool = False) -> int:
        """Write every held row in time order into a trajectory store, episodes cut after
        each ``done`` or ``truncated`` row.  Returns the number of episodes."""
        from numbatraj.replay._store_io import dump_replay

        return dump_replay(self, path, env_id=env_id, overwrite=overwrite)

    @classmethod
    def from_store(cls, store: Any, capacity: int, **kwargs: Any) -> StoreReplay:
        """A replay with the store's columns, filled with its rows in order (the newest
        ``capacity`` win); ``kwargs`` go to the constructor."""
        from numbatraj.replay._store_io import replay_from_store

        return replay_from_store(cls, store, capacity, **kwargs)

    def __repr__(self) -> str:
        kind = "prioritized" if self._prioritized else "uniform"
        return (
            f"StoreReplay(columns={list(self._cols.names)}, capacity={self._capacity}, "
            f"size={self._size}, n_demo={self._n_demo}, {kind})"
        )
