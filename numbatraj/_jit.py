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

import ctypes
import os
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

import numba

__all__ = [
    "CONCURRENT_PARALLEL_OK",
    "PARALLEL_LOCK",
    "device_twin",
    "njit_kernel",
    "njit_parallel",
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
