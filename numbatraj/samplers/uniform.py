"""UniformSampler: uniform rows on the host, over a fixed or growing population."""

from __future__ import annotations

from typing import Any

import numpy as np

from numbatraj._checks import (
    check_count,
    check_seed,
    generator_state,
    new_generator,
    set_generator_state,
)
from numbatraj.data.index_batch import IndexBatch
from numbatraj.errors import SamplerError
from numbatraj.samplers import _philox
from numbatraj.samplers._pcg64 import RawWords

__all__ = ["UniformSampler", "uniform_rows"]


def uniform_rows(gen: np.random.Generator, lo: int, n: int, batch_size: int) -> np.ndarray:
    """``batch_size`` uniform rows in ``[lo, lo + n)`` from ``gen``'s raw 64-bit output.

    Each row is ``lo + floor(w * n / 2**64)`` for one raw word ``w`` (bias below
    ``n / 2**64``).  Returns int64, shape ``(batch_size,)``.  The output is a separate array,
    not the raw words reinterpreted in place: aliasing stops the loop from vectorising.
    """
    raw = gen.bit_generator.random_raw(batch_size)
    out = np.empty(batch_size, dtype=np.int64)
    _philox._bounded_rows_cpu(raw, np.int64(lo), np.int64(n), out)
    return out


def _check_out(out: Any) -> int:
    """``out`` must be a writeable C-contiguous int64 ``(B,)`` array, ``B >= 1``; returns B."""
    if type(out) is not np.ndarray or out.dtype != _I64 or out.ndim != 1:
        ok = False
    else:
        f = out.flags
        ok = f.c_contiguous and f.writeable
    if not ok:
        got = f"{out.dtype} {out.shape}" if isinstance(out, np.ndarray) else type(out).__name__
        raise SamplerError(f"out must be a writeable C-contiguous int64 (B,) array, got {got}")
    b: int = out.shape[0]
    return b if b >= 1 else check_count("batch_size", b)


_I64 = np.dtype(np.int64)


class UniformSampler:
    """Uniform rows in ``[0, n_rows)``, drawn on the host.

    Parameters
    ----------
    n_rows : int
        Population size (>= 0).  A buffer that grows sets :attr:`n_rows` as it fills (the
        sampler owns its population: draws read it, they are not handed one).
    seed : int
        Seed of the sampler's own PCG64 generator; numpy's global state is never used.

    Notes
    -----
    :meth:`sample_range_into` draws from a sub-range of the population (a replay's
    demonstration prefix or its recent window) from the same stream.

    Examples
    --------
    >>> s = UniformSampler(1000, seed=0)
    >>> s.sample(4).indices.shape
    (4,)
    """

    def __init__(self, n_rows: int, seed: int = 0) -> None:
        self._n = check_count("n_rows", n_rows, minimum=0)
        self._seed = check_seed(seed)
        self._gen = new_generator(self._seed)
        self._words = RawWords(self._gen)

    @property
    def n_rows(self) -> int:
        """Current population size."""
        return self._n

    @n_rows.setter
    def n_rows(self, value: int) -> None:
        self._n = check_count("n_rows", value, minimum=0)

    @property
    def seed(self) -> int:
        return self._seed

    def sample(self, batch_size: int, n_rows: int | None = None) -> IndexBatch:
        """Draw ``batch_size`` rows (with replacement).

        Parameters
        ----------
        batch_size : int
            Number of rows (>= 1).
        n_rows : int, optional
            Population size for this draw (and from now on); defaults to :attr:`n_rows`.

        Returns
        -------
        IndexBatch
            ``indices`` int64, shape ``(batch_size,)``, each in ``[0, n_rows)``.
        """
        b = check_count("batch_size", batch_size)
        if n_rows is not None:
            self.n_rows = n_rows
        if self._n == 0:
            raise SamplerError("cannot sample: the population is empty (n_rows = 0)")
        out = np.empty(b, dtype=np.int64)
        self._fill(out, b, 0, self._n)  # the rows of uniform_rows(gen, 0, n, b), one kernel
        return IndexBatch(out)

    def sample_into(self, out: np.ndarray, n_rows: int | None = None) -> np.ndarray:
        """:meth:`sample` into a caller-owned array, allocating nothing once a batch size has
        been seen: the same rows, and the stream advances the same.

        Parameters
        ----------
        out : int64 array (B,)
            C-contiguous and writeable, ``B >= 1``.
        n_rows : int, optional
            As in :meth:`sample`.

        Returns
        -------
        ndarray
            ``out``.
        """
        b = _check_out(out)
        if n_rows is not None:
            self.n_rows = n_rows
        if self._n == 0:
            raise SamplerError("cannot sample: the population is empty (n_rows = 0)")
        self._fill(out, b, 0, self._n)
        return out

    def sample_range_into(self, out: np.ndarray, lo: int, n: int) -> np.ndarray:
        """Uniform rows in ``[lo, lo + n)``, a part of the population, into ``out``: the
        restricted draw of a replay (its demonstration prefix, its recent window), from the
        same stream and with the same mapping as :meth:`sample_into`, allocating nothing once
        a batch size has been seen.

        Parameters
        ----------
        out : int64 array (B,)
            C-contiguous and writeable, ``B >= 1``.
        lo, n : int
            The range, ``0 <= lo`` and ``1 <= n`` with ``lo + n <= n_rows``.

        Returns
        -------
        ndarray
            ``out``.
        """
        b = _check_out(out)
        if type(lo) is not int or lo < 0:
            lo = check_count("lo", lo, minimum=0)
        if type(n) is not int or n < 1:
            n = check_count("n", n)
        if lo + n > self._n:
            raise SamplerError(
                f"range [{lo}, {lo + n}) is outside the population [0, {self._n})"
            )
        self._fill(out, b, lo, n)
        return out

    def _fill(self, out: np.ndarray, b: int, lo: int, n: int) -> None:
        """Rows ``[lo, lo + n)`` into ``out`` (``b`` entries): one kernel that draws the
        words and maps them (``_pcg64.pcg64_rows_cpu``), no words' buffer."""
        self._words.rows(out, lo, n)

    def _fill_ring(self, out: np.ndarray, n: int, split: int, shift: int, top: int,
                   cap: int) -> None:
        """Rows ``[0, n)`` into ``out``, each row from ``split`` up moved by ``shift`` and
        wrapped back by ``cap`` at ``top`` (a replay's logical rows to its physical ones,
        ``_ring_kernels.physical_row``), in the same kernel pass as the draw.  The stream
        advances as by :meth:`sample_into`; no checks (the replay's own arrays)."""
        self._words.rows(out, 0, n, split, shift, top, cap)

    def state_dict(self) -> dict[str, Any]:
        """Population size, seed and generator state: enough to resume the stream exactly."""
        return {
            "kind": "UniformSampler",
            "n_rows": self._n,
            "seed": self._seed,
            "generator": generator_state(self._gen),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`."""
        if state.get("kind") != "UniformSampler":
            raise SamplerError(f"state is for {state.get('kind')!r}, expected 'UniformSampler'")
        self._n = check_count("n_rows", state["n_rows"], minimum=0)
        self._seed = check_seed(state["seed"])
        set_generator_state(self._gen, state["generator"])

    def __repr__(self) -> str:
        return f"UniformSampler(n_rows={self._n}, seed={self._seed})"
