"""Argument checks shared by the samplers and the replays: counts, seeds, real numbers, and
the samplers' generators (creation and exact state round trips).

Each check names the argument, the bad value and what was expected, and raises
:class:`~numbatraj.errors.SamplerError`.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from numbatraj.errors import SamplerError

__all__ = [
    "check_count",
    "check_real",
    "check_seed",
    "generator_state",
    "new_generator",
    "set_generator_state",
]


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


def check_real(name: str, value: Any, lo: float, lo_open: bool, hi: float | None = None) -> float:
    """A finite real number in ``[lo, hi]`` (``(lo, ...`` when ``lo_open``; no upper bound
    when ``hi`` is None)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise SamplerError(f"{name} must be a real number, got {value!r}") from None
    bad = not math.isfinite(v) or v < lo or (lo_open and v == lo) or (hi is not None and v > hi)
    if bad:
        interval = f"{'(' if lo_open else '['}{lo:g}, {'inf)' if hi is None else f'{hi:g}]'}"
        raise SamplerError(f"{name} must be in {interval}, got {value!r}")
    return v


def new_generator(seed: int | list[int]) -> np.random.Generator:
    """A sampler's own generator (PCG64 from ``seed``); numpy's global state is untouched."""
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
