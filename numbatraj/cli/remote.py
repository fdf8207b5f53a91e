"""``numbatraj remote pull|push|list|describe``: datasets through a catalog service."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

__all__ = ["register"]


def _catalog(args: argparse.Namespace) -> Any:
    from numbatraj.remote.client import RemoteCatalog

    return RemoteCatalog.from_env(args.env_file)


def _store_facts(path: str) -> dict[str, Any]:
    """env_id, seed and n_rows from a numbatraj store's manifest; empty for other files."""
    try:
        from numbatraj.data.store import TrajectoryStore

        with TrajectoryStore(path) as s:
            m = s.manifest
            seed = m.get("seed")
            return {
                "env_id": m.get("env_id") or None,
                "seed": int(seed) if seed not in (None, "", "None") else None,
                "n_rows": s.n_rows,
            }
    except (OSError, ValueError):
        return {}


def _cmd_push(args: argparse.Namespace) -> int:
    facts = _store_facts(args.path)
    for k in ("env_id", "seed", "n_rows"):
        if getattr(args, k) is not None:
            facts[k] = getattr(args, k)
    with _catalog(args) as cat:
        row = cat.push(
            args.path, args.name, args.version, env_id=facts.get("env_id"),
            n_rows=facts.get("n_rows"), seed=facts.get("seed"),
            source_commit=args.source_commit,
        )
    print(f"{row['name']} {row['version']}: {row['status']}, {row['bytes']} bytes, "
          f"sha256 {row['sha256']}")
    return 0


def _cmd_pull(args: argparse.Namespace) -> int:
    with _catalog(args) as cat:
        res = cat.pull(args.name, args.dest, version=args.version)
    how = "up to date, nothing moved" if res.cached else f"{res.bytes_downloaded} bytes fetched"
    print(f"{res.record['name']} {res.record['version']} -> {res.path} ({how})")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    with _catalog(args) as cat:
        rows = cat.list(args.name)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table: list[tuple[str, ...]] = [
        ("name", "version", "status", "bytes", "env_id", "n_rows", "seed")
    ]
    table += [
        tuple(str(r.get(k) if r.get(k) is not None else "-") for k in table[0]) for r in rows
    ]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0


def _cmd_describe(args: argparse.Namespace) -> int:
    with _catalog(args) as cat:
        rec = cat.describe(args.name, args.version)
    rec.pop("download", None)
    print(json.dumps(rec, indent=2))
    return 0


def register(subparsers: Any) -> None:
    """Add the ``remote`` command to the ``numbatraj`` parser."""
    rem = subparsers.add_parser(
        "remote", help="pull/push datasets through a catalog (NUMBATRAJ_CATALOG_URL/_API_KEY)"
    )
    rem_sub = rem.add_subparsers(dest="remote_command", required=True, metavar="ACTION")

    def sub(name: str, help_: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = rem_sub.add_parser(name, help=help_)
        p.add_argument("--env-file", default=".env", help="dotenv file with the two keys")
        return p

    pull = sub("pull", "fetch a dataset to DEST unless DEST already matches")
    pull.add_argument("name")
    pull.add_argument("dest")
    pull.add_argument("--version", default=None, help="default: the latest ready version")
    pull.set_defaults(func=_cmd_pull)
    push = sub("push", "register, upload and complete a dataset version")
    push.add_argument("path")
    push.add_argument("name")
    push.add_argument("version")
    push.add_argument("--env-id", default=None, help="default: from the store's manifest")
    push.add_argument("--n-rows", type=int, default=None, help="default: the store's rows")
    push.add_argument("--seed", type=int, default=None, help="default: from the manifest")
    push.add_argument("--source-commit", default=os.environ.get("GIT_COMMIT"))
    push.set_defaults(func=_cmd_push)
    lst = sub("list", "list datasets (pending ones included)")
    lst.add_argument("name", nargs="?", default=None)
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(func=_cmd_list)
    desc = sub("describe", "metadata of a ready dataset version")
    desc.add_argument("name")
    desc.add_argument("--version", default=None)
    desc.set_defaults(func=_cmd_describe)
