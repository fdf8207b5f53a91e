"""New large arrays whose pages a helper thread faults in while the caller fills them.

A freshly allocated array of 32 MiB and more is a fresh mapping (glibc's ``malloc`` maps
every block past its largest dynamic threshold, 32 MiB on 64-bit), and its first write to
each page takes a page fault in which the kernel zeroes the page: on the AMD EPYC VM
(stop 46) faulting in 0.99 GiB took 91 ms and copying a stored column into it 80 ms,
one after the other in the writing thread.  :func:`filled` hands the faults to a second
thread, which prefaults the array from its end backwards with
``madvise(MADV_POPULATE_WRITE)`` (Linux 5.14 and later) while the caller writes it from the
front, so the two meet near the middle and the caller finds most of its pages present.
The prefault changes no byte the caller wrote (it only makes pages present), so the order
in which the two threads reach a page does not matter.

It takes a core only where :mod:`numbatraj._jit`'s policy gives threads: by default when a
core is free at the moment of the call (:func:`numbatraj._jit.free_cores`), never after
``set_num_threads(1)``, always after ``set_num_threads(n > 1)``.  On a busy machine the
caller faults its own pages, as without this module.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from numbatraj import _jit

__all__ = ["FAULT_AHEAD_MIN_BYTES", "FAULT_AHEAD_PIECE_BYTES", "filled"]

#: Arrays of at least this many bytes get the helper thread (below it glibc may hand back
#: pages a freed block left mapped, and a thread's start would cost more than it saves).
#: Measured on the AMD EPYC VM, a fresh ``read_range`` of a 10 M x 26 float32 store, one
#: process, interleaved rounds, alone / with the helper: 8 MiB 0.55 / 0.82 ms (glibc reused
#: pages: no faults to save), 32 MiB 6.2 / 5.0 ms, 128 MiB 20.3 / 14.9 ms, 512 MiB 85 / 69
#: ms; ``load_column`` of the whole 0.99 GiB column 161-163 / 116-121 ms (h5py ``ds[()]``
#: 149-154 ms in the same rounds).
FAULT_AHEAD_MIN_BYTES = 32 << 20
#: Bytes the helper prefaults per ``madvise`` call: how far it can run past a stop request
#: (4, 16 and 64 MiB measured alike on the 0.99 GiB column, 116-120 ms).
FAULT_AHEAD_PIECE_BYTES = 4 << 20

_MADV_POPULATE_WRITE = int(getattr(mmap, "MADV_POPULATE_WRITE", 23))
_PAGE = mmap.PAGESIZE
#: False once ``madvise`` refused the request (a kernel before 5.14): no more helpers
_populate_ok = sys.platform.startswith("linux")
_madvise: Any = None


def _libc_madvise() -> Any:
    """libc's ``madvise`` through ctypes (it releases the GIL while the kernel works), or
    None where it cannot be loaded."""
    global _madvise, _populate_ok
    if _madvise is None:
        try:
            fn = ctypes.CDLL(None, use_errno=True).madvise
        except (OSError, AttributeError):
            _populate_ok = False
            return None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        fn.restype = ctypes.c_int
        _madvise = fn
    return _madvise


def helper_wanted(nbytes: int) -> bool:
    """Whether an array of ``nbytes`` gets the prefaulting thread now (the thread policy
    of the module docstring, and a kernel that took the request before)."""
    if nbytes < FAULT_AHEAD_MIN_BYTES or not _populate_ok:
        return False
    n = _jit.explicit_threads()
    if n is not None:
        return n > 1
    return _jit.free_cores() >= 1


def _prefault_backwards(address: int, nbytes: int, stop: list[bool]) -> None:
    """Prefault the whole pages of ``[address, address + nbytes)`` writable, from the end,
    :data:`FAULT_AHEAD_PIECE_BYTES` a call, until done or ``stop[0]`` is set."""
    global _populate_ok
    madvise = _libc_madvise()
    if madvise is None:
        return
    lo = -(-address // _PAGE) * _PAGE
    hi = (address + nbytes) // _PAGE * _PAGE
    while hi > lo and not stop[0]:
        p = max(lo, hi - FAULT_AHEAD_PIECE_BYTES)
        if madvise(p, hi - p, _MADV_POPULATE_WRITE) != 0:
            if ctypes.get_errno() == errno.EINVAL:  # a kernel that does not know the advice
                _populate_ok = False
            return  # anything else (ENOMEM, say): the writer faults the rest itself
        hi = p


def filled(shape: tuple[int, ...], dtype: Any, fill: Callable[[np.ndarray], None]) -> np.ndarray:
    """``np.empty(shape, dtype)`` after ``fill(array)`` wrote it, with the array's pages
    prefaulted by a helper thread meanwhile when :func:`helper_wanted` says so.  ``fill``
    should write the array from the front (the helper comes from the back).  An exception
    from ``fill`` propagates after the helper has stopped (at most one piece later)."""
    out = np.empty(shape, dtype=dtype)
    if not helper_wanted(out.nbytes):
        fill(out)
        return out
    stop = [False]
    helper = threading.Thread(target=_prefault_backwards, name="numbatraj-prefault",
                              args=(out.ctypes.data, out.nbytes, stop), daemon=True)
    helper.start()
    try:
        fill(out)
    finally:
        stop[0] = True
        helper.join()
    return out
