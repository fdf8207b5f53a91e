"""Catalog tables for mirrored recordings (see :mod:`numbatraj.remote.recording`).

Three tables, created with the catalog's own (``db._SCHEMA``):

``recording_blobs``
    the bytes the service holds for a dataset, one row per SHA-256 (``pending`` until the
    object is checked, then ``ready``); a file's content is uploaded once, whatever its path.
``recording_files``
    the committed snapshot: path -> SHA-256.  Replaced whole, in one transaction, by a
    commit, so a reader always sees one complete snapshot.
``recordings``
    one summary row per dataset (files, bytes, episodes, frames, when).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from numbatraj.errors import CatalogRequestError
from numbatraj.remote.db import CatalogDB, check_name, check_version

__all__ = [
    "Blob",
    "RECORDING_SCHEMA",
    "blob",
    "check_dataset",
    "check_project",
    "check_rel_path",
    "committed_count",
    "committed_sha",
    "list_recordings",
    "mark_blob_ready",
    "put_pending_blob",
    "replace_snapshot",
    "snapshot",
]

RECORDING_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS recording_blobs (
        project TEXT NOT NULL, dataset TEXT NOT NULL, sha256 TEXT NOT NULL,
        bytes BIGINT NOT NULL, object_key TEXT NOT NULL, status TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (project, dataset, sha256))""",
    """CREATE TABLE IF NOT EXISTS recording_files (
        project TEXT NOT NULL, dataset TEXT NOT NULL, path TEXT NOT NULL,
        sha256 TEXT NOT NULL, bytes BIGINT NOT NULL, PRIMARY KEY (project, dataset, path))""",
    """CREATE TABLE IF NOT EXISTS recordings (
        project TEXT NOT NULL, dataset TEXT NOT NULL, files BIGINT NOT NULL,
        bytes BIGINT NOT NULL, episodes BIGINT, frames BIGINT,
        updated_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (project, dataset))""",
)

_PATH = re.compile(r"[A-Za-z0-9_+=,@-][A-Za-z0-9._+=,@-]{0,127}")
MAX_PATH_CHARS = 512


def check_project(project: str) -> str:
    """A project name: the catalog's dataset-name rule (a-z 0-9 . _ -)."""
    try:
        return check_name(project)
    except CatalogRequestError as exc:
        raise CatalogRequestError(str(exc).replace("dataset name", "project")) from None


def check_dataset(dataset: str) -> str:
    """A recording's dataset name: the catalog's version rule (A-Z a-z 0-9 . _ + -)."""
    try:
        return check_version(dataset)
    except CatalogRequestError as exc:
        raise CatalogRequestError(str(exc).replace("version", "dataset")) from None


def check_rel_path(path: str) -> str:
    """A file's path inside a recording: relative POSIX, no hidden part, no ``..``."""
    parts = path.split("/") if isinstance(path, str) else []
    if (
        not parts or len(path) > MAX_PATH_CHARS
        or not all(_PATH.fullmatch(p) for p in parts) or ".." in parts
    ):
        raise CatalogRequestError(
            f"file path {path!r} is not allowed: relative, '/'-separated, no hidden or '..' "
            f"part, at most {MAX_PATH_CHARS} chars of A-Z a-z 0-9 . _ + = , @ -"
        )
    return path


@dataclass(frozen=True)
class Blob:
    """A content the service holds (or is waiting for) for one dataset."""

    sha256: str
    bytes: int
    object_key: str
    status: str


def blob(db: CatalogDB, project: str, dataset: str, sha256: str) -> Blob | None:
    """The blob with ``sha256`` in ``project/dataset``, or None."""
    rows = db._exec(
        "SELECT sha256, bytes, object_key, status FROM recording_blobs "
        "WHERE project = ? AND dataset = ? AND sha256 = ?", (project, dataset, sha256),
    )
    return Blob(*rows[0]) if rows else None


