"""ShardedReplay: replay shards as Ray actors, and the picklable client every process holds.

A sample is two rounds of calls, each to all shards at once: the shards' sampling weights
(rows held, or total priority), then ``b_k`` rows from shard ``k`` with ``(b_k)`` drawn
multinomially from those weights.  Prioritized rows then have ``P(i) = leaf_i / sum of all
leaves`` over the union of the shards, exactly as in one buffer holding every row, and the
IS weights are computed here over the union: ``w_i = (N P(i)) ** -beta / max_j w_j =
(leaf_i / min_j leaf_j) ** -beta``, the smallest leaf taken over every shard.

With a rate limiter on, the rows go to the shards whose limiter admits them now, in
proportion to their weights among those and never more than a shard admits (the excess is
drawn again over the others); rows no shard admits are drawn in further rounds, every
``_POLL_S`` seconds, as inserts let them through (the sample blocks; a timeout raises
:class:`RateLimitTimeoutError`).  A shard whose writer lags is passed over rather than
stalling the learner, and every shard's samples-per-insert stays in its band.  While a
limiter holds some shards back, ``P(i)`` is over the others.  Without a limiter every budget
is infinite and the draw is one exactly proportional round.

Row ``r`` of shard ``k`` is the global index ``k * capacity + r`` in the returned
:class:`~numbatraj.data.IndexBatch`; rows come grouped by shard, in shard order.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import ray

from numbatraj.data.column import ColumnSpec
from numbatraj.data.index_batch import IndexBatch
from numbatraj.errors import NumbatrajError, RateLimitTimeoutError, SamplerError, SchemaError
from numbatraj.io.atomic import write_bytes
from numbatraj.ray.rate_limiter import RateLimiter
from numbatraj.ray.shard import ReplayShard, ShardSample

__all__ = ["ShardedReplay"]

_POLL_S = 0.002  # while no shard's limiter admits the rows left, re-read budgets this often


def _get(refs: Any, timeout: float | None = None) -> Any:
    """``ray.get`` that re-raises a numbatraj error from an actor as itself."""
    try:
        return ray.get(refs, timeout=timeout)
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, NumbatrajError):
            raise cause from None
        raise


def _shard_seed(seed: int, k: int) -> int:
    return int(np.random.SeedSequence([seed, k]).generate_state(1, np.uint64)[0])


def _combine(parts: Sequence[tuple[int, ShardSample]], capacity: int,
             prioritized: bool) -> tuple[dict[str, np.ndarray], IndexBatch]:
    """One minibatch from the shards' samples (``(shard, sample)`` pairs, shard order)."""
    names = list(parts[0][1][0])
    data = {n: np.concatenate([p[0][n] for _, p in parts]) for n in names}
    idx = np.concatenate([k * capacity + p[1] for k, p in parts]).astype(np.int64)
    if not prioritized:
        return data, IndexBatch(idx)
    leaves = np.concatenate([p[3] for _, p in parts])
    gmin = min(p[4] for _, p in parts)
    beta = parts[0][1][5]
    w = np.divide(leaves, gmin)  # the single-buffer arithmetic, with the union's minimum
    np.power(w, -beta, out=w)
    stamps = np.concatenate([p[2] for _, p in parts]).astype(np.int64)
    return data, IndexBatch(idx, weights=w.astype(np.float32), stamps=stamps)


def _allocate(b: int, weight: np.ndarray, budget: np.ndarray,
              rng: np.random.Generator) -> np.ndarray:
    """Rows per shard: multinomial in ``weight`` over the shards with budget left, each
    capped at its ``budget`` (rows its limiter admits now), the excess drawn again over the
    others.  The counts may sum to less than ``b`` (no budget left anywhere)."""
    counts = np.zeros(weight.shape[0], dtype=np.int64)
    left = b
    active = (weight > 0) & (budget >= 1)
    while left > 0 and active.any():
        p = weight * active
        c = np.minimum(rng.multinomial(left, p / p.sum()), budget - counts).astype(np.int64)
        counts += c
        left -= int(c.sum())
        active &= budget - counts >= 1
    return counts


