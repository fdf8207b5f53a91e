"""Online replay buffers composed from declared columns, a ring and one sampler.

:class:`StoreReplay` keeps the ring in host memory; :class:`StoreReplayGpu` in device
memory (imported lazily: ``numbatraj.replay`` does not import ``numba.cuda``).  ``.demo``
files (:class:`DemoWriter`, :class:`DemoFile`) hold intervention transitions that load as a
replay's pinned demonstration prefix.
"""

from typing import Any

from numbatraj.replay.buffer import StoreReplay
from numbatraj.replay.columns import Quantization
from numbatraj.replay.demo_file import DemoFile, DemoWriter

__all__ = ["DemoFile", "DemoWriter", "Quantization", "StoreReplay", "StoreReplayGpu"]


def __getattr__(name: str) -> Any:
    if name == "StoreReplayGpu":
        from numbatraj.replay.gpu import StoreReplayGpu

        return StoreReplayGpu
    raise AttributeError(f"module 'numbatraj.replay' has no attribute {name!r}")
