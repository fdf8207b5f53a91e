"""``numbatraj remote pull|push|list|describe|promote``: datasets, policies and projects
through a catalog service (``--kind``, default ``dataset``)."""

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
    facts = _store_facts(args.path) if args.kind == "dataset" else {}
    for k in ("env_id", "seed", "n_rows"):
        if getattr(args, k) is not None:
            facts[k] = getattr(args, k)
    meta = {"env_id": facts.get("env_id"), "n_rows": facts.get("n_rows"),
            "seed": facts.get("seed"), "source_commit": args.source_commit}
    with _catalog(args) as cat:
        if args.kind == "dataset" and args.alias is None and args.run is None:
            row = cat.push(args.path, args.name, args.version, **meta)
        else:
            row = cat.push_artifact(args.path, args.kind, args.name, args.version,
                                    alias=args.alias, run=args.run, **meta)
    aliases = f", aliases {', '.join(row['aliases'])}" if row.get("aliases") else ""
    print(f"{row['name']} {row['version']}: {row['status']}, {row['bytes']} bytes, "
          f"sha256 {row['sha256']}{aliases}")
    return 0


def _cmd_pull(args: argparse.Namespace) -> int:
    with _catalog(args) as cat:
        if args.kind == "dataset" and args.alias is None and args.dest is not None:
            res = cat.pull(args.name, args.dest, version=args.version)
        else:
            res = cat.pull_artifact(args.kind, args.name, args.version, args.alias,
                                    dest=args.dest)
    how = "up to date, nothing moved" if res.cached else f"{res.bytes_downloaded} bytes fetched"
    print(f"{res.record['name']} {res.record['version']} -> {res.path} ({how})")
    return 0


def _cmd_promote(args: argparse.Namespace) -> int:
    with _catalog(args) as cat:
        out = cat.promote(args.kind, args.name, args.version, args.alias)
    print(f"{out['kind']} {out['name']}: {out['alias']} -> {out['version']}")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    with _catalog(args) as cat:
        rows = cat.list_artifacts(args.kind, args.name)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table: list[tuple[str, ...]] = [
        ("name", "version", "status", "bytes", "env_id", "n_rows", "seed", "aliases")
    ]
    table += [
        tuple(
            (",".join(r.get(k) or []) or "-") if k == "aliases"
            else str(r.get(k) if r.get(k) is not None else "-") for k in table[0]
        ) for r in rows
    ]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0


def _cmd_describe(args: argparse.Namespace) -> int:
    with _catalog(args) as cat:
        rec = cat.describe_artifact(args.kind, args.name, args.version, args.alias)
    rec.pop("download", None)
    print(json.dumps(rec, indent=2))  # JSON always; --json is accepted as list takes it
    return 0


def register(subparsers: Any) -> None:
    """Add the ``remote`` command to the ``numbatraj`` parser."""
    rem = subparsers.add_parser(
        "remote", help="pull/push datasets through a catalog (NUMBATRAJ_CATALOG_URL/_API_KEY)"
    )
    rem_sub = rem.add_subparsers(dest="remote_command", required=True, metavar="ACTION")

    def sub(name: str, help_: str, alias: bool = True) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = rem_sub.add_parser(name, help=help_)
        p.add_argument("--env-file", default=".env", help="dotenv file with the two keys")
        p.add_argument("--kind", choices=("dataset", "policy", "project"), default="dataset",
                       help="artifact kind (default dataset)")
        if alias:
            p.add_argument("--alias", default=None,
                           help="an alias such as 'promoted' (pull/describe: by alias; "
                           "push: point it at the pushed version)")
        return p

    pull = sub("pull", "fetch an artifact to DEST unless DEST already matches")
    pull.add_argument("name")
    pull.add_argument("dest", nargs="?", default=None,
                      help="default for policies/projects: the numbatraj cache")
    pull.add_argument("--version", default=None, help="default: the latest ready version")
    pull.set_defaults(func=_cmd_pull)
    push = sub("push", "register, upload and complete a version (a project: a directory)")
    push.add_argument("path")
    push.add_argument("name")
    push.add_argument("version")
    push.add_argument("--env-id", default=None, help="default: from the store's manifest")
    push.add_argument("--n-rows", type=int, default=None, help="default: the store's rows")
    push.add_argument("--seed", type=int, default=None, help="default: from the manifest")
    push.add_argument("--source-commit", default=os.environ.get("GIT_COMMIT"))
    push.add_argument("--run", default=None, help="the training run that made it")
    push.set_defaults(func=_cmd_push)
    promote = sub("promote", "point an alias at a ready version", alias=False)
    promote.add_argument("name")
    promote.add_argument("version")
    promote.add_argument("alias")
    promote.set_defaults(func=_cmd_promote)
    lst = sub("list", "list versions (pending ones included)", alias=False)
    lst.add_argument("name", nargs="?", default=None)
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(func=_cmd_list)
    desc = sub("describe", "metadata of a ready version")
    desc.add_argument("name")
    desc.add_argument("--version", default=None)
    desc.add_argument("--json", action="store_true",
                      help="JSON (the default output; accepted as list takes it)")
    desc.set_defaults(func=_cmd_describe)
