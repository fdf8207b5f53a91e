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

__all__ = ["device_twin", "njit_kernel", "njit_parallel"]

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
