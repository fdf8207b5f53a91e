"""The prioritized sampler's generations as runs: few intervals of equal generation.

A row's generation counts how often it was written.  A replay writes its rows in ring
order (one row, a batch, a batch that wraps), so the generations form at most a few
intervals of equal value: ``[0, w)`` one lap ahead of ``[w, capacity)``, a demo prefix
before them.  Read from the dense ``int64`` array, a stamp costs every drawn row a cache
line (and, on a large buffer, a page walk) in the draw and again in the update's stale
check; read from the intervals it costs a comparison or two in L1.

The dense array stays the truth: every writer still bumps it, and the intervals are a
second, exact description of it kept only while it is short.  ``runs`` (int64, see
:func:`new_runs`) holds the interval count, a validity flag, the interval starts and their
generations.  A write that would take more than :data:`MAX_RUNS` intervals (rows written
out of ring order) clears the flag, and from then on every kernel reads the dense array;
:func:`encode` rebuilds the intervals from a dense array (a checkpoint being loaded).

Layout of ``runs``: ``runs[0]`` the interval count ``n``, ``runs[1]`` 1 while valid,
``runs[2 : 2 + SLOTS]`` the starts (``starts[0] == 0``, ``starts[n]`` the capacity),
``runs[2 + SLOTS :]`` the generations (interval ``k`` is ``[starts[k], starts[k + 1])``).

Kernels take arrays and scalars only and never raise or allocate; they are inlined into
the callers in ``_blocked_kernels``.
"""

from __future__ import annotations

import numba
import numpy as np

#: every kernel here is inlined at the Numba level into its callers: as plain calls they
#: pass their arrays with a reference count taken and dropped, which a one-row add paid
_inline = numba.njit(cache=True, nogil=True, inline="always")

#: the most intervals kept; a write that would need more falls back to the dense array
MAX_RUNS = 8
#: interval slots: a write splits at most two intervals before the merge
SLOTS = MAX_RUNS + 3
#: length of ``runs``
LENGTH = 2 + 2 * SLOTS


def new_generations(capacity: int) -> np.ndarray:
    """One array for the kernels, one argument fewer to unbox per call: the ``capacity``
    dense generations, then their ``runs`` (:func:`parts` splits it), all zero, the
    intervals those of rows never written.  (Before the inlining, a one-row add took
    0.17 us more than without intervals with ``runs`` as an argument of its own, 0.13 us
    more with this array: two timeit runs, not one.)"""
    gr = np.zeros(capacity + LENGTH, dtype=np.int64)
    gr[capacity:] = new_runs(capacity)
    return gr


@_inline
def parts(gr):  # type: ignore[no-untyped-def]
    """The dense generations and the ``runs`` of :func:`new_generations`' array."""
    n = gr.shape[0] - LENGTH
    return gr[:n], gr[n:]


def new_runs(capacity: int) -> np.ndarray:
    """The intervals of ``capacity`` rows never written: one, generation 0."""
    runs = np.zeros(LENGTH, dtype=np.int64)
    runs[0] = 1
    runs[1] = 1
    runs[3] = capacity  # starts[1]
    return runs


def encode(runs: np.ndarray, gen: np.ndarray) -> None:
    """Describe the dense generations ``gen`` in ``runs``; invalid (the dense array is
    read) when they take more than :data:`MAX_RUNS` intervals."""
    cut = np.flatnonzero(gen[1:] != gen[:-1]) + 1
    n = cut.shape[0] + 1
    runs[:] = 0
    if gen.shape[0] == 0 or n > MAX_RUNS:
        return
    runs[0] = n
    runs[1] = 1
    starts = runs[2 : 2 + SLOTS]
    values = runs[2 + SLOTS :]
    starts[1:n] = cut
    starts[n] = gen.shape[0]
    values[0] = gen[0]
    values[1:n] = gen[cut]


@_inline
def _split(runs, x):  # type: ignore[no-untyped-def]
    """Make ``x`` (inside ``(0, capacity)``) start an interval; False when no slot is left."""
    n = runs[0]
    s = 2
    v = 2 + SLOTS
    k = n - 1
    while runs[s + k] > x:
        k -= 1
    if runs[s + k] == x:
        return True
    if n + 1 > SLOTS - 1:
        return False
    i = n
    runs[s + n + 1] = runs[s + n]  # the capacity moves up
    while i > k + 1:
        runs[s + i] = runs[s + i - 1]
        runs[v + i] = runs[v + i - 1]
        i -= 1
    runs[s + k + 1] = x
    runs[v + k + 1] = runs[v + k]
    runs[0] = n + 1
    return True


@_inline
def _bump_range(runs, a, b):  # type: ignore[no-untyped-def]
    """Generations of rows ``[a, b)`` go up by one; then equal neighbours merge.  Clears
    the validity flag when more than ``MAX_RUNS`` intervals remain."""
    s = 2
    v = 2 + SLOTS
    cap = runs[s + runs[0]]
    if a > 0 and not _split(runs, a):
        runs[1] = 0
        return
    if b < cap and not _split(runs, b):
        runs[1] = 0
        return
    n = runs[0]
    for k in range(n):
        x = runs[s + k]
        if x >= a and x < b:
            runs[v + k] += 1
    m = 1
    for k in range(1, n):
        if runs[v + k] != runs[v + m - 1]:
            runs[s + m] = runs[s + k]
            runs[v + m] = runs[v + k]
            m += 1
    runs[s + m] = cap
    runs[0] = m
    if m > MAX_RUNS:
        runs[1] = 0


@_inline
def bump(runs, rows):  # type: ignore[no-untyped-def]
    """Rows ``rows`` (in ``[0, capacity)``, any order, repeats counted) were written: each
    run of consecutive ascending rows bumps its interval.  A no-op once invalid."""
    k = rows.shape[0]
    j = 0
    while j < k and runs[1] == 1:
        a = rows[j]
        e = j + 1
        while e < k and rows[e] == rows[e - 1] + 1:
            e += 1
        _bump_range(runs, a, a + (e - j))
        j = e


@_inline
def find(runs, r, k):  # type: ignore[no-untyped-def]
    """The interval holding row ``r``, searched from interval ``k`` (the previous row's:
    rows in ascending order, as drawn, cost a comparison each)."""
    s = 2
    while r >= runs[s + k + 1]:
        k += 1
    while r < runs[s + k]:
        k -= 1
    return k


@_inline
def stamps_of(runs, rows, stamps):  # type: ignore[no-untyped-def]
    """``stamps[i]`` = the generation of ``rows[i]`` (``runs`` valid)."""
    v = 2 + SLOTS
    k = 0
    for i in range(rows.shape[0]):
        k = find(runs, rows[i], k)
        stamps[i] = runs[v + k]
