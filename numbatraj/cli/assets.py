"""``numbatraj assets status|pull|where [PATTERN] [--root DIR] [--force]``."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from numbatraj.cli._common import print_json

__all__ = ["register"]


def _packs(args: argparse.Namespace,
           quiet: bool = False) -> tuple[list[Any], list[tuple[str, str]]]:
    from numbatraj.remote.assets import declared_packs

    if not os.path.isdir(args.root):
        raise NotADirectoryError(f"--root {args.root} is not a directory")
    packs, bad = declared_packs(args.root, args.pattern)
    for _, err in bad:
        print(f"FAILED   {err}", file=sys.stderr)
    if not packs and not bad and not quiet:
        where = f" matching {args.pattern!r}" if args.pattern else ""
        print(f"no assets.kv{where} under {os.path.abspath(args.root)}")
    return packs, bad


def _rel(path: str) -> str:
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _cmd_status(args: argparse.Namespace) -> int:
    from numbatraj.remote.assets import pack_status

    packs, bad = _packs(args, quiet=args.json)
    states = [pack_status(d) for d in packs]
    missing = sum(st.state != "present" for st in states)
    if args.json:
        print_json({
            "packs": [{"label": st.decl.label, "state": st.state, "bytes": st.decl.bytes,
                       "provider": st.decl.provider, "dest": st.decl.dest,
                       "declared_in": st.decl.where} for st in states],
            "invalid": [{"assets_kv": kv, "error": err} for kv, err in bad],
            "present": len(packs) - missing,
        })
        return 1 if (missing or bad) else 0
    for st in states:
        d = st.decl
        print(f"{st.state:8s} {d.label:24s} {d.bytes:>12d} B  {_rel(d.dest)}  ({_rel(d.where)})")
    if packs:
        print(f"{len(packs) - missing} of {len(packs)} packs present")
    return 1 if (missing or bad) else 0


def _cmd_pull(args: argparse.Namespace) -> int:
    from numbatraj.remote.assets import PackResult, pull_packs

    packs, bad = _packs(args)

    def show(r: PackResult) -> None:
        d = r.decl
        if r.state == "failed":
            print(f"FAILED   {d.label}: {r.error}", file=sys.stderr)
        elif r.state == "present":
            print(f"present  {d.label} -> {_rel(d.dest)}")
        else:
            how = f"{r.linked} linked" + (f", {r.copied} copied" if r.copied else "")
            print(f"pulled   {d.label} -> {_rel(d.dest)} ({r.downloaded} bytes fetched, {how})")

    results = pull_packs(packs, force=args.force, env_file=args.env_file, on_result=show,
                         fetch_options={"progress": bool(getattr(args, "progress", False))})
    failed = [r.decl.label for r in results if r.state == "failed"] + [kv for kv, _ in bad]
    if failed:
        print(f"{len(failed)} failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _cmd_where(args: argparse.Namespace) -> int:
    from numbatraj.remote.assets import where_packs

    packs, bad = _packs(args)
    for d, url, cred in where_packs(packs, env_file=args.env_file):
        print(f"{d.label}  [{d.provider}]  {url}\n    credential: {cred}")
    return 1 if bad else 0


def register(subparsers: Any) -> None:
    """Add ``numbatraj assets status|pull|where`` to the ``numbatraj`` parser."""
    ap = subparsers.add_parser(
        "assets", help="asset packs declared in assets.kv files: status, pull, where"
    )
    sub = ap.add_subparsers(dest="assets_command", required=True, metavar="ACTION")
    for name, func, help_ in (
        ("status", _cmd_status, "what is on this machine and what is not (exit 1 if any "
         "pack is not present)"),
        ("pull", _cmd_pull, "fetch, verify, extract and place every declared pack"),
        ("where", _cmd_where, "each pack's URL and whether a credential is sent"),
    ):
        p = sub.add_parser(name, help=help_)
        p.add_argument("pattern", nargs="?", default=None,
                       help="only assets.kv files whose path (under --root) matches")
        p.add_argument("--root", default=".", help="tree searched for assets.kv (default .)")
        p.add_argument("--env-file", default=".env",
                       help="dotenv file for the catalog URL and key (provider=catalog)")
        if name == "pull":
            p.add_argument("--force", action="store_true", help="re-fetch even if present")
        if name == "status":
            p.add_argument("--json", action="store_true", help="print the packs as JSON")
        p.set_defaults(func=func, extras=("remote",))
