"""``numbatraj info|validate``: describe and check a store."""

from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np

__all__ = ["format_info", "register"]


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


def register(subparsers: Any) -> None:
    """Add the ``info`` and ``validate`` commands."""
    info = subparsers.add_parser("info", help="describe a store: columns, rows, episodes, sizes")
    info.add_argument("path")
    info.set_defaults(func=_cmd_info)

    val = subparsers.add_parser("validate", help="check a store; exit 1 listing every violation")
    val.add_argument("path")
    val.set_defaults(func=_cmd_validate)
