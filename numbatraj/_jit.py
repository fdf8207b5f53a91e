"""The one decorator preset for host kernels.

``cache=True`` keeps compiled kernels on disk (``NUMBA_CACHE_DIR``) so a fresh process does
not recompile; ``nogil=True`` lets callers overlap kernels with I/O threads.  No
``fastmath``: it breaks NaN handling.  Kernels are compiled lazily on first call, never at
import (eager signatures make ``import numbatraj`` slow).
"""

from __future__ import annotations

import os
import time
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
#: Batches moving fewer bytes than this never start a parallel region.  A gather is bound by
#: memory latency; one thread with prefetching already runs at 0.2-0.6x ``np.take``'s time,
#: and a fork/join costs 5-20 us on an idle machine and up to milliseconds when a woken
#: worker has to wait for a busy core (docs/residency.md, "Threads").
PARALLEL_MIN_BYTES = 4 << 20

_explicit: int | None = None  # the n of the last set_num_threads(n), None until called
#: [monotonic time of the last /proc/loadavg read, idle cores then]
_idle_cache: list[float] = [0.0, 0.0]
_IDLE_TTL_S = 0.02


def set_num_threads(n: int | None) -> None:
    """Threads numbatraj's host kernels may use (and ``numba.set_num_threads(n)``).

    ``n == 1``: every kernel runs on the calling thread.  ``n > 1``: batches of at least
    :data:`PARALLEL_MIN_BYTES` run on ``n`` threads whatever the load (you said the cores
    are yours).  Until this is called, the default policy is automatic: such batches go
    parallel only over the cores that are idle at that moment (``/proc/loadavg``), so a busy
    machine never makes a gather wait for a thread.  ``n`` is at most ``NUMBA_NUM_THREADS``.

    Raises
    ------
    ValueError
        ``n`` is not an integer in ``[1, NUMBA_NUM_THREADS]``.
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


def _idle_cores() -> int:
    """Cores of this process's affinity set with nothing runnable on them right now.

    From the instantaneous runnable count in ``/proc/loadavg`` (this thread included), read
    at most every 20 ms; 0 where the file is missing (then the default stays serial).
    """
    now = time.monotonic()
    if now - _idle_cache[0] < _IDLE_TTL_S:
        return int(_idle_cache[1])
    try:
        with open("/proc/loadavg", "rb") as f:
            running = int(f.read().split()[3].split(b"/")[0])
        cores = len(os.sched_getaffinity(0))
        idle = max(cores - (running - 1), 0)
    except (OSError, ValueError, IndexError, AttributeError):
        idle = 0
    _idle_cache[0], _idle_cache[1] = now, idle
    return idle


def parallel_threads(nbytes: int) -> int:
    """Threads a host kernel moving ``nbytes`` should use; 1 means the serial kernel."""
    if nbytes < PARALLEL_MIN_BYTES:
        return 1
    n = int(numba.get_num_threads())
    if n <= 1:
        return 1
    if _explicit is not None and _explicit > 1:
        return n
    return max(min(n, _idle_cores()), 1)
