"""SumTree: prefix-sum search and minimum over non-negative leaves, in flat float64 arrays."""

from __future__ import annotations

from typing import Any

import numpy as np

from numbatraj._checks import check_count
from numbatraj.errors import RowIndexError, SamplerError
from numbatraj.samplers import _sumtree_kernels as K

__all__ = ["SumTree", "check_rows", "check_values"]


def _cache_aligned(n: int, value: float) -> np.ndarray:
    """A float64 ``(n,)`` array filled with ``value`` whose first element starts a 64-byte
    cache line, so that node ``8m`` does too: each group of eight leaves the descent ends in
    is one line, not two (numpy's own buffers start 16 bytes into a line).  Measured at
    2**24 leaves: sample + update(4096) about 7% faster; values and layout are unchanged."""
    buf = np.empty(n + 8, dtype=np.float64)
    off = (-buf.ctypes.data % 64) // 8
    a = buf[off : off + n]
    a.fill(value)
    return a


def check_rows(name: str, rows: Any, n: int) -> np.ndarray:
    """``rows`` as a contiguous int64 1-D array with every entry in ``[0, n)``."""
    a = np.asarray(rows)
    if a.ndim != 1:
        raise SamplerError(f"{name} must be 1-D, got shape {a.shape}")
    if a.size and a.dtype.kind not in "iu":
        raise SamplerError(f"{name} must be integers, got dtype {a.dtype}")
    a = np.ascontiguousarray(a, dtype=np.int64)
    j = int(K._first_out_of_range_cpu(a, n))
    if j >= 0:
        count = int(np.count_nonzero((a < 0) | (a >= n)))
        raise RowIndexError(
            f"{name}[{j}] = {a[j]} is outside [0, {n}) ({count} out-of-range entries)"
        )
    return a


def check_values(name: str, values: Any, n: int) -> np.ndarray:
    """``values`` as a contiguous float64 1-D array of length ``n``, finite and >= 0."""
    v = np.asarray(values)
    if v.ndim != 1 or v.shape[0] != n:
        raise SamplerError(f"{name} must have shape ({n},), got {v.shape}")
    if v.size and v.dtype.kind not in "iuf":
        raise SamplerError(f"{name} must be real numbers, got dtype {v.dtype}")
    v = np.ascontiguousarray(v, dtype=np.float64)
    j = int(K._first_bad_value_cpu(v))
    if j >= 0:
        count = int(np.count_nonzero(~np.isfinite(v) | (v < 0)))
        raise SamplerError(
            f"{name}[{j}] = {float(v[j])!r}: expected a finite number >= 0 "
            f"({count} bad entries; NaN, infinite and negative values are refused)"
        )
    return v


class SumTree:
    """A sum-tree and a min-tree over ``capacity`` non-negative leaves.

    Parameters
    ----------
    capacity : int
        Number of leaves (>= 1).  Storage is two float64 arrays of ``2P`` (sums and minima),
        ``P`` the next power of two.

    Notes
    -----
    Internal nodes are recomputed from their children on every update, so they depend only
    on the leaves: no drift accumulates over long runs and :meth:`rebuild` reproduces the
    same bits.  Leaves never set count as absent: 0 in the sum, +inf in the min.
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = check_count("capacity", capacity)
        p = 1
        while p < self._capacity:
            p *= 2
        self._p = p
        #: float64 ``(2P,)``: subtree sums, root at 1, leaf ``i`` at ``P + i``.
        self.sums = _cache_aligned(2 * p, 0.0)
        #: float64 ``(2P,)``: subtree minima (+inf where no leaf was set).
        self.mins = _cache_aligned(2 * p, np.inf)

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def n_leaves_padded(self) -> int:
        """``P``: the power of two the tree is laid out for."""
        return self._p

    @property
    def total(self) -> float:
        """Sum of all leaves (the root)."""
        return float(self.sums[1])

    @property
    def min(self) -> float:
        """Smallest leaf that was set (+inf when none was)."""
        return float(self.mins[1])

    @property
    def leaves(self) -> np.ndarray:
        """Read-only float64 view of the ``capacity`` leaves."""
        v = self.sums[self._p : self._p + self._capacity]
        v.flags.writeable = False
        return v

    def update(self, leaves: Any, values: Any) -> None:
        """Set ``leaves[j]`` to ``values[j]`` in order; a repeated leaf takes its last value.

        Parameters
        ----------
        leaves : int array (K,)
            Leaf numbers in ``[0, capacity)``.
        values : float array (K,)
            Finite values >= 0.
        """
        rows = check_rows("leaves", leaves, self._capacity)
        vals = check_values("values", values, rows.shape[0])
        K._sumtree_update_cpu(
            self.sums, self.mins, self._p, rows, vals, np.empty(rows.shape[0], np.int64)
        )

    def find(self, masses: Any) -> np.ndarray:
        """Leaf holding each prefix mass: ``searchsorted(cumsum(leaves), masses, side="right")``.

        Parameters
        ----------
        masses : float array (B,)
            Prefix masses in ``[0, total)``.

        Returns
        -------
        int64 array (B,)
            Leaf numbers.  Masses at or past ``total`` (rounding) map to the last leaf with
            positive mass.
        """
        m = np.array(masses, dtype=np.float64, copy=True).reshape(-1)
        if self.total <= 0.0:
            raise SamplerError("cannot search an empty sum-tree (total mass is 0)")
        bad = np.flatnonzero(~np.isfinite(m) | (m < 0))
        if bad.size:
            j = int(bad[0])
            raise SamplerError(f"masses[{j}] = {float(m[j])!r}: expected a finite mass >= 0")
        out = np.empty(m.shape[0], dtype=np.int64)
        K._sumtree_find_cpu(self.sums, self._p, m, out, np.empty(m.shape[0], np.float64))
        return out

    def rebuild(self) -> None:
        """Recompute every internal node from the leaves."""
        K._sumtree_build_cpu(self.sums, self.mins, self._p)

    def load_leaves(self, sums: np.ndarray, mins: np.ndarray) -> None:
        """Replace the leaves (sum and min values, length ``capacity``) and rebuild."""
        p, c = self._p, self._capacity
        self.sums[:] = 0.0
        self.mins[:] = np.inf
        self.sums[p : p + c] = sums
        self.mins[p : p + c] = mins
        self.rebuild()

    def __repr__(self) -> str:
        return f"SumTree(capacity={self._capacity}, total={self.total:g}, min={self.min:g})"
