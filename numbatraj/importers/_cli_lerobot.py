"""``numbatraj import lerobot``: a LeRobot v3.0 dataset (Hub or directory) into a store."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register"]


def _cmd(args: argparse.Namespace) -> int:
    from numbatraj.lerobot.hub import default_store_path, resolve_dataset_root
    from numbatraj.lerobot.read import import_lerobot_v3

    if args.repo:
        root = resolve_dataset_root(
            args.repo, revision=args.revision, allow_download=not args.no_download
        )
        out = args.out or default_store_path(args.repo, args.height, args.width)
        source = args.repo + (f"@{args.revision}" if args.revision else "")
    else:
        if not args.out:
            args.lerobot_parser.error("--root needs --out")
        root, out, source = args.root, args.out, None
    path = import_lerobot_v3(
        root,
        out,
        height=args.height,
        width=args.width,
        force=args.force,
        show_progress=not args.quiet,
        source=source,
    )
    print(path)
    return 0


def register(subparsers: Any) -> None:
    """Add the ``lerobot`` subcommand to ``numbatraj import``'s subparsers."""
    p = subparsers.add_parser(
        "lerobot",
        help="LeRobot v3.0 dataset (Hub repo or directory) -> store",
        description=(
            "Import a LeRobot v3.0 dataset into a trajectory store with columns qpos, action, "
            "task_index and images (n_cameras, 3, H, W). --repo looks in numbatraj's cache, "
            "LeRobot's home and the huggingface_hub cache before downloading."
        ),
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--repo", metavar="ORG/NAME", help="Hugging Face dataset repo")
    src.add_argument("--root", metavar="DIR", help="a local dataset directory (needs --out)")
    p.add_argument("--out", metavar="PATH", help="output .h5 (default for --repo: under the cache)")
    p.add_argument("--height", type=int, default=240, help="image height (default 240)")
    p.add_argument("--width", type=int, default=320, help="image width (default 320)")
    p.add_argument("--revision", metavar="REV", help="branch, tag or commit (default: main)")
    p.add_argument("--force", action="store_true", help="rebuild even if the output exists")
    p.add_argument("--no-download", action="store_true", help="fail rather than download")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd, lerobot_parser=p)
