"""Plain NumPy / Python references for every kernel.

Tests compare each Numba kernel (host and device) against the function here.  Keep these
obviously correct rather than fast.  Sections are appended per package area.
"""

from __future__ import annotations

import numpy as np

__all__: list[str] = []


# --------------------------------------------------------------------------- store
def episode_offsets_ref(lengths: np.ndarray) -> np.ndarray:
    """Start row of each episode, by a Python loop."""
    out = np.zeros(len(lengths), dtype=np.int64)
    total = 0
    for i, n in enumerate(lengths):
        out[i] = total
        total += int(n)
    return out
