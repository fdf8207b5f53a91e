"""A 127.0.0.1 file server whose payload can be replaced, for stale-part-file tests.

``StaleServer(payload, etag=True, last_modified=False, if_range=True)`` serves the current
payload at any path, honouring ``Range``; with ``etag`` / ``last_modified`` it sends those
validators (derived from the payload), and with ``if_range`` a ``Range`` request whose
``If-Range`` does not match the current validator gets the whole payload as ``200``.
``srv.payload = new`` swaps the content; ``srv.cut = n`` makes every response send only
``n`` body bytes and close; ``srv.requests`` lists ``(Range, If-Range)``.
"""

from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["StaleServer"]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base signature
        pass

    def do_GET(self) -> None:
        srv = self.server.owner
        data = srv.payload
        rng = self.headers.get("Range")
        if_range = self.headers.get("If-Range")
        srv.requests.append((rng, if_range))
        validators = srv.validators()
        start = None
        if rng and rng.startswith("bytes="):
            a = rng[6:].partition("-")[0]
            start = int(a) if a.isdigit() else None
        if start is not None and srv.if_range and if_range is not None:
            if if_range not in validators.values():
                start = None  # the resource changed: the whole of it, as 200
        if start is None:
            self.send_response(200)
            body = data
        else:
            self.send_response(206)
            body = data[start:]
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        for name, value in validators.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if srv.cut is not None:
            self.wfile.write(body[: srv.cut])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: StaleServer


class StaleServer:
    """See the module docstring."""

    def __init__(
        self, payload: bytes, *, etag: bool = True, last_modified: bool = False,
        if_range: bool = True,
    ) -> None:
        self.payload = payload
        self.etag = etag
        self.last_modified = last_modified
        self.if_range = if_range
        self.cut: int | None = None
        self.requests: list[tuple[str | None, str | None]] = []
        self._srv = _Server(("127.0.0.1", 0), _Handler)
        self._srv.owner = self
        self._thread = threading.Thread(target=self._srv.serve_forever, daemon=True)
        self._thread.start()

    def validators(self) -> dict[str, str]:
        digest = hashlib.sha256(self.payload).hexdigest()
        out = {}
        if self.etag:
            out["ETag"] = f'"{digest[:16]}"'
        if self.last_modified:
            second = int(digest[:4], 16) % 60
            out["Last-Modified"] = f"Sun, 01 Nov 2026 10:00:{second:02d} GMT"
        return out

    def url(self, path: str = "f") -> str:
        return f"http://127.0.0.1:{self._srv.server_port}/{path}"

    def stop(self) -> None:
        self._srv.shutdown()
        self._srv.server_close()

    def __enter__(self) -> StaleServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
