"""StoreReplayGpu: the replay with its columns, ring state and sum-tree in device memory.

``sample_into`` is CUDA-graph-safe: it launches kernels only, into preallocated device
outputs; the ring's size and cursor, the Philox draw counter and the IS exponent are read
from device memory and the draw counter is advanced by the kernel, so a captured sequence
draws fresh rows on each replay.  ``add`` and ``update_priorities`` are launches too, with
the host keeping a mirror of size and cursor (the host decides where rows go).

Every draw has a host twin (``_lanes.py``): the same bodies compiled for the host give the
same rows, which is how the tests check the device under the CUDA simulator.

The configuration, ring state, checks, templates and checkpoint format are the replay
core's (``_front.ReplayFront``), shared with :class:`StoreReplay`; this module holds only
where the device keeps the data.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from numbatraj._checks import as_host_values, check_real
from numbatraj._cuda import get_cuda, is_device_array
from numbatraj.data.column import ColumnSpec
from numbatraj.data.index_batch import IndexBatch
from numbatraj.errors import IntegrityError, SamplerError, SchemaError
from numbatraj.replay import _checkpoint as ck
from numbatraj.replay import _lanes
from numbatraj.replay import _stream_kernels as _sk
from numbatraj.replay import _streams as _st
from numbatraj.replay._front import ReplayFront
from numbatraj.replay.buffer import StoreReplay
from numbatraj.samplers import SumTree
from numbatraj.samplers.sumtree import check_values

__all__ = ["StoreReplayGpu"]

_U32 = 0xFFFFFFFF


class _DeviceSide(_st.SideTable):
    """The next_of side table with a device mirror of its slots and values.

    The host table stays the record (the add templates, the checkpoint and ``to_host`` use
    it); every row it touches is noted, and :meth:`flush` (after each add) copies those rows'
    slots, and the values of the rows that hold an entry, to the device, where the sampling
    kernels read them (``_stream_cuda._side_fill_cuda``).  ``d_slot``: int32 or int64
    ``(capacity, 1)``; ``d_pool[target]``: ``(pool rows, elements per row)``.  The device
    pool is replaced when the host pool grows (doubling), so a CUDA graph captured before
    such an add must be captured again.
    """

    def __init__(self, capacity: int, specs: Mapping[str, tuple[np.dtype, tuple[int, ...]]],
                 cuda: Any, scatter: Any, blocks: Any, tpb: int) -> None:
        super().__init__(capacity, specs)
        self._cuda, self._scatter, self._blocks, self._tpb = cuda, scatter, blocks, tpb
        self.d_slot = cuda.to_device(self.slot.reshape(capacity, 1))
        self.d_pool: dict[str, Any] = {}
        self._touched: list[np.ndarray] = []
        self._upload_pool()

    def _upload_pool(self) -> None:
        self.d_pool = {t: self._cuda.to_device(np.ascontiguousarray(p.reshape(p.shape[0], -1)))
                       for t, p in self.pool.items()}

    def release(self, rows: np.ndarray) -> None:
        super().release(rows)
        self._touched.append(np.asarray(rows, dtype=np.int64).reshape(-1))

    def keep(self, rows: np.ndarray, values: Mapping[str, np.ndarray]) -> None:
        super().keep(rows, values)
        self._touched.append(np.asarray(rows, dtype=np.int64).reshape(-1))

    def flush(self) -> None:
        """Mirror every row touched since the last flush (a few launches, no sync)."""
        if not self._touched:
            return
        rows = np.unique(np.concatenate(self._touched))
        self._touched = []
        if not rows.size:
            return
        cuda, g, tpb = self._cuda, self._blocks, self._tpb
        slots = self.slot[rows]
        grown = any(self.d_pool[t].shape[0] != p.shape[0] for t, p in self.pool.items())
        if grown:
            self._upload_pool()
        else:
            kept = slots >= 0
            if kept.any():
                s = slots[kept].astype(np.int64)
                d_s = cuda.to_device(s)
                for t, p in self.pool.items():
                    vals = np.ascontiguousarray(p[s].reshape(s.shape[0], -1))
                    self._scatter[g(vals.size), tpb](self.d_pool[t], d_s, cuda.to_device(vals))
        d_rows = cuda.to_device(rows)
        self._scatter[g(rows.shape[0]), tpb](self.d_slot, d_rows,
                                             cuda.to_device(slots.reshape(-1, 1)))


class StoreReplayGpu(ReplayFront):
    """The :class:`StoreReplay` API with every column in device memory.

    Parameters are those of :class:`StoreReplay`.  Uniform rows come from a Philox stream
    keyed by ``seed`` (lane ``i`` of draw ``d``: ``philox4x32_10(d, i; seed)``); prioritized
    rows from a device sum-tree with one Philox uniform per stratum.  ``n_step`` /
    ``gamma`` become the defaults of ``sample`` and ``sample_into`` as on the host; the
    device walks each window at draw time (its rows keep no targets).

    Notes
    -----
    ``sample_into`` has the contract of :class:`StoreReplay`'s: it fills caller-owned
    (device) arrays and returns the replay's own :class:`IndexBatch` for that batch size.
    On the device ``sample_indices`` and ``sample`` return that same batch too (its buffers
    stay where a captured graph points), overwritten by the next draw of the same size.
    """

    _KIND = "StoreReplayGpu"
    #: every stream option of StoreReplay runs on the device
    _OPTIONS = frozenset({"n_envs", "next_of", "frame_stack", "n_step", "sequences",
                          "prioritized_sequences"})

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
        n_step: int | None = None,
        gamma: float = 0.99,
    ) -> None:
        cuda = get_cuda()
        from numbatraj.replay import _ring_cuda, _stream_cuda, _sumtree_cuda

        self._cuda, self._rc, self._sc = cuda, _ring_cuda, _sumtree_cuda
        self._stc = _stream_cuda
        super().__init__(
            columns, capacity, prioritized=prioritized, seed=seed, alpha=alpha, beta=beta,
            eps=eps, quantize=quantize, demo_capacity=demo_capacity,
            demo_fraction=demo_fraction, n_envs=n_envs, next_of=next_of,
            frame_stack=frame_stack,
        )
        if n_step is not None:  # the draws' defaults; the device walks (nothing kept)
            self._kept = self._check_draw_nstep(n_step, gamma)
            self._check_nstep(*self._kept)  # a quantised reward is refused here already
        cap = self._capacity
        self._k0, self._k1 = np.uint64(self._seed & _U32), np.uint64(self._seed >> 32)
        self._ere_step_set = False
        self._data: dict[str, Any] = {}
        for name in self._cols.names:
            e = self._cols.row_elems(name)
            self._data[name] = cuda.to_device(np.zeros((cap, e), self._cols.storage_dtype(name)))
        self._istate = cuda.to_device(np.zeros(_lanes.N_STATE, np.int64))
        self._fstate = cuda.to_device(np.array([1.0, self._beta], np.float64))
        self._bufs: dict[int, tuple[Any, ...]] = {}
        self._last: dict[int, Any] = {}  # batch size -> n-step last rows (device int64)
        self._false: Any = None  # (capacity,) device False, for an absent done / truncated
        #: per-batch device int64 scratch of the stream gathers: (what, rows, depth) -> array
        self._scratch: dict[tuple[str, int, int], Any] = {}
        if self._prioritized:
            p = 1
            while p < cap:
                p *= 2
            self._p = p
            self._levels = p.bit_length() - 1
            self._sums = cuda.to_device(np.zeros(2 * p, np.float64))
            self._mins = cuda.to_device(np.full(2 * p, np.inf, np.float64))
            self._gen = cuda.to_device(np.zeros(cap, np.int64))
            self._owner = cuda.to_device(np.full(cap, -1, np.int64))

    # ------------------------------------------------------------------ properties
    @property
    def state_array(self) -> Any:
        """int64 device ring state (``_lanes`` slots: cursor, size, n_demo, draw, ...)."""
        return self._istate

    def _beta_changed(self) -> None:
        self._fstate[_lanes.BETA : _lanes.BETA + 1].copy_to_device(np.array([self._beta]))

    def storage(self, name: str) -> np.ndarray:
        """Host copy of column ``name``'s physical rows ``(capacity, *shape)`` (synchronises)."""
        if name not in self._data:
            raise SchemaError(f"no column {name!r}; columns: {', '.join(self._cols.names)}")
        shape = (self._capacity, *self._cols.specs[name].shape)
        return self._data[name].copy_to_host().reshape(shape)

    def tree_leaves(self) -> np.ndarray:
        """Host copy of the sum-tree leaves (float64 ``(capacity,)``; prioritized only)."""
        return self._sums.copy_to_host()[self._p : self._p + self._capacity]

    # ------------------------------------------------------------------ writes
    def _write_ring(self, arrays: dict[str, Any], n: int, cursor: int) -> None:
        r = self._r
        self._put(arrays, n, self._d, r, cursor)
        skip = max(0, n - r)
        self._note_added(self._d + (cursor + np.arange(skip, n, dtype=np.int64)) % r)

    def _write_demos(self, arrays: dict[str, Any], n: int) -> None:
        self._put(arrays, n, self._n_demo, n, 0)
        self._note_added(np.arange(self._n_demo, self._n_demo + n, dtype=np.int64))

    def _ring_changed(self) -> None:
        self._sync_state()
        if self._side is not None:
            self._side.flush()  # type: ignore[attr-defined]

    def _side_table(self) -> _st.SideTable:
        if self._side is None:
            specs = self._cols.specs
            rc = self._rc
            nx = self._streams.next_of
            self._side = _DeviceSide(
                self._capacity, {t: (specs[src].dtype, specs[src].shape) for t, src in nx.items()},
                self._cuda, self._stc._scatter_rows_cuda, rc.blocks, rc.THREADS_PER_BLOCK)
        return self._side

    def _restore_streams(self, path: str, state: Mapping[str, Any],
                         side: Mapping[str, Any] | None) -> None:
        super()._restore_streams(path, state, side)
        if self._side is not None:
            self._side.flush()  # type: ignore[attr-defined]

    def _put(self, arrays: dict[str, Any], n: int, base: int, cap: int, cur: int) -> None:
        rc = self._rc
        skip = max(0, n - cap)
        for name, a in arrays.items():
            e = self._cols.row_elems(name)
            if not e:
                continue
            if is_device_array(a):
                src = a.reshape(n * e) if a.is_c_contiguous() else None
                if src is None:
                    raise SchemaError(f"column {name!r}: device rows must be C-contiguous")
            else:
                src = self._cuda.to_device(np.ascontiguousarray(a).reshape(n * e))
            grid = rc.blocks((n - skip) * e)
            q = self._cols.quant.get(name)
            if q is None:
                rc._ring_put_cuda[grid, rc.THREADS_PER_BLOCK](self._data[name], src, base, cap, cur)
            else:
                rc._ring_put_quantize_cuda[grid, rc.THREADS_PER_BLOCK](
                    self._data[name], src, base, cap, cur, q.low, q.high, q.scale
                )

    def _note_added(self, rows: np.ndarray) -> None:
        if not self._prioritized or not rows.size:
            return
        sc, rc = self._sc, self._rc
        d_rows = self._cuda.to_device(rows)
        nodes = self._cuda.device_array(rows.shape[0], np.int64)
        g = rc.blocks(rows.shape[0])
        sc._add_leaves_cuda[g, rc.THREADS_PER_BLOCK](
            self._sums, self._mins, self._p, self._gen, d_rows, self._fstate, self._alpha, nodes
        )
        self._ancestors(nodes)

    def _ancestors(self, nodes: Any) -> None:
        g = self._rc.blocks(nodes.shape[0])
        for _ in range(self._levels):
            self._sc._ancestors_cuda[g, self._rc.THREADS_PER_BLOCK](self._sums, self._mins, nodes)

    def _sync_state(self) -> None:
        self._rc._set_state_cuda[1, 1](self._istate, self._cursor, self._size, self._n_demo)

    # ------------------------------------------------------------------ ERE
    def set_ere_step(self, *, k: int, K: int) -> None:  # noqa: N803
        """Write ERE's ``k`` of ``K`` into device memory (one launch, no sync); call it
        outside a captured graph, or pass ``k``/``K`` to :meth:`sample_into`."""
        self.ere_window(k=k, K=K)  # validates
        self._rc._set_ere_step_cuda[1, 1](self._istate, int(k), int(K))
        self._ere_step_set = True

    # ------------------------------------------------------------------ sampling
    def _buffers(self, b: int) -> tuple[Any, ...]:
        bufs = self._bufs.get(b)
        if bufs is None:
            cuda = self._cuda
            idx = cuda.device_array(b, np.int64)
            if self._prioritized:
                w = cuda.device_array(b, np.float32)
                st = cuda.device_array(b, np.int64)
                bufs = (idx, w, st, IndexBatch(idx, weights=w, stamps=st))
            else:
                bufs = (idx, None, None, IndexBatch(idx))
            self._bufs[b] = bufs
        return bufs

    def _index_batch(self, b: int) -> IndexBatch:
        return self._reused_batch(b)

    def _reused_batch(self, b: int) -> IndexBatch:
        batch: IndexBatch = self._buffers(b)[3]
        return batch

    def _draw(self, batch: IndexBatch, k: int | None, K: int | None) -> None:  # noqa: N803
        """Launch the draw kernel into ``batch``'s device buffers; advance the draw counter."""
        b = batch.batch_size
        ere = self._ere is not None
        if ere and (k is not None or K is not None):
            self.set_ere_step(k=k, K=K)  # type: ignore[arg-type]
        elif ere and not self._ere_step_set:
            raise SamplerError(
                "ERE is on: sample() needs integer k and K (update k of K), or call "
                "set_ere_step(k, K) first"
            )
        eta = self._ere.eta if ere else 1.0  # type: ignore[union-attr]
        c_min = self._ere.c_min if ere else 1  # type: ignore[union-attr]
        frac = -1.0 if self._fraction is None else self._fraction
        idx, w, st, _ = self._buffers(b)
        rc = self._rc
        g = rc.blocks(b)
        if self._prioritized:
            self._sc._per_draw_cuda[g, rc.THREADS_PER_BLOCK](
                self._istate, self._fstate, self._sums, self._mins, self._p, self._gen, self._k0,
                self._k1, self._d, self._r, frac, ere, eta, c_min, idx, w, st,
            )
        else:
            rc._uniform_draw_cuda[g, rc.THREADS_PER_BLOCK](
                self._istate, self._k0, self._k1, self._d, self._r, frac, ere, eta, c_min, idx
            )
        rc._next_draw_cuda[1, 1](self._istate)

    def _check_output(self, name: str, o: Any, dt: np.dtype, shape: tuple[int, ...]) -> Any:
        if not is_device_array(o) and hasattr(o, "__cuda_array_interface__"):
            o = get_cuda().as_cuda_array(o)  # a torch CUDA tensor, CuPy...: a zero-copy view
        if not is_device_array(o):
            raise SchemaError(
                f"sample_into: outputs[{name!r}] must be a device array, got "
                f"{type(o).__name__}"
            )
        if np.dtype(o.dtype) != dt or tuple(o.shape) != shape or not o.is_c_contiguous():
            raise SchemaError(
                f"sample_into: outputs[{name!r}] is {np.dtype(o.dtype).name} "
                f"{tuple(o.shape)}, expected a C-contiguous {dt.name} {shape}"
            )
        return o

    def _gather(self, idx: Any, outputs: Mapping[str, Any], b: int) -> None:
        rc = self._rc
        for name, out in outputs.items():
            e = self._cols.row_elems(name)
            if not e:
                continue
            g = rc.blocks(b * e)
            flat = out.reshape(b, e)
            q = self._cols.quant.get(name)
            if q is None:
                rc._gather_cuda[g, rc.THREADS_PER_BLOCK](self._data[name], idx, flat)
            else:
                rc._gather_dequantize_cuda[g, rc.THREADS_PER_BLOCK](
                    self._data[name], idx, q.low, q.step, flat
                )

    def _new_outputs(self, b: int) -> dict[str, Any]:
        return {
            n: self._cuda.device_array((b, *s.shape), self._cols.sample_dtype(n))
            for n, s in self._cols.specs.items()
        }

    def update_priorities(self, batch: IndexBatch, priorities: Any, *, sync: bool = True,
                          eta: float = 0.9) -> int | None:
        """Feed priorities back on the device; stale rows are skipped.

        ``batch``: the :class:`IndexBatch` from :meth:`sample` (device indices and stamps) or
        host row numbers (no stamp check).  ``priorities``: host or device, finite, >= 0.
        For a window batch of :meth:`sample_sequences` ``priorities`` is the ``(B, T)`` TD
        error (host, or a float32/float64 device array) and each window's start gets
        ``eta * max|td| + (1 - eta) * mean|td|`` (R2D2, as :class:`StoreReplay`, bit for
        bit).  Returns how many were skipped (since the last synced call) when ``sync`` (one
        device read and write), else None.  Device values are not checked (a NaN goes in).
        """
        self._need_prioritized()
        cuda, rc, sc = self._cuda, self._rc, self._sc
        if isinstance(batch, IndexBatch) and len(batch.indices.shape) == 2:
            rows, priorities = self._window_priorities(batch, priorities, eta)
            batch = IndexBatch(rows, weights=batch.weights, stamps=batch.stamps)
        if isinstance(batch, IndexBatch):
            rows, stamps = batch.indices, batch.stamps
        else:
            rows, stamps = batch, None
        if not is_device_array(rows):
            r = np.ascontiguousarray(rows, dtype=np.int64)
            if r.ndim != 1 or (r.size and (r.min() < 0 or r.max() >= self._capacity)):
                raise SamplerError(f"indices must be 1-D rows in [0, {self._capacity})")
            rows = cuda.to_device(r)
        n = rows.shape[0]
        if is_device_array(priorities):
            pr = priorities
            if np.dtype(pr.dtype) != np.float64 or tuple(pr.shape) != (n,):
                raise SamplerError(
                    f"device priorities must be float64 ({n},), got {pr.dtype} {pr.shape}"
                )
        else:
            ph = np.ascontiguousarray(priorities, dtype=np.float64)
            if ph.shape != (n,) or not np.all(np.isfinite(ph) & (ph >= 0)):
                raise SamplerError(
                    f"priorities must be {n} finite numbers >= 0, got shape {ph.shape}"
                )
            pr = cuda.to_device(ph)
        check = stamps is not None
        if not check:
            stamps = rows
        g = rc.blocks(n)
        tpb = rc.THREADS_PER_BLOCK
        nodes = cuda.device_array(n, np.int64)
        sc._claim_cuda[g, tpb](self._istate, self._fstate, self._gen, rows, stamps, check, pr,
                               self._eps, self._owner)
        sc._apply_cuda[g, tpb](self._sums, self._mins, self._p, rows, pr, self._eps,
                               self._alpha, self._owner, nodes)
        sc._release_cuda[g, tpb](rows, self._owner)
        self._ancestors(nodes)
        if not sync:
            return None
        st = self._istate.copy_to_host()
        skipped = int(st[_lanes.SKIPPED])
        self._istate[_lanes.SKIPPED : _lanes.SKIPPED + 1].copy_to_device(np.zeros(1, np.int64))
        return skipped

    def _window_priorities(self, batch: IndexBatch, td: Any, eta: float) -> tuple[Any, Any]:
        """Window starts (device, contiguous) and their R2D2 priorities (float64 ``(B,)``,
        device): ``_window_priorities_cuda`` over device ``td``; the host twin
        (``window_priorities_cpu``, the same body) and the host checks over host ``td``."""
        eta = check_real("eta", eta, 0.0, False)
        if eta > 1:
            raise SamplerError(f"eta must be in [0, 1], got {eta!r}")
        cuda, rc = self._cuda, self._rc
        rows = batch.indices
        shape = tuple(rows.shape)
        b = shape[0]
        if not is_device_array(td) and hasattr(td, "__cuda_array_interface__"):
            td = cuda.as_cuda_array(td)  # a torch CUDA tensor, CuPy...: a zero-copy view
        d_rows = rows if is_device_array(rows) else cuda.to_device(
            np.ascontiguousarray(rows, dtype=np.int64))
        starts = cuda.device_array(b, np.int64)
        if is_device_array(td):
            dt = np.dtype(td.dtype)
            if tuple(td.shape) != shape or dt not in (np.float32, np.float64):
                raise SamplerError(
                    f"update_priorities: a window batch of shape {shape} needs td of shape "
                    f"{shape} (one TD error per step), got {dt} {tuple(td.shape)}; nothing was "
                    f"updated (device td: float32 or float64)"
                )
            pr = cuda.device_array(b, np.float64)
            self._stc._window_priorities_cuda[rc.blocks(b), rc.THREADS_PER_BLOCK](
                td, d_rows, eta, pr, starts)
            return starts, pr
        a = np.asarray(as_host_values(td))
        if a.shape != shape or a.dtype.kind not in "fiu":
            raise SamplerError(
                f"update_priorities: a window batch of shape {shape} needs td of shape "
                f"{shape} (one TD error per step), got {a.dtype} {a.shape}; nothing was updated"
            )
        p = np.empty(b, np.float64)
        _sk.window_priorities_cpu(np.ascontiguousarray(a), eta, p)
        p = check_values("priorities", p, b)
        h_rows = rows.copy_to_host() if is_device_array(rows) else np.asarray(rows)
        return cuda.to_device(np.ascontiguousarray(h_rows[:, 0], dtype=np.int64)), p

    # ------------------------------------------------------------------ streams
    def _flag_column(self, name: str) -> Any:
        """Device bool ``(capacity,)`` view of ``done`` / ``truncated`` (all False if absent)."""
        if name in self._end_names:
            return self._data[name][:, 0]
        if self._false is None:
            self._false = self._cuda.to_device(np.zeros(self._capacity, np.bool_))
        return self._false

    def _end_flags(self, phys: np.ndarray) -> np.ndarray:
        """``done | truncated`` of held rows ``phys`` (a gather launch and a copy back)."""
        rc = self._rc
        f = np.zeros(phys.shape[0], dtype=np.bool_)
        if not phys.size:
            return f
        d_rows = self._cuda.to_device(np.ascontiguousarray(phys, dtype=np.int64))
        out = self._cuda.device_array((phys.shape[0], 1), np.bool_)
        for c in self._end_names:
            rc._gather_cuda[rc.blocks(phys.shape[0]), rc.THREADS_PER_BLOCK](
                self._data[c], d_rows, out)
            f |= out.copy_to_host()[:, 0]
        return f

    def _end_flag_at(self, p: int) -> bool:
        """``done | truncated`` of held row ``p`` (one byte per flag copied back: the cut
        flag of a full one-stream ring costs a small device read per add)."""
        return any(bool(self._data[c][p : p + 1].copy_to_host()[0, 0]) for c in self._end_names)

    def _ends_of(self, arrays: Mapping[str, Any], sel: np.ndarray, n: int) -> np.ndarray:
        f = np.zeros(sel.shape[0], dtype=np.bool_)
        for c in self._end_names:
            a = arrays[c]
            h = a.copy_to_host() if is_device_array(a) else np.asarray(a)
            f |= h.reshape(n)[sel].astype(np.bool_)
        return f

    def _new_outputs_ext(self, b: int, ns: tuple[int, float] | None) -> dict[str, Any]:
        return {n: self._cuda.device_array((b, *shp), dt)
                for n, (dt, shp) in self._out_specs(ns).items()}

    def _rows_scratch(self, what: str, b: int, depth: int) -> Any:
        """Device int64 ``(b, depth)`` scratch, one per use and batch size (graph-safe)."""
        key = (what, b, depth)
        a = self._scratch.get(key)
        if a is None:
            a = self._scratch[key] = self._cuda.device_array((b, depth), np.int64)
        return a

    def _stack_rows(self, rows: Any, b: int, depth: int, shift: bool, what: str) -> Any:
        """Frame-stack rows ``(b, depth)`` of ``rows`` (the next stack when ``shift``)."""
        rc = self._rc
        st = self._rows_scratch(what, b, depth)
        self._stc._stack_rows_cuda[rc.blocks(b), rc.THREADS_PER_BLOCK](
            self._istate, rows, depth, shift, self._flag_column("done"),
            self._flag_column("truncated"), self._d, self._r, self._streams.n_envs, st)
        return st

    def _gather_cols(self, rows: Any, outputs: Mapping[str, Any], names: Iterable[str],
                     b: int, what: str) -> None:
        """Declared columns ``names`` at device ``rows`` (b,), frame stacks built."""
        fs = self._streams.frame_stack
        names = list(names)
        flat = {n: outputs[n] for n in names if n not in fs}
        if flat:
            self._gather(rows, flat, b)
        for n in names:
            depth = fs.get(n)
            if depth is None:
                continue
            st = self._stack_rows(rows, b, depth, False, f"{what}:{n}")
            out = outputs[n]
            self._gather(st.reshape(b * depth), {n: out.reshape(b * depth, *out.shape[2:])},
                         b * depth)

    def _gather_next(self, target: str, rows: Any, out: Any, b: int, stacked: bool) -> None:
        """``next_of`` target at device ``rows`` (b,) into ``out`` (``(b, [depth,] *shape)``):
        the source's next row of the same stream (the next stack when the source is stacked
        and ``stacked``), then the side table's entries over it."""
        src = self._streams.next_of[target]
        depth = self._streams.frame_stack.get(src) if stacked else None
        rc, tpb = self._rc, self._rc.THREADS_PER_BLOCK
        d = 1 if depth is None else depth
        st = self._stack_rows(rows, b, d, True, f"next:{target}")  # depth 1: the next row
        flat = out.reshape(b * d, *out.shape[(1 if depth is None else 2):])
        self._gather(st.reshape(b * d), {src: flat}, b * d)
        e = self._cols.row_elems(src)
        side = self._side_table()
        if e:
            self._stc._side_fill_cuda[rc.blocks(b * e), tpb](
                side.d_slot[:, 0], side.d_pool[target], rows, d,  # type: ignore[attr-defined]
                flat.reshape(b * d, e))

    def _check_nstep(self, n_step: int | None,
                     gamma: float | None) -> tuple[int, float] | None:
        ns = super()._check_nstep(n_step, gamma)
        if ns is not None and "reward" in self._cols.quant:
            # the device walk reads the stored reward words: for a quantised column those
            # are uint8 codes, and summing them would be silently wrong
            raise SamplerError(
                "StoreReplayGpu: n_step with a quantised 'reward' column is not supported on "
                "the device (StoreReplay supports it); leave 'reward' out of quantize="
            )
        return ns

    def _gather_ext(self, idx: Any, outputs: Mapping[str, Any], b: int,
                    ns: tuple[int, float] | None) -> None:
        """Columns at the drawn rows (frame stacks built, ``_stack_rows_cuda``); with
        n-step the targets (``_nstep_cuda``, geometry from the device state) and every
        ``next_<x>`` column at row ``t + m - 1``; ``next_of`` targets from the next row of
        the stream or the side table.  Launches only, into per-batch-size buffers:
        CUDA-graph-safe like the plain draw."""
        names = self._cols.names
        at_last = [n for n in names if ns is not None and n.startswith("next_")
                   and n[5:] in self._cols.specs]
        self._gather_cols(idx, outputs, [n for n in names if n not in at_last], b, "t")
        last = idx
        if ns is not None:
            last = self._last.get(b)
            if last is None:
                last = self._last[b] = self._cuda.device_array(b, np.int64)
            rc = self._rc
            self._stc._nstep_cuda[rc.blocks(b), rc.THREADS_PER_BLOCK](
                self._istate, idx, ns[0], ns[1], self._data["reward"][:, 0],
                self._flag_column("done"), self._flag_column("truncated"), self._d, self._r,
                self._streams.n_envs, outputs["return"], outputs["discount"], last)
            if at_last:
                self._gather_cols(last, outputs, at_last, b, "last")
        for t in self._streams.next_of:
            self._gather_next(t, last, outputs[t], b, True)

    def _sample_sequences(self, b: int, t: int,
                          within: bool) -> tuple[dict[str, Any], IndexBatch]:
        """Windows: uniform starts from the Philox stream (``sequence_start_py``) or
        prioritized ones from the sum-tree (``per_sequence_start_py``), then each lane's
        window (``window_row_py``), then one gather of every column and the next_of
        targets."""
        cuda, rc, stc = self._cuda, self._rc, self._stc
        e = self._streams.n_envs
        g, tpb = rc.blocks(b), rc.THREADS_PER_BLOCK
        starts = cuda.device_array(b, np.int64)
        w = st = None
        if self._prioritized:
            if not within and self._size - (t - 1) * e <= 0:
                raise SamplerError(
                    f"sample_sequences: no online window of T={t} (prioritized spanning "
                    f"windows are drawn from online rows only, {self._size // e} per env)"
                )
            w = cuda.device_array(b, np.float32)
            st = cuda.device_array(b, np.int64)
            stc._per_sequence_starts_cuda[g, tpb](
                self._istate, self._fstate, self._sums, self._mins, self._p, self._gen,
                self._k0, self._k1, t, within, self._d, self._r, e, starts, w, st)
        else:
            stc._sequence_starts_cuda[g, tpb](self._istate, self._k0, self._k1, t, within,
                                              self._d, self._r, e, starts)
        rc._next_draw_cuda[1, 1](self._istate)
        rows = cuda.device_array((b, t), np.int64)
        first = cuda.device_array((b, t), np.bool_)
        pad = cuda.device_array((b, t), np.bool_)
        self._cut_first[0] = True
        stc._window_rows_cuda[g, tpb](
            self._istate, starts, t, within, self._flag_column("done"),
            self._flag_column("truncated"), self._d, self._r, e,
            cuda.to_device(self._cut_first), rows, first, pad)
        n = b * t
        out: dict[str, Any] = {}
        for name, spec in self._cols.specs.items():
            out[name] = cuda.device_array((b, t, *spec.shape), self._cols.sample_dtype(name))
        flat = rows.reshape(n)
        self._gather(flat, {k: v.reshape(n, *v.shape[2:]) for k, v in out.items()}, n)
        for tgt, src in self._streams.next_of.items():
            spec = self._cols.specs[src]
            a = cuda.device_array((b, t, *spec.shape), spec.dtype)
            self._gather_next(tgt, flat, a.reshape(n, *spec.shape), n, False)
            out[tgt] = a
        out["is_first"] = first
        if within:
            for name in list(out):
                if name != "is_first":
                    p = cuda.device_array((b, t), np.bool_)
                    p.copy_to_device(pad)
                    out[f"{name}_is_pad"] = p
        return out, IndexBatch(rows, weights=w, stamps=st, is_first=first)

    # ------------------------------------------------------------------ checkpoints
    def _saved_rows(self) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
        d, nd, size = self._d, self._n_demo, self._size
        for name, spec in self._cols.specs.items():
            col = self._data[name]
            dt = self._cols.storage_dtype(name)
            out = []
            for lo, n in ((0, nd), (d, size)):
                rows = col[lo : lo + n].copy_to_host() if n else np.empty((0, 1), dt)
                out.append(rows.astype(dt, copy=False).reshape(n, *spec.shape))
            yield name, out[0], out[1]

    def _stream_state(self) -> dict[str, Any]:
        fstate = self._fstate.copy_to_host()
        return {"istate": self._istate.copy_to_host().tolist(),
                "max_priority": float(fstate[_lanes.MAXP]), "ere_step_set": self._ere_step_set}

    def _tree_arrays(self) -> ck.TreeArrays | None:
        if not self._prioritized:
            return None
        present = ck.held_rows(self._capacity, self._d, self._n_demo, self._size)
        return ck.TreeArrays(self.tree_leaves(), self._gen.copy_to_host(), present)

    def _row_buffer(self, name: str, lo: int, n: int, shape: tuple[int, ...],
                    dtype: np.dtype) -> np.ndarray:
        return np.empty((n, *shape), dtype)  # one host buffer per dataset, then one copy

    def _load_rows(self, name: str, demo: np.ndarray, ring_rows: np.ndarray,
                   ring: ck.RingState) -> None:
        e = self._cols.row_elems(name)
        dt = self._cols.storage_dtype(name)
        for lo, rows in ((0, demo), (self._d, ring_rows)):
            n = rows.shape[0]
            if n:
                host = np.ascontiguousarray(rows, dtype=dt).reshape(n, e)
                self._data[name][lo : lo + n].copy_to_device(host)

    def _restore(self, state: dict[str, Any], ring: ck.RingState, tree: ck.TreeArrays | None,
                 path: str) -> None:
        try:
            istate = np.asarray(state["istate"], dtype=np.int64)
            max_priority = state["max_priority"]
            ere_step_set = bool(state["ere_step_set"])
        except (KeyError, TypeError, ValueError) as exc:
            raise IntegrityError(f"checkpoint {path!r}: unreadable device state: {exc!r}") from exc
        held = (ring.cursor, ring.size, ring.n_demo)
        if istate.shape != (_lanes.N_STATE,) or tuple(
            int(istate[i]) for i in (_lanes.CURSOR, _lanes.SIZE, _lanes.N_DEMO)
        ) != held or istate[_lanes.DRAW] < 0:
            raise IntegrityError(
                f"checkpoint {path!r}: device state {istate.tolist()} does not match the ring "
                f"state cursor={ring.cursor}, size={ring.size}, n_demo={ring.n_demo} "
                f"(expected {_lanes.N_STATE} words, draw >= 0)"
            )
        maxp = check_real("max_priority", max_priority, 0.0, True)
        if tree is not None:
            t = SumTree(self._capacity)  # rebuilt from the leaves: the saved tree's bits
            t.load_leaves(tree.leaves, np.where(tree.present, tree.leaves, np.inf))
            self._sums.copy_to_device(t.sums)
            self._mins.copy_to_device(t.mins)
            self._gen.copy_to_device(tree.stamps)
        self._istate.copy_to_device(istate)
        self._fstate.copy_to_device(np.array([maxp, self._beta], np.float64))
        self._set_ring_state(ring)
        self._ere_step_set = ere_step_set

    def _host_rows(self) -> StoreReplay:
        return self.to_host()

    def to_host(self) -> StoreReplay:
        """A uniform :class:`StoreReplay` holding the same rows and ring state (synchronises)."""
        st = self._streams
        host = StoreReplay(self._cols.specs.values(), self._capacity, seed=self._seed,
                           quantize={n: (q.low, q.high) for n, q in self._cols.quant.items()},
                           demo_capacity=self._d, n_envs=st.n_envs, next_of=st.next_of or None,
                           frame_stack=st.frame_stack or None)
        for name in self._cols.names:
            host._data[name][...] = self.storage(name)
        host._set_ring_state(self._ring_state())
        host._set_cut_first(self._cut_first)
        if self._side is not None:
            rows, values = self._side.state()
            host._side_table().keep(rows, values)
        return host
