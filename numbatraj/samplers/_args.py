"""Argument checks shared by the samplers: seeds, counts and generator state, and the
generator's raw words into a preallocated buffer (:class:`RawWords`).

Each check names the argument, the bad value and what was expected.
"""

from __future__ import annotations

import ctypes
import numbers
from typing import Any

import numpy as np

from numbatraj._jit import njit_kernel
from numbatraj.errors import SamplerError
from numbatraj.samplers._philox import mulhi64

__all__ = [
    "check_seed",
    "check_count",
    "new_generator",
    "generator_state",
    "set_generator_state",
    "RawWords",
]

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


def check_seed(seed: Any) -> int:
    """A seed must be a non-negative integer below 2**64 (bools refused)."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise SamplerError(
            f"seed must be a non-negative integer, got {seed!r} ({type(seed).__name__})"
        )
    seed = int(seed)
    if not 0 <= seed < 2**64:
        raise SamplerError(f"seed must be in [0, 2**64), got {seed}")
    return seed


def check_count(name: str, value: Any, minimum: int = 1) -> int:
    """An integer argument (batch size, row count, window) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise SamplerError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    value = int(value)
    if value < minimum:
        raise SamplerError(f"{name} must be >= {minimum}, got {value}")
    return value


def new_generator(seed: int) -> np.random.Generator:
    """The sampler's own generator (PCG64 from ``seed``); numpy's global state is untouched."""
    return np.random.Generator(np.random.PCG64(seed))


def generator_state(gen: np.random.Generator) -> dict[str, Any]:
    """A deep copy of the generator's bit-generator state (a plain dict)."""
    st = gen.bit_generator.state
    return {
        "bit_generator": st["bit_generator"],
        "state": dict(st["state"]),
        "has_uint32": st["has_uint32"],
        "uinteger": st["uinteger"],
    }


def set_generator_state(gen: np.random.Generator, state: dict[str, Any]) -> None:
    """Restore what :func:`generator_state` returned, checking the bit generator's kind."""
    kind = gen.bit_generator.state["bit_generator"]
    if not isinstance(state, dict) or state.get("bit_generator") != kind:
        got = state.get("bit_generator") if isinstance(state, dict) else type(state).__name__
        raise SamplerError(f"generator state is for {got!r}, expected {kind!r}")
    gen.bit_generator.state = state
