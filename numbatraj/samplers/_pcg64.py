"""The generator's raw 64-bit words into a preallocated buffer (:class:`RawWords`): numpy's
PCG64 step as a kernel that advances the generator's own state in place.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from numbatraj._jit import njit_kernel
from numbatraj.samplers._philox import mulhi64

__all__ = ["RawWords"]

_MUL_HI = np.uint64(2549297995355413924)  # PCG's default 128-bit multiplier
_MUL_LO = np.uint64(4865540595714422341)


@njit_kernel
def _pcg64_raw_cpu(st, out):  # type: ignore[no-untyped-def]
    """PCG64 (XSL-RR 128/64) words into ``out`` (uint64), advancing ``st`` in place.

    ``st`` uint64 (4,) is the 128-bit state and increment as little-endian halves
    ``(state_lo, state_hi, inc_lo, inc_hi)``.  Each word: ``state = state * M + inc``
    (mod 2**128), then ``rotr64(hi ^ lo, hi >> 58)`` of the new state, as numpy's PCG64.
    """
    lo = st[0]
    hi = st[1]
    ilo = st[2]
    ihi = st[3]
    for i in range(out.shape[0]):
        nhi = mulhi64(lo, _MUL_LO) + lo * _MUL_HI + hi * _MUL_LO
        nlo = lo * _MUL_LO
        lo = nlo + ilo
        hi = nhi + ihi + np.uint64(lo < nlo)
        x = hi ^ lo
        rot = hi >> np.uint64(58)
        out[i] = (x >> rot) | (x << ((np.uint64(64) - rot) & np.uint64(63)))
    st[0] = lo
    st[1] = hi


def _pcg64_state_view(bitgen: Any) -> np.ndarray | None:
    """uint64 (4,) view of a PCG64's state and increment, or None when its memory layout is
    not the one :func:`_pcg64_raw_cpu` expects (checked on a scratch generator)."""
    if type(bitgen) is not np.random.PCG64:
        return None
    try:
        probe = np.random.PCG64(12345)
        twin = np.random.PCG64(12345)
        pv = _state_words(probe)  # numpy's pcg64_state: {pcg64_random_t *pcg_state; ...}
        got = np.empty(9, dtype=np.uint64)
        _pcg64_raw_cpu(pv, got)
        if not np.array_equal(got, twin.random_raw(9)) or probe.random_raw() != twin.random_raw():
            return None
        return _state_words(bitgen)
    except Exception:  # any surprise: the caller falls back to random_raw
        return None


def _state_words(bitgen: Any) -> np.ndarray:
    ptr = ctypes.c_void_p.from_address(bitgen.ctypes.state_address).value
    if not ptr:
        raise ValueError("PCG64 without state")
    return np.ctypeslib.as_array((ctypes.c_uint64 * 4).from_address(ptr))


class RawWords:
    """A generator's raw 64-bit words into a preallocated buffer, without allocating.

    For numpy's ``PCG64`` the words are produced by a kernel that advances the generator's
    own state in place (a view of its memory, checked against ``random_raw`` when built);
    for anything else ``bit_generator.random_raw`` is copied in.  Either way the words and
    the generator's later output are exactly those of ``random_raw``.
    """

    def __init__(self, gen: np.random.Generator) -> None:
        self._bitgen = gen.bit_generator  # keeps the viewed memory alive
        self._state = _pcg64_state_view(self._bitgen)

    def fill(self, out: np.ndarray) -> None:
        """``out`` uint64 (B,), C-contiguous: the next ``B`` raw words."""
        if self._state is not None:
            _pcg64_raw_cpu(self._state, out)
        else:
            out[:] = self._bitgen.random_raw(out.shape[0])
