"""What every command group shares: exit codes, the missing-extra hint, JSON and tables.

Exit codes (documented in ``numbatraj --help``):

- ``0``: the command did what was asked;
- ``1``: it ran and failed (a store with violations, a file that cannot be read, a refused
  request), the message on one line of stderr;
- ``2``: usage: a bad argument, or an optional dependency that is not installed (the line
  names the extra to install);
- ``130``: interrupted (Ctrl-C).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "DISTRIBUTION",
    "EXTRA_MODULES",
    "UsageError",
    "extra_for",
    "print_json",
    "print_table",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

# Top-level import names of each runtime extra's distributions (setup.cfg's
# [options.extras_require]; tests/test_cli.py checks the two agree).
EXTRA_MODULES: dict[str, frozenset[str]] = {
    "cuda": frozenset({"numba_cuda"}),
    "lerobot": frozenset({"pyarrow", "av", "PIL", "tqdm", "platformdirs"}),
    "remote": frozenset(
        {"requests", "boto3", "botocore", "zstandard", "tqdm", "dotenv", "platformdirs",
         "starlette", "uvicorn", "h11", "sqlalchemy", "httpx", "anyio", "urllib3"}
    ),
    "hub": frozenset({"huggingface_hub", "dotenv", "platformdirs"}),
    "importers": frozenset({"zarr", "numcodecs", "PIL", "tqdm"}),
    "torch": frozenset({"torch"}),
    "gym": frozenset({"gymnasium"}),
    "ray": frozenset({"ray"}),
    "postgres": frozenset({"psycopg"}),
}


# import name -> distribution name, where they differ
DISTRIBUTION = {"PIL": "Pillow", "dotenv": "python-dotenv", "numba_cuda": "numba-cuda",
                "sqlalchemy": "SQLAlchemy"}


class UsageError(Exception):
    """A command-line mistake found after parsing (exit 2)."""


def extra_for(module: str | None, preferred: Sequence[str] = ()) -> str | None:
    """The extras that install top-level module ``module``, as pip spells them
    (``lerobot,hub``): all of ``preferred`` (the command's own extras) when one of them
    holds the module, else the first extra that does; ``None`` for a module no extra
    provides (a real bug, not a missing extra)."""
    if not module:
        return None
    top = module.split(".")[0]
    if any(top in EXTRA_MODULES.get(name, ()) for name in preferred):
        return ",".join(preferred)
    for name, modules in EXTRA_MODULES.items():
        if top in modules:
            return name
    return None


def print_json(value: Any) -> None:
    """``value`` as indented JSON on stdout (numpy scalars and paths as plain values)."""

    def default(o: Any) -> Any:
        if hasattr(o, "item"):
            return o.item()
        if hasattr(o, "tolist"):
            return o.tolist()
        return str(o)

    json.dump(value, sys.stdout, indent=2, default=default)
    sys.stdout.write("\n")


def print_table(header: Sequence[str], rows: Iterable[Mapping[str, Any] | Sequence[Any]],
                keys: Sequence[str] | None = None) -> None:
    """A left-aligned text table; ``None`` cells print as ``-``."""
    keys = list(keys or header)
    table: list[list[str]] = [list(header)]
    for r in rows:
        cells = [r.get(k) for k in keys] if isinstance(r, Mapping) else list(r)
        table.append(["-" if c is None else str(c) for c in cells])
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
