"""Sequence-window kernels: map ranks to in-episode starts, expand starts into windows.

``bounds`` is int64 ``(E + 1,)``: episode offsets followed by the total row count, so
episode ``e`` covers rows ``[bounds[e], bounds[e + 1])``.  Kernels take arrays and scalars
only, assume valid input (``sequence.py`` checks), never raise and never allocate.
"""

from __future__ import annotations

from numbatraj._jit import njit_kernel


@njit_kernel
def _last_le_cpu(arr, n, keys, out, col):  # type: ignore[no-untyped-def]
    """``out[i, col]`` = the last ``e`` in ``[0, n)`` with ``arr[e] <= keys[i]`` (``arr``
    non-decreasing, ``arr[0] <= keys[i]``; ``out`` int64 ``(B, >col)``).

    One binary search per key, every key one level at a time and without branches (a step
    of the largest power of two first, then halves), so the probes of different keys are
    in flight together instead of one dependent chain of misses after another: 16 windows
    over 16,777 episodes with the bounds out of the caches paid ~14 misses each in a row.
    """
    b = keys.shape[0]
    for i in range(b):
        out[i, col] = 0
    last = n - 1
    step = 1
    while step * 2 <= last:
        step *= 2
    while step >= 1 and last >= 1:
        for i in range(b):
            lo = out[i, col]
            p = lo + step
            q = p if p <= last else last
            out[i, col] = p if (p <= last) & (arr[q] <= keys[i]) else lo
        step >>= 1


@njit_kernel
def _expand_windows_cpu(bounds, starts, window, out_idx, out_first):  # type: ignore[no-untyped-def]
    """``out_idx[b, t] = starts[b] + t``; ``out_first[b, t]`` true where that row starts an
    episode.

    One binary search per window finds the episode of its first row (all windows' searches
    level by level, :func:`_last_le_cpu`); the walk along the window then only compares
    against the next boundary.  ``out_idx`` int64 and
    ``out_first`` bool, both ``(B, window)``.
    """
    n_ep = bounds.shape[0] - 1
    _last_le_cpu(bounds, n_ep, starts, out_idx, 0)  # each window's episode, in out_idx[:, 0]
    for b in range(starts.shape[0]):
        s = starts[b]
        e = out_idx[b, 0]
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
    _last_le_cpu(first_valid, n, ranks, out.reshape(out.shape[0], 1), 0)  # episodes
    for i in range(ranks.shape[0]):
        lo = out[i]
        out[i] = bounds[lo] + ranks[i] - first_valid[lo]
