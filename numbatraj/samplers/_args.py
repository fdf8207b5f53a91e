"""Argument checks shared by the samplers: seeds, counts and generator state.

Each check names the argument, the bad value and what was expected.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from numbatraj.errors import SamplerError

__all__ = ["check_seed", "check_count", "new_generator", "generator_state", "set_generator_state"]


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
