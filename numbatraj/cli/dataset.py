"""``numbatraj dataset push|pull|list``: a project's recordings through the catalog."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from numbatraj.cli._common import print_json, print_table

__all__ = ["register"]


def _sync(args: argparse.Namespace) -> Any:
    from numbatraj.remote.client import RemoteCatalog
    from numbatraj.remote.recording import RecordingSync

    cat = RemoteCatalog.from_env(args.env_file)
    return RecordingSync(cat, args.project, args.dataset, args.root)


def _show(res: Any) -> None:
    held = f", held back {len(res.held_back)}" if res.held_back else ""
    rep = f", repeated {res.repeats}x" if res.repeats else ""
    print(f"pass: {res.offered} offered, {res.unchanged} unchanged, {res.uploaded} uploaded "
          f"({res.uploaded_bytes} bytes){held}{rep}: {res.note}", flush=True)


def _cmd_push(args: argparse.Namespace) -> int:
    import os

    sync = _sync(args)
    try:
        if not os.path.isdir(sync.root):
            print(f"numbatraj dataset push: error: {sync.root} is not a directory",
                  file=sys.stderr)
            return 1
        if not args.watch:
            res = sync.push_pass()
            _show(res)
            return 0 if (res.committed or res.note in ("unchanged",)) else 1
        print(f"watching {sync.root} every {args.every:g} s (Ctrl-C stops; it only reads)",
              flush=True)
        summary = sync.watch(args.every, on_pass=_show)
        print(summary, flush=True)
        return 0
    finally:
        sync.catalog.close()


def _cmd_pull(args: argparse.Namespace) -> int:
    sync = _sync(args)
    try:
        dest = args.dest or sync.root
        n, moved = sync.pull(dest)
    finally:
        sync.catalog.close()
    print(f"{args.project}/{args.dataset} -> {dest} ({n} files, {moved} bytes fetched)")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from numbatraj.remote.client import RemoteCatalog
    from numbatraj.remote.recording import list_recordings

    with RemoteCatalog.from_env(args.env_file) as cat:
        rows = list_recordings(cat, args.project)
    if args.json:
        print_json(rows)
        return 0
    print_table(("dataset", "files", "bytes", "episodes", "frames"), rows)
    return 0


def register(subparsers: Any) -> None:
    """Add ``numbatraj dataset push|pull|list`` to the ``numbatraj`` parser."""
    ds = subparsers.add_parser(
        "dataset", help="mirror a project's recordings through the catalog, file by file"
    )
    sub = ds.add_subparsers(dest="dataset_command", required=True, metavar="ACTION")

    def common(name: str, help_: str, dataset: bool = True) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, help=help_)
        p.add_argument("--project", required=True)
        if dataset:
            p.add_argument("--dataset", required=True)
            p.add_argument("--root", default=None, help="the dataset directory (default "
                           "$NUMBATRAJ_PROJECTS/<project>/datasets/<dataset>, projects/...)")
        p.add_argument("--env-file", default=".env",
                       help="dotenv with the catalog URL and key (and NUMBATRAJ_PROJECTS)")
        p.set_defaults(extras=("remote",))
        return p

    push = common("push", "offer every file; upload what the service lacks; metadata last")
    push.add_argument("--watch", action="store_true", help="repeat until Ctrl-C")
    push.add_argument("--every", type=float, default=60.0, help="seconds between passes")
    push.set_defaults(func=_cmd_push)
    pull = common("pull", "fetch the service's snapshot (metadata last)")
    pull.add_argument("--dest", default=None, help="default: the dataset directory")
    pull.set_defaults(func=_cmd_pull)
    lst = common("list", "datasets of a project on the service", dataset=False)
    lst.add_argument("--json", action="store_true", help="print the datasets as JSON")
    lst.set_defaults(func=_cmd_list)
