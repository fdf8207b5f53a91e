"""``numbatraj lerobot push|reject``: publish a recorded LeRobot v3.0 directory, or reject one
of its episodes."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register"]


def _push(args: argparse.Namespace) -> int:
    from numbatraj.lerobot.hub import push_lerobot_dataset

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
    p.set_defaults(func=_push)
    r = sub.add_parser(
        "reject",
        help="list an episode in meta/rejected_episodes.json (kept on disk, not imported)",
    )
    r.add_argument("--root", required=True, metavar="DIR", help="the dataset directory")
    r.add_argument("--episode", required=True, type=int, help="episode index")
    r.add_argument("--note", metavar="TEXT", help="why (appended to the file's note)")
    r.set_defaults(func=_reject)