def put_pending_blob(
    db: CatalogDB, project: str, dataset: str, sha256: str, size: int, object_key: str
) -> None:
    """Register a pending blob (replacing a pending one; never a ready one)."""
    with db._lock, db._cursor() as cur:
        cur.execute(db._sql(
            "DELETE FROM recording_blobs WHERE project = ? AND dataset = ? AND sha256 = ? "
            "AND status = 'pending'"), (project, dataset, sha256))
        cur.execute(db._sql(
            "INSERT INTO recording_blobs (project, dataset, sha256, bytes, object_key, status, "
            "created_at) VALUES (?, ?, ?, ?, ?, 'pending', ?)"),
            (project, dataset, sha256, size, object_key, time.time()))


def mark_blob_ready(db: CatalogDB, project: str, dataset: str, b: Blob) -> bool:
    """Flip the pending blob ``b`` to ready; False when the row is no longer ``b``.

    The row must still be pending with ``b``'s object key and size: an offer that replaced
    it since ``b`` was read (and whose object was never checked) stays pending.
    """
    n = db._exec_count(
        "UPDATE recording_blobs SET status = 'ready' WHERE project = ? AND dataset = ? "
        "AND sha256 = ? AND status = 'pending' AND object_key = ? AND bytes = ?",
        (project, dataset, b.sha256, b.object_key, b.bytes),
    )
    return n > 0


def snapshot(db: CatalogDB, project: str, dataset: str) -> dict[str, tuple[str, int, str]]:
    """The committed files: path -> ``(sha256, bytes, object_key)``."""
    rows = db._exec(
        "SELECT f.path, f.sha256, f.bytes, b.object_key FROM recording_files f "
        "JOIN recording_blobs b ON b.project = f.project AND b.dataset = f.dataset "
        "AND b.sha256 = f.sha256 WHERE f.project = ? AND f.dataset = ? ORDER BY f.path",
        (project, dataset),
    )
    return {str(p): (str(s), int(n), str(k)) for p, s, n, k in rows}


def replace_snapshot(
    db: CatalogDB,
    project: str,
    dataset: str,
    files: Mapping[str, tuple[str, int]],
    episodes: int | None,
    frames: int | None,
) -> None:
    """Make ``files`` the dataset's snapshot, atomically (one transaction)."""
    now = time.time()
    total = sum(n for _, n in files.values())
    with db._lock, db._cursor() as cur:
        cur.execute(db._sql("DELETE FROM recording_files WHERE project = ? AND dataset = ?"),
                    (project, dataset))
        for path, (sha, n) in sorted(files.items()):
            cur.execute(db._sql(
                "INSERT INTO recording_files (project, dataset, path, sha256, bytes) "
                "VALUES (?, ?, ?, ?, ?)"), (project, dataset, path, sha, n))
        cur.execute(db._sql("DELETE FROM recordings WHERE project = ? AND dataset = ?"),
                    (project, dataset))
        cur.execute(db._sql(
            "INSERT INTO recordings (project, dataset, files, bytes, episodes, frames, "
            "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)"),
            (project, dataset, len(files), total, episodes, frames, now))


def list_recordings(db: CatalogDB, project: str) -> list[dict[str, Any]]:
    """Summary rows of every committed dataset of ``project``."""
    rows = db._exec(
        "SELECT dataset, files, bytes, episodes, frames, updated_at FROM recordings "
        "WHERE project = ? ORDER BY dataset", (project,),
    )
    keys = ("dataset", "files", "bytes", "episodes", "frames", "updated_at")
    return [dict(zip(keys, r)) for r in rows]


def committed_sha(db: CatalogDB, project: str, dataset: str, path: str) -> str | None:
    """The SHA-256 the committed snapshot holds at ``path``, or None."""
    rows = db._exec(
        "SELECT sha256 FROM recording_files WHERE project = ? AND dataset = ? AND path = ?",
        (project, dataset, path),
    )
    return str(rows[0][0]) if rows else None


def committed_count(db: CatalogDB, project: str, dataset: str) -> int:
    """Files in the committed snapshot (0 before the first commit)."""
    rows = db._exec(
        "SELECT files FROM recordings WHERE project = ? AND dataset = ?", (project, dataset)
    )
    return int(rows[0][0]) if rows else 0
