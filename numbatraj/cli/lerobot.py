"""``numbatraj import lerobot`` (a LeRobot v3.0 dataset, Hub or directory, into a store) and
``numbatraj lerobot push|reject`` (publish a recorded directory, or reject an episode)."""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

from numbatraj.cli._common import UsageError

__all__ = ["register", "register_import"]

_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def _source(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """``(repo id, directory)``: exactly one is set (SOURCE, or the old --repo / --root)."""
    given = [v for v in (args.source, args.repo, args.root) if v]
    if len(given) != 1:
        raise UsageError("give one SOURCE: a Hub repo id (ORG/NAME) or a dataset directory")
    if args.root or (args.source and os.path.isdir(args.source)):
        return None, args.root or args.source
    repo = args.repo or args.source
    if not _REPO.match(repo):
        raise UsageError(f"SOURCE {repo!r} is neither a directory nor a Hub repo id (ORG/NAME)")
    return repo, None


def _cmd_import(args: argparse.Namespace) -> int:
    repo, root = _source(args)
    from numbatraj.lerobot.hub import default_store_path, resolve_dataset_root
    from numbatraj.lerobot.read import import_lerobot_v3

    if repo is not None:
        root = resolve_dataset_root(
            repo, revision=args.revision, allow_download=not args.no_download
        )
        out = args.out or default_store_path(repo, args.height, args.width)
        source: str | None = repo + (f"@{args.revision}" if args.revision else "")
    else:
        assert root is not None
        if not args.out:
            raise UsageError("a directory SOURCE needs --out PATH")
        out, source = args.out, None
    path = import_lerobot_v3(
        root,
        out,
        height=args.height,
        width=args.width,
        overwrite=args.overwrite,
        show_progress=getattr(args, "progress", False) and not args.no_progress,
        source=source,
    )
    print(path)
    return 0


def register_import(subparsers: Any) -> None:
    """Add the ``lerobot`` subcommand to ``numbatraj import``'s subparsers."""
    p = subparsers.add_parser(
        "lerobot",
        help="LeRobot v3.0 dataset (Hub repo or directory) -> store",
        description=(
            "Import a LeRobot v3.0 dataset into a trajectory store with columns qpos, action, "
            "task_index and images (n_cameras, 3, H, W).  SOURCE is a dataset directory or a "
            "Hub repo id; a repo is looked for in numbatraj's cache, LeRobot's home "
            "(HF_LEROBOT_HOME) and the huggingface_hub cache before it is downloaded."
        ),
    )
    p.add_argument("source", nargs="?", metavar="SOURCE",
                   help="ORG/NAME (a Hub dataset repo) or a local dataset directory")
    p.add_argument("--repo", help=argparse.SUPPRESS)  # the former spelling of SOURCE
    p.add_argument("--root", help=argparse.SUPPRESS)  # the former spelling of SOURCE
    p.add_argument("--out", metavar="PATH",
                   help="output .h5 (needed for a directory; default for a repo: under the "
                        "cache)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing output that is not this import's (another "
                        "dataset, revision or parameters, or a broken file)")
    p.add_argument("--force", dest="overwrite", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--height", type=int, default=240, help="image height (default 240)")
    p.add_argument("--width", type=int, default=320, help="image width (default 320)")
    p.add_argument("--revision", metavar="REV",
                   help="branch, tag or commit (default: v3.0, else main)")
    p.add_argument("--no-download", action="store_true", help="fail rather than download")
    p.add_argument("--quiet", dest="no_progress", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(func=_cmd_import, extras=("lerobot", "hub"))


def _push(args: argparse.Namespace) -> int:
    from numbatraj.lerobot.hub import push_lerobot_dataset

    if not getattr(args, "progress", False):
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()

    result = push_lerobot_dataset(
        args.root,
        args.repo,
        private=not args.public,
        message=args.message,
        endpoint=args.endpoint,
    )
    if result.commit is None:
        print(f"{args.repo}: up to date ({result.files} files, nothing sent)")
    else:
        print(f"{args.repo}: sent {len(result.sent)} of {result.files} files ({result.commit})")
    for rel in result.held_back:
        print(f"held back (not in the episode table yet): {rel}")
    return 0


def _reject(args: argparse.Namespace) -> int:
    from numbatraj.lerobot.write import reject_episode

    rejected = reject_episode(args.root, args.episode, note=args.note)
    print(f"rejected episodes: {rejected}")
    return 0


def register(subparsers: Any) -> None:
    """Add the top-level ``lerobot`` command group (``push``, ``reject``)."""
    group = subparsers.add_parser(
        "lerobot",
        help="LeRobot v3.0 datasets: push to the Hugging Face Hub, reject an episode",
        description="Work on a LeRobot v3.0 directory written by a recorder.",
    )
    sub = group.add_subparsers(dest="lerobot_command", metavar="COMMAND", required=True)
    p = sub.add_parser(
        "push",
        help="upload a dataset directory to a Hub dataset repo",
        description=(
            "Upload what is on disk (hidden, temporary and .part files skipped, videos of an "
            "episode still being recorded held back) in one commit; unchanged files are not sent "
            "again.  Token: HF_TOKEN, then a .env file, then the hf CLI's login."
        ),
    )
    p.add_argument("--root", required=True, metavar="DIR", help="the dataset directory")
    p.add_argument("--repo", required=True, metavar="ORG/NAME", help="the dataset repo")
    p.add_argument("--message", metavar="TEXT", help="commit message")
    p.add_argument(
        "--public", action="store_true",
        help="create the repo public (default private; an existing repo keeps its visibility)",
    )
    p.add_argument("--endpoint", metavar="URL", help="Hub URL (default: HF_ENDPOINT or the Hub)")
    p.set_defaults(func=_push, extras=("hub",))
    r = sub.add_parser(
        "reject",
        help="list an episode in meta/rejected_episodes.json (kept on disk, not imported)",
    )
    r.add_argument("--root", required=True, metavar="DIR", help="the dataset directory")
    r.add_argument("--episode", required=True, type=int, help="episode index")
    r.add_argument("--note", metavar="TEXT", help="why (appended to the file's note)")
    r.set_defaults(func=_reject, extras=("lerobot",))
