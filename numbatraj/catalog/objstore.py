"""The embedded object endpoint: signed ``GET``/``HEAD``/``PUT`` of files under a directory.

This is the object store of a single-machine catalog (``--objects file:///dir``), served by
the catalog process.  It answers only URLs :class:`~numbatraj.catalog.objects.FileObjects`
signed, honours ``Range`` (so downloads resume), and writes an upload to a temporary name
that becomes the object only when its size and SHA-256 equal the signed ones.
"""

from __future__ import annotations

import hashlib
import os
from http.server import BaseHTTPRequestHandler

from numbatraj.catalog.objects import FileObjects
from numbatraj.errors import CatalogRequestError
from numbatraj.io.atomic import discard, publish, temp_path

__all__ = ["serve_object_get", "serve_object_put"]

_BLOCK = 1 << 20


def _plain(handler: BaseHTTPRequestHandler, status: int, text: str, **headers: str) -> None:
    body = (text + "\n").encode()
    handler.send_response(status)
    for k, v in headers.items():
        handler.send_header(k.replace("_", "-"), v)
    handler.send_header("Content-Type", "text/plain; charset=utf-8")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(body)


def _range(value: str | None, size: int) -> tuple[int, int] | None | str:
    """Inclusive ``(start, end)`` of ``bytes=a-[b]``; None: whole object; "416": unsatisfiable."""
    if not value:
        return None
    if not value.startswith("bytes=") or "," in value:
        return None  # unsupported forms get the whole object, as RFC 9110 allows
    a, _, b = value[6:].partition("-")
    if not a.isdigit():
        return None
    start = int(a)
    end = min(int(b), size - 1) if b.isdigit() else size - 1
    if start >= size or end < start:
        return "416"
    return start, end


def serve_object_get(
    handler: BaseHTTPRequestHandler, objects: FileObjects, key: str, query: str
) -> int:
    """Answer a signed GET or HEAD; returns the body bytes sent."""
    problem, _ = objects.verify_url(handler.command, key, query)
    if problem is not None:
        _plain(handler, 403, f"access denied for {key}: {problem}")
        return 0
    try:
        path = objects.path_of(key)
        f = open(path, "rb")  # noqa: SIM115 - closed below, after sendfile
    except (CatalogRequestError, FileNotFoundError):
        _plain(handler, 404, f"no object {key}")
        return 0
    with f:
        size = os.fstat(f.fileno()).st_size
        rng = _range(handler.headers.get("Range"), size)
        if rng == "416":
            _plain(handler, 416, f"range not satisfiable for {size} bytes",
                   Content_Range=f"bytes */{size}")
            return 0
        if rng is None:
            start, end, status = 0, size - 1, 200
        else:
            assert isinstance(rng, tuple)
            (start, end), status = rng, 206
        n = end - start + 1
        handler.send_response(status)
        handler.send_header("Content-Type", "application/octet-stream")
        handler.send_header("Accept-Ranges", "bytes")
        handler.send_header("Content-Length", str(n))
        if status == 206:
            handler.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        handler.end_headers()
        if handler.command == "HEAD" or n <= 0:
            return 0
        handler.wfile.flush()
        return int(handler.connection.sendfile(f, start, n))


def serve_object_put(
    handler: BaseHTTPRequestHandler, objects: FileObjects, key: str, query: str
) -> None:
    """Accept a signed PUT whose body has exactly the signed size and SHA-256."""
    problem, q = objects.verify_url("PUT", key, query)
    length = handler.headers.get("Content-Length")
    if problem is not None:
        handler.close_connection = True  # the body is not read
        _plain(handler, 403, f"access denied for {key}: {problem}")
        return
    if length is None or not length.isdigit():
        handler.close_connection = True
        _plain(handler, 411, "a PUT needs Content-Length")
        return
    n = int(length)
    if str(n) != q.get("size"):
        handler.close_connection = True
        _plain(handler, 400, f"Content-Length {n} differs from the signed size {q.get('size')}")
        return
    path = objects.path_of(key)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = temp_path(path)
    h = hashlib.sha256()
    got = 0
    try:
        with open(tmp, "wb") as out:
            while got < n:
                block = handler.rfile.read(min(_BLOCK, n - got))
                if not block:
                    break
                h.update(block)
                out.write(block)
                got += len(block)
        if got != n:
            handler.close_connection = True
            _plain(handler, 400, f"body ended after {got} of {n} bytes; nothing stored")
            return
        if h.hexdigest() != q.get("sha256"):
            _plain(handler, 400, f"body sha256 {h.hexdigest()} differs from the signed "
                   f"{q.get('sha256')}; nothing stored")
            return
        publish(tmp, path)
        _plain(handler, 200, f"stored {key} ({n} bytes)")
    finally:
        discard(tmp)
