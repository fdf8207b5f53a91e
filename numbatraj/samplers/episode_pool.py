"""EpisodePoolSampler: every row once per epoch, shuffled through a pool of resident windows.

For stores read in contiguous slabs (a local file larger than memory, or a store behind HTTP
Range reads): episodes are cut into windows of at most ``window_rows`` rows; each epoch
visits the windows in a shuffled order, keeps ``pool_windows`` of them resident, and draws
minibatch rows uniformly without replacement from the rows left in the pool.  A window whose
rows are all drawn leaves the pool and the next window in the epoch's order is read (one
``read_range`` per column).  Every row of every episode is drawn exactly once per epoch.

Determinism: the window order of epoch ``e`` comes from ``(seed, e)`` and the draws from a
generator seeded with ``(seed, e, 1)``; :meth:`EpisodePoolSampler.state_dict` holds the epoch,
the position in the window order, the rows left in the pool and the generator state, so a
sampler resumed with :meth:`EpisodePoolSampler.load_state_dict` on a fresh object (after a
kill) draws exactly the batches the original would have drawn.

The source is anything with ``read_range(name, start, stop) -> ndarray`` and
``episode_lengths`` (a :class:`~numbatraj.TrajectoryStore`, a ``RemoteStore``...); this module
imports neither.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from numbatraj.errors import SamplerError

__all__ = ["EpisodePoolSampler", "RangeSource"]


class RangeSource(Protocol):
    """What :class:`EpisodePoolSampler` reads from."""

    @property
    def episode_lengths(self) -> np.ndarray: ...

    def read_range(self, name: str, start: int, stop: int) -> np.ndarray: ...


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise SamplerError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


class EpisodePoolSampler:
    """Shuffled epochs over a slab-read source through ``pool_windows`` resident windows.

    Parameters
    ----------
    source : RangeSource
        ``read_range`` and ``episode_lengths`` (and ``columns``, when ``columns`` is None).
    batch_size : int
        Rows per batch; the last batch of an epoch holds what is left (may be shorter).
    columns : sequence of str, optional
        Columns to read (default: every column of ``source.columns``).
    window_rows : int
        Longest window; an episode of ``L`` rows is ``ceil(L / window_rows)`` windows.
    pool_windows : int
        Windows resident at once: the shuffle's reach (more windows, better mixing, more
        memory: about ``pool_windows * window_rows`` rows).
    seed : int
        Seed of the window orders and the draws.
    """

    def __init__(
        self,
        source: RangeSource,
        *,
        batch_size: int,
        columns: Sequence[str] | None = None,
        window_rows: int = 4096,
        pool_windows: int = 16,
        seed: int = 0,
    ) -> None:
        self._source = source
        self._b = _check_int("batch_size", batch_size, 1)
        self._w = _check_int("window_rows", window_rows, 1)
        self._p = _check_int("pool_windows", pool_windows, 1)
        self._seed = _check_int("seed", seed, 0)
        if columns is None:
            if not hasattr(source, "columns"):
                raise SamplerError(f"{type(source).__name__} has no columns: pass columns=")
            columns = list(source.columns)
        self._names = [str(c) for c in columns]
        if not self._names:
            raise SamplerError("columns is empty: name at least one column to read")
        lengths = np.asarray(source.episode_lengths, dtype=np.int64)
        if lengths.ndim != 1 or (lengths.size and lengths.min() < 1):
            raise SamplerError(f"episode_lengths must be 1-D and >= 1, got {lengths!r}")
        offsets = np.zeros_like(lengths)
        if lengths.size > 1:
            np.cumsum(lengths[:-1], out=offsets[1:])
        starts, stops = [], []
        for o, n in zip(offsets.tolist(), lengths.tolist()):
            for s in range(o, o + n, self._w):
                starts.append(s)
                stops.append(min(s + self._w, o + n))
        self._wstart = np.asarray(starts, dtype=np.int64)  # every window, in store order
        self._wstop = np.asarray(stops, dtype=np.int64)
        self._n_rows = int(lengths.sum())
        if self._n_rows == 0:
            raise SamplerError("the source has no rows to sample")
        self._start_epoch(0)

    # ------------------------------------------------------------------ properties
    @property
    def n_rows(self) -> int:
        return self._n_rows

    @property
    def n_windows(self) -> int:
        return int(self._wstart.shape[0])

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to."""
        return self._epoch

    @property
    def rows_left(self) -> int:
        """Rows of the current epoch not yet drawn."""
        return self._left

    @property
    def batch_size(self) -> int:
        return self._b

    @property
    def columns(self) -> list[str]:
        return list(self._names)

    # ------------------------------------------------------------------ epochs
    def _order(self, epoch: int) -> np.ndarray:
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self._seed, epoch])))
        return rng.permutation(self.n_windows)

    def _start_epoch(self, epoch: int) -> None:
        self._epoch = epoch
        self._order_e = self._order(epoch)
        self._next = 0  # position in _order_e of the next window to read
        self._rng = np.random.Generator(
            np.random.PCG64(np.random.SeedSequence([self._seed, epoch, 1])))
        self._resident: dict[int, dict[str, np.ndarray]] = {}  # window -> its rows
        self._pool = np.zeros(0, dtype=np.int64)  # global rows left in resident windows
        self._left = self._n_rows
        self._fill()

    def _load(self, w: int) -> dict[str, np.ndarray]:
        a, b = int(self._wstart[w]), int(self._wstop[w])
        return {n: np.asarray(self._source.read_range(n, a, b)) for n in self._names}

    def _fill(self) -> None:
        """Read windows in epoch order until ``pool_windows`` are resident."""
        new = []
        while len(self._resident) < self._p and self._next < self.n_windows:
            w = int(self._order_e[self._next])
            self._next += 1
            self._resident[w] = self._load(w)
            new.append(np.arange(self._wstart[w], self._wstop[w], dtype=np.int64))
        if new:
            self._pool = np.concatenate([self._pool, *new])

    def next_batch(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The next batch: ``(columns, rows)``, each column ``(k, *shape)`` and ``rows`` the
        int64 store rows drawn, ``k = min(batch_size, rows_left)``.  After the last batch of
        an epoch the next call starts the following epoch."""
        if self._left == 0:
            self._start_epoch(self._epoch + 1)
        parts_rows: list[np.ndarray] = []
        parts: list[dict[str, np.ndarray]] = []
        need = min(self._b, self._left)
        while need:
            k = min(need, self._pool.shape[0])
            pos = self._rng.choice(self._pool.shape[0], size=k, replace=False)
            rows = self._pool[pos]
            self._pool = np.delete(self._pool, pos)
            parts_rows.append(rows)
            parts.append(self._gather(rows))
            need -= k
            self._left -= k
            self._evict()
            self._fill()
        rows = np.concatenate(parts_rows) if len(parts_rows) > 1 else parts_rows[0]
        if len(parts) == 1:
            return parts[0], rows
        return {n: np.concatenate([p[n] for p in parts]) for n in self._names}, rows

    def epoch_batches(self) -> Iterator[tuple[dict[str, np.ndarray], np.ndarray]]:
        """The batches left in the current epoch (all of the next one when it is over)."""
        if self._left == 0:
            self._start_epoch(self._epoch + 1)
        while self._left:
            yield self.next_batch()

    def __iter__(self) -> Iterator[tuple[dict[str, np.ndarray], np.ndarray]]:
        """Batches forever, epoch after epoch."""
        while True:
            yield self.next_batch()

    def _windows_of(self, rows: np.ndarray) -> np.ndarray:
        return np.searchsorted(self._wstart, rows, side="right") - 1

    def _gather(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        win = self._windows_of(rows)
        out: dict[str, np.ndarray] = {}
        first = self._resident[int(win[0])]
        for n in self._names:
            a = first[n]
            out[n] = np.empty((rows.shape[0], *a.shape[1:]), dtype=a.dtype)
        for w in np.unique(win).tolist():
            sel = np.flatnonzero(win == w)
            local = rows[sel] - self._wstart[w]
            data = self._resident[w]
            for n in self._names:
                out[n][sel] = data[n][local]
        return out

    def _evict(self) -> None:
        live = set(np.unique(self._windows_of(self._pool)).tolist()) if self._pool.size else set()
        for w in [w for w in self._resident if w not in live]:
            del self._resident[w]

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Where the sampler is: epoch, window position, pool rows and generator state
        (plain Python values and one int64 array; picklable, JSON-able after ``tolist``)."""
        return {
            "kind": "EpisodePoolSampler",
            "seed": self._seed,
            "n_rows": self._n_rows,
            "n_windows": self.n_windows,
            "window_rows": self._w,
            "pool_windows": self._p,
            "batch_size": self._b,
            "epoch": self._epoch,
            "next_window": self._next,
            "resident": sorted(self._resident),
            "pool": self._pool.copy(),
            "rows_left": self._left,
            "generator": self._rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume exactly where :meth:`state_dict` was taken (the resident windows are read
        again).  The sampler must have the same source layout, seed and settings."""
        if state.get("kind") != "EpisodePoolSampler":
            raise SamplerError(f"state is for {state.get('kind')!r}, expected "
                               f"'EpisodePoolSampler'")
        mine = {"seed": self._seed, "n_rows": self._n_rows, "n_windows": self.n_windows,
                "window_rows": self._w, "pool_windows": self._p, "batch_size": self._b}
        bad = {k: (state.get(k), v) for k, v in mine.items() if state.get(k) != v}
        if bad:
            detail = ", ".join(f"{k}: state {a!r}, sampler {b!r}" for k, (a, b) in bad.items())
            raise SamplerError(f"state does not match this sampler ({detail})")
        self._epoch = int(state["epoch"])
        self._order_e = self._order(self._epoch)
        self._next = int(state["next_window"])
        self._resident = {int(w): self._load(int(w)) for w in state["resident"]}
        self._pool = np.asarray(state["pool"], dtype=np.int64).copy()
        self._left = int(state["rows_left"])
        self._rng = np.random.Generator(np.random.PCG64())
        self._rng.bit_generator.state = state["generator"]

    def __repr__(self) -> str:
        return (f"EpisodePoolSampler(rows={self._n_rows}, windows={self.n_windows}, "
                f"window_rows={self._w}, pool_windows={self._p}, batch_size={self._b}, "
                f"epoch={self._epoch}, rows_left={self._left})")
