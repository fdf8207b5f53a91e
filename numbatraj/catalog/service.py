"""The catalog service a lab runs itself: metadata and presigned URLs, never the bytes.

HTTP + JSON on the standard library's threading server::

    GET  /v1/health                                   no key
    GET  /v1/datasets[?name=N]                        read    every row (pending included)
    GET  /v1/datasets/<name>[?version=V]              read    a ready row + presigned GET
    POST /v1/datasets                                 write   register: pending + presigned PUT
    POST /v1/datasets/<name>/<version>/complete       write   check size + digest, then ready
    ... /v1/recordings/<project>[/<dataset>[/...]]    recordings mirrored file by file
                                                      (see :mod:`.recordings`)

Keys travel as ``Authorization: Bearer <key>``: none or an unknown one is ``401``, a read
key on a write route ``403``.  With the embedded ``file://`` object backend the same process
also serves ``GET|HEAD|PUT /objects/<key>?expires=..&sig=..``, which answers only URLs it
signed; that endpoint is the object store, not the catalog, and it is the only place bytes
pass through this process.
"""

from __future__ import annotations

import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

from numbatraj.catalog._http import HTTPError, Request, body_int, body_sha256, body_text
from numbatraj.catalog.db import CatalogDB, DatasetRecord, open_db
from numbatraj.catalog.objects import FileObjects, ObjectBackend, new_object_key, open_objects
from numbatraj.catalog.objstore import serve_object_get, serve_object_put
from numbatraj.catalog.protocol import check_name, check_version
from numbatraj.catalog.recordings import RecordingRoutes
from numbatraj.errors import CatalogRequestError

__all__ = ["CatalogService", "DatasetRoutes"]


