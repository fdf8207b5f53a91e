"""StoreReplayGpu: the replay with its columns, ring state and sum-tree in device memory.

``sample_into`` is CUDA-graph-safe: it launches kernels only, into preallocated device
outputs; the ring's size and cursor, the Philox draw counter and the IS exponent are read
from device memory and the draw counter is advanced by the kernel, so a captured sequence
draws fresh rows on each replay.  ``add`` and ``update_priorities`` are launches too, with
the host keeping a mirror of size and cursor (the host decides where rows go).

Every draw has a host twin (``_lanes.py``): the same bodies compiled for the host give the
same rows, which is how the tests check the device under the CUDA simulator.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from numbatraj._cuda import get_cuda
from numbatraj.data.column import ColumnSpec
from numbatraj.data.index_batch import IndexBatch, _on_device
from numbatraj.errors import SamplerError, SchemaError
from numbatraj.replay import _draw, _lanes
from numbatraj.replay.columns import ReplayColumns
from numbatraj.samplers._args import check_count, check_seed
from numbatraj.samplers.prioritized import _check_real

__all__ = ["StoreReplayGpu"]

_U32 = 0xFFFFFFFF


class StoreReplayGpu:
    """The :class:`StoreReplay` API with every column in device memory.

    Parameters are those of :class:`StoreReplay`.  Uniform rows come from a Philox stream
    keyed by ``seed`` (lane ``i`` of draw ``d``: ``philox4x32_10(d, i; seed)``); prioritized
    rows from a device sum-tree with one Philox uniform per stratum.

    Notes
    -----
    The arrays of the :class:`IndexBatch` that :meth:`sample_into` returns are the replay's
    own buffers for that batch size, overwritten by the next call with the same size.
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
        cuda = get_cuda()
        from numbatraj.replay import _ring_cuda, _sumtree_cuda

        self._cuda, self._rc, self._sc = cuda, _ring_cuda, _sumtree_cuda
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
        self._k0, self._k1 = np.uint64(self._seed & _U32), np.uint64(self._seed >> 32)
        self._prioritized = bool(prioritized)
        self._alpha = _check_real("alpha", alpha, 0.0, False)
        self._eps = _check_real("eps", eps, 0.0, True)
        beta = _check_real("beta", beta, 0.0, False)
        self._fraction = _draw.check_fraction(demo_fraction)
        self._ere: _draw.EreConfig | None = None
        self._ere_step_set = False
        self._data: dict[str, Any] = {}
        for name in self._cols.names:
            e = self._cols.row_elems(name)
            self._data[name] = cuda.to_device(np.zeros((cap, e), self._cols.storage_dtype(name)))
        self._istate = cuda.to_device(np.zeros(_lanes.N_STATE, np.int64))
        self._fstate = cuda.to_device(np.array([1.0, beta], np.float64))
        self._beta = beta
        self._cursor = self._size = self._n_demo = self._n_added = 0
        self._bufs: dict[int, tuple[Any, ...]] = {}
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
    columns = property(lambda self: dict(self._cols.specs), doc="The declared columns.")
    quantization = property(lambda self: dict(self._cols.quant))
    capacity = property(lambda self: self._capacity)
    demo_capacity = property(lambda self: self._d)
    ring_capacity = property(lambda self: self._r)
    size = property(lambda self: self._size, doc="Online rows held.")
    n_demo = property(lambda self: self._n_demo, doc="Demonstration rows held.")
    n_rows = property(lambda self: self._n_demo + self._size)
    cursor = property(lambda self: self._cursor)
    n_added = property(lambda self: self._n_added)
    prioritized = property(lambda self: self._prioritized)
    seed = property(lambda self: self._seed)
    ere = property(lambda self: self._ere)
    state_array = property(lambda self: self._istate, doc="int64 device ring state.")

    def __len__(self) -> int:
        return self.n_rows

    @property
    def beta(self) -> float:
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        if not self._prioritized:
            raise SamplerError("beta applies to a prioritized replay (prioritized=True)")
        self._beta = _check_real("beta", value, 0.0, False)
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
    def _put(self, arrays: dict[str, Any], n: int, base: int, cap: int, cur: int) -> None:
        rc = self._rc
        skip = max(0, n - cap)
        for name, a in arrays.items():
            e = self._cols.row_elems(name)
            if not e:
                continue
            if _on_device(a):
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

    def add(self, **rows: Any) -> int:
        """Insert one row or a batch of ``n`` rows (host or device arrays) into the ring.

        Checks as :meth:`StoreReplay.add` (all columns before any write).  Returns ``n``.
        """
        arrays, n = self._cols.check_rows(rows)
        if n == 0:
            return 0
        r, cur = self._r, self._cursor
        self._put(arrays, n, self._d, r, cur)
        skip = max(0, n - r)
        self._note_added(self._d + (cur + np.arange(skip, n, dtype=np.int64)) % r)
        self._cursor = (cur + n) % r
        self._size = min(self._size + n, r)
        self._n_added += n
        self._sync_state()
        return n

    def add_demos(self, **rows: Any) -> int:
        """Append rows to the pinned demonstration prefix (see :meth:`StoreReplay.add_demos`)."""
        arrays, n = self._cols.check_rows(rows, "add_demos")
        if n == 0:
            return 0
        free = self._d - self._n_demo
        if n > free:
            raise SchemaError(
                f"add_demos: {n} rows do not fit the demonstration prefix ({self._n_demo} of "
                f"demo_capacity {self._d} rows used, {free} free); nothing was written"
            )
        self._put(arrays, n, self._n_demo, n, 0)
        self._note_added(np.arange(self._n_demo, self._n_demo + n, dtype=np.int64))
        self._n_demo += n
        self._sync_state()
        return n

    # ------------------------------------------------------------------ ERE
    def configure_ere(self, enabled: bool, eta: float = 0.996, c_min: int = 5000) -> None:
        """As :meth:`StoreReplay.configure_ere`."""
        self._ere = _draw.check_ere(eta, c_min) if enabled else None

    def ere_window(self, k: int, K: int) -> int:  # noqa: N803
        """``c_k`` for update ``k`` of ``K`` at the current size (ERE must be on)."""
        if self._ere is None:
            raise SamplerError("ERE is off; call configure_ere(True, ...) first")
        return _draw.ere_window(self._ere, self._size, k, K)

    def set_ere_step(self, k: int, K: int) -> None:  # noqa: N803
        """Write ERE's ``k`` of ``K`` into device memory (one launch, no sync); call it
        outside a captured graph, or pass ``k``/``K`` to :meth:`sample_into`."""
        self.ere_window(k, K)  # validates
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

    def sample_indices(self, batch_size: int, k: int | None = None, K: int | None = None) -> IndexBatch:  # noqa: N803,E501
        """Draw one minibatch's physical rows on the device (buffers reused per batch size)."""
        b = check_count("batch_size", batch_size)
        if self.n_rows == 0:
            raise SamplerError(
                "cannot sample: the replay is empty (no online or demonstration rows); "
                "add() rows first"
            )
        ere = self._ere is not None
        if ere and (k is not None or K is not None):
            self.set_ere_step(k, K)  # type: ignore[arg-type]
        elif ere and not self._ere_step_set:
            raise SamplerError(
                "ERE is on: sample() needs integer k and K (update k of K), or call "
                "set_ere_step(k, K) first"
            )
        eta = self._ere.eta if ere else 1.0  # type: ignore[union-attr]
        c_min = self._ere.c_min if ere else 1  # type: ignore[union-attr]
        frac = -1.0 if self._fraction is None else self._fraction
        idx, w, st, batch = self._buffers(b)
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
        return batch

    def _check_outputs(self, outputs: Mapping[str, Any], b: int) -> None:
        if set(outputs) != set(self._cols.names):
            raise SchemaError(
                f"sample_into: outputs has columns {sorted(outputs)}, expected "
                f"{sorted(self._cols.names)}"
            )
        for name, spec in self._cols.specs.items():
            o = outputs[name]
            dt, shape = self._cols.sample_dtype(name), (b, *spec.shape)
            if not _on_device(o):
                raise SchemaError(
                    f"sample_into: outputs[{name!r}] must be a device array, got "
                    f"{type(o).__name__}"
                )
            if np.dtype(o.dtype) != dt or tuple(o.shape) != shape or not o.is_c_contiguous():
                raise SchemaError(
                    f"sample_into: outputs[{name!r}] is {np.dtype(o.dtype).name} "
                    f"{tuple(o.shape)}, expected a C-contiguous {dt.name} {shape}"
                )

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

    def sample_into(self, outputs: Mapping[str, Any], batch_size: int, k: int | None = None,
                    K: int | None = None) -> IndexBatch:  # noqa: N803
        """Draw and gather into caller-owned device arrays; kernels only, no host sync.

        ``outputs[name]``: C-contiguous device array ``(batch_size, *spec.shape)`` of the
        sample dtype (float32 for quantised columns).
        """
        b = check_count("batch_size", batch_size)
        self._check_outputs(outputs, b)
        batch = self.sample_indices(b, k, K)
        self._gather(batch.indices, outputs, b)
        return batch

    def sample(self, batch_size: int, k: int | None = None,
               K: int | None = None) -> tuple[dict[str, Any], IndexBatch]:  # noqa: N803
        """Draw a minibatch into new device arrays (see :meth:`StoreReplay.sample`)."""
        b = check_count("batch_size", batch_size)
        out = {
            n: self._cuda.device_array((b, *s.shape), self._cols.sample_dtype(n))
            for n, s in self._cols.specs.items()
        }
        return out, self.sample_into(out, b, k, K)

    def update_priorities(self, batch: IndexBatch, priorities: Any, *, sync: bool = True) -> int | None:  # noqa: E501
        """Feed priorities back on the device; stale rows are skipped.

        ``batch``: the :class:`IndexBatch` from :meth:`sample` (device indices and stamps) or
        host row numbers (no stamp check).  ``priorities``: host or device, finite, >= 0.
        Returns how many were skipped (since the last synced call) when ``sync`` (one device
        read and write), else None.
        """
        if not self._prioritized:
            raise SamplerError("update_priorities needs a prioritized replay (prioritized=True)")
        cuda, rc, sc = self._cuda, self._rc, self._sc
        if isinstance(batch, IndexBatch):
            rows, stamps = batch.indices, batch.stamps
        else:
            rows, stamps = batch, None
        if not _on_device(rows):
            r = np.ascontiguousarray(rows, dtype=np.int64)
            if r.ndim != 1 or (r.size and (r.min() < 0 or r.max() >= self._capacity)):
                raise SamplerError(f"indices must be 1-D rows in [0, {self._capacity})")
            rows = cuda.to_device(r)
        n = rows.shape[0]
        if _on_device(priorities):
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

    # ------------------------------------------------------------------ files
    def save(self, path: Any) -> None:
        """Checkpoint rows, ring state, sum-tree and Philox counter (atomic rename)."""
        from numbatraj.replay._checkpoint_gpu import save_replay_gpu

        save_replay_gpu(self, path)

    @classmethod
    def load(cls, path: Any) -> StoreReplayGpu:
        """A device replay restored from :meth:`save`; it draws what the saved one would."""
        from numbatraj.replay._checkpoint_gpu import load_replay_gpu

        return load_replay_gpu(cls, path)

    def to_host(self) -> Any:
        """A uniform :class:`StoreReplay` holding the same rows and ring state (synchronises)."""
        from numbatraj.replay.buffer import StoreReplay

        host = StoreReplay(self._cols.specs.values(), self._capacity, seed=self._seed,
                           quantize={n: (q.low, q.high) for n, q in self._cols.quant.items()},
                           demo_capacity=self._d)
        for name in self._cols.names:
            host._data[name][...] = self.storage(name)
        host._cursor, host._size, host._n_demo = self._cursor, self._size, self._n_demo
        host._n_added = self._n_added
        return host

    def dump(self, path: Any, *, env_id: str | None = None, overwrite: bool = False) -> int:
        """As :meth:`StoreReplay.dump` (through a host copy)."""
        return int(self.to_host().dump(path, env_id=env_id, overwrite=overwrite))

    @classmethod
    def from_store(cls, store: Any, capacity: int, **kwargs: Any) -> StoreReplayGpu:
        """As :meth:`StoreReplay.from_store`."""
        from numbatraj.replay._store_io import replay_from_store

        return replay_from_store(cls, store, capacity, **kwargs)  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        kind = "prioritized" if self._prioritized else "uniform"
        return (
            f"StoreReplayGpu(columns={list(self._cols.names)}, capacity={self._capacity}, "
            f"size={self._size}, n_demo={self._n_demo}, {kind})"
        )
