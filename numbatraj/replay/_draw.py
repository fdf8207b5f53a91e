"""Which rows a replay minibatch holds: the demo/online split, the ERE window, and the
mapping from a sampler's logical rows onto the ring's physical rows.

Shared by :class:`~numbatraj.replay.StoreReplay` and the host side of
:class:`~numbatraj.replay.StoreReplayGpu`: the checks, around the bodies of ``_split.py``
(which the device compiles too).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

from numbatraj.errors import SamplerError
from numbatraj.replay._split import ere_size_py, split_lanes_py, window_ranges_py

__all__ = ["EreConfig", "check_fraction", "ere_window", "split_batch", "window_ranges"]


@dataclass(frozen=True)
class EreConfig:
    """Emphasizing Recent Experience (Wang & Ross, 2019): ``c_k = max(N eta**(k 1000 / K),
    c_min)`` most recent rows, for update ``k`` of ``K``."""

    eta: float = 0.996
    c_min: int = 5000


def check_ere(eta: Any, c_min: Any) -> EreConfig:
    try:
        e = float(eta)
    except (TypeError, ValueError):
        raise SamplerError(f"ERE eta must be a real number in (0, 1], got {eta!r}") from None
    if not 0.0 < e <= 1.0:
        raise SamplerError(f"ERE eta must be in (0, 1], got {eta!r}")
    if isinstance(c_min, bool) or not isinstance(c_min, numbers.Integral) or c_min < 1:
        raise SamplerError(f"ERE c_min must be an integer >= 1, got {c_min!r}")
    return EreConfig(e, int(c_min))


def ere_window(cfg: EreConfig, n: int, k: Any, big_k: Any) -> int:
    """``min(N, max(floor(N * eta**(k * 1000 / K)), c_min))`` rows (at least 1 when N > 0).

    ``k`` is the update number within the current phase, ``0 <= k <= K``; ``K >= 1``.
    """
    for name, v in (("k", k), ("K", big_k)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise SamplerError(
                f"ERE is on: sample() needs integer k and K (update k of K), got {name}={v!r}"
            )
    k, big_k = int(k), int(big_k)
    if big_k < 1 or not 0 <= k <= big_k:
        raise SamplerError(f"ERE needs K >= 1 and 0 <= k <= K, got k={k}, K={big_k}")
    return int(ere_size_py(n, k, big_k, cfg.eta, cfg.c_min))


def check_fraction(value: Any) -> float | None:
    if value is None:
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise SamplerError(f"demo_fraction must be None or in [0, 1], got {value!r}") from None
    if not 0.0 <= f <= 1.0:
        raise SamplerError(f"demo_fraction must be None or in [0, 1], got {value!r}")
    return f


def split_batch(b: int, n_demo: int, n_online: int, fraction: float | None, ere: bool) -> int:
    """How many of ``b`` rows come from the demo prefix; -1 means one joint population
    (``_split.split_lanes_py``)."""
    return int(split_lanes_py(b, n_demo, n_online, -1.0 if fraction is None else fraction, ere))


def window_ranges(ring_base: int, ring_cap: int, cursor: int, c: int) -> tuple[int, ...]:
    """Physical row ranges ``(lo0, hi0, lo1, hi1)`` of the ``c`` most recent ring rows
    (``_split.window_ranges_py``)."""
    return tuple(int(x) for x in window_ranges_py(ring_base, ring_cap, cursor, c))
