"""The ``numbatraj`` command.  Thin: parses arguments and calls the library."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import numpy as np

from numbatraj._version import __version__

__all__ = ["main", "format_info"]


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= (1 << 20) else f"{n / 1024:.1f} KiB"


def format_info(path: str) -> str:
    """The text ``numbatraj info PATH`` prints."""
    from numbatraj.data.store import TrajectoryStore

    with TrajectoryStore(path) as s:
        m = s.manifest
        lines = [f"store: {path}"]
        if s.is_foreign:
            lines.append("format: foreign HDF5 (no numbatraj manifest; schema recovered)")
        else:
            lines.append(
                f"format: {m.get('format')} v{m.get('format_version')} "
                f"(written by numbatraj {m.get('numbatraj_version')})"
            )
            lines.append(f"env_id: {m.get('env_id') or '-'}   seed: {m.get('seed') or '-'}")
        lengths = s.episode_lengths
        if lengths.size:
            ep = (
                f"{s.n_episodes} episodes, length min {int(lengths.min())} / "
                f"median {float(np.median(lengths)):g} / max {int(lengths.max())}"
            )
        else:
            ep = "0 episodes"
        lines.append(f"rows: {s.n_rows}   {ep}")
        lines.append(f"size on disk: {_mib(os.path.getsize(path))}")
        rows = [("column", "dtype", "row shape", "compression", "stored", "in memory")]
        for name, spec in s.columns.items():
            st = s.storage(name)
            rows.append(
                (
                    name,
                    spec.dtype.name,
                    str(spec.shape),
                    st["compression"],
                    _mib(st["stored_bytes"]),
                    _mib(st["nbytes"]),
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines.append("columns:")
        for r in rows:
            lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        attrs = {k[5:]: v for k, v in m.items() if k.startswith("attr.")}
        if attrs:
            lines.append("attrs: " + ", ".join(f"{k}={v}" for k, v in attrs.items()))
    return "\n".join(lines)


def _cmd_info(args: argparse.Namespace) -> int:
    print(format_info(args.path))
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from numbatraj.data.validate import validate_store

    report = validate_store(args.path)
    print(report)
    return 0 if report.ok else 1


# Modules that add their own commands: each defines ``register(subparsers)``.  A module that
# does not exist yet is skipped; any other import error propagates.
_COMMAND_MODULES = (
    "numbatraj.importers._cli",
    "numbatraj.remote._cli",
    "numbatraj.importers._cli_lerobot_write",
    "numbatraj.remote._cli_assets",
    "numbatraj.remote._cli_dataset",
)

# Modules that add a ``numbatraj import <format>`` subcommand: ``register(import_subparsers)``.
_IMPORT_MODULES = (
    "numbatraj.importers._cli_lerobot",
    "numbatraj.importers._cli_formats",
)


def _optional_module(name: str):  # type: ignore[no-untyped-def]
    import importlib

    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and name.startswith(exc.name):
            return None
        raise


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="numbatraj", description="Trajectory stores for RL and robot learning."
    )
    p.add_argument("--version", action="version", version=f"numbatraj {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    info = sub.add_parser("info", help="describe a store: columns, rows, episodes, sizes")
    info.add_argument("path")
    info.set_defaults(func=_cmd_info)

    val = sub.add_parser("validate", help="check a store; exit 1 listing every violation")
    val.add_argument("path")
    val.set_defaults(func=_cmd_validate)

    import_modules = [m for m in map(_optional_module, _IMPORT_MODULES) if m is not None]
    if import_modules:
        imp = sub.add_parser("import", help="convert a dataset from another format into a store")
        imp_sub = imp.add_subparsers(dest="format", required=True, metavar="FORMAT")
        for mod in import_modules:
            mod.register(imp_sub)
    for mod in map(_optional_module, _COMMAND_MODULES):
        if mod is not None:
            mod.register(sub)
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
