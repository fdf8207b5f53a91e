"""``numbatraj info|validate``: describe a store, a replay checkpoint or a ``.demo`` file;
check a store."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import numpy as np

from numbatraj.cli._common import EXIT_FAILED, EXIT_OK, print_json

__all__ = ["describe", "format_info", "register"]

_DEMO_MAGIC = b"NTJDEMO\x00"  # numbatraj.replay.DEMO_MAGIC, compared without importing numba


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= (1 << 20) else f"{n / 1024:.1f} KiB"


def _kind(path: str) -> str:
    """``demo``, ``checkpoint`` or ``store``, from the file's first bytes and attrs."""
    if not os.path.isfile(path):
        return "store"  # the store reader says what is wrong with the path
    with open(path, "rb") as fh:
        head = fh.read(8)
    if head == _DEMO_MAGIC:
        return "demo"
    import h5py

    try:
        with h5py.File(path, "r") as f:
            if "numbatraj_replay" in f.attrs:
                return "checkpoint"
    except OSError:
        pass
    return "store"


def _describe_store(path: str) -> dict[str, Any]:
    from numbatraj.data.store import TrajectoryStore
    from numbatraj.errors import SchemaError

    with TrajectoryStore(path) as s:
        m = s.manifest
        lengths = s.episode_lengths
        cols = []
        for name, spec in s.columns.items():
            st = s.storage(name)
            cols.append({"name": name, "dtype": spec.dtype.name, "shape": list(spec.shape),
                         "compression": st["compression"], "stored_bytes": st["stored_bytes"],
                         "nbytes": st["nbytes"]})
        stats = {}
        for name in s.columns:
            try:
                got = s.stats(name)
            except SchemaError:  # no statistics recorded for this column
                continue
            stats[name] = {k: np.asarray(v).tolist() for k, v in got.items()}
        return {
            "kind": "store",
            "path": path,
            "foreign": s.is_foreign,
            "format": m.get("format"),
            "format_version": m.get("format_version"),
            "numbatraj_version": m.get("numbatraj_version"),
            "env_id": m.get("env_id") or None,
            "seed": m.get("seed") or None,
            "n_rows": s.n_rows,
            "n_episodes": s.n_episodes,
            "episode_length": None if not lengths.size else {
                "min": int(lengths.min()), "median": float(np.median(lengths)),
                "max": int(lengths.max())},
            "bytes": os.path.getsize(path),
            "columns": cols,
            "attrs": {k[5:]: v for k, v in m.items() if k.startswith("attr.")},
            "stats": stats,
        }


def _describe_checkpoint(path: str) -> dict[str, Any]:
    # Read-only look at the documented checkpoint layout (numbatraj.replay._checkpoint):
    # attrs numbatraj_replay, config (JSON) and state (JSON); no row is read.
    import h5py

    from numbatraj.errors import IntegrityError

    with h5py.File(path, "r") as f:
        try:
            cfg = json.loads(f.attrs["config"])
            state = json.loads(f.attrs["state"])
        except (KeyError, ValueError) as exc:
            raise IntegrityError(f"checkpoint {path!r}: unreadable config/state: {exc}") from exc
        version = int(f.attrs["numbatraj_replay"])
    cols = [{"name": c["name"], "dtype": np.dtype(c["dtype"]).name, "shape": c["shape"]}
            for c in cfg.get("columns", [])]
    return {
        "kind": "checkpoint",
        "path": path,
        "format_version": version,
        "replay": cfg.get("kind", "StoreReplay"),
        "capacity": cfg.get("capacity"),
        "demo_capacity": cfg.get("demo_capacity"),
        "prioritized": cfg.get("prioritized"),
        "seed": cfg.get("seed"),
        "size": state.get("size"),
        "n_demo": state.get("n_demo"),
        "n_added": state.get("n_added"),
        "quantize": cfg.get("quantize") or {},
        "bytes": os.path.getsize(path),
        "columns": cols,
    }


def _describe_demo(path: str) -> dict[str, Any]:
    from numbatraj.replay.demo_file import DemoFile

    d = DemoFile(path, verify=False)
    return {
        "kind": "demo",
        "path": path,
        "n_rows": d.n_rows,
        "interventions": int(np.count_nonzero(d.intervention)),
        "bytes": os.path.getsize(path),
        "columns": [{"name": s.name, "dtype": s.dtype.name, "shape": list(s.shape)}
                    for s in d.columns.values()],
    }


def describe(path: str) -> dict[str, Any]:
    """What ``numbatraj info --json PATH`` prints: a store, checkpoint or ``.demo`` file."""
    kind = _kind(path)
    if kind == "demo":
        return _describe_demo(path)
    if kind == "checkpoint":
        return _describe_checkpoint(path)
    return _describe_store(path)


