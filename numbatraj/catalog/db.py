"""Catalog metadata: one row per dataset name + version, and hashed API keys.

:class:`CatalogDB` is the small interface the service needs.  :func:`open_db` picks the
backend from a URL: ``sqlite:///path/catalog.db`` (the default; WAL journal) or
``postgresql://user:pass@host/db`` (the scale-out path, through ``psycopg`` 3).  Both run
the same SQL; only the parameter style and the connection differ.
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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from numbatraj.errors import CatalogRequestError

__all__ = [
    "ROLES",
    "ApiKey",
    "CatalogDB",
    "DatasetRecord",
    "check_name",
    "check_version",
    "hash_key",
    "open_db",
]

ROLES = ("read", "write")
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS datasets (
        name TEXT NOT NULL, version TEXT NOT NULL, sha256 TEXT NOT NULL,
        bytes BIGINT NOT NULL, env_id TEXT, n_rows BIGINT, seed BIGINT, source_commit TEXT,
        status TEXT NOT NULL, object_key TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (name, version))""",
    """CREATE TABLE IF NOT EXISTS api_keys (
        key_hash TEXT PRIMARY KEY, role TEXT NOT NULL, label TEXT,
        created_at DOUBLE PRECISION NOT NULL)""",
)
_COLUMNS = (
    "name, version, sha256, bytes, env_id, n_rows, seed, source_commit, status, object_key, "
    "created_at, updated_at"
)


def check_name(name: str) -> str:
    """A dataset name: lower-case letters, digits, ``.``, ``_``, ``-``; at most 128 chars."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise CatalogRequestError(
            f"dataset name {name!r} is not allowed: use 1-128 of a-z 0-9 . _ - starting with a "
            "letter or digit, without '..'"
        )
    return name


def check_version(version: str) -> str:
    """A version: letters, digits, ``.``, ``_``, ``+``, ``-``; at most 64 chars."""
    if not isinstance(version, str) or not _VERSION.fullmatch(version) or ".." in version:
        raise CatalogRequestError(
            f"version {version!r} is not allowed: use 1-64 of A-Z a-z 0-9 . _ + - starting "
            "with a letter or digit, without '..'"
        )
    return version


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


class CatalogDB(ABC):
    """Rows of datasets and API keys over a DB-API connection.

    Use :func:`open_db`; this base class holds the SQL, subclasses the connection.
    """

    placeholder = "?"

    def __init__(self) -> None:
        self._lock = threading.Lock()

    # -- connection (subclasses) -----------------------------------------------------------

    @abstractmethod
    def _cursor(self) -> Any:
        """A context manager yielding a DB-API cursor inside one transaction."""

    @abstractmethod
    def close(self) -> None:
        """Close the connection."""

    def _sql(self, sql: str) -> str:
        return sql if self.placeholder == "?" else sql.replace("?", self.placeholder)

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock, self._cursor() as cur:
            cur.execute(self._sql(sql), tuple(params))
            return list(cur.fetchall()) if cur.description else []

    def _exec_count(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run a write statement; the number of rows it changed."""
        with self._lock, self._cursor() as cur:
            cur.execute(self._sql(sql), tuple(params))
            return int(cur.rowcount)

    def init_schema(self) -> None:
        """Create the tables when absent (the recording tables included)."""
        from numbatraj.remote._recording_db import RECORDING_SCHEMA

        for stmt in (*_SCHEMA, *RECORDING_SCHEMA):
            self._exec(stmt)

    # -- datasets --------------------------------------------------------------------------

    def get(self, name: str, version: str) -> DatasetRecord | None:
        """The row for ``name`` + ``version``, or None."""
        rows = self._exec(
            f"SELECT {_COLUMNS} FROM datasets WHERE name = ? AND version = ?", (name, version)
        )
        return DatasetRecord(*rows[0]) if rows else None

    def latest_ready(self, name: str) -> DatasetRecord | None:
        """The most recently completed ``ready`` version of ``name``."""
        rows = self._exec(
            f"SELECT {_COLUMNS} FROM datasets WHERE name = ? AND status = 'ready' "
            "ORDER BY updated_at DESC, version DESC LIMIT 1",
            (name,),
        )
        return DatasetRecord(*rows[0]) if rows else None

    def list_rows(self, name: str | None = None) -> list[DatasetRecord]:
        """Every row (of one name when given), ordered by name then creation."""
        where, params = ("WHERE name = ?", (name,)) if name else ("", ())
        rows = self._exec(
            f"SELECT {_COLUMNS} FROM datasets {where} ORDER BY name, created_at, version", params
        )
        return [DatasetRecord(*r) for r in rows]

    def put_pending(self, rec: DatasetRecord) -> None:
        """Insert ``rec`` as pending, replacing a pending row of the same name + version.

        A ready row is never replaced: the caller checks first, and the ``WHERE`` clause
        makes a race between two registrations unable to overwrite one.
        """
        with self._lock, self._cursor() as cur:
            cur.execute(
                self._sql("DELETE FROM datasets WHERE name = ? AND version = ? AND status = ?"),
                (rec.name, rec.version, "pending"),
            )
            cur.execute(
                self._sql(f"INSERT INTO datasets ({_COLUMNS}) VALUES ({', '.join('?' * 12)})"),
                tuple(asdict(rec).values()),
            )

    def mark_ready(self, rec: DatasetRecord) -> bool:
        """Flip the pending row ``rec`` to ready; False when the row is no longer ``rec``.

        The row must still hold ``rec``'s object key, sha256 and size: a registration that
        replaced it since ``rec`` was read (and whose object was never checked) stays pending.
        """
        n = self._exec_count(
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
        self._exec(
            "INSERT INTO api_keys (key_hash, role, label, created_at) VALUES (?, ?, ?, ?)",
            (hash_key(key), role, label, time.time()),
        )
        return key

    def role_of(self, key: str) -> str | None:
        """The role of ``key``, or None when it is unknown."""
        rows = self._exec("SELECT role FROM api_keys WHERE key_hash = ?", (hash_key(key),))
        return str(rows[0][0]) if rows else None

    def keys(self) -> list[ApiKey]:
        """Stored keys (hashes only)."""
        rows = self._exec("SELECT key_hash, role, label, created_at FROM api_keys ORDER BY 4")
        return [ApiKey(*r) for r in rows]


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
                f"--db {mask_password(url)!r} needs the psycopg package (pip install psycopg)"
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
            raise CatalogRequestError(f"--db {mask_password(url)!r} names no file (sqlite:///catalog.db)")
        return SqliteCatalogDB(path)
    if parts.scheme == "" and url:
        return SqliteCatalogDB(url)
    raise CatalogRequestError(
        f"--db {mask_password(url)!r} is not supported: use sqlite:///path.db or postgresql://..."
    )
