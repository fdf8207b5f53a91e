"""The catalog's ASGI app (Starlette): routing, capped bodies, errors, health.

Every catalog request is answered by the same steps: the body is read first, refused with
413 when ``Content-Length`` or the chunks received pass :data:`~._http.MAX_JSON_BYTES`
(before more is read); then the synchronous route code (SQL and presigning) runs on a
worker thread with a :class:`~._http.Request`; its answer, or an error, becomes JSON.
``HEAD`` is routed as ``GET`` and answered without a body.  With the embedded object
backend, ``/objects/<key>`` is served by :mod:`.objstore` on the same app.

:func:`app_from_env` is the factory uvicorn's worker processes call (``--workers N``).
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any
from urllib.parse import unquote

import anyio
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect
from starlette.requests import Request as StarletteRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from numbatraj.catalog._http import MAX_JSON_BYTES, HTTPError, Request
from numbatraj.catalog.artifacts import MIN_PART_BYTES, ArtifactRoutes
from numbatraj.catalog.db import CatalogDB, DatabaseUnavailable, open_db
from numbatraj.catalog.guard import GuardedH11Protocol
from numbatraj.catalog.objects import FileObjects, ObjectBackend, open_objects
from numbatraj.catalog.objstore import serve_object
from numbatraj.catalog.protocol import KINDS, check_kind
from numbatraj.catalog.recordings import RecordingRoutes
from numbatraj.errors import CatalogRequestError

__all__ = ["ENV_SERVE", "CatalogApp", "app_from_env", "build_app"]

#: The JSON settings :func:`app_from_env` reads in each worker process.
ENV_SERVE = "NUMBATRAJ_CATALOG_SERVE"
_METHODS = ["GET", "HEAD", "POST", "PUT"]
#: A JSON body (at most 64 KiB) must arrive within this many seconds.
BODY_TIMEOUT_S = 10.0


class CatalogApp:
    """The routes over one database and object backend, as an ASGI app (``.asgi``).

    Parameters
    ----------
    db : CatalogDB
    objects : ObjectBackend
    get_expiry_s, put_expiry_s : int
        Lifetime of presigned download / upload URLs.
    min_part_bytes : int
        Smallest part a multipart push may use.
    """

    def __init__(self, db: CatalogDB, objects: ObjectBackend, *, get_expiry_s: int,
                 put_expiry_s: int, min_part_bytes: int = MIN_PART_BYTES) -> None:
        self.db = db
        self.objects = objects
        expiry = {"get_expiry_s": get_expiry_s, "put_expiry_s": put_expiry_s}
        self.kinds = {k: ArtifactRoutes(db, objects, kind=k, min_part_bytes=min_part_bytes,
                                        **expiry) for k in KINDS}
        self.recordings = RecordingRoutes(db, objects, **expiry)
        self.object_bytes_served = 0
        self._count_lock = threading.Lock()
        self.asgi = Starlette(routes=[Route("/{rest:path}", self._endpoint, methods=_METHODS)])

    def _count(self, n: int) -> None:
        with self._count_lock:
            self.object_bytes_served += n

    # -- one request -----------------------------------------------------------------------

    async def _endpoint(self, request: StarletteRequest) -> Response:
        path = request.url.path
        if path.startswith("/objects/") and isinstance(self.objects, FileObjects):
            return await serve_object(request, self.objects, unquote(path[len("/objects/"):]),
                                      self._count)
        try:
            body = await _read_capped(request)
            req = Request(request.method, path, request.url.query, request.headers, body,
                          self.db)
            await anyio.to_thread.run_sync(self._dispatch, req)
            return JSONResponse(req.answer, status_code=req.status)
        except HTTPError as exc:
            headers = {"Connection": "close"} if exc.status in (408, 413) else None
            return JSONResponse({"error": str(exc)}, status_code=exc.status, headers=headers)
        except CatalogRequestError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        except DatabaseUnavailable as exc:
            return JSONResponse({"error": str(exc)}, status_code=503,
                                headers={"Retry-After": "1"})
        except ClientDisconnect:
            return Response(status_code=400)
        except Exception as exc:  # noqa: BLE001 - answer 500 rather than drop the socket
            return JSONResponse({"error": f"internal error: {type(exc).__name__}: {exc}"},
                                status_code=500)

    def _dispatch(self, req: Request) -> None:
        segs = req.segs
        if req.method == "GET" and segs == ["v1", "health"]:
            return self._health(req)
        if segs[:2] == ["v1", "datasets"]:
            return self.kinds["dataset"].route(req, segs[2:])
        if segs[:2] == ["v1", "artifacts"] and len(segs) >= 3:
            return self.kinds[check_kind(segs[2])].route(req, segs[3:])
        if len(segs) >= 2 and segs[:2] == ["v1", "recordings"]:
            return self.recordings.route(req, segs[2:])
        raise HTTPError(404, f"no route {req.method} {req.path}")

    def _health(self, req: Request) -> None:
        out: dict[str, Any] = {"ok": True, "objects": self.objects.description}
        try:
            self.db.ping()
            out["database"] = "ok"
        except DatabaseUnavailable as exc:
            out.update(ok=False, database=str(exc))
        try:
            self.objects.health()
            out["object_store"] = "ok"
        except OSError as exc:
            out.update(ok=False, object_store=str(exc))
        req.respond(200 if out["ok"] else 503, out)


#: A refused body (over :data:`MAX_JSON_BYTES`) of up to this many bytes is read to its end
#: (and discarded) before the 413, within :data:`DRAIN_S`: a client still sending then reads
#: the answer instead of a connection reset by the server's close.  Past it (or a declared
#: ``Content-Length`` past it) the 413 goes at once and the connection closes.
DRAIN_BYTES = 1 << 20
DRAIN_S = 2.0


async def _read_capped(request: StarletteRequest) -> bytes:
    """The whole body, refusing (413) one past :data:`MAX_JSON_BYTES` before reading it."""
    length = request.headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise HTTPError(400, f"Content-Length {length!r} is not a byte count")
        if int(length) > MAX_JSON_BYTES:
            if int(length) <= DRAIN_BYTES:
                await _drain(request.stream(), 0)
            raise HTTPError(413, f"request body of {length} bytes exceeds {MAX_JSON_BYTES}")
    buf = bytearray()
    stream = request.stream()
    try:
        with anyio.fail_after(BODY_TIMEOUT_S):
            async for chunk in stream:
                buf += chunk
                if len(buf) > MAX_JSON_BYTES:
                    break
            else:
                return bytes(buf)
    except TimeoutError:
        raise HTTPError(408, f"request body not received within {BODY_TIMEOUT_S} s") from None
    await _drain(stream, len(buf))
    raise HTTPError(413, f"request body exceeds {MAX_JSON_BYTES} bytes")


async def _drain(stream: Any, got: int) -> None:
    """Read and discard the rest of a refused body: up to :data:`DRAIN_BYTES` in all and
    :data:`DRAIN_S` seconds (see there); a client that hangs up ends it too."""
    with anyio.move_on_after(DRAIN_S):
        try:
            async for chunk in stream:
                got += len(chunk)
                if got > DRAIN_BYTES:
                    return
        except ClientDisconnect:
            return


def build_app(db: CatalogDB, objects: ObjectBackend, **kwargs: Any) -> CatalogApp:
    """A :class:`CatalogApp` (its ``.asgi`` is what uvicorn serves)."""
    return CatalogApp(db, objects, **kwargs)


def app_from_env() -> Any:
    """The ASGI app of one worker process, from the JSON in ``$NUMBATRAJ_CATALOG_SERVE``."""
    cfg = json.loads(os.environ[ENV_SERVE])
    objects = open_objects(cfg["objects"])
    if isinstance(objects, FileObjects):
        objects.base_url = cfg["url"]
    GuardedH11Protocol.head_timeout = float(cfg["header_timeout"])
    app = CatalogApp(open_db(cfg["db"]), objects, get_expiry_s=cfg["get_expiry_s"],
                     put_expiry_s=cfg["put_expiry_s"], min_part_bytes=cfg["min_part_bytes"])
    return app.asgi
