"""The demo/online split and the ERE window: one body each, for every replay.

Plain Python functions ending in ``_py`` and taking scalars only.  They are the single
source of truth of this arithmetic: ``_draw.py`` calls them as plain Python for the host
replay's checks, ``_lanes.py`` compiles them for the host twin of the device draws, and
``_ring_cuda.py`` compiles the same bodies as CUDA device functions, so the host replay, the
host twin and the device agree by construction.  ``fraction < 0`` means no demo fraction.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["ere_size_py", "split_lanes_py", "window_ranges_py", "window_start_py"]


def split_lanes_py(b, n_demo, size, fraction, ere):  # type: ignore[no-untyped-def]
    """How many of ``b`` rows come from the demo prefix; -1 means one joint population.

    No online rows: all from the demos.  With a fraction (``>= 0``) and demo rows:
    ``floor(fraction * b + 0.5)`` (half up).  Otherwise ERE samples only the online rows
    (0), and without ERE demo and online rows form one population (-1).
    """
    if size == 0:
        return b
    if fraction >= 0.0 and n_demo > 0:
        return np.int64(math.floor(fraction * b + 0.5))
    if ere:
        return 0
    return -1


def ere_size_py(size, k, big_k, eta, c_min):  # type: ignore[no-untyped-def]
    """ERE's window ``c_k = min(N, max(floor(N eta**(k 1000 / K)), c_min))`` for update
    ``k`` of ``K`` (``1 <= K``, ``0 <= k <= K``) over ``N = size`` online rows."""
    c = np.int64(math.floor(size * eta ** (k * 1000.0 / big_k)))
    if c < c_min:
        c = c_min
    if c > size:
        c = size
    return c


def window_start_py(cursor, c, ring_cap):  # type: ignore[no-untyped-def]
    """Ring slot of the oldest of the ``c`` most recent rows (``c <= ring_cap``)."""
    start = cursor - c
    if start < 0:
        start += ring_cap
    return start


def window_ranges_py(ring_base, ring_cap, cursor, c):  # type: ignore[no-untyped-def]
    """Physical row ranges ``(lo0, hi0, lo1, hi1)`` of the ``c`` most recent ring rows (the
    second range is empty, ``lo1 == hi1``, unless the window wraps)."""
    start = cursor - c
    if start < 0:
        start += ring_cap
    if start + c <= ring_cap:
        return ring_base + start, ring_base + start + c, ring_base, ring_base
    return ring_base + start, ring_base + ring_cap, ring_base, ring_base + start + c - ring_cap
