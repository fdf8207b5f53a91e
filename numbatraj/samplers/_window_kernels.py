"""Sequence-window kernels: map ranks to in-episode starts, expand starts into windows.

``bounds`` is int64 ``(E + 1,)``: episode offsets followed by the total row count, so
episode ``e`` covers rows ``[bounds[e], bounds[e + 1])``.  Kernels take arrays and scalars
only, assume valid input (``sequence.py`` checks), never raise and never allocate.
"""

from __future__ import annotations

from numbatraj._jit import njit_kernel


@njit_kernel
def _episode_of_cpu(bounds, row):  # type: ignore[no-untyped-def]
    """Episode holding ``row``: the last ``e`` with ``bounds[e] <= row`` (binary search)."""
    lo = 0
    hi = bounds.shape[0] - 2
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if bounds[mid] <= row:
            lo = mid
        else:
            hi = mid - 1
    return lo


@njit_kernel
def _expand_windows_cpu(bounds, starts, window, out_idx, out_first):  # type: ignore[no-untyped-def]
    """``out_idx[b, t] = starts[b] + t``; ``out_first[b, t]`` true where that row starts an
    episode.

    One binary search per window finds the episode of its first row; the walk along the
    window then only compares against the next boundary.  ``out_idx`` int64 and
    ``out_first`` bool, both ``(B, window)``.
    """
    n_ep = bounds.shape[0] - 1
    for b in range(starts.shape[0]):
        s = starts[b]
        e = _episode_of_cpu(bounds, s)
        nxt = bounds[e + 1]
        for t in range(window):
            r = s + t
            out_idx[b, t] = r
            if r == nxt and e + 1 < n_ep:
                e += 1
                nxt = bounds[e + 1]
            out_first[b, t] = r == bounds[e]


@njit_kernel
def _starts_from_ranks_cpu(bounds, first_valid, ranks, out):  # type: ignore[no-untyped-def]
    """In-episode window starts from ranks among all valid starts.

    Episode ``e`` has ``max(len_e - window + 1, 0)`` valid starts; ``first_valid`` (int64,
    ``(E + 1,)``) is their running count, so rank ``k`` belongs to the last episode ``e``
    with ``first_valid[e] <= k`` and maps to start ``bounds[e] + k - first_valid[e]``.
    Episodes with no valid start occupy an empty range and are never chosen.
    """
    n = first_valid.shape[0] - 1
    for i in range(ranks.shape[0]):
        k = ranks[i]
        lo = 0
        hi = n - 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if first_valid[mid] <= k:
                lo = mid
            else:
                hi = mid - 1
        out[i] = bounds[lo] + k - first_valid[lo]
