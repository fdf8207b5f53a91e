"""Importers: datasets from other formats become trajectory stores.

Each importer reads its source with the library made for it (h5py, zarr, pyarrow, PyAV),
streams rows into :class:`~numbatraj.TrajectoryStoreWriter` (which builds ``<out>.tmp`` and
renames it when complete) and is gated in the tests against an independent reading of the
source.  Names are imported lazily, so ``import numbatraj.importers`` does not pull in
pyarrow, PyAV or zarr until an importer that needs them is used.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "SourceFormatError": "numbatraj.importers._common",
    "import_d4rl": "numbatraj.importers.d4rl",
    "import_diffusion_policy": "numbatraj.importers.diffusion_policy",
    "DatasetNotFoundError": "numbatraj.importers.hub_cache",
    "resolve_dataset_root": "numbatraj.importers.hub_cache",
    "import_lafan_g1": "numbatraj.importers.lafan",
    "LeRobotFormatError": "numbatraj.importers.lerobot",
    "import_lerobot_v3": "numbatraj.importers.lerobot",
    "import_libero": "numbatraj.importers.libero",
    "import_minari": "numbatraj.importers.minari",
    "import_robomimic": "numbatraj.importers.robomimic",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'numbatraj.importers' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
