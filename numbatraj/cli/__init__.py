"""The ``numbatraj`` command.  Thin: parses arguments and calls the library.

One module per command group; each imports the library lazily inside its commands, so
``numbatraj --help`` loads nothing but argparse.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from numbatraj._version import __version__
from numbatraj.cli import assets, catalog, dataset, formats, lerobot, remote, store
from numbatraj.cli.store import format_info

__all__ = ["build_parser", "format_info", "main"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="numbatraj", description="Trajectory stores for RL and robot learning."
    )
    p.add_argument("--version", action="version", version=f"numbatraj {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    store.register(sub)
    imp = sub.add_parser("import", help="convert a dataset from another format into a store")
    imp_sub = imp.add_subparsers(dest="format", required=True, metavar="FORMAT")
    lerobot.register_import(imp_sub)
    formats.register(imp_sub)
    catalog.register(sub)
    remote.register(sub)
    lerobot.register(sub)
    assets.register(sub)
    dataset.register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from numbatraj.errors import NumbatrajError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (NumbatrajError, OSError) as exc:
        print(f"numbatraj {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
