"""Versioned schema migrations for the catalog database (SQLite and PostgreSQL).

The applied versions are rows of ``schema_versions``; :func:`migrate` runs every missing
migration in order, each in its own transaction together with its row, so a catalog made by
an earlier release upgrades in place and a failed step leaves the previous version intact.
Version 1 is the schema the first release created (``CREATE TABLE IF NOT EXISTS``), so a
database that predates the versions table is recognised as version 1 and moved on from
there.  The statements are plain SQL that both engines accept; ``?`` is the placeholder.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["MIGRATIONS", "Migration", "migrate", "schema_version"]


class _Tx(Protocol):
    def execute(self, sql: str, params: Any = ()) -> int: ...

    def query(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]: ...


@dataclass(frozen=True)
class Migration:
    """One schema step: its number, a name for logs, and its statements."""

    version: int
    name: str
    statements: tuple[str, ...]


_V1 = (
    """CREATE TABLE IF NOT EXISTS datasets (
        name TEXT NOT NULL, version TEXT NOT NULL, sha256 TEXT NOT NULL,
        bytes BIGINT NOT NULL, env_id TEXT, n_rows BIGINT, seed BIGINT, source_commit TEXT,
        status TEXT NOT NULL, object_key TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (name, version))""",
    """CREATE TABLE IF NOT EXISTS api_keys (
        key_hash TEXT PRIMARY KEY, role TEXT NOT NULL, label TEXT,
        created_at DOUBLE PRECISION NOT NULL)""",
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

_V2 = (
    # datasets become artifacts of kind 'dataset'; the row is keyed by kind + name + version
    """CREATE TABLE artifacts (
        kind TEXT NOT NULL, name TEXT NOT NULL, version TEXT NOT NULL,
        sha256 TEXT NOT NULL, bytes BIGINT NOT NULL, env_id TEXT, n_rows BIGINT, seed BIGINT,
        source_commit TEXT, status TEXT NOT NULL, object_key TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
        run TEXT, filename TEXT, upload_token TEXT,
        PRIMARY KEY (kind, name, version))""",
    """INSERT INTO artifacts (kind, name, version, sha256, bytes, env_id, n_rows, seed,
        source_commit, status, object_key, created_at, updated_at)
        SELECT 'dataset', name, version, sha256, bytes, env_id, n_rows, seed, source_commit,
        status, object_key, created_at, updated_at FROM datasets""",
    "DROP TABLE datasets",
    # one row per registration: complete is tied to its token
    """CREATE TABLE uploads (
        token TEXT PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL, version TEXT NOT NULL,
        sha256 TEXT NOT NULL, bytes BIGINT NOT NULL, env_id TEXT, n_rows BIGINT, seed BIGINT,
        source_commit TEXT, run TEXT, filename TEXT, object_key TEXT NOT NULL,
        multipart_id TEXT, part_size BIGINT, created_at DOUBLE PRECISION NOT NULL)""",
    "CREATE INDEX uploads_by_artifact ON uploads (kind, name, version)",
    """CREATE TABLE aliases (
        kind TEXT NOT NULL, name TEXT NOT NULL, alias TEXT NOT NULL, version TEXT NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (kind, name, alias))""",
    "ALTER TABLE api_keys ADD COLUMN last_used DOUBLE PRECISION",
    "ALTER TABLE api_keys ADD COLUMN revoked_at DOUBLE PRECISION",
)

#: Every schema step, oldest first.  Append; never edit a released one.
MIGRATIONS = (
    Migration(1, "initial: datasets, api_keys, recordings", _V1),
    Migration(2, "artifacts with kinds and aliases, per-registration uploads, key revocation",
              _V2),
)

_VERSIONS_TABLE = """CREATE TABLE IF NOT EXISTS schema_versions (
    version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"""


def schema_version(transaction: Callable[[], AbstractContextManager[_Tx]]) -> int:
    """The newest applied migration (0 for an empty database)."""
    with transaction() as tx:
        tx.execute(_VERSIONS_TABLE)
        rows = tx.query("SELECT MAX(version) FROM schema_versions")
    return int(rows[0][0] or 0) if rows else 0


def migrate(
    transaction: Callable[[], AbstractContextManager[_Tx]],
    *,
    lock: Callable[[Any], None] | None = None,
    now: Callable[[], float],
) -> list[int]:
    """Apply the missing migrations in order; returns the versions applied now.

    ``lock`` runs first inside each transaction (PostgreSQL takes an advisory lock there,
    so service processes starting together apply each step once; SQLite's ``BEGIN
    IMMEDIATE`` already serialises them).
    """
    applied: list[int] = []
    for m in MIGRATIONS:
        with transaction() as tx:
            if lock is not None:
                lock(tx)
            tx.execute(_VERSIONS_TABLE)
            done = {int(r[0]) for r in tx.query("SELECT version FROM schema_versions")}
            if m.version in done:
                continue
            for stmt in m.statements:
                tx.execute(stmt)
            tx.execute("INSERT INTO schema_versions (version, name, applied_at) VALUES (?, ?, ?)",
                       (m.version, m.name, now()))
            applied.append(m.version)
    return applied

