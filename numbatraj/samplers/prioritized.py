"""PrioritizedSampler: proportional prioritized sampling (Schaul et al., 2016) on a sum-tree.

Rows are drawn with probability ``P(i) = p_i**alpha / sum_j p_j**alpha`` by stratified
sampling (one uniform per equal-mass segment), with importance-sampling weights
``w_i = (N P(i))**-beta / max_j w_j``; the maximum comes from the min-tree, as in the paper.

Every sampled row carries a generation stamp.  A row's generation goes up each time it is
(re)written (:meth:`PrioritizedSampler.note_added`), so a priority update computed for the
old content of a row that has since been overwritten is recognised and skipped.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from numbatraj import _jit
from numbatraj._checks import (
    as_host_values,
    check_count,
    check_real,
    check_seed,
    generator_state,
    new_generator,
    set_generator_state,
)
from numbatraj.data.index_batch import IndexBatch
from numbatraj.errors import RowIndexError, SamplerError
from numbatraj.samplers import _blocked_kernels as B
from numbatraj.samplers import _gen_runs as R
from numbatraj.samplers import _sumtree_kernels as K
from numbatraj.samplers.sumtree import SumTree, check_rows, check_values

__all__ = ["PrioritizedSampler", "PrioritizedTree"]


_I64 = np.dtype(np.int64)
_F32 = np.dtype(np.float32)

#: The thread policy's kind of a draw (``numbatraj._jit.parallel_threads``).  A draw's size
#: for the policy is the cache lines its descent reads, ``64 * B * (bands + 1)`` bytes.  Each
#: tree depth is calibrated apart (``_jit.auto_variant``): the threads win on a tree past
#: the caches and not on one inside them, at the same bytes.
DRAW_KIND = "prioritized draw"


def _check_outputs(indices: Any, weights: Any, stamps: Any) -> int:
    """The three output arrays of a draw: C-contiguous, writeable, one length ``B >= 1``."""
    b = indices.shape[0] if isinstance(indices, np.ndarray) else -1
    for name, a, dt in (("indices", indices, _I64), ("weights", weights, _F32),
                        ("stamps", stamps, _I64)):
        if type(a) is not np.ndarray or a.dtype != dt or a.shape != (b,):
            ok = False
        else:
            f = a.flags
            ok = f.c_contiguous and f.writeable
        if not ok:
            got = f"{a.dtype} {a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
            raise SamplerError(
                f"{name} must be a writeable C-contiguous {dt.name} array of "
                f"shape (B,) like indices, got {got}"
            )
    if b < 1:
        check_count("batch_size", b)
    return b


class PrioritizedTree:
    """A read-only look at a :class:`PrioritizedSampler`'s sum/min tree.

    The sampler keeps its tree with one cache line per three levels
    (``_blocked_kernels``): only every third level is stored, the two between recomputed
    from it, so a descent or an update at ``2**24`` rows reads eight lines instead of about
    twenty.  The node values are those of a :class:`SumTree` over the same leaves, bit for
    bit.  :attr:`total`, :attr:`min` and :attr:`leaves` read the live tree;
    :attr:`sums` and :attr:`mins` build the level-by-level arrays (``(2P,)``, node ``n`` at
    ``n``) afresh on every access, and :meth:`snapshot` a whole :class:`SumTree`: copies,
    ``O(P)``, whose writes do not reach the sampler.
    """

    def __init__(self, sampler: PrioritizedSampler) -> None:
        self._s = sampler

    @property
    def capacity(self) -> int:
        return self._s._capacity

    @property
    def n_leaves_padded(self) -> int:
        """``P``: the power of two the tree is laid out for."""
        return self._s._p

    @property
    def total(self) -> float:
        """Sum of all leaves (the root)."""
        return float(self._s._sums[1])

    @property
    def min(self) -> float:
        """Smallest leaf that was set (+inf when none was)."""
        return float(self._s._mins[1])

    @property
    def leaves(self) -> np.ndarray:
        """Read-only float64 view of the ``capacity`` leaves (live: it follows updates)."""
        return self._s._leaf_view

    def _binary(self, is_min: bool) -> np.ndarray:
        s = self._s
        out = np.zeros(2 * s._p) if not is_min else np.full(2 * s._p, np.inf)
        B.to_binary(s._sums, s._mins, s._p, s._r0, s._nb, s._present_p, is_min, out)
        return out

    @property
    def sums(self) -> np.ndarray:
        """The subtree sums as :attr:`SumTree.sums` lays them out (a new array)."""
        return self._binary(False)

    @property
    def mins(self) -> np.ndarray:
        """The subtree minima as :attr:`SumTree.mins` lays them out (a new array)."""
        return self._binary(True)

    def snapshot(self) -> SumTree:
        """A :class:`SumTree` holding the same nodes (a copy)."""
        t = SumTree(self._s._capacity)
        t.sums[:] = self.sums
        t.mins[:] = self.mins
        return t

    def __repr__(self) -> str:
        return (f"PrioritizedTree(capacity={self.capacity}, total={self.total:g}, "
                f"min={self.min:g})")


class PrioritizedSampler:
    """Rows drawn in proportion to ``priority**alpha``, with IS weights and stale-update guard.

    Parameters
    ----------
    capacity : int
        Number of rows (>= 1).
    alpha : float
        Prioritization exponent in ``[0, inf)``; 0 is uniform.
    beta : float
        IS-weight exponent in ``[0, inf)``; settable (:attr:`beta`) for annealing to 1.
    eps : float
        Added to every priority before the exponent (> 0), so no row's probability is 0.
    seed : int
        Seed of the sampler's own generators: ``PCG64(seed)`` for draws over every row, and
        ``PCG64([seed, 1])`` for the restricted draws of :meth:`sample_ranges_into`, so the
        whole-population sequence does not depend on restricted draws made in between.

    Notes
    -----
    A row enters with :meth:`note_added` (at the largest ``priority + eps`` seen so far,
    initially 1) and leaves the population never; a row written again is noted again, which
    bumps its generation.
    """

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
        seed: int = 0,
    ) -> None:
        self._capacity = check_count("capacity", capacity)
        p = 1
        while p < self._capacity:
            p *= 2
        self._p = p
        self._r0, self._nb, size = B.layout(p)
        #: this tree depth's thread-policy kind (its own calibration)
        self._draw_kind = _jit.auto_variant(DRAW_KIND, f"2^{p.bit_length() - 1} leaves")
        #: the sums and minima, one cache line per three levels (``_blocked_kernels``);
        #: the minima store neither the leaf level (a present row's min leaf is its sum
        #: leaf) nor, from 64 leaves up, the band above it (``B.min_size``)
        self._sums = B.new_tree(size, 0.0)
        self._mins = B.new_tree(B.min_size(p), np.inf)
        lo = int(B.leaf_slot(0, p, self._r0, self._nb))
        self._leaf_lo = lo
        self._leaf_view = self._sums[lo : lo + self._capacity]
        self._leaf_view.flags.writeable = False
        self._alpha = check_real("alpha", alpha, 0.0, False)
        self._beta = check_real("beta", beta, 0.0, False)
        self._eps = check_real("eps", eps, 0.0, True)
        self._seed = check_seed(seed)
        self._gen = new_generator(self._seed)
        self._range_gen = new_generator([self._seed, 1])
        #: the generations (``_stamps``, the truth, always written) and the same as
        #: intervals while rows are written in ring order (``_runs``, ``_gen_runs``): a
        #: draw's stamps and an update's stale check then read no line of ``_stamps``
        self._gr = R.new_generations(self._capacity)
        self._stamps = self._gr[: self._capacity]
        self._runs = self._gr[self._capacity :]
        #: which rows were added: ``P`` flags (the padding rows stay false), the kernels
        #: take them all, ``_present`` is the ``capacity`` rows
        self._present_p = np.zeros(p, dtype=np.bool_)
        self._present = self._present_p[: self._capacity]
        self._n_present = 0
        self._max_priority = 1.0
        self._no_stamps = np.zeros(0, dtype=np.int64)
        self._maxp = np.ones(1)  # the kernel's in/out cell for max_priority
        #: batch size -> (uniforms (B,), scratch (2, B)) reused by every draw of that size
        self._work: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._nodes = np.empty(0, dtype=np.int64)  # update scratch, grown as needed

    # ------------------------------------------------------------------ properties
    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def alpha(self) -> float:
        return self._alpha

    @property
    def beta(self) -> float:
        """IS-weight exponent; assign to anneal it."""
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        self._beta = check_real("beta", value, 0.0, False)

    @property
    def eps(self) -> float:
        return self._eps

    @property
    def n_rows(self) -> int:
        """How many distinct rows have been added."""
        return self._n_present

    @property
    def max_priority(self) -> float:
        """Largest ``priority + eps`` applied so far (new rows get it); starts at 1."""
        return self._max_priority

    @property
    def tree(self) -> PrioritizedTree:
        """The sum/min tree (a read-only :class:`PrioritizedTree`); leaf ``i`` holds
        ``(priority_i + eps) ** alpha``."""
        return PrioritizedTree(self)

    def generation(self, rows: Any, out: np.ndarray | None = None) -> np.ndarray:
        """Current generation stamp of each row (int64, shape of ``rows``); into ``out``
        (int64, the shape of ``rows``) when given, which is returned."""
        r = check_rows("rows", rows, self._capacity)
        if out is None:
            return self._stamps[r]
        return np.take(self._stamps, r, out=out, mode="clip")  # checked: no buffering

    def _scratch(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        w = self._work.get(b)
        if w is None:
            if len(self._work) >= 8:
                self._work.clear()
            w = self._work[b] = (np.empty(b), np.empty((2, b)))
        return w

    # ------------------------------------------------------------------ writes
    def note_added(self, indices: Any) -> None:
        """Rows ``indices`` were (re)written: give them the max priority, bump generations.

        Parameters
        ----------
        indices : int array (K,)
            Rows in ``[0, capacity)``.
        """
        rows = check_rows("indices", indices, self._capacity)
        value = self._max_priority**self._alpha
        self._n_present += int(
            B.add_rows_runs(self._sums, self._mins, self._p, self._r0, self._nb, self._gr,
                            self._present_p, rows, value, np.empty(rows.shape[0], dtype=np.int64))
        )

    def update_priorities(self, indices: Any, priorities: Any, stamps: Any = None) -> int:
        """Set new priorities (batched; a repeated row: the last one wins).

        Parameters
        ----------
        indices : int array (K,) or IndexBatch
            Rows to update.  An :class:`IndexBatch` from :meth:`sample` brings its stamps.
        priorities : float array (K,)
            New priorities, finite and >= 0 (for example ``|TD error|``).
        stamps : int64 array (K,), optional
            Generation stamps returned with the sample.  Rows rewritten since (their stamp is
            stale) are skipped.  Without stamps every update is applied.

        Returns
        -------
        int
            How many updates were skipped as stale.
        """
        if isinstance(indices, IndexBatch):
            if stamps is None:
                stamps = indices.stamps
            indices = indices.indices
        rows = check_rows("indices", indices, self._capacity)
        pr = check_values("priorities", as_host_values(priorities), rows.shape[0])
        # once every row has been added (a full buffer: the steady state) none can be absent,
        # and the scattered reads of ``present`` are skipped
        full = self._n_present == self._capacity
        j = -1 if full else int(K._first_absent_cpu(self._present, rows))
        if j >= 0:
            raise RowIndexError(f"indices[{j}] = {rows[j]} was never added (call note_added first)")
        check = stamps is not None
        if check:
            st = np.asarray(stamps)
            if st.shape != rows.shape or (st.size and st.dtype.kind not in "iu"):
                raise SamplerError(
                    f"stamps must be integers of shape {rows.shape}, got {st.dtype} {st.shape}"
                )
            st = np.ascontiguousarray(st, dtype=np.int64)
        else:
            st = self._no_stamps
        k = rows.shape[0]
        if self._nodes.shape[0] < k:
            self._nodes = np.empty(k, dtype=np.int64)
        maxp = self._maxp
        maxp[0] = self._max_priority
        # the minima read no ``present`` flag where every row of every eight-row leaf group
        # is present (the padding rows past a capacity that is no multiple of 8 are not)
        whole = full and self._capacity % 8 == 0
        skipped = int(
            B.update_rows_runs(self._sums, self._mins, self._p, self._r0, self._nb,
                               self._present_p, whole, self._gr, rows, pr, self._eps,
                               self._alpha, st, check, self._nodes[:k], maxp)
        )
        self._max_priority = float(maxp[0])
        return skipped

    # ------------------------------------------------------------------ sampling
    def sample(self, batch_size: int) -> IndexBatch:
        """Draw ``batch_size`` rows by stratified proportional sampling.

        Returns
        -------
        IndexBatch
            ``indices`` int64 ``(B,)``, ``weights`` float32 ``(B,)`` (max possible weight 1),
            ``stamps`` int64 ``(B,)`` to pass back to :meth:`update_priorities`.
        """
        b = check_count("batch_size", batch_size)
        leaves = np.empty(b, dtype=np.int64)
        weights = np.empty(b, dtype=np.float32)
        stamps = np.empty(b, dtype=np.int64)
        self._draw(leaves, weights, stamps)
        return IndexBatch(leaves, weights=weights, stamps=stamps)

    def sample_into(self, indices: np.ndarray, weights: np.ndarray, stamps: np.ndarray) -> None:
        """:meth:`sample` into caller-owned arrays, allocating nothing once a batch size has
        been seen: the same draws, and the stream advances the same.

        Parameters
        ----------
        indices : int64 array (B,)
        weights : float32 array (B,)
        stamps : int64 array (B,)
            C-contiguous, writeable, one length ``B >= 1``.
        """
        _check_outputs(indices, weights, stamps)
        self._draw(indices, weights, stamps)

    def sample_ranges_into(
        self,
        indices: np.ndarray,
        weights: np.ndarray,
        stamps: np.ndarray,
        lo0: int,
        hi0: int,
        lo1: int = 0,
        hi1: int = 0,
    ) -> None:
        """A draw restricted to rows ``[lo0, hi0)`` and ``[lo1, hi1)`` (the second range may
        be empty): a replay's demonstration prefix, or its recent window, which wraps around
        the ring as two ranges.  Stratified over the ranges' mass, with weights normalised to
        the ranges (the smallest leaf in them has weight 1); stamps as :meth:`sample`.

        The uniforms come from the sampler's restricted stream (``PCG64([seed, 1])``): two
        restricted draws of ``m`` and ``B - m`` rows take the stream's first ``m`` and next
        ``B - m`` uniforms.  Allocates nothing once a batch size has been seen.

        Parameters
        ----------
        indices : int64 array (B,)
        weights : float32 array (B,)
        stamps : int64 array (B,)
            C-contiguous, writeable, one length ``B >= 1``.
        lo0, hi0, lo1, hi1 : int
            ``0 <= lo0 < hi0 <= capacity`` and ``0 <= lo1 <= hi1 <= capacity``; every row in
            the ranges must have been added.
        """
        _check_outputs(indices, weights, stamps)
        c = self._capacity
        if not (type(lo0) is type(hi0) is type(lo1) is type(hi1) is int):
            lo0, hi0, lo1, hi1 = (check_count(nm, v, minimum=0) for nm, v in
                                  (("lo0", lo0), ("hi0", hi0), ("lo1", lo1), ("hi1", hi1)))
        if not (0 <= lo0 < hi0 <= c and 0 <= lo1 <= hi1 <= c):
            raise SamplerError(
                f"row ranges [{lo0}, {hi0}) and [{lo1}, {hi1}) must lie in [0, {c}), the "
                f"first non-empty"
            )
        if self._n_present == 0 or not self._sums[1] > 0.0:
            raise SamplerError("cannot sample: no row has been added (call note_added first)")
        u, scratch = self._scratch(indices.shape[0])
        self._range_gen.random(out=u)
        B.sample_ranges(self._sums, self._mins, self._p, self._r0, self._nb, self._present_p,
                        u, self._beta, lo0, hi0, lo1, hi1, indices, weights, scratch)
        B.stamps_into(self._gr, indices, stamps)

    def _draw(self, leaves: np.ndarray, weights: np.ndarray, stamps: np.ndarray) -> None:
        if self._n_present == 0 or not self._sums[1] > 0.0:
            raise SamplerError("cannot sample: no row has been added (call note_added first)")
        b = leaves.shape[0]
        u, scratch = self._scratch(b)
        self._gen.random(out=u)
        args = (self._sums, self._p, self._r0, self._nb, self._gr, u, leaves, stamps, scratch)
        nbytes = 64 * b * (self._nb + 1)
        if _jit.below_floor(nbytes, DRAW_KIND):  # small: serial, no clock
            B.draw(*args)
        else:
            _jit.auto_call(self._draw_kind, nbytes, b, B.draw, B.draw_par, *args)
        # w_i = (N P(i))**-beta / max_j w_j = (leaf_i / min_leaf)**-beta (N and the total
        # cancel; the largest weight is the smallest leaf's, the min-tree root)
        w = scratch[0]
        np.divide(scratch[1], self._mins[1], out=w)
        np.power(w, -self._beta, out=w)
        np.copyto(weights, w, casting="same_kind")

    def probabilities(self) -> np.ndarray:
        """``P(i)`` of every row (float64, ``(capacity,)``); 0 for rows never added."""
        leaves = self._leaf_view
        return leaves / leaves.sum() if self._n_present else np.zeros_like(leaves)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Leaves, generations, settings and generator state (arrays are copies)."""
        return {
            "kind": "PrioritizedSampler",
            "capacity": self._capacity,
            "alpha": self._alpha,
            "beta": self._beta,
            "eps": self._eps,
            "seed": self._seed,
            "max_priority": self._max_priority,
            "leaves": self._leaf_view.copy(),
            "stamps": self._stamps.copy(),
            "present": self._present.copy(),
            "generator": generator_state(self._gen),
            "range_generator": generator_state(self._range_gen),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`; the tree is rebuilt from the leaves (same bits)."""
        if state.get("kind") != "PrioritizedSampler":
            raise SamplerError(f"state is for {state.get('kind')!r}, expected 'PrioritizedSampler'")
        if int(state["capacity"]) != self._capacity:
            raise SamplerError(
                f"state has capacity {state['capacity']}, this sampler has {self._capacity}"
            )
        present = np.asarray(state["present"], dtype=np.bool_)
        leaves = np.asarray(state["leaves"], dtype=np.float64)
        stamps = np.asarray(state["stamps"], dtype=np.int64)
        for name, a in (("present", present), ("leaves", leaves), ("stamps", stamps)):
            if a.shape != (self._capacity,):
                raise SamplerError(
                    f"state {name} has shape {a.shape}, expected ({self._capacity},)"
                )
        self._alpha = check_real("alpha", state["alpha"], 0.0, False)
        self._beta = check_real("beta", state["beta"], 0.0, False)
        self._eps = check_real("eps", state["eps"], 0.0, True)
        self._seed = check_seed(state["seed"])
        self._max_priority = check_real("max_priority", state["max_priority"], 0.0, True)
        self._stamps[:] = stamps
        R.encode(self._runs, self._stamps)
        self._present[:] = present
        self._n_present = int(present.sum())
        self._load_leaves(leaves)
        set_generator_state(self._gen, state["generator"])
        if "range_generator" in state:  # states saved before restricted draws moved here
            set_generator_state(self._range_gen, state["range_generator"])

    def _load_leaves(self, leaves: np.ndarray) -> None:
        """Replace the ``capacity`` leaves and rebuild (the minima from them and the
        ``present`` flags, which must be set first)."""
        lo, c = self._leaf_lo, self._capacity
        self._sums[:] = 0.0
        self._mins[:] = np.inf
        self._sums[lo : lo + c] = leaves
        B.build(self._sums, self._mins, self._p, self._r0, self._nb, self._present_p)

    def __repr__(self) -> str:
        return (
            f"PrioritizedSampler(capacity={self._capacity}, rows={self._n_present}, "
            f"alpha={self._alpha:g}, beta={self._beta:g}, eps={self._eps:g})"
        )
