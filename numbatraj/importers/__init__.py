"""Importers: datasets from other formats become trajectory stores.

Each importer reads its source with the library made for it (h5py, zarr, Pillow), streams
rows into :class:`~numbatraj.TrajectoryStoreWriter` (which builds the store under a temporary
name of its own and publishes it when complete) and is gated in the tests against an
independent reading of the source.  Names are imported lazily, so ``import
numbatraj.importers`` does not pull in zarr until an importer that needs it is used.

LeRobot v3.0 lives in :mod:`numbatraj.lerobot`; ``import_lerobot_v3`` stays reachable here
as an alias of :func:`numbatraj.lerobot.import_lerobot_v3`.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "SourceFormatError": "numbatraj.importers._common",
    "import_d4rl": "numbatraj.importers.d4rl",
    "import_diffusion_policy": "numbatraj.importers.diffusion_policy",
    "import_lafan_g1": "numbatraj.importers.lafan",
    "import_libero": "numbatraj.importers.libero",
    "import_minari": "numbatraj.importers.minari",
    "import_robomimic": "numbatraj.importers.robomimic",
}

__all__ = sorted([*_EXPORTS, "import_lerobot_v3"])


def __getattr__(name: str) -> Any:
    if name == "import_lerobot_v3":  # the alias: the public numbatraj.lerobot, on first use
        from numbatraj.lerobot import import_lerobot_v3

        return import_lerobot_v3
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'numbatraj.importers' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
