"""Argument checks shared by the samplers, the replays, the resident columns and the training
loader: counts, seeds, real numbers, the samplers' generators (creation and exact state round
trips), and the caller's buffers (:func:`host_buffer`: numpy, torch CPU tensors, DLPack).

Each check names the argument, the bad value and what was expected, and raises
:class:`~numbatraj.errors.SamplerError`.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from numbatraj.errors import SamplerError, SchemaError

__all__ = [
    "as_host_values",
    "check_count",
    "host_buffer",
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
    if type(value) is int and value >= minimum:  # the common case, without the ABC check
        return value
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


def _is_torch(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def host_buffer(obj: Any, what: str) -> np.ndarray:
    """The numpy view of a caller's output buffer a host kernel writes through.

    ``obj`` is a numpy array, a torch CPU tensor, or any object exporting host memory by
    DLPack (``__dlpack__``) or the array interface.  No copy is made: writes land in
    ``obj``.  Raises :class:`~numbatraj.errors.SchemaError` naming ``what`` for a tensor on
    another device, one that requires grad, is not contiguous or has a lazy conj/neg bit, a
    DLPack export numpy cannot read, or an object that exports no memory at all.  The
    caller checks dtype, shape, layout and writability with its own messages.
    """
    if type(obj) is np.ndarray:
        return obj
    if _is_torch(obj):
        if obj.device.type != "cpu":
            raise SchemaError(f"{what} is a torch tensor on {obj.device}, expected a CPU tensor "
                              f"(device outputs go to the device gathers)")
        if obj.requires_grad:
            raise SchemaError(f"{what} requires grad; pass a tensor with requires_grad=False")
        if not obj.is_contiguous():
            raise SchemaError(f"{what} must be a contiguous tensor")
        if obj.is_conj() or obj.is_neg():
            raise SchemaError(f"{what} has a lazy conj/neg bit; resolve it first")
        try:
            return np.asarray(obj.numpy())
        except (TypeError, RuntimeError) as exc:
            raise SchemaError(f"{what}: torch dtype {obj.dtype} has no numpy view") from exc
    if isinstance(obj, np.ndarray):
        return obj
    if hasattr(obj, "__dlpack__"):
        try:
            return np.from_dlpack(obj)
        except (BufferError, TypeError, RuntimeError, ValueError) as exc:
            raise SchemaError(f"{what}: its DLPack export is not host memory numpy can write "
                              f"({exc})") from exc
    if hasattr(obj, "__array_interface__"):
        return np.asarray(obj)
    raise SchemaError(f"{what} must be a numpy array, a torch CPU tensor or a DLPack "
                      f"exporter, got {type(obj).__name__}")


def as_host_values(obj: Any) -> Any:
    """Input values (priorities, TD errors) as something ``np.asarray`` reads: a torch
    tensor is detached and, when it lives on a device, copied to the host (inputs are
    small; outputs are never copied)."""
    if _is_torch(obj):
        obj = obj.detach()
        if obj.device.type != "cpu":
            obj = obj.cpu()
        return obj.numpy()
    return obj
