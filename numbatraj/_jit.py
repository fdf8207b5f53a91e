"""The one decorator preset for host kernels, and the threading layer they run on.

``cache=True`` keeps compiled kernels on disk (``NUMBA_CACHE_DIR``) so a fresh process does
not recompile; ``nogil=True`` lets callers overlap kernels with I/O threads.  No
``fastmath``: it breaks NaN handling.  Kernels are compiled lazily on first call, never at
import (eager signatures make ``import numbatraj`` slow).

Threading layer: Numba's default on Linux is GNU OpenMP, which kills a child forked after
the parent ran one parallel kernel ("fork() called from a process already using GNU
OpenMP"), so DataLoader workers die.  Unless ``NUMBA_THREADING_LAYER`` is set, numbatraj
asks for ``"forksafe"``: TBB when it loads (pip's ``tbb``, whose library lives in the
environment's ``lib/`` where the loader does not look, so it is preloaded here), else
Numba's workqueue.  Measured on 2 cores (docs/training.md): TBB 1.5 us for a 16-row gather
where GNU OpenMP took 125 us and workqueue 33 us.  Workqueue cannot take two parallel
launches at once (it aborts the process); :data:`PARALLEL_LOCK` serialises them when
:data:`CONCURRENT_PARALLEL_OK` is False.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

import numba

__all__ = [
    "CONCURRENT_PARALLEL_OK",
    "PARALLEL_LOCK",
    "device_twin",
    "njit_kernel",
    "njit_parallel",
    "parallel_call",
    "parallel_region",
    "parallel_threads",
    "set_num_threads",
]


def _preload_pip_tbb() -> bool:
    """Load the environment's ``libtbb.so.12`` by path so Numba's TBB layer finds it by soname."""
    if not sys.platform.startswith("linux"):
        return False
    path = os.path.join(sys.prefix, "lib", "libtbb.so.12")
    if not os.path.exists(path):
        return False
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return False
    return True


if os.environ.get("NUMBA_THREADING_LAYER"):
    _layer = str(getattr(numba.config, "THREADING_LAYER", ""))
    CONCURRENT_PARALLEL_OK = _layer in ("tbb", "omp", "threadsafe", "safe")
else:
    CONCURRENT_PARALLEL_OK = _preload_pip_tbb()
    numba.config.THREADING_LAYER = "forksafe"  # type: ignore[attr-defined]

#: Take this around a parallel kernel launch when :data:`CONCURRENT_PARALLEL_OK` is False.
PARALLEL_LOCK = threading.Lock()

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
    :data:`PARALLEL_MIN_BYTES` then run on ``n`` threads (``ResidentColumn.gather`` and the
    gathers of a ``StoreReplay``'s columns stored apart, such as pixel observations: 256
    3x84x84 ``next_of`` pairs 1.6x faster on two idle cores of an Intel VM).  ``n`` is at most
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


@contextlib.contextmanager
def parallel_region() -> Iterator[None]:
    """Hold around every parallel kernel launch: launches from several threads at once are
    serialised when the threading layer cannot take them (workqueue, without TBB)."""
    if CONCURRENT_PARALLEL_OK:
        yield
    else:
        with PARALLEL_LOCK:
            yield


def parallel_call(kernel: Callable[..., Any], threads: int, *args: Any) -> Any:
    """``kernel(*args)`` (a parallel kernel) on exactly ``threads`` of Numba's threads, the
    count restored afterwards, inside :func:`parallel_region`."""
    before = numba.get_num_threads()
    if threads != before:
        numba.set_num_threads(threads)
    try:
        with parallel_region():
            return kernel(*args)
    finally:
        if threads != before:
            numba.set_num_threads(before)
