"""The catalog service a lab runs itself: metadata and presigned URLs, never the bytes.

HTTP + JSON on the standard library's threading server::

    GET  /v1/health                                   no key
    GET  /v1/datasets[?name=N]                        read    every row (pending included)
    GET  /v1/datasets/<name>[?version=V]              read    a ready row + presigned GET
    POST /v1/datasets                                 write   register: pending + presigned PUT
    POST /v1/datasets/<name>/<version>/complete       write   check size + digest, then ready
    ... /v1/recordings/<project>[/<dataset>[/...]]    recordings mirrored file by file
                                                      (see :mod:`._recording_service`)

Keys travel as ``Authorization: Bearer <key>``: none or an unknown one is ``401``, a read
key on a write route ``403``.  With the embedded ``file://`` object backend the same process
also serves ``GET|HEAD|PUT /objects/<key>?expires=..&sig=..``, which answers only URLs it
signed; that endpoint is the object store, not the catalog, and it is the only place bytes
pass through this process.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from numbatraj.errors import CatalogRequestError
from numbatraj.io.hashing import check_sha256_hex
from numbatraj.remote.db import CatalogDB, DatasetRecord, check_name, check_version, open_db
from numbatraj.remote.objects import FileObjects, S3Objects, new_object_key, open_objects
from numbatraj.remote.objstore import serve_object_get, serve_object_put

__all__ = ["CatalogService"]

_MAX_JSON = 64 << 10
_TEXT = re.compile(r"[\x20-\x7e]{0,200}")


class _HTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _opt_int(body: dict[str, Any], key: str) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _HTTPError(400, f"{key} must be an integer or null, got {v!r}")
    return v


def _opt_text(body: dict[str, Any], key: str) -> str | None:
    v = body.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or not _TEXT.fullmatch(v):
        raise _HTTPError(400, f"{key} must be printable ASCII of at most 200 chars, got {v!r}")
    return v


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base signature
        if self.server.verbose:
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

    # -- plumbing --------------------------------------------------------------------------

    def _json(self, status: int, obj: Any) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _drain(self) -> None:
        """Consume an unread request body so the kept-alive connection stays in step."""
        if getattr(self, "_body_read", False):
            return
        n = self.headers.get("Content-Length") or "0"
        if n.isdigit() and int(n) <= _MAX_JSON:
            self.rfile.read(int(n))
        else:
            self.close_connection = True

    def _read_json(self) -> dict[str, Any]:
        self._body_read = True
        n = int(self.headers.get("Content-Length") or 0)
        if n > _MAX_JSON:
            self.close_connection = True
            raise _HTTPError(413, f"request body of {n} bytes exceeds {_MAX_JSON}")
        try:
            obj = json.loads(self.rfile.read(n) or b"{}")
        except json.JSONDecodeError as exc:
            raise _HTTPError(400, f"request body is not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise _HTTPError(400, "request body must be a JSON object")
        return obj

    def _auth(self, need: str) -> str:
        header = self.headers.get("Authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise _HTTPError(401, "missing API key: send 'Authorization: Bearer <key>'")
        role = self.server.db.role_of(key.strip())
        if role is None:
            raise _HTTPError(401, "API key not recognised")
        if need == "write" and role != "write":
            raise _HTTPError(403, f"a {role} key cannot {self.command} {self.path.split('?')[0]}")
        return role

    def _route(self) -> None:
        parts = urlsplit(self.path)
        path = parts.path
        q = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        srv = self.server
        if path.startswith("/objects/") and isinstance(srv.objects, FileObjects):
            key = unquote(path[len("/objects/") :])
            if self.command == "PUT":
                serve_object_put(self, srv.objects, key, parts.query)
            else:
                sent = serve_object_get(self, srv.objects, key, parts.query)
                with srv.lock:
                    srv.object_bytes_served += sent
            return
        segs = [unquote(s) for s in path.strip("/").split("/")]
        if self.command == "GET" and segs == ["v1", "health"]:
            self._json(200, {"ok": True, "objects": srv.objects.description})
        elif self.command == "GET" and segs == ["v1", "datasets"]:
            self._auth("read")
            rows = srv.db.list_rows(check_name(q["name"]) if q.get("name") else None)
            self._json(200, {"datasets": [r.public() for r in rows]})
        elif self.command == "GET" and len(segs) == 3 and segs[:2] == ["v1", "datasets"]:
            self._auth("read")
            self._json(200, self._describe(check_name(segs[2]), q.get("version")))
        elif self.command == "POST" and segs == ["v1", "datasets"]:
            self._auth("write")
            status, out = self._register(self._read_json())
            self._json(status, out)
        elif (
            self.command == "POST" and len(segs) == 5 and segs[:2] == ["v1", "datasets"]
            and segs[4] == "complete"
        ):
            self._auth("write")
            self._json(200, self._complete(check_name(segs[2]), check_version(segs[3])))
        elif len(segs) >= 2 and segs[:2] == ["v1", "recordings"]:
            from numbatraj.remote._recording_service import route_recording

            route_recording(self, segs[2:])
        else:
            raise _HTTPError(404, f"no route {self.command} {path}")

    def _handle(self) -> None:
        self._body_read = False
        try:
            self._route()
        except _HTTPError as exc:
            self._drain()
            self._json(exc.status, {"error": str(exc)})
        except CatalogRequestError as exc:
            self._drain()
            self._json(400, {"error": str(exc)})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # noqa: BLE001 - answer 500 rather than drop the socket
            self._drain()
            self._json(500, {"error": f"internal error: {type(exc).__name__}: {exc}"})

    do_GET = do_POST = do_PUT = do_HEAD = _handle

    # -- the catalog -----------------------------------------------------------------------

    def _describe(self, name: str, version: str | None) -> dict[str, Any]:
        srv = self.server
        if version is None:
            rec = srv.db.latest_ready(name)
            if rec is None:
                pending = srv.db.list_rows(name)
                if pending:
                    raise _HTTPError(
                        409, f"dataset {name!r} has no ready version (pending: "
                        + ", ".join(r.version for r in pending) + ")",
                    )
                raise _HTTPError(404, f"no dataset named {name!r}")
        else:
            rec = srv.db.get(name, check_version(version))
            if rec is None:
                raise _HTTPError(404, f"no dataset {name!r} version {version!r}")
            if rec.status != "ready":
                raise _HTTPError(
                    409, f"dataset {name!r} version {version!r} is {rec.status}: its upload "
                    "was never completed, so it cannot be downloaded",
                )
        url = srv.objects.presign_get(rec.object_key, srv.get_expiry_s)
        return {**rec.public(), "download": url.public()}

    def _register(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        srv = self.server
        name = check_name(body.get("name"))  # type: ignore[arg-type]
        version = check_version(body.get("version"))  # type: ignore[arg-type]
        try:
            digest = check_sha256_hex(body.get("sha256"), what="sha256")  # type: ignore[arg-type]
        except ValueError as exc:
            raise _HTTPError(400, str(exc)) from None
        size = _opt_int(body, "bytes")
        if size is None or size < 0:
            raise _HTTPError(400, f"bytes must be a non-negative integer, got {size!r}")
        existing = srv.db.get(name, version)
        if existing is not None and existing.status == "ready":
            if existing.sha256 == digest and existing.bytes == size:
                return 200, {**existing.public(), "upload": None}
            raise _HTTPError(
                409, f"dataset {name!r} version {version!r} is ready and immutable "
                f"(sha256 {existing.sha256}, {existing.bytes} bytes); push a new version",
            )
        now = time.time()
        rec = DatasetRecord(
            name=name, version=version, sha256=digest, bytes=size,
            env_id=_opt_text(body, "env_id"), n_rows=_opt_int(body, "n_rows"),
            seed=_opt_int(body, "seed"), source_commit=_opt_text(body, "source_commit"),
            status="pending", object_key=new_object_key(name, version),
            created_at=now, updated_at=now,
        )
        srv.db.put_pending(rec)
        put = srv.objects.presign_put(rec.object_key, srv.put_expiry_s, digest, size)
        return 201, {**rec.public(), "upload": put.public()}

    def _complete(self, name: str, version: str) -> dict[str, Any]:
        srv = self.server
        rec = srv.db.get(name, version)
        if rec is None:
            raise _HTTPError(404, f"no dataset {name!r} version {version!r} was registered")
        if rec.status == "pending":
            problem = srv.objects.check(rec.object_key, rec.sha256, rec.bytes)
            if problem is not None:
                raise _HTTPError(409, f"{name} {version} stays pending: {problem}")
            if not srv.db.mark_ready(rec):
                raise _HTTPError(
                    409, f"dataset {name!r} version {version!r} was registered again while "
                    "its upload was being checked; complete the new registration's upload",
                )
            rec = srv.db.get(name, version)
            assert rec is not None
        return rec.public()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        addr: tuple[str, int],
        db: CatalogDB,
        objects: FileObjects | S3Objects,
        get_expiry_s: int,
        put_expiry_s: int,
        verbose: bool,
    ) -> None:
        super().__init__(addr, _Handler)
        self.db = db
        self.objects = objects
        self.get_expiry_s = get_expiry_s
        self.put_expiry_s = put_expiry_s
        self.verbose = verbose
        self.lock = threading.Lock()
        self.object_bytes_served = 0


class CatalogService:
    """A running catalog: metadata DB + object backend behind one HTTP server.

    Parameters
    ----------
    db : str or CatalogDB
        ``sqlite:///catalog.db``, ``postgresql://...``, or an open :class:`CatalogDB`.
    objects : str or backend
        ``file:///srv/objects`` or ``s3://bucket?endpoint=...&region=auto``.
    host, port : str, int
        Where to listen; port 0 picks a free one.
    public_url : str, optional
        Base URL clients reach this service at (behind a proxy, say); it is also the base of
        the embedded object endpoint's URLs.  Defaults to ``http://host:port``.
    get_expiry_s, put_expiry_s : int
        Lifetime of presigned download / upload URLs, capped at 7 days.
    verbose : bool
        Log each request to stderr.

    Examples
    --------
    >>> with CatalogService("sqlite:///cat.db", "file:///tmp/objects") as svc:
    ...     key = svc.db.add_key("write")
    ...     print(svc.url)
    """

    def __init__(
        self,
        db: str | CatalogDB,
        objects: str | FileObjects | S3Objects,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        public_url: str | None = None,
        get_expiry_s: int = 3600,
        put_expiry_s: int = 6 * 3600,
        verbose: bool = False,
    ) -> None:
        self.db = open_db(db) if isinstance(db, str) else db
        self.objects = open_objects(objects) if isinstance(objects, str) else objects
        self._srv = _Server(
            (host, port), self.db, self.objects, get_expiry_s, put_expiry_s, verbose
        )
        bound_host, bound_port = self._srv.server_address[:2]
        self.url = (public_url or f"http://{bound_host!s}:{bound_port}").rstrip("/")
        if isinstance(self.objects, FileObjects):
            self.objects.base_url = self.url
        self._thread: threading.Thread | None = None

    @property
    def object_bytes_served(self) -> int:
        """Body bytes the embedded object endpoint has sent (0 for S3)."""
        return self._srv.object_bytes_served

    def start(self) -> CatalogService:
        """Serve in a background thread; returns self."""
        self._thread = threading.Thread(
            target=self._srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted."""
        self._srv.serve_forever()

    def stop(self) -> None:
        """Stop serving and close the database."""
        if self._thread is not None:
            self._srv.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._srv.server_close()
        self.db.close()

    def __enter__(self) -> CatalogService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

