"""The local side of recording sync: which files a pass may offer, and their digests.

A dataset directory is read, never written.  Hidden files (a writer's ``.name.pid.tmp``),
``*.part`` files (the video still being encoded) and anything that is not a regular file
are skipped.  A digest is remembered by ``(size, mtime, inode)`` so a ``--watch`` cycle
hashes only what changed; a file whose stat changes while it is hashed is being written and
is held back.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from typing import Any

from numbatraj.io.hashing import HASH_BLOCK_BYTES, sha256_file
from numbatraj.lerobot.schema import INFO_PATH

__all__ = ["FileStat", "HashCache", "checkpoint_in_progress", "scan_dataset"]

_SKIP_SUFFIXES = (".part", ".tmp")
_STANDALONE = frozenset({INFO_PATH, "meta/rejected_episodes.json"})


@dataclass(frozen=True)
class FileStat:
    """What identifies a version of a file without reading it."""

    size: int
    mtime_ns: int
    ino: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileStat:
        return cls(st.st_size, st.st_mtime_ns, st.st_ino)


def scan_dataset(root: str) -> dict[str, FileStat]:
    """Relative POSIX path -> :class:`FileStat` of every file a pass may offer."""
    out: dict[str, FileStat] = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        for name in files:
            if name.startswith(".") or name.endswith(_SKIP_SUFFIXES):
                continue
            full = os.path.join(d, name)
            try:
                st = os.lstat(full)
            except FileNotFoundError:
                continue  # renamed away between listing and stat
            if stat.S_ISREG(st.st_mode):
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                out[rel] = FileStat.of(st)
    return out


def checkpoint_in_progress(files: dict[str, FileStat]) -> bool:
    """True when a data or metadata file is newer than ``meta/info.json``.

    A checkpointing writer renames ``info.json`` last, so a newer data or episode-table file
    means a checkpoint is half applied: the pass waits and reads again.
    """
    info = files.get(INFO_PATH)
    if info is None:
        return False
    return any(
        st.mtime_ns > info.mtime_ns
        for p, st in files.items()
        if p not in _STANDALONE and p.startswith(("data/", "meta/"))
    )


class HashCache:
    """SHA-256 of files, remembered by :class:`FileStat` across passes."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[FileStat, str]] = {}
        self.hashed_bytes = 0

    def digest(self, root: str, rel: str, before: FileStat) -> str | None:
        """The digest of ``rel``, or None when it changed while being read (held back)."""
        known = self._known.get(rel)
        if known is not None and known[0] == before:
            return known[1]
        full = os.path.join(root, *rel.split("/"))
        try:
            sha = sha256_file(full)
            after = FileStat.of(os.lstat(full))
        except FileNotFoundError:
            return None
        self.hashed_bytes += before.size
        if after != before:
            return None
        self._known[rel] = (before, sha)
        return sha

    def digest_open(self, rel: str, f: Any, before: FileStat) -> str | None:
        """The digest of the open file ``f`` (``rel``, stat ``before`` when listed), or None
        when the descriptor is not that version or it changed while being read."""
        if FileStat.of(os.fstat(f.fileno())) != before:
            return None
        known = self._known.get(rel)
        if known is not None and known[0] == before:
            return known[1]
        h = hashlib.sha256()
        f.seek(0)
        for block in iter(lambda: f.read(HASH_BLOCK_BYTES), b""):
            h.update(block)
        self.hashed_bytes += before.size
        if FileStat.of(os.fstat(f.fileno())) != before:
            return None
        self._known[rel] = (before, h.hexdigest())
        return h.hexdigest()
