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

import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar, TypeVar

import numpy as np

from numbatraj._checks import check_count, check_real, check_seed
from numbatraj.data.column import ColumnSpec
from numbatraj.data.index_batch import IndexBatch
from numbatraj.errors import SamplerError, SchemaError
from numbatraj.replay import _checkpoint as ck
from numbatraj.replay import _draw, _store_io
from numbatraj.replay.columns import Quantization, ReplayColumns

__all__ = ["ReplayFront"]

R = TypeVar("R", bound="ReplayFront")


class ReplayFront:
    """Configuration, ring state and the templates of both replays (see the module doc).

    ``sample_into`` contract (host and device): ``outputs`` are the caller's arrays, filled
    in place and checked before anything is drawn; the returned :class:`IndexBatch` belongs
    to the replay, one per batch size, and its arrays are overwritten by the next draw of the
    same batch size (copy them to keep them).  Nothing is allocated once a batch size has
    been seen.
    """

    _KIND: ClassVar[str] = "StoreReplay"

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
        self._alpha = check_real("alpha", alpha, 0.0, False)
        self._beta = check_real("beta", beta, 0.0, False)
        self._eps = check_real("eps", eps, 0.0, True)
        self._fraction = _draw.check_fraction(demo_fraction)
        self._ere: _draw.EreConfig | None = None
        self._cursor = 0
        self._size = 0
        self._n_demo = 0
        self._n_added = 0

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

    def _beta_changed(self) -> None:
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
        arrays, n = self._cols.check_rows(rows)
        return self._add_rows(arrays, n)

    def _add_rows(self, arrays: dict[str, Any], n: int) -> int:
        if n == 0:
            return 0
        cur = self._cursor
        self._write_ring(arrays, n, cur)
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
        arrays, n = self._cols.check_rows(rows, "add_demos")
        if n == 0:
            return 0
        free = self._d - self._n_demo
        if n > free:
            raise SchemaError(
                f"add_demos: {n} rows do not fit the demonstration prefix ({self._n_demo} of "
                f"demo_capacity {self._d} rows used, {free} free); nothing was written"
            )
        self._write_demos(arrays, n)
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

    def _write_ring(self, arrays: dict[str, Any], n: int, cursor: int) -> None:
        """Backend: ``n`` checked rows into ring slots ``cursor, cursor + 1, ...`` (the newest
        ``ring_capacity`` when more), noted in the sampler when prioritized."""
        raise NotImplementedError

    def _write_demos(self, arrays: dict[str, Any], n: int) -> None:
        """Backend: ``n`` checked rows into physical rows ``[n_demo, n_demo + n)``."""
        raise NotImplementedError

    def _ring_changed(self) -> None:
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

    def sample(self, batch_size: int, *, k: int | None = None,
               K: int | None = None) -> tuple[dict[str, Any], IndexBatch]:  # noqa: N803
        """Draw a minibatch.

        Parameters
        ----------
        batch_size : int
            Rows (>= 1), drawn with replacement.
        k, K : int, optional, keyword-only
            Update ``k`` of ``K`` in the current phase; required when ERE is on.

        Returns
        -------
        dict of str to array
            Every column in new arrays, shape ``(batch_size, *spec.shape)``, declared dtype
            (float32 for a quantised column).
        IndexBatch
            Physical rows; with ``prioritized=True`` also ``weights`` float32 ``(B,)`` and
            ``stamps`` int64 ``(B,)`` for :meth:`update_priorities`.
        """
        batch = self.sample_indices(batch_size, k=k, K=K)
        b = batch.batch_size
        out = self._new_outputs(b)
        self._gather(batch.indices, out, b)
        return out, batch

    def sample_into(self, outputs: Mapping[str, Any], batch_size: int, *, k: int | None = None,
                    K: int | None = None) -> IndexBatch:  # noqa: N803
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
        self._check_outputs(outputs, b)
        batch = self._reused_batch(b)
        self._check_drawable()
        self._draw(batch, k, K)
        self._gather(batch.indices, outputs, b)
        return batch

    def _check_drawable(self) -> None:
        if self.n_rows == 0:
            raise SamplerError(
                "cannot sample: the replay is empty (no online or demonstration rows); "
                "add() rows first"
            )

    def _check_outputs(self, outputs: Mapping[str, Any], b: int) -> None:
        if set(outputs) != set(self._cols.names):
            raise SchemaError(
                f"sample_into: outputs has columns {sorted(outputs)}, expected "
                f"{sorted(self._cols.names)}"
            )
        for name, spec in self._cols.specs.items():
            self._check_output(name, outputs[name], self._cols.sample_dtype(name),
                               (b, *spec.shape))

    def _check_output(self, name: str, out: Any, dtype: np.dtype,
                      shape: tuple[int, ...]) -> None:
        """Backend: one ``sample_into`` output (SchemaError naming ``outputs[name]``)."""
        raise NotImplementedError

    def _index_batch(self, b: int) -> IndexBatch:
        """Backend: the IndexBatch :meth:`sample_indices` fills."""
        raise NotImplementedError

    def _reused_batch(self, b: int) -> IndexBatch:
        """Backend: the replay's own IndexBatch for batch size ``b``."""
        raise NotImplementedError

    def _new_outputs(self, b: int) -> dict[str, Any]:
        """Backend: new arrays for every column of ``b`` rows."""
        raise NotImplementedError

    def _draw(self, batch: IndexBatch, k: int | None, K: int | None) -> None:  # noqa: N803
        """Backend: fill ``batch`` (a non-empty replay)."""
        raise NotImplementedError

    def _gather(self, idx: Any, outputs: Mapping[str, Any], b: int) -> None:
        """Backend: rows ``idx`` of every column into ``outputs``."""
        raise NotImplementedError

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
            "state": {**self._ring_state().to_json(), **self._stream_state()},
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

    # ------------------------------------------------------------------ files
    def save(self, path: str | os.PathLike[str]) -> None:
        """Checkpoint everything (rows, ring state, priorities, streams) to ``path``
        (HDF5, written to ``<path>.tmp`` and renamed when complete)."""
        state = {**self._ring_state().to_json(), **self._stream_state()}
        ck.write_checkpoint(path, self._config(), state, self._saved_rows(), self._tree_arrays())

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
        return rep

    def _saved_rows(self) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
        """Backend: ``(column, demo rows, ring rows)`` host arrays of the storage dtype."""
        raise NotImplementedError

    def _stream_state(self) -> dict[str, Any]:
        """Backend: the random streams and whatever else the backend keeps, as JSON."""
        raise NotImplementedError

    def _tree_arrays(self) -> ck.TreeArrays | None:
        """Backend: the sampler's per-row arrays (prioritized), else None."""
        raise NotImplementedError

    def _row_buffer(self, name: str, lo: int, n: int, shape: tuple[int, ...],
                    dtype: np.dtype) -> np.ndarray:
        """Backend: where a load reads rows ``[lo, lo + n)`` of ``name`` (``(n, *shape)``)."""
        raise NotImplementedError

    def _load_rows(self, name: str, demo: np.ndarray, ring_rows: np.ndarray,
                   ring: ck.RingState) -> None:
        """Backend: place loaded rows (a no-op where :meth:`_row_buffer` gave storage)."""
        raise NotImplementedError

    def _restore(self, state: dict[str, Any], ring: ck.RingState, tree: ck.TreeArrays | None,
                 path: str) -> None:
        """Backend: the streams and the tree (rebuilt by ``SumTree.load_leaves``), then the
        ring state."""
        raise NotImplementedError

    def dump(self, path: str | os.PathLike[str], *, env_id: str | None = None,
             overwrite: bool = False) -> int:
        """Write every held row in time order into a trajectory store, episodes cut after
        each ``done`` or ``truncated`` row.  Returns the number of episodes."""
        return _store_io.dump_replay(self._host_rows(), path, env_id=env_id,
                                     overwrite=overwrite)

    def _host_rows(self) -> _store_io.HeldRows:
        """Backend: the rows as a host replay (itself, or a host copy)."""
        raise NotImplementedError

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