def _draw(shards: Sequence[Any], batch_size: int, rng: np.random.Generator, capacity: int,
          prioritized: bool, limited: bool,
          timeout: float | None) -> tuple[dict[str, np.ndarray], IndexBatch]:
    """Rounds of (weights and budgets, then per-shard samples) until ``batch_size`` rows
    are drawn; then one batch (see the module docstring)."""
    t0 = time.monotonic()
    parts: list[tuple[int, ShardSample]] = []
    left = batch_size
    while True:
        sw = _get([s.weight.remote() for s in shards])
        w = np.array([x[1] for x in sw], dtype=np.float64)
        if w.sum() == 0 and not limited:
            raise SamplerError("cannot sample: every shard is empty; add() rows first")
        counts = _allocate(left, w, np.array([x[2] for x in sw], dtype=np.float64), rng)
        if counts.sum():
            wait = None if timeout is None else max(0.0, timeout - (time.monotonic() - t0))
            refs = [(k, shards[k].sample.remote(int(c), wait))
                    for k, c in enumerate(counts) if c]
            got = _get([r for _, r in refs])
            parts.extend((k, g) for (k, _), g in zip(refs, got))
            left -= int(counts.sum())
        if left == 0:
            break
        if timeout is not None and time.monotonic() - t0 > timeout:
            raise RateLimitTimeoutError(
                f"a sample of {batch_size} rows waited {timeout:g} s for the shards' rate "
                f"limiters and got {batch_size - left} rows (rows held per shard "
                f"{[x[0] for x in sw]}, rows each admits {[x[2] for x in sw]})"
            )
        time.sleep(_POLL_S)
    parts.sort(key=lambda kp: kp[0])
    return _combine(parts, capacity, prioritized)


_draw_task: Any = None


def _draw_remote(*args: Any) -> Any:
    global _draw_task
    if _draw_task is None:
        _draw_task = ray.remote(num_cpus=0)(_draw)
    return _draw_task.remote(*args)


