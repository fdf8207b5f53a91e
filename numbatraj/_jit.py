"""The one decorator preset for host kernels.

``cache=True`` keeps compiled kernels on disk (``NUMBA_CACHE_DIR``) so a fresh process does
not recompile; ``nogil=True`` lets callers overlap kernels with I/O threads.  No
``fastmath``: it breaks NaN handling.  Kernels are compiled lazily on first call, never at
import (eager signatures make ``import numbatraj`` slow).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import numba

__all__ = ["device_twin", "njit_kernel", "njit_parallel", "parallel_threads", "set_num_threads"]

njit_kernel = numba.njit(cache=True, nogil=True)
njit_parallel = numba.njit(cache=True, nogil=True, parallel=True)


def device_twin(fn: Callable[..., Any], **names: Any) -> Callable[..., Any]:
    """A copy of the ``_py`` body ``fn`` (the same code object) whose globals map ``names`` to
    other callables: compiled as a CUDA device function (``device=True``) it is the device
    twin of a host kernel, with the functions it calls rebound to their device compiles, so host and
    device run one body and agree bit for bit by construction."""
    g = dict(fn.__globals__)
    g.update(names)
    out = types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
    out.__qualname__ = fn.__qualname__
    return out


# ---------------------------------------------------------------------- when kernels go parallel
#: Batches moving fewer bytes than this never start a parallel region, even after
#: ``set_num_threads(n > 1)``: below it one thread with prefetching finishes before a
#: fork/join would pay for itself.
PARALLEL_MIN_BYTES = 4 << 20

_explicit: int | None = None  # the n of the last set_num_threads(n), None until called


def set_num_threads(n: int | None) -> None:
    """Threads numbatraj's host kernels may use (and ``numba.set_num_threads(n)``).

    By default (and after ``set_num_threads(None)`` or ``set_num_threads(1)``) every host
    kernel runs on the calling thread.  Measured: a gather is bound by memory latency and one
    thread with prefetching runs at 0.1-0.6x ``np.take``'s time, while a parallel region
    made 4096 pixel rows 1.5-1.8x slower than the serial kernel on a shared 2-core machine
    (a woken worker waits for a busy core; docs/residency.md, "Threads").
    ``set_num_threads(n)`` with ``n > 1`` says the cores are yours: batches of at least
    :data:`PARALLEL_MIN_BYTES` then run on ``n`` threads.  ``n`` is at most
    ``NUMBA_NUM_THREADS``; like Numba's, the count is per calling thread.

    Raises
    ------
    ValueError
        ``n`` is not None or an integer in ``[1, NUMBA_NUM_THREADS]``.
    """
    global _explicit
    top = int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
    if n is None:
        numba.set_num_threads(top)
        _explicit = None
        return
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= top:
        raise ValueError(
            f"set_num_threads: n = {n!r}, expected an int in [1, {top}] (NUMBA_NUM_THREADS)"
        )
    numba.set_num_threads(n)
    _explicit = n


def parallel_threads(nbytes: int) -> int:
    """Threads a host kernel moving ``nbytes`` should use; 1 means the serial kernel."""
    if _explicit is None or _explicit <= 1 or nbytes < PARALLEL_MIN_BYTES:
        return 1
    return max(min(_explicit, int(numba.get_num_threads())), 1)
