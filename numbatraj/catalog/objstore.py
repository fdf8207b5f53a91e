"""The embedded object endpoint: signed ``GET``/``HEAD``/``PUT`` of files under a directory.

This is the object store of a single-machine catalog (``--objects file:///dir``), served by
the catalog's ASGI app.  It answers only URLs :class:`~numbatraj.catalog.objects.FileObjects`
signed, honours ``Range`` (so downloads resume and large objects are pulled in parallel
ranges), writes an upload to a temporary name that becomes the object only when its size and
SHA-256 equal the signed ones, and takes the parts of a multipart upload
(``?upload=<id>&part=<n>``), each published whole or not at all.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse

from numbatraj.catalog.objects import FileObjects
from numbatraj.errors import CatalogRequestError
from numbatraj.io.atomic import discard, publish, temp_path

__all__ = ["MAX_PART_BYTES", "serve_object"]

_BLOCK = 1 << 20
#: A multipart part larger than this is refused (S3 allows 5 GiB).
MAX_PART_BYTES = 5 << 30
#: An upload that sends no body bytes for this many seconds is dropped (a slow body).
BODY_IDLE_S = 60.0


def _plain(status: int, text: str, **headers: str) -> Response:
    return PlainTextResponse(text + "\n", status_code=status,
                             headers={k.replace("_", "-"): v for k, v in headers.items()})


def _range(value: str | None, size: int) -> tuple[int, int] | None | str:
    """Inclusive ``(start, end)`` of ``bytes=a-[b]``; None: whole object; "416": unsatisfiable."""
    if not value:
        return None
    if not value.startswith("bytes=") or "," in value:
        return None  # unsupported forms get the whole object, as RFC 9110 allows
    a, _, b = value[6:].partition("-")
    if not a.isdigit() or len(a) > 19 or len(b) > 19:
        return None
    start = int(a)
    end = min(int(b), size - 1) if b.isdigit() else size - 1
    if start >= size or end < start:
        return "416"
    return start, end


async def serve_object(
    request: Request, objects: FileObjects, key: str, count: Callable[[int], None]
) -> Response:
    """Answer a signed request to ``/objects/<key>``; ``count(n)`` gets body bytes sent."""
    method = request.method
    if method in ("GET", "HEAD"):
        return _get(request, objects, key, count)
    if method == "PUT":
        return await _put(request, objects, key)
    return _plain(405, f"{method} is not served on /objects", Allow="GET, HEAD, PUT")


def _get(request: Request, objects: FileObjects, key: str,
         count: Callable[[int], None]) -> Response:
    problem, _ = objects.verify_url(request.method, key, request.url.query)
    if problem is not None:
        return _plain(403, f"access denied for {key}: {problem}")
    try:
        f = open(objects.path_of(key), "rb")  # noqa: SIM115 - closed by the body iterator
    except (CatalogRequestError, FileNotFoundError):
        return _plain(404, f"no object {key}")
    size = os.fstat(f.fileno()).st_size
    rng = _range(request.headers.get("range"), size)
    if rng == "416":
        f.close()
        return _plain(416, f"range not satisfiable for {size} bytes",
                      Content_Range=f"bytes */{size}")
    if rng is None:
        start, end, status = 0, size - 1, 200
    else:
        assert isinstance(rng, tuple)
        (start, end), status = rng, 206
    n = end - start + 1
    headers = {"Accept-Ranges": "bytes", "Content-Length": str(n)}
    if status == 206:
        headers["Content-Range"] = f"bytes {start}-{end}/{size}"
    if request.method == "HEAD" or n <= 0:
        f.close()
        return Response(b"", status_code=status, headers=headers,
                        media_type="application/octet-stream")

    async def body() -> AsyncIterator[bytes]:
        try:
            pos, left = start, n
            while left > 0:
                block = await anyio.to_thread.run_sync(os.pread, f.fileno(),
                                                       min(_BLOCK, left), pos)
                if not block:
                    break
                pos += len(block)
                left -= len(block)
                count(len(block))
                yield block
        finally:
            f.close()

    return StreamingResponse(body(), status_code=status, headers=headers,
                             media_type="application/octet-stream")


async def _put(request: Request, objects: FileObjects, key: str) -> Response:
    method = "PART" if "upload" in request.query_params else "PUT"
    problem, q = objects.verify_url("PUT", key, request.url.query)
    close = {"Connection": "close"}
    if problem is not None:
        return _plain(403, f"access denied for {key}: {problem}", **close)
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or len(length) > 19):
        return _plain(400, f"Content-Length {length!r} is not a byte count", **close)
    if method == "PART":
        try:
            part = int(q.get("part", ""))
            pdir = objects.part_dir(q.get("upload", ""))
        except (ValueError, CatalogRequestError) as exc:
            return _plain(400, f"bad part upload: {exc}", **close)
        if not 1 <= part <= 10_000 or not os.path.isdir(pdir):
            return _plain(404, f"no open multipart upload {q.get('upload')} part {part}",
                          **close)
        limit, want_sha = MAX_PART_BYTES, None
        path = os.path.join(pdir, str(part))
        if length is not None and int(length) > limit:
            return _plain(413, f"part of {length} bytes exceeds {limit}", **close)
    else:
        if length is None:
            return _plain(411, "a PUT needs Content-Length", **close)
        if length != q.get("size"):
            return _plain(400, f"Content-Length {length} differs from the signed size "
                          f"{q.get('size')}", **close)
        limit, want_sha = int(length), q.get("sha256")
        path = objects.path_of(key)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = temp_path(path)
    h = hashlib.sha256()
    got = 0
    try:
        out: Any = await anyio.to_thread.run_sync(open, tmp, "wb")
        try:
            buf = bytearray()
            async for chunk in _idle_limited(request.stream()):
                got += len(chunk)
                if got > limit:
                    return _plain(413, f"body exceeds {limit} bytes; nothing stored", **close)
                buf += chunk
                if len(buf) >= _BLOCK:
                    data, buf = bytes(buf), bytearray()
                    await anyio.to_thread.run_sync(_write, out, h, data)
            if buf:
                await anyio.to_thread.run_sync(_write, out, h, bytes(buf))
        finally:
            await anyio.to_thread.run_sync(out.close)
        if length is not None and got != int(length):
            return _plain(400, f"body ended after {got} of {length} bytes; nothing stored",
                          **close)
        if want_sha is not None and h.hexdigest() != want_sha:
            return _plain(400, f"body sha256 {h.hexdigest()} differs from the signed "
                          f"{want_sha}; nothing stored")
        await anyio.to_thread.run_sync(publish, tmp, path)
        return _plain(200, f"stored {key} ({got} bytes)", ETag=f'"{h.hexdigest()}"')
    except ClientDisconnect:
        return _plain(400, "client went away; nothing stored", **close)
    except TimeoutError:
        return _plain(408, f"no body bytes for {BODY_IDLE_S} s; nothing stored", **close)
    finally:
        discard(tmp)


async def _idle_limited(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``chunks``, raising :class:`TimeoutError` when one takes over :data:`BODY_IDLE_S`."""
    it = chunks.__aiter__()
    while True:
        with anyio.fail_after(BODY_IDLE_S):
            try:
                chunk = await it.__anext__()
            except StopAsyncIteration:
                return
        yield chunk


def _write(out: Any, h: Any, data: bytes) -> None:
    h.update(data)
    out.write(data)