class ShardedReplay:
    """``n_shards`` replay shards as Ray actors, sampled as one buffer.

    Parameters
    ----------
    n_shards : int
        Shard actors to start (each reserves no CPU: ``num_cpus=0``).
    columns : iterable of ColumnSpec
        The row layout of every shard.
    capacity : int
        Rows per shard.
    prioritized : bool
        Proportional prioritized sampling across shards (IS weights over the union).
    seed : int
        Shard ``k`` is seeded from ``(seed, k)``; this client's shard choices from ``seed``.
    rate_limiter : RateLimiter, optional
        One limiter per shard with these settings; off when None.
    max_concurrency : int
        Threads of each shard actor (blocked writers and samplers each hold one).
    **replay_kwargs
        ``alpha``, ``beta``, ``eps``, ``quantize``... for every shard's ``StoreReplay``.

    Notes
    -----
    The object is picklable: pass it to writer actors, which then add to the same shards.
    Ray must be initialised (``ray.init``) before one is made.  ``writer`` and ``timeout``
    are keywords of :meth:`add`, so they cannot be column names there (use
    :meth:`add_batch`).
    """

    def __init__(
        self,
        n_shards: int,
        columns: Iterable[ColumnSpec],
        capacity: int,
        *,
        prioritized: bool = False,
        seed: int = 0,
        rate_limiter: RateLimiter | None = None,
        max_concurrency: int = 16,
        **replay_kwargs: Any,
    ) -> None:
        if isinstance(n_shards, bool) or not isinstance(n_shards, int) or n_shards < 1:
            raise SchemaError(f"n_shards must be an int >= 1, got {n_shards!r}")
        cols = list(columns)
        limiter = rate_limiter or RateLimiter.off()
        cls = ray.remote(ReplayShard).options(num_cpus=0, max_concurrency=max_concurrency)
        shards = [
            cls.remote(cols, capacity, prioritized=prioritized, seed=_shard_seed(seed, k),
                       rate_limiter=limiter, **replay_kwargs)
            for k in range(n_shards)
        ]
        self._setup(shards, int(capacity), bool(prioritized), int(seed), limiter)
        self._config = {"columns": cols, "replay_kwargs": dict(replay_kwargs),
                        "max_concurrency": max_concurrency}
        _get([s.ping.remote() for s in shards])  # type: ignore[attr-defined]  # ctor errors

    def _setup(self, shards: list[Any], capacity: int, prioritized: bool, seed: int,
               limiter: RateLimiter) -> None:
        self._shards = shards
        self._capacity = capacity
        self._prioritized = prioritized
        self._seed = seed
        self._limiter = limiter
        self._rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, 1 << 20])))
        self._next = 0

    # ------------------------------------------------------------------ properties
    @property
    def n_shards(self) -> int:
        return len(self._shards)

    @property
    def shards(self) -> list[Any]:
        """The shard actor handles (``ReplayShard`` actors)."""
        return list(self._shards)

    @property
    def capacity(self) -> int:
        """Rows per shard."""
        return self._capacity

    @property
    def prioritized(self) -> bool:
        return self._prioritized

    @property
    def rate_limiter(self) -> RateLimiter:
        return self._limiter

    @property
    def size(self) -> int:
        """Rows held by all shards together (one call to each shard)."""
        return int(sum(x[0] for x in _get([s.weight.remote() for s in self._shards])))

    def stats(self) -> list[dict[str, Any]]:
        """Every shard's :meth:`ReplayShard.stats`, in shard order."""
        return list(_get([s.stats.remote() for s in self._shards]))

    # ------------------------------------------------------------------ writes
    def _shard_for(self, writer: int | None) -> Any:
        if writer is None:
            k = self._next
            self._next = (k + 1) % len(self._shards)
        else:
            if isinstance(writer, bool) or not isinstance(writer, (int, np.integer)):
                raise SchemaError(f"writer must be an int, got {writer!r}")
            k = int(writer) % len(self._shards)
        return self._shards[k]

    def add_batch(self, columns: Mapping[str, Any], *, writer: int | None = None,
                  timeout: float | None = None) -> Any:
        """Send a batch of rows to one shard without waiting; returns the ObjectRef of its
        ``(size, weight)`` (``ray.get`` it to wait, and to see a rate-limit timeout)."""
        arrays = {k: np.asarray(v) for k, v in columns.items()}
        return self._shard_for(writer).add.remote(arrays, timeout)

    def add(self, *, writer: int | None = None, timeout: float | None = None,
            **columns: Any) -> int:
        """Add a batch of rows (one ``(n, *shape)`` array per column) to shard
        ``writer % n_shards`` (default: round robin), waiting while its rate limiter holds
        writers back; :class:`RateLimitTimeoutError` after ``timeout`` seconds.  Returns
        ``n``."""
        n = next(iter(columns.values())).shape[0] if columns else 0
        _get(self.add_batch(columns, writer=writer, timeout=timeout))
        return int(n)

    def update_priorities(self, batch: IndexBatch, priorities: Any) -> int:
        """Feed new priorities back for a batch from :meth:`sample`; rows overwritten since
        (stale stamps) are skipped.  Returns how many were skipped."""
        if not self._prioritized:
            raise SamplerError("update_priorities needs a prioritized replay (prioritized=True)")
        if not isinstance(batch, IndexBatch) or batch.stamps is None:
            raise SamplerError("update_priorities needs the IndexBatch sample() returned "
                               "(with stamps)")
        p = np.asarray(priorities, dtype=np.float64)
        if p.shape != (batch.batch_size,):
            raise SamplerError(f"priorities has shape {p.shape}, expected "
                               f"({batch.batch_size},)")
        shard = batch.indices // self._capacity
        rows = batch.indices % self._capacity
        refs = []
        for k in np.unique(shard):
            m = shard == k
            refs.append(self._shards[int(k)].update_priorities.remote(
                rows[m], batch.stamps[m], p[m]))
        return int(sum(_get(refs)))

    def set_beta(self, beta: float) -> None:
        """Set the IS-weight exponent of every shard (prioritized)."""
        _get([s.set_beta.remote(beta) for s in self._shards])

    # ------------------------------------------------------------------ sampling
    def sample(self, batch_size: int,
               timeout: float | None = None) -> tuple[dict[str, np.ndarray], IndexBatch]:
        """Draw ``batch_size`` rows from all shards in proportion to their weights (rows
        held, or total priority), waiting for the shards' rate limiters.

        Returns
        -------
        dict of str to ndarray
            Every column, ``(batch_size, *shape)``.
        IndexBatch
            Global indices ``shard * capacity + row``; prioritized: IS weights over the
            union of shards and stamps for :meth:`update_priorities`.
        """
        b = self._check_batch(batch_size)
        return _draw(self._shards, b, self._sub_rng(), self._capacity, self._prioritized,
                     self._limiter.enabled, timeout)

    def sample_async(self, batch_size: int, timeout: float | None = None) -> Any:
        """:meth:`sample` run by a Ray task (no CPU reserved): returns its ObjectRef at once,
        so the next batch is drawn while the learner trains on this one.  The same draws as
        :meth:`sample` would make at this point of the stream."""
        b = self._check_batch(batch_size)
        return _draw_remote(self._shards, b, self._sub_rng(), self._capacity,
                            self._prioritized, self._limiter.enabled, timeout)

    def _check_batch(self, batch_size: int) -> int:
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size < 1:
            raise SamplerError(f"batch_size must be an int >= 1, got {batch_size!r}")
        return int(batch_size)

    def _sub_rng(self) -> np.random.Generator:
        return np.random.Generator(np.random.PCG64(int(self._rng.integers(0, 2**63))))

    # ------------------------------------------------------------------ files
    def save(self, directory: str | os.PathLike[str]) -> list[str]:
        """Checkpoint every shard to ``directory/shard-<k>.h5`` (in parallel) and the
        layout to ``directory/sharded.json``.  Returns the shard paths."""
        d = os.fspath(directory)
        os.makedirs(d, exist_ok=True)
        paths = [os.path.join(d, f"shard-{k:03d}.h5") for k in range(len(self._shards))]
        _get([s.save.remote(p) for s, p in zip(self._shards, paths)])
        lim = self._limiter
        meta = {"n_shards": len(self._shards), "capacity": self._capacity,
                "prioritized": self._prioritized, "seed": self._seed,
                "rate_limiter": [lim.min_size_to_sample, lim.samples_per_insert,
                                 lim.error_buffer]}
        write_bytes(os.path.join(d, "sharded.json"), json.dumps(meta).encode())
        return paths

    @classmethod
    def load(cls, directory: str | os.PathLike[str], *, max_concurrency: int = 16,
             rate_limiter: RateLimiter | None = None) -> ShardedReplay:
        """Shards restored from :meth:`save` as new actors (each samples what the saved one
        would); the rate limiter is the saved one unless given."""
        d = os.fspath(directory)
        try:
            with open(os.path.join(d, "sharded.json"), encoding="utf-8") as f:
                meta = json.load(f)
        except FileNotFoundError:
            raise FileNotFoundError(f"{d!r} holds no sharded.json: not a ShardedReplay "
                                    f"checkpoint (ShardedReplay.save writes one)") from None
        limiter = rate_limiter or RateLimiter(int(meta["rate_limiter"][0]),
                                              meta["rate_limiter"][1],
                                              float(meta["rate_limiter"][2]))
        actor = ray.remote(ReplayShard).options(num_cpus=0, max_concurrency=max_concurrency)
        shards = [actor.remote(rate_limiter=limiter,
                               checkpoint=os.path.join(d, f"shard-{k:03d}.h5"))
                  for k in range(int(meta["n_shards"]))]
        self = cls.__new__(cls)
        self._setup(shards, int(meta["capacity"]), bool(meta["prioritized"]),
                    int(meta["seed"]), limiter)
        self._config = {"max_concurrency": max_concurrency}
        _get([s.ping.remote() for s in shards])  # type: ignore[attr-defined]
        return self

    def shutdown(self) -> None:
        """Kill the shard actors (their rows are gone; :meth:`save` first to keep them)."""
        for s in self._shards:
            ray.kill(s)

    def __repr__(self) -> str:
        kind = "prioritized" if self._prioritized else "uniform"
        return (f"ShardedReplay(n_shards={len(self._shards)}, capacity={self._capacity}, "
                f"{kind}, rate_limiter={self._limiter})")