def _short(v: Any, n: int = 3) -> str:
    """A statistic for the table: a number, or the first ``n`` values of a vector."""
    if v is None:
        return "-"
    flat = np.ravel(np.asarray(v, dtype=np.float64))
    text = ", ".join(f"{x:.4g}" for x in flat[:n])
    return text if flat.size == 1 else f"[{text}{', ...' if flat.size > n else ''}]"


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def _format(d: dict[str, Any]) -> str:
    path = d["path"]
    if d["kind"] == "store":
        lines = [f"store: {path}"]
        if d["foreign"]:
            lines.append("format: foreign HDF5 (no numbatraj manifest; schema recovered)")
        else:
            lines.append(f"format: {d['format']} v{d['format_version']} "
                         f"(written by numbatraj {d['numbatraj_version']})")
            lines.append(f"env_id: {d['env_id'] or '-'}   seed: {d['seed'] or '-'}")
        el = d["episode_length"]
        ep = (f"{d['n_episodes']} episodes, length min {el['min']} / median {el['median']:g} "
              f"/ max {el['max']}") if el else "0 episodes"
        lines.append(f"rows: {d['n_rows']}   {ep}")
        lines.append(f"size on disk: {_mib(d['bytes'])}")
        rows: list[tuple[str, ...]] = [
            ("column", "dtype", "row shape", "compression", "stored", "in memory")]
        rows += [(c["name"], c["dtype"], str(tuple(c["shape"])), c["compression"],
                  _mib(c["stored_bytes"]), _mib(c["nbytes"])) for c in d["columns"]]
        lines.append("columns:")
        lines += _table(rows)
        if d.get("stats"):
            srows: list[tuple[str, ...]] = [("stats", "count", "mean", "std", "min", "max")]
            srows += [(name, str(st.get("count", "-")), *(_short(st.get(k))
                                                       for k in ("mean", "std", "min", "max")))
                      for name, st in d["stats"].items()]
            lines += _table(srows)
        if d["attrs"]:
            lines.append("attrs: " + ", ".join(f"{k}={v}" for k, v in d["attrs"].items()))
        return "\n".join(lines)
    table: list[tuple[str, ...]] = [("column", "dtype", "row shape")]
    table += [(c["name"], c["dtype"], str(tuple(c["shape"]))) for c in d["columns"]]
    if d["kind"] == "checkpoint":
        lines = [
            f"replay checkpoint: {path}",
            f"format: numbatraj_replay v{d['format_version']}, {d['replay']}"
            + (", prioritized" if d["prioritized"] else ", uniform"),
            f"capacity: {d['capacity']} ({d['demo_capacity']} demo)   held: {d['size']} online "
            f"+ {d['n_demo']} demo   added: {d['n_added']}   seed: {d['seed']}",
            f"size on disk: {_mib(d['bytes'])}",
        ]
        if d["quantize"]:
            lines.append("quantized: " + ", ".join(
                f"{k} [{lo:g}, {hi:g}]" for k, (lo, hi) in d["quantize"].items()))
    else:
        lines = [
            f".demo file: {path}",
            f"rows: {d['n_rows']}   interventions: {d['interventions']}",
            f"size on disk: {_mib(d['bytes'])}",
        ]
    lines.append("columns:")
    lines += _table(table)
    return "\n".join(lines)


def format_info(path: str) -> str:
    """The text ``numbatraj info PATH`` prints."""
    return _format(describe(path))


def _cmd_info(args: argparse.Namespace) -> int:
    if args.json:
        print_json(describe(args.path))
    else:
        print(format_info(args.path))
    return EXIT_OK


def _cmd_validate(args: argparse.Namespace) -> int:
    from numbatraj.data.validate import validate_store

    report = validate_store(args.path)
    if args.json:
        print_json({"path": report.path, "ok": report.ok, "errors": report.errors,
                    "warnings": report.warnings, "n_rows": report.n_rows,
                    "n_episodes": report.n_episodes, "foreign": report.foreign})
    else:
        print(report)
    return EXIT_OK if report.ok else EXIT_FAILED


def register(subparsers: Any) -> None:
    """Add the ``info`` and ``validate`` commands."""
    info = subparsers.add_parser(
        "info", help="describe a store, a replay checkpoint or a .demo file",
        description="Describe a trajectory store (columns, rows, episodes, sizes), a replay "
                    "checkpoint (StoreReplay.save) or a .demo file; reads headers only.",
    )
    info.add_argument("path")
    info.add_argument("--json", action="store_true", help="print the description as JSON")
    info.set_defaults(func=_cmd_info)

    val = subparsers.add_parser("validate", help="check a store; exit 1 listing every violation")
    val.add_argument("path")
    val.add_argument("--json", action="store_true", help="print the report as JSON")
    val.set_defaults(func=_cmd_validate)