class DatasetRoutes:
    """The ``/v1/datasets...`` routes over one database and object backend.

    Parameters
    ----------
    db : CatalogDB
        Holds the rows.
    objects : ObjectBackend
        Where the bytes go; presigns the transfers and checks uploads.
    get_expiry_s, put_expiry_s : int
        Lifetime of presigned download / upload URLs.
    """

    def __init__(
        self, db: CatalogDB, objects: ObjectBackend, *, get_expiry_s: int, put_expiry_s: int
    ) -> None:
        self.db = db
        self.objects = objects
        self.get_expiry_s = get_expiry_s
        self.put_expiry_s = put_expiry_s

    def route(self, req: Request, segs: list[str]) -> None:
        """Answer a ``/v1/datasets...`` request; ``segs`` are the path parts after it."""
        cmd = req.method
        if cmd == "GET" and not segs:
            req.auth("read")
            name = req.query.get("name")
            rows = self.db.list_rows(check_name(name) if name else None)
            req.respond(200, {"datasets": [r.public() for r in rows]})
        elif cmd == "GET" and len(segs) == 1:
            req.auth("read")
            req.respond(200, self._describe(check_name(segs[0]), req.query.get("version")))
        elif cmd == "POST" and not segs:
            req.auth("write")
            status, out = self._register(req.read_json())
            req.respond(status, out)
        elif cmd == "POST" and len(segs) == 3 and segs[2] == "complete":
            req.auth("write")
            req.respond(200, self._complete(check_name(segs[0]), check_version(segs[1])))
        else:
            raise HTTPError(404, f"no route {cmd} {req.path}")

    def _describe(self, name: str, version: str | None) -> dict[str, Any]:
        db = self.db
        if version is None:
            rec = db.latest_ready(name)
            if rec is None:
                pending = db.list_rows(name)
                if pending:
                    raise HTTPError(
                        409, f"dataset {name!r} has no ready version (pending: "
                        + ", ".join(r.version for r in pending) + ")",
                    )
                raise HTTPError(404, f"no dataset named {name!r}")
        else:
            rec = db.get(name, check_version(version))
            if rec is None:
                raise HTTPError(404, f"no dataset {name!r} version {version!r}")
            if rec.status != "ready":
                raise HTTPError(
                    409, f"dataset {name!r} version {version!r} is {rec.status}: its upload "
                    "was never completed, so it cannot be downloaded",
                )
        url = self.objects.presign_get(rec.object_key, self.get_expiry_s)
        return {**rec.public(), "download": url.public()}

    def _register(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = check_name(body.get("name"))
        version = check_version(body.get("version"))
        digest = body_sha256(body.get("sha256"), "sha256")
        size = body_int(body, "bytes")
        if size is None or size < 0:
            raise HTTPError(400, f"bytes must be a non-negative integer, got {size!r}")
        existing = self.db.get(name, version)
        if existing is not None and existing.status == "ready":
            if existing.sha256 == digest and existing.bytes == size:
                return 200, {**existing.public(), "upload": None}
            raise HTTPError(
                409, f"dataset {name!r} version {version!r} is ready and immutable "
                f"(sha256 {existing.sha256}, {existing.bytes} bytes); push a new version",
            )
        now = time.time()
        rec = DatasetRecord(
            name=name, version=version, sha256=digest, bytes=size,
            env_id=body_text(body, "env_id"), n_rows=body_int(body, "n_rows"),
            seed=body_int(body, "seed"), source_commit=body_text(body, "source_commit"),
            status="pending", object_key=new_object_key(name, version),
            created_at=now, updated_at=now,
        )
        self.db.put_pending(rec)
        put = self.objects.presign_put(rec.object_key, self.put_expiry_s, digest, size)
        return 201, {**rec.public(), "upload": put.public()}

    def _complete(self, name: str, version: str) -> dict[str, Any]:
        rec = self.db.get(name, version)
        if rec is None:
            raise HTTPError(404, f"no dataset {name!r} version {version!r} was registered")
        if rec.status == "pending":
            problem = self.objects.check(rec.object_key, rec.sha256, rec.bytes)
            if problem is not None:
                raise HTTPError(409, f"{name} {version} stays pending: {problem}")
            if not self.db.mark_ready(rec):
                raise HTTPError(
                    409, f"dataset {name!r} version {version!r} was registered again while "
                    "its upload was being checked; complete the new registration's upload",
                )
            rec = self.db.get(name, version)
            assert rec is not None
        return rec.public()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base signature
        if self.server.verbose:
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

    def _route(self, req: Request) -> None:
        srv = self.server
        objects = srv.objects
        if req.path.startswith("/objects/") and isinstance(objects, FileObjects):
            key = unquote(req.path[len("/objects/") :])
            if self.command == "PUT":
                serve_object_put(self, objects, key, req.raw_query)
            else:
                sent = serve_object_get(self, objects, key, req.raw_query)
                with srv.lock:
                    srv.object_bytes_served += sent
            return
        segs = req.segs
        if self.command == "GET" and segs == ["v1", "health"]:
            req.respond(200, {"ok": True, "objects": objects.description})
        elif segs[:2] == ["v1", "datasets"]:
            srv.datasets.route(req, segs[2:])
        elif len(segs) >= 2 and segs[:2] == ["v1", "recordings"]:
            srv.recordings.route(req, segs[2:])
        else:
            raise HTTPError(404, f"no route {self.command} {req.path}")

    def _handle(self) -> None:
        req = Request(self, self.server.db)
        try:
            self._route(req)
        except HTTPError as exc:
            req.drain()
            req.respond(exc.status, {"error": str(exc)})
        except CatalogRequestError as exc:
            req.drain()
            req.respond(400, {"error": str(exc)})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # noqa: BLE001 - answer 500 rather than drop the socket
            req.drain()
            req.respond(500, {"error": f"internal error: {type(exc).__name__}: {exc}"})

    do_GET = do_POST = do_PUT = do_HEAD = _handle


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        addr: tuple[str, int],
        db: CatalogDB,
        objects: ObjectBackend,
        get_expiry_s: int,
        put_expiry_s: int,
        verbose: bool,
    ) -> None:
        super().__init__(addr, _Handler)
        self.db = db
        self.objects = objects
        expiry = {"get_expiry_s": get_expiry_s, "put_expiry_s": put_expiry_s}
        self.datasets = DatasetRoutes(db, objects, **expiry)
        self.recordings = RecordingRoutes(db, objects, **expiry)
        self.verbose = verbose
        self.lock = threading.Lock()
        self.object_bytes_served = 0


class CatalogService:
    """A running catalog: metadata DB + object backend behind one HTTP server.

    Parameters
    ----------
    db : str or CatalogDB
        ``sqlite:///catalog.db``, ``postgresql://...``, or an open :class:`CatalogDB`.
    objects : str or ObjectBackend
        ``file:///srv/objects`` or ``s3://bucket?endpoint=...&region=auto``, or an open
        backend (:class:`~numbatraj.catalog.objects.FileObjects`, ``S3Objects``).
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
        objects: str | ObjectBackend,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        public_url: str | None = None,
        get_expiry_s: int = 3600,
        put_expiry_s: int = 6 * 3600,
        verbose: bool = False,
    ) -> None:
        self.db = open_db(db) if isinstance(db, str) else db
        self.objects: ObjectBackend = (
            open_objects(objects) if isinstance(objects, str) else objects
        )
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

