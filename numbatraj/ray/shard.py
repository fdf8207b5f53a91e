"""ReplayShard: one StoreReplay behind a lock and a rate limiter, shaped to be a Ray actor.

The class is plain Python (it imports no Ray), so it runs and tests in-process;
:class:`~numbatraj.ray.ShardedReplay` makes it an actor with
``ray.remote(ReplayShard).options(num_cpus=0, max_concurrency=...)``.  Ray runs a threaded
actor's methods on a pool of threads, so an ``add`` waiting for the rate limiter does not stop
the ``sample`` that will let it through: every method takes the shard's one lock (a
``threading.Condition``), and the waits release it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from numbatraj.data.column import ColumnSpec
from numbatraj.errors import SamplerError
from numbatraj.ray.rate_limiter import RateLimiter, RateLimiterState
from numbatraj.replay import StoreReplay
from numbatraj.samplers import PrioritizedSampler

__all__ = ["ReplayShard", "ShardSample"]

#: What :meth:`ReplayShard.sample` returns: ``(columns, indices, stamps, leaves, min_leaf,
#: beta)``; ``stamps``/``leaves`` are None for a uniform shard, ``leaves`` are the sampled
#: rows' ``(priority + eps) ** alpha`` and ``min_leaf`` the smallest leaf of the shard.
ShardSample = tuple[dict[str, np.ndarray], np.ndarray, Any, Any, float, float]


class ReplayShard:
    """One replay shard: a :class:`~numbatraj.replay.StoreReplay` plus a rate limiter.

    Parameters
    ----------
    columns : iterable of ColumnSpec
        The row layout (ignored when ``checkpoint`` is given: the file has it).
    capacity : int
        Rows this shard holds.
    prioritized, seed, **replay_kwargs
        Passed to :class:`StoreReplay` (``alpha``, ``beta``, ``eps``, ``quantize``...).
    rate_limiter : RateLimiter, optional
        Off when None.
    checkpoint : path-like, optional
        Restore the replay from a file written by :meth:`save` (``StoreReplay.load``); it
        samples exactly what the saved shard would.  The limiter restarts with the held rows
        counted as inserted and ``samples_per_insert * (held - min_size_to_sample)`` rows
        counted as sampled: the centre of its band.
    """

    def __init__(
        self,
        columns: Iterable[ColumnSpec] = (),
        capacity: int = 0,
        *,
        prioritized: bool = False,
        seed: int = 0,
        rate_limiter: RateLimiter | None = None,
        checkpoint: str | os.PathLike[str] | None = None,
        **replay_kwargs: Any,
    ) -> None:
        if checkpoint is not None:
            self._replay = StoreReplay.load(checkpoint)
        else:
            self._replay = StoreReplay(columns, capacity, prioritized=prioritized, seed=seed,
                                       **replay_kwargs)
        cfg = rate_limiter or RateLimiter.off()
        held = self._replay.n_rows
        spi = cfg.samples_per_insert or 0.0
        sampled = int(round(spi * max(held - cfg.min_size_to_sample, 0)))
        self._limiter = RateLimiterState(cfg, inserted=held, sampled=sampled)
        self._limiter.size = held
        self._lock = self._limiter.lock

    # ------------------------------------------------------------------ writes
    def add(self, rows: Mapping[str, Any], timeout: float | None = None) -> tuple[int, float]:
        """Insert a batch of rows (one array per column, ``(n, *shape)``), waiting for the
        rate limiter first.  Returns ``(size, weight)``: rows held and the shard's sampling
        weight (total priority when prioritized, else rows held) after the insert."""
        arrays = {k: np.asarray(v) for k, v in rows.items()}
        n = next(iter(arrays.values())).shape[0] if arrays else 0
        with self._lock:
            if n:
                self._limiter.wait_insert(n, timeout)
            self._replay.add(**arrays)
            self._limiter.inserted_rows(n, self._replay.n_rows)
            return self._replay.n_rows, self._weight()

    def update_priorities(self, rows: Any, stamps: Any, priorities: Any) -> int:
        """New priorities for physical ``rows`` sampled with ``stamps`` (stale ones skipped,
        as ``StoreReplay.update_priorities``).  Returns how many were skipped."""
        with self._lock:
            return int(self._per().update_priorities(rows, priorities, stamps))

    def set_beta(self, beta: float) -> None:
        with self._lock:
            self._replay.beta = beta

    # ------------------------------------------------------------------ reads
    def _per(self) -> PrioritizedSampler:
        sampler = self._replay.sampler
        if not isinstance(sampler, PrioritizedSampler):
            raise SamplerError("priorities need a prioritized shard (prioritized=True)")
        return sampler

    def _weight(self) -> float:
        if self._replay.n_rows == 0:
            return 0.0
        if self._replay.prioritized:
            return float(self._per().tree.total)
        return float(self._replay.n_rows)

    def weight(self) -> tuple[int, float, float]:
        """``(size, weight, budget)`` now: rows held, sampling weight (see :meth:`add`) and
        the rows the rate limiter would let a sample take without waiting (inf when off)."""
        with self._lock:
            return self._replay.n_rows, self._weight(), self._limiter.budget()

    def sample(self, batch_size: int, timeout: float | None = None) -> ShardSample:
        """Draw ``batch_size`` rows after the rate limiter lets them through."""
        b = int(batch_size)
        with self._lock:
            self._limiter.wait_sample(b, timeout)
            data, batch = self._replay.sample(b)
            self._limiter.sampled_rows(b)
            if not self._replay.prioritized:
                return data, batch.indices, None, None, 0.0, 0.0
            tree = self._per().tree
            leaves = tree.leaves[batch.indices]
            return data, batch.indices, batch.stamps, leaves, tree.min, self._replay.beta

    def rows(self, indices: Any) -> dict[str, np.ndarray]:
        """Rows at physical ``indices`` (``StoreReplay.rows``)."""
        with self._lock:
            return self._replay.rows(indices)

    def probabilities(self) -> np.ndarray:
        """Leaves ``(priority + eps) ** alpha`` of every physical row (prioritized only;
        0 for rows never added)."""
        with self._lock:
            if not self._replay.prioritized:
                raise SamplerError("probabilities need a prioritized shard (prioritized=True)")
            return np.array(self._per().tree.leaves)

    def stats(self) -> dict[str, Any]:
        """Size, capacity, rows ever added, sampling weight, and the limiter's counters
        (``inserted``, ``sampled``, ``diff`` and its extremes, seconds spent waiting)."""
        with self._lock:
            r = self._replay
            out: dict[str, Any] = {
                "size": r.n_rows,
                "capacity": r.capacity,
                "n_added": r.n_added,
                "prioritized": r.prioritized,
                "weight": self._weight(),
                "rate_limiter": self._limiter.config,
            }
            out.update(self._limiter.stats())
            return out

    # ------------------------------------------------------------------ files
    def save(self, path: str | os.PathLike[str]) -> str:
        """Checkpoint the replay to ``path`` (``StoreReplay.save``: one HDF5 file, published
        atomically).  Returns the path."""
        with self._lock:
            self._replay.save(path)
        return os.fspath(path)

    def ping(self) -> None:
        """Nothing: the bare round trip of an actor call (for benchmarks)."""
        return None
