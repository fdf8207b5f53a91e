"""Catalog metadata: artifacts, API keys and mirrored recordings, over one SQL database.

:class:`CatalogDB` is the interface the service needs, over a SQLAlchemy Core engine and its
connection pool.  :func:`open_db` picks the backend from a URL: ``sqlite:///path/catalog.db``
(the default; WAL journal) or ``postgresql://user:pass@host/db`` (the scale-out path, through
``psycopg`` 3; the pool pings a connection before lending it, so a database restart costs
no service restart).  Both run the same SQL; the schema is versioned
(:mod:`numbatraj.catalog.migrations`) and upgraded in place when the catalog opens.

Tables
------
``artifacts``
    one row per kind (``dataset``, ``policy``, ``project``) + name + version: ``pending``
    until an upload is checked, then ``ready`` and immutable.
``uploads``
    one row per registration (its token, digest, object key, multipart upload id); of the
    registrations of one version, the first whose object checks out wins.
``aliases``
    ``promoted`` and friends: kind + name + alias -> version.
``api_keys``
    SHA-256 of each key, its role, label, last use and revocation time.
``recording_blobs``
    the bytes the service holds for a recording, one row per SHA-256 (``pending`` until
    the object is checked, then ``ready``); a file's content is uploaded once, whatever
    its path.
``recording_files``
    the committed snapshot: path -> SHA-256.  Replaced whole, in one transaction, by a
    commit, so a reader always sees one complete snapshot.
``recordings``
    one summary row per recording (files, bytes, episodes, frames, when).
``schema_versions``
    the migrations applied.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from numbatraj.catalog.migrations import migrate, schema_version
from numbatraj.catalog.protocol import ROLES
from numbatraj.errors import CatalogError, CatalogRequestError

__all__ = [
    "ApiKey",
    "Blob",
    "CatalogDB",
    "DatabaseUnavailable",
    "DatasetRecord",
    "PostgresCatalogDB",
    "SqliteCatalogDB",
    "Transaction",
    "Upload",
    "hash_key",
    "mask_password",
    "open_db",
]

_COLUMNS = (
    "name, version, sha256, bytes, env_id, n_rows, seed, source_commit, status, object_key, "
    "created_at, updated_at, kind, run, filename, upload_token"
)
_UPLOAD_COLUMNS = (
    "token, kind, name, version, sha256, bytes, env_id, n_rows, seed, source_commit, run, "
    "filename, object_key, multipart_id, part_size, created_at"
)
#: ``last_used`` is written at most this often per key (a write per request would make
#: every read a write).
LAST_USED_EVERY_S = 60.0


class DatabaseUnavailable(CatalogError):
    """The database could not be reached (the service answers 503 and retries later)."""


def hash_key(key: str) -> str:
    """How an API key is stored: SHA-256 hex (keys are 256-bit random, so no salt needed)."""
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True)
class DatasetRecord:
    """One artifact row (``status`` is ``pending`` or ``ready``; ``kind`` ``dataset`` ...)."""

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
    kind: str = "dataset"
    run: str | None = None
    filename: str | None = None
    upload_token: str | None = None

    def public(self) -> dict[str, Any]:
        """The row as the API shows it (the object key and upload token stay private)."""
        d = asdict(self)
        del d["object_key"], d["upload_token"]
        return d


@dataclass(frozen=True)
class Upload:
    """One registration: what ``complete`` with its ``token`` checks and publishes."""

    token: str
    kind: str
    name: str
    version: str
    sha256: str
    bytes: int
    env_id: str | None
    n_rows: int | None
    seed: int | None
    source_commit: str | None
    run: str | None
    filename: str | None
    object_key: str
    multipart_id: str | None
    part_size: int | None
    created_at: float


@dataclass(frozen=True)
class ApiKey:
    """A stored key: its hash, role, label, and when it was last used and revoked."""

    key_hash: str
    role: str
    label: str | None
    created_at: float
    last_used: float | None = None
    revoked_at: float | None = None

    @property
    def id(self) -> str:
        """The public identifier: the first 12 hex digits of the hash (never the key)."""
        return self.key_hash[:12]

    def public(self) -> dict[str, Any]:
        """As ``keys list --json`` shows it."""
        return {"id": self.id, "role": self.role, "label": self.label,
                "created": self.created_at, "last_used": self.last_used,
                "revoked": self.revoked_at}


@dataclass(frozen=True)
class Blob:
    """A content the service holds (or is waiting for) for one recording."""

    sha256: str
    bytes: int
    object_key: str
    status: str


class Transaction:
    """Statements run inside one :meth:`CatalogDB.transaction`; ``?`` placeholders."""

    def __init__(self, conn: Any, placeholder: str) -> None:
        self._conn = conn
        self._placeholder = placeholder

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; the number of rows it changed (-1 when not known)."""
        return int(self._run(sql, params).rowcount)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; the rows it returned."""
        res = self._run(sql, params)
        return [tuple(r) for r in res.fetchall()] if res.returns_rows else []

    def _run(self, sql: str, params: Sequence[Any]) -> Any:
        if self._placeholder != "?":
            sql = sql.replace("?", self._placeholder)
        return self._conn.exec_driver_sql(sql, tuple(params))


class CatalogDB:
    """Rows of artifacts, uploads, aliases, API keys and recordings over a pooled engine.

    Use :func:`open_db`; this class holds the SQL, the subclasses build the engine.

    Parameters
    ----------
    engine : sqlalchemy.engine.Engine
        The pooled engine; its dialect picks the placeholder.
    serialise : bool
        Run this process's transactions one at a time (SQLite: one writer at a time
        anyway; a lock queues the service's threads instead of spinning on ``busy_timeout``).
    """

    def __init__(self, engine: Any, *, serialise: bool = False) -> None:
        self._engine = engine
        self.placeholder = "?" if engine.dialect.paramstyle == "qmark" else "%s"
        self._lock: Any = threading.Lock() if serialise else nullcontext()
        self._last_used: dict[str, float] = {}
        self.migrated = self._migrate()

    # -- connection ------------------------------------------------------------------------

    def _migrate(self) -> list[int]:
        return migrate(self.transaction, lock=self._migration_lock, now=time.time)

    def _migration_lock(self, tx: Transaction) -> None:
        """Serialise schema steps between processes (SQLite: BEGIN IMMEDIATE does it)."""

    @property
    def schema_version(self) -> int:
        """The newest applied migration."""
        return schema_version(self.transaction)

    def close(self) -> None:
        """Close every pooled connection."""
        self._engine.dispose()

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """One transaction, committed when the block ends and rolled back when it raises.

        A pooled connection is held for the block.  A database that cannot be reached is
        :class:`DatabaseUnavailable`.
        """
        from sqlalchemy.exc import DBAPIError

        with self._lock:
            try:
                conn = self._engine.connect()
            except DBAPIError as exc:
                raise DatabaseUnavailable(f"database unreachable: {_short(exc)}") from None
            with conn:
                try:
                    with conn.begin():
                        yield Transaction(conn, self.placeholder)
                except DBAPIError as exc:
                    if exc.connection_invalidated:
                        raise DatabaseUnavailable(
                            f"database connection lost: {_short(exc)}") from None
                    raise

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        for attempt in (0, 1):  # a connection lost under a restart is retried once
            try:
                with self.transaction() as tx:
                    return tx.query(sql, params)
            except DatabaseUnavailable:
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        with self.transaction() as tx:
            return tx.execute(sql, params)

    def ping(self) -> None:
        """One round trip to the database; :class:`DatabaseUnavailable` when it fails."""
        self._query("SELECT 1")

    def init_schema(self) -> None:
        """Apply missing migrations (kept for callers of the first release)."""
        self._migrate()

    # -- artifacts -------------------------------------------------------------------------

    def get(self, name: str, version: str, kind: str = "dataset") -> DatasetRecord | None:
        """The row for ``kind`` + ``name`` + ``version``, or None."""
        rows = self._query(
            f"SELECT {_COLUMNS} FROM artifacts WHERE kind = ? AND name = ? AND version = ?",
            (kind, name, version),
        )
        return DatasetRecord(*rows[0]) if rows else None

    def latest_ready(self, name: str, kind: str = "dataset") -> DatasetRecord | None:
        """The most recently completed ``ready`` version of ``name``."""
        rows = self._query(
            f"SELECT {_COLUMNS} FROM artifacts WHERE kind = ? AND name = ? AND status = 'ready' "
            "ORDER BY updated_at DESC, version DESC LIMIT 1",
            (kind, name),
        )
        return DatasetRecord(*rows[0]) if rows else None

    def list_rows(self, name: str | None = None, kind: str = "dataset") -> list[DatasetRecord]:
        """Every row of ``kind`` (of one name when given), ordered by name then creation."""
        where, params = ("AND name = ?", (kind, name)) if name else ("", (kind,))
        rows = self._query(
            f"SELECT {_COLUMNS} FROM artifacts WHERE kind = ? {where} "
            "ORDER BY name, created_at, version", params,
        )
        return [DatasetRecord(*r) for r in rows]

    def register(self, up: Upload) -> DatasetRecord | None:
        """Record the registration ``up`` and point the pending row at it.

        Returns None when registered, or the ready row when ``kind/name/version`` is
        already ready (nothing is then recorded).  Earlier registrations stay valid: of
        all of them, the first to complete wins (:meth:`complete`).
        """
        vals = asdict(up)
        with self.transaction() as tx:
            n = tx.execute(
                f"INSERT INTO artifacts ({_COLUMNS}) VALUES ({', '.join('?' * 16)}) "
                "ON CONFLICT (kind, name, version) DO NOTHING",
                (up.name, up.version, up.sha256, up.bytes, up.env_id, up.n_rows, up.seed,
                 up.source_commit, "pending", up.object_key, up.created_at, up.created_at,
                 up.kind, up.run, up.filename, up.token),
            )
            if n == 0:
                n = tx.execute(
                    "UPDATE artifacts SET sha256 = ?, bytes = ?, env_id = ?, n_rows = ?, "
                    "seed = ?, source_commit = ?, object_key = ?, run = ?, filename = ?, "
                    "upload_token = ?, updated_at = ? "
                    "WHERE kind = ? AND name = ? AND version = ? AND status = 'pending'",
                    (up.sha256, up.bytes, up.env_id, up.n_rows, up.seed, up.source_commit,
                     up.object_key, up.run, up.filename, up.token, up.created_at, up.kind,
                     up.name, up.version),
                )
            if n == 0:
                rows = tx.query(
                    f"SELECT {_COLUMNS} FROM artifacts WHERE kind = ? AND name = ? "
                    "AND version = ?", (up.kind, up.name, up.version))
                return DatasetRecord(*rows[0])
            tx.execute(f"INSERT INTO uploads ({_UPLOAD_COLUMNS}) VALUES "
                       f"({', '.join('?' * len(vals))})", tuple(vals.values()))
        return None

    def put_pending(self, rec: DatasetRecord) -> str:
        """Register ``rec`` as a pending upload; returns its token (see :meth:`register`)."""
        token = new_token()
        up = Upload(token, rec.kind, rec.name, rec.version, rec.sha256, rec.bytes, rec.env_id,
                    rec.n_rows, rec.seed, rec.source_commit, rec.run, rec.filename,
                    rec.object_key, None, None, rec.created_at)
        if self.register(up) is not None:
            raise CatalogRequestError(f"{rec.kind} {rec.name!r} {rec.version!r} is ready")
        return token

    def upload(self, token: str) -> Upload | None:
        """The registration with ``token``, or None."""
        rows = self._query(f"SELECT {_UPLOAD_COLUMNS} FROM uploads WHERE token = ?", (token,))
        return Upload(*rows[0]) if rows else None

    def complete(self, up: Upload, *, current_only: bool = False) -> tuple[bool, list[Upload]]:
        """Make ``up``'s checked object the ready version, unless another already is.

        One conditional ``UPDATE`` decides: of concurrent completions of one version,
        exactly one changes the pending row.  With ``current_only`` the row must still point
        at ``up`` (the first release's tokenless complete).  Returns ``(won, losers)``:
        the other registrations of that version, removed now (their multipart uploads can
        be aborted).
        """
        now = time.time()
        extra = " AND upload_token = ?" if current_only else ""
        params: tuple[Any, ...] = (up.sha256, up.bytes, up.env_id, up.n_rows, up.seed,
                                   up.source_commit, up.object_key, up.run, up.filename,
                                   up.token, now, up.kind, up.name, up.version)
        with self.transaction() as tx:
            n = tx.execute(
                "UPDATE artifacts SET status = 'ready', sha256 = ?, bytes = ?, env_id = ?, "
                "n_rows = ?, seed = ?, source_commit = ?, object_key = ?, run = ?, "
                "filename = ?, upload_token = ?, updated_at = ? "
                f"WHERE kind = ? AND name = ? AND version = ? AND status = 'pending'{extra}",
                params + ((up.token,) if current_only else ()),
            )
            if n != 1:
                return False, []
            rows = tx.query(
                f"SELECT {_UPLOAD_COLUMNS} FROM uploads WHERE kind = ? AND name = ? "
                "AND version = ?", (up.kind, up.name, up.version))
            tx.execute("DELETE FROM uploads WHERE kind = ? AND name = ? AND version = ?",
                       (up.kind, up.name, up.version))
        return True, [Upload(*r) for r in rows if r[0] != up.token]

    def drop_upload(self, token: str) -> None:
        """Forget one registration (aborted, or lost to another)."""
        self._execute("DELETE FROM uploads WHERE token = ?", (token,))

    def mark_ready(self, rec: DatasetRecord) -> bool:
        """Flip the pending row ``rec`` to ready; False when the row is no longer ``rec``."""
        n = self._execute(
            "UPDATE artifacts SET status = 'ready', updated_at = ? "
            "WHERE kind = ? AND name = ? AND version = ? AND status = 'pending' "
            "AND object_key = ? AND sha256 = ? AND bytes = ?",
            (time.time(), rec.kind, rec.name, rec.version, rec.object_key, rec.sha256,
             rec.bytes),
        )
        return n > 0

    # -- aliases ---------------------------------------------------------------------------

    def set_alias(self, kind: str, name: str, alias: str, version: str) -> None:
        """Point ``alias`` of ``kind/name`` at ``version`` (replacing where it pointed)."""
        with self.transaction() as tx:
            tx.execute("DELETE FROM aliases WHERE kind = ? AND name = ? AND alias = ?",
                       (kind, name, alias))
            tx.execute("INSERT INTO aliases (kind, name, alias, version, updated_at) "
                       "VALUES (?, ?, ?, ?, ?)", (kind, name, alias, version, time.time()))

    def alias_version(self, kind: str, name: str, alias: str) -> str | None:
        """The version ``alias`` points at, or None."""
        rows = self._query("SELECT version FROM aliases WHERE kind = ? AND name = ? AND "
                           "alias = ?", (kind, name, alias))
        return str(rows[0][0]) if rows else None

    def aliases(self, kind: str, name: str | None = None) -> dict[tuple[str, str], list[str]]:
        """``(name, version) -> [alias, ...]`` for ``kind`` (one name when given)."""
        where, params = ("AND name = ?", (kind, name)) if name else ("", (kind,))
        rows = self._query(f"SELECT name, version, alias FROM aliases WHERE kind = ? {where} "
                           "ORDER BY alias", params)
        out: dict[tuple[str, str], list[str]] = {}
        for n, v, a in rows:
            out.setdefault((str(n), str(v)), []).append(str(a))
        return out

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
        """The role of ``key``, or None when it is unknown or revoked.

        Every call reads the database (no cache), so a revocation holds from the next
        request; ``last_used`` is written at most every :data:`LAST_USED_EVERY_S`.
        """
        h = hash_key(key)
        rows = self._query("SELECT role FROM api_keys WHERE key_hash = ? AND revoked_at IS NULL",
                           (h,))
        if not rows:
            return None
        now = time.time()
        if now - self._last_used.get(h, 0.0) > LAST_USED_EVERY_S:
            self._last_used[h] = now
            self._execute("UPDATE api_keys SET last_used = ? WHERE key_hash = ?", (now, h))
        return str(rows[0][0])

    def keys(self) -> list[ApiKey]:
        """Stored keys (hashes only), oldest first."""
        rows = self._query("SELECT key_hash, role, label, created_at, last_used, revoked_at "
                           "FROM api_keys ORDER BY created_at")
        return [ApiKey(*r) for r in rows]

    def revoke_key(self, key_id: str) -> ApiKey:
        """Revoke the key whose :attr:`ApiKey.id` is ``key_id``; returns it.

        Raises
        ------
        CatalogRequestError
            No key, or a revoked one, has that id (the message lists the valid ids).
        """
        found = [k for k in self.keys() if k.id == key_id]
        if not found:
            ids = ", ".join(k.id for k in self.keys() if k.revoked_at is None) or "none"
            raise CatalogRequestError(f"no API key with id {key_id!r} (active ids: {ids})")
        k = found[0]
        if k.revoked_at is not None:
            return k
        now = time.time()
        self._execute("UPDATE api_keys SET revoked_at = ? WHERE key_hash = ?", (now, k.key_hash))
        return ApiKey(k.key_hash, k.role, k.label, k.created_at, k.last_used, now)

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




def new_token() -> str:
    """A registration token (returned by register, required by complete)."""
    return "upl_" + secrets.token_urlsafe(24)


def _short(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return mask_password(text[0] if text else type(exc).__name__)[:300]


class SqliteCatalogDB(CatalogDB):
    """SQLite in WAL mode through a small pool; ``BEGIN IMMEDIATE`` for every transaction.

    Parameters
    ----------
    path : str
        The database file (``:memory:`` for a private in-memory one).
    """

    def __init__(self, path: str) -> None:
        from sqlalchemy import create_engine, event
        from sqlalchemy.pool import QueuePool, StaticPool

        self.path = path
        memory = path == ":memory:"
        if not memory:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

        def connect() -> sqlite3.Connection:
            conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None,
                                   timeout=30)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA busy_timeout=30000")
            return conn

        if memory:
            engine = create_engine("sqlite://", creator=connect, poolclass=StaticPool)
        else:
            engine = create_engine("sqlite://", creator=connect, poolclass=QueuePool,
                                   pool_size=4, max_overflow=4, pool_timeout=60)

        @event.listens_for(engine, "begin")
        def _begin(conn: Any) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        super().__init__(engine, serialise=True)


class PostgresCatalogDB(CatalogDB):
    """PostgreSQL through ``psycopg`` 3 and a pre-pinging pool (install psycopg to use it).

    Parameters
    ----------
    url : str
        ``postgresql://user:pass@host:port/db[?options=...]``.
    pool_size, max_overflow : int
        Connections kept open, and how many more a burst may open.
    """

    def __init__(self, url: str, *, pool_size: int = 8, max_overflow: int = 24) -> None:
        try:
            import psycopg  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
        except ModuleNotFoundError as exc:
            raise CatalogRequestError(
                f"database URL {mask_password(url)!r} needs the psycopg package "
                "(pip install psycopg)"
            ) from exc
        from sqlalchemy import create_engine

        sa_url = re.sub(r"^postgres(ql)?://", "postgresql+psycopg://", url)
        engine = create_engine(sa_url, pool_size=pool_size, max_overflow=max_overflow,
                               pool_pre_ping=True, pool_recycle=1800, pool_timeout=30)
        try:
            super().__init__(engine)
        except DatabaseUnavailable:
            engine.dispose()
            raise

    def _migration_lock(self, tx: Transaction) -> None:
        tx.query("SELECT pg_advisory_xact_lock(?)", (0x6E74636174,))  # 'ntcat'


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
