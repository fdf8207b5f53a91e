"""The one decorator preset for host kernels.

``cache=True`` keeps compiled kernels on disk (``NUMBA_CACHE_DIR``) so a fresh process does
not recompile; ``nogil=True`` lets callers overlap kernels with I/O threads.  No
``fastmath``: it breaks NaN handling.  Kernels are compiled lazily on first call, never at
import (eager signatures make ``import numbatraj`` slow).
"""

from __future__ import annotations

import numba

__all__ = ["njit_kernel", "njit_parallel"]

njit_kernel = numba.njit(cache=True, nogil=True)
njit_parallel = numba.njit(cache=True, nogil=True, parallel=True)
