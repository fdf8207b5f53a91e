"""The catalog service a lab runs itself: metadata, API keys and presigned URLs.

See docs/remote.md.  :mod:`numbatraj.catalog.protocol` (names, routes, JSON keys; standard
library only) is the one part the client, :mod:`numbatraj.remote`, imports.  Names here are
imported lazily, so ``import numbatraj.catalog.protocol`` loads no SQL, HTTP server or
boto3 until a server name is used.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CatalogService": "numbatraj.catalog.service",
    "CatalogApp": "numbatraj.catalog.app",
    "CatalogDB": "numbatraj.catalog.db",
    "DatasetRecord": "numbatraj.catalog.db",
    "open_db": "numbatraj.catalog.db",
    "FileObjects": "numbatraj.catalog.objects",
    "ObjectBackend": "numbatraj.catalog.objects",
    "Presigned": "numbatraj.catalog.objects",
    "S3Objects": "numbatraj.catalog.objects",
    "open_objects": "numbatraj.catalog.objects",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'numbatraj.catalog' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
