"""Catalog metadata: datasets, API keys and mirrored recordings, over one SQL database.

:class:`CatalogDB` is the interface the service needs.  :func:`open_db` picks the backend
from a URL: ``sqlite:///path/catalog.db`` (the default; WAL journal) or
``postgresql://user:pass@host/db`` (the scale-out path, through ``psycopg`` 3).  Both run
the same SQL; only the parameter style and the connection differ.

Tables
------
``datasets``
    one row per dataset name + version (``pending`` until its object is checked).
``api_keys``
    SHA-256 of each key, its role and label.
``recording_blobs``
    the bytes the service holds for a recording, one row per SHA-256 (``pending`` until
    the object is checked, then ``ready``); a file's content is uploaded once, whatever
    its path.
``recording_files``
    the committed snapshot: path -> SHA-256.  Replaced whole, in one transaction, by a
    commit, so a reader always sees one complete snapshot.
``recordings``
    one summary row per recording (files, bytes, episodes, frames, when).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from numbatraj.catalog.protocol import ROLES
from numbatraj.errors import CatalogRequestError

__all__ = [
    "ApiKey",
    "Blob",
    "CatalogDB",
    "DatasetRecord",
    "PostgresCatalogDB",
    "SqliteCatalogDB",
    "Transaction",
    "hash_key",
    "mask_password",
    "open_db",
]

_SCHEMA = (
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
_COLUMNS = (
    "name, version, sha256, bytes, env_id, n_rows, seed, source_commit, status, object_key, "
    "created_at, updated_at"
)


def hash_key(key: str) -> str:
    """How an API key is stored: SHA-256 hex (keys are 256-bit random, so no salt needed)."""
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class DatasetRecord:
    """One catalog row (``status`` is ``pending`` or ``ready``)."""

    name: str
    version: str
    sha256: str
    bytes: int
    env_id: str | None
    n_rows: int | None
    seed: int | None
    source_commit: str | None
    status: str
    object_key: str
    created_at: float
    updated_at: float

    def public(self) -> dict[str, Any]:
        """The row as the API shows it (the object key stays private)."""
        d = asdict(self)
        del d["object_key"]
        return d


@dataclass(frozen=True)
class ApiKey:
    """A stored key: its hash, role and label."""

    key_hash: str
    role: str
    label: str | None
    created_at: float


@dataclass(frozen=True)
class Blob:
    """A content the service holds (or is waiting for) for one recording."""

    sha256: str
    bytes: int
    object_key: str
    status: str


class Transaction:
    """Statements run inside one :meth:`CatalogDB.transaction`; ``?`` placeholders."""

    def __init__(self, cursor: Any, placeholder: str) -> None:
        self._cur = cursor
        self._placeholder = placeholder

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; the number of rows it changed (-1 when not known)."""
        if self._placeholder != "?":
            sql = sql.replace("?", self._placeholder)
        self._cur.execute(sql, tuple(params))
        return int(self._cur.rowcount)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; the rows it returned."""
        self.execute(sql, params)
        return list(self._cur.fetchall()) if self._cur.description else []


class CatalogDB(ABC):
    """Rows of datasets, API keys and recordings over a DB-API connection.

    Use :func:`open_db`; this base class holds the SQL, subclasses the connection.
    """

    placeholder = "?"

    def __init__(self) -> None:
        self._lock = threading.Lock()

    # -- connection (subclasses) -----------------------------------------------------------

    @abstractmethod
    def _cursor(self) -> AbstractContextManager[Any]:
        """A context manager yielding a DB-API cursor inside one transaction."""

    @abstractmethod
    def close(self) -> None:
        """Close the connection."""

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """One transaction, committed when the block ends and rolled back when it raises.

        The service's threads share the connection: a transaction holds it until it ends.
        """
        with self._lock, self._cursor() as cur:
            yield Transaction(cur, self.placeholder)

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.transaction() as tx:
            return tx.query(sql, params)

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        with self.transaction() as tx:
            return tx.execute(sql, params)

    def init_schema(self) -> None:
        """Create the tables when absent (the recording tables included)."""
        for stmt in _SCHEMA:
            self._execute(stmt)

    # -- datasets --------------------------------------------------------------------------

    def get(self, name: str, version: str) -> DatasetRecord | None:
        """The row for ``name`` + ``version``, or None."""
        rows = self._query(
            f"SELECT {_COLUMNS} FROM datasets WHERE name = ? AND version = ?", (name, version)
        )
        return DatasetRecord(*rows[0]) if rows else None

    def latest_ready(self, name: str) -> DatasetRecord | None:
        """The most recently completed ``ready`` version of ``name``."""
        rows = self._query(
            f"SELECT {_COLUMNS} FROM datasets WHERE name = ? AND status = 'ready' "
            "ORDER BY updated_at DESC, version DESC LIMIT 1",
            (name,),
        )
        return DatasetRecord(*rows[0]) if rows else None

    def list_rows(self, name: str | None = None) -> list[DatasetRecord]:
        """Every row (of one name when given), ordered by name then creation."""
        where, params = ("WHERE name = ?", (name,)) if name else ("", ())
        rows = self._query(
            f"SELECT {_COLUMNS} FROM datasets {where} ORDER BY name, created_at, version", params
        )
        return [DatasetRecord(*r) for r in rows]

    def put_pending(self, rec: DatasetRecord) -> None:
        """Insert ``rec`` as pending, replacing a pending row of the same name + version.

        A ready row is never replaced: the caller checks first, and the ``WHERE`` clause
        makes a race between two registrations unable to overwrite one.
        """
        with self.transaction() as tx:
            tx.execute(
                "DELETE FROM datasets WHERE name = ? AND version = ? AND status = ?",
                (rec.name, rec.version, "pending"),
            )
            tx.execute(
                f"INSERT INTO datasets ({_COLUMNS}) VALUES ({', '.join('?' * 12)})",
                tuple(asdict(rec).values()),
            )

    def mark_ready(self, rec: DatasetRecord) -> bool:
        """Flip the pending row ``rec`` to ready; False when the row is no longer ``rec``.

        The row must still hold ``rec``'s object key, sha256 and size: a registration that
        replaced it since ``rec`` was read (and whose object was never checked) stays pending.
        """
        n = self._execute(
            "UPDATE datasets SET status = 'ready', updated_at = ? "
            "WHERE name = ? AND version = ? AND status = 'pending' AND object_key = ? "
            "AND sha256 = ? AND bytes = ?",
            (time.time(), rec.name, rec.version, rec.object_key, rec.sha256, rec.bytes),
        )
        return n > 0

    # -- API keys --------------------------------------------------------------------------

    def add_key(self, role: str, label: str | None = None) -> str:
        """Create a key with ``role`` (``read`` or ``write``); returns the key, shown once."""
        if role not in ROLES:
            raise CatalogRequestError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        key = "ntk_" + secrets.token_urlsafe(32)
        self._execute(
            "INSERT INTO api_keys (key_hash, role, label, created_at) VALUES (?, ?, ?, ?)",
            (hash_key(key), role, label, time.time()),
        )
        return key

    def role_of(self, key: str) -> str | None:
        """The role of ``key``, or None when it is unknown."""
        rows = self._query("SELECT role FROM api_keys WHERE key_hash = ?", (hash_key(key),))
        return str(rows[0][0]) if rows else None

    def keys(self) -> list[ApiKey]:
        """Stored keys (hashes only)."""
        rows = self._query("SELECT key_hash, role, label, created_at FROM api_keys ORDER BY 4")
        return [ApiKey(*r) for r in rows]

    # -- recordings ------------------------------------------------------------------------

    def blob(self, project: str, dataset: str, sha256: str) -> Blob | None:
        """The blob with ``sha256`` in ``project/dataset``, or None."""
        rows = self._query(
            "SELECT sha256, bytes, object_key, status FROM recording_blobs "
            "WHERE project = ? AND dataset = ? AND sha256 = ?", (project, dataset, sha256),
        )
        return Blob(*rows[0]) if rows else None

    def put_pending_blob(
        self, project: str, dataset: str, sha256: str, size: int, object_key: str
    ) -> None:
        """Register a pending blob (replacing a pending one; never a ready one)."""
        with self.transaction() as tx:
            tx.execute(
                "DELETE FROM recording_blobs WHERE project = ? AND dataset = ? AND sha256 = ? "
                "AND status = 'pending'", (project, dataset, sha256))
            tx.execute(
                "INSERT INTO recording_blobs (project, dataset, sha256, bytes, object_key, "
                "status, created_at) VALUES (?, ?, ?, ?, ?, 'pending', ?)",
                (project, dataset, sha256, size, object_key, time.time()))

    def mark_blob_ready(self, project: str, dataset: str, b: Blob) -> bool:
        """Flip the pending blob ``b`` to ready; False when the row is no longer ``b``.

        The row must still be pending with ``b``'s object key and size: an offer that
        replaced it since ``b`` was read (and whose object was never checked) stays pending.
        """
        n = self._execute(
            "UPDATE recording_blobs SET status = 'ready' WHERE project = ? AND dataset = ? "
            "AND sha256 = ? AND status = 'pending' AND object_key = ? AND bytes = ?",
            (project, dataset, b.sha256, b.object_key, b.bytes),
        )
        return n > 0

    def snapshot(self, project: str, dataset: str) -> dict[str, tuple[str, int, str]]:
        """The committed files: path -> ``(sha256, bytes, object_key)``."""
        rows = self._query(
            "SELECT f.path, f.sha256, f.bytes, b.object_key FROM recording_files f "
            "JOIN recording_blobs b ON b.project = f.project AND b.dataset = f.dataset "
            "AND b.sha256 = f.sha256 WHERE f.project = ? AND f.dataset = ? ORDER BY f.path",
            (project, dataset),
        )
        return {str(p): (str(s), int(n), str(k)) for p, s, n, k in rows}

    def replace_snapshot(
        self,
        project: str,
        dataset: str,
        files: Mapping[str, tuple[str, int]],
        episodes: int | None,
        frames: int | None,
    ) -> None:
        """Make ``files`` the recording's snapshot, atomically (one transaction)."""
        now = time.time()
        total = sum(n for _, n in files.values())
        with self.transaction() as tx:
            tx.execute("DELETE FROM recording_files WHERE project = ? AND dataset = ?",
                       (project, dataset))
            for path, (sha, n) in sorted(files.items()):
                tx.execute(
                    "INSERT INTO recording_files (project, dataset, path, sha256, bytes) "
                    "VALUES (?, ?, ?, ?, ?)", (project, dataset, path, sha, n))
            tx.execute("DELETE FROM recordings WHERE project = ? AND dataset = ?",
                       (project, dataset))
            tx.execute(
                "INSERT INTO recordings (project, dataset, files, bytes, episodes, frames, "
                "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (project, dataset, len(files), total, episodes, frames, now))

    def list_recordings(self, project: str) -> list[dict[str, Any]]:
        """Summary rows of every committed recording of ``project``."""
        rows = self._query(
            "SELECT dataset, files, bytes, episodes, frames, updated_at FROM recordings "
            "WHERE project = ? ORDER BY dataset", (project,),
        )
        keys = ("dataset", "files", "bytes", "episodes", "frames", "updated_at")
        return [dict(zip(keys, r)) for r in rows]

    def committed_sha(self, project: str, dataset: str, path: str) -> str | None:
        """The SHA-256 the committed snapshot holds at ``path``, or None."""
        rows = self._query(
            "SELECT sha256 FROM recording_files WHERE project = ? AND dataset = ? AND path = ?",
            (project, dataset, path),
        )
        return str(rows[0][0]) if rows else None

    def committed_count(self, project: str, dataset: str) -> int:
        """Files in the committed snapshot (0 before the first commit)."""
        rows = self._query(
            "SELECT files FROM recordings WHERE project = ? AND dataset = ?", (project, dataset)
        )
        return int(rows[0][0]) if rows else 0


class SqliteCatalogDB(CatalogDB):
    """SQLite in WAL mode; one connection shared by the service's threads under a lock."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        if path != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA busy_timeout=5000")
        self.init_schema()

    @contextmanager
    def _cursor(self) -> Iterator[Any]:
        cur = self._conn.cursor()
        try:
            cur.execute("BEGIN IMMEDIATE")
            yield cur
            cur.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                cur.execute("ROLLBACK")
            raise
        finally:
            cur.close()

    def close(self) -> None:
        self._conn.close()


class PostgresCatalogDB(CatalogDB):
    """PostgreSQL through ``psycopg`` 3 (install it to use ``postgresql://`` URLs)."""

    placeholder = "%s"

    def __init__(self, url: str) -> None:
        super().__init__()
        try:
            import psycopg  # type: ignore[import-not-found,unused-ignore]
        except ModuleNotFoundError as exc:
            raise CatalogRequestError(
                f"database URL {mask_password(url)!r} needs the psycopg package "
                "(pip install psycopg)"
            ) from exc
        self._conn = psycopg.connect(url, autocommit=False)
        self.init_schema()

    @contextmanager
    def _cursor(self) -> Iterator[Any]:
        cur = self._conn.cursor()
        try:
            yield cur
            self._conn.commit()
        except BaseException:
            self._conn.rollback()
            raise
        finally:
            cur.close()

    def close(self) -> None:
        self._conn.close()


_QUERY_PASSWORD = re.compile(r"(?i)((?:^|&)password=)[^&]*")


def mask_password(url: str) -> str:
    """``url`` with its password (``user:pw@host`` or ``?password=``) shown as ``***``."""
    try:
        parts = urlsplit(url)
        has_pw = parts.password is not None
    except ValueError:
        return re.sub(r"(//[^/@:]*:)[^/@]*@", r"\1***@", url)
    netloc = parts.netloc
    if has_pw:
        userinfo, hostport = netloc.rsplit("@", 1)
        netloc = f"{userinfo.split(':', 1)[0]}:***@{hostport}"
    query = _QUERY_PASSWORD.sub(r"\1***", parts.query)
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def open_db(url: str) -> CatalogDB:
    """Open the catalog database named by ``url``.

    Parameters
    ----------
    url : str
        ``sqlite:///relative.db``, ``sqlite:////absolute/path.db``, ``sqlite://:memory:``,
        a bare file path (SQLite), or ``postgresql://...`` / ``postgres://...``.
    """
    parts = urlsplit(url)
    if parts.scheme in ("postgresql", "postgres"):
        return PostgresCatalogDB(url)
    if parts.scheme == "sqlite":
        path = unquote(parts.netloc + parts.path)
        if path.startswith("/") and not parts.netloc:
            path = path[1:]  # sqlite:///x.db is relative, sqlite:////x.db absolute
        if not path:
            raise CatalogRequestError(
                f"database URL {mask_password(url)!r} names no file (sqlite:///catalog.db)"
            )
        return SqliteCatalogDB(path)
    if parts.scheme == "" and url:
        return SqliteCatalogDB(url)
    raise CatalogRequestError(
        f"database URL {mask_password(url)!r} is not supported: use sqlite:///path.db or "
        "postgresql://..."
    )
