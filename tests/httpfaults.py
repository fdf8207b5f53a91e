"""A fault-injecting HTTP file server on 127.0.0.1 for download tests.

One server serves one payload under several paths, one per failure mode; query parameters
tune a mode and a per-URL counter lets a fault hit only the first ``times`` requests::

    with FaultServer(payload) as srv:
        fetch(srv.url("drop", at=1000, times=1), dest)
        srv.requests  # what the client sent: path, Range, Accept-Encoding, ...

Modes (the path):

ok             honours Range (206 + Content-Range, 416 past the end)
ignore-range   answers every request 200 with the whole file
drop           sends the body up to absolute byte ``at`` then closes (first ``times`` requests);
               with ``each=n``, every response carries only ``n`` bytes then closes
trickle        one byte every ``interval`` seconds (never finishes while the client waits)
stall          sends ``after`` bytes, then nothing (until the client leaves or the server stops)
wrong-bytes    honours Range, but byte ``at`` (default the middle) is flipped
always-416     answers every Range request 416 with ``Content-Range: bytes */<len>``
busy           first ``times`` requests: 503 with ``Retry-After: <retry_after>``; then ok
gzip           ``Content-Encoding: gzip`` with a gzipped body
expired        403 with an S3-style "Request has expired" body
throttle       honours Range ``bytes=a-b`` and sends at most ``rate`` bytes/s per connection
               (a per-connection cap, as object stores and proxies have)
bad-range      a Range request gets 206 whose Content-Range start is off by ``shift`` or
               whose total is ``total``; requests without Range get 200

Everything binds to 127.0.0.1 on an ephemeral port; handler threads are daemons and every
wait checks the stop event, so a stopped server leaves nothing running for long.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

__all__ = ["FaultServer"]

MAX_HANG_S = 10.0  # the longest a trickle or stall keeps a handler thread alive


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base signature
        pass

    # -- helpers ---------------------------------------------------------------------------

    def _range_start(self) -> int | None:
        value = self.headers.get("Range")
        if not value or not value.startswith("bytes="):
            return None
        start, _, _ = value[6:].partition("-")
        return int(start) if start.isdigit() else None

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_range(self, data: bytes) -> None:
        """Normal behaviour: 200, or 206 / 416 for a Range request."""
        start = self._range_start()
        if start is None:
            self._send(200, data, {"Accept-Ranges": "bytes"})
        elif start >= len(data):
            self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"})
        else:
            cr = f"bytes {start}-{len(data) - 1}/{len(data)}"
            self._send(206, data[start:], {"Content-Range": cr})

    def _slow(self, data: bytes, start: int, interval: float, n_before: int) -> None:
        body = data[start:]
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[:n_before])
        self.wfile.flush()
        deadline = time.monotonic() + MAX_HANG_S
        i = n_before
        stop = self.server.stop_event
        while i < len(body) and time.monotonic() < deadline and not stop.is_set():
            if interval > 0:
                self.wfile.write(body[i : i + 1])
                i += 1
            stop.wait(interval if interval > 0 else 0.05)
        self.close_connection = True

    def _throttled(self, data: bytes, rate: float) -> None:
        value = self.headers.get("Range") or ""
        a, _, b = value[6:].partition("-") if value.startswith("bytes=") else ("", "", "")
        start = int(a) if a.isdigit() else 0
        end = min(int(b), len(data) - 1) if b.isdigit() else len(data) - 1
        if a.isdigit():
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if self.command == "HEAD":
            return
        step = 64 << 10
        t0 = time.monotonic()
        stop = self.server.stop_event
        for i in range(start, end + 1, step):
            self.wfile.write(data[i : min(i + step, end + 1)])
            due = t0 + (i + step - start) / rate
            wait = due - time.monotonic()
            if wait > 0 and stop.wait(min(wait, MAX_HANG_S)):
                break

    # -- dispatch --------------------------------------------------------------------------

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        srv = self.server
        parts = urlsplit(self.path)
        mode = parts.path.strip("/")
        q = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        with srv.lock:
            srv.counts[self.path] += 1
            nth = srv.counts[self.path]
            srv.requests.append(
                {
                    "mode": mode,
                    "path": self.path,
                    "range": self.headers.get("Range"),
                    "accept_encoding": self.headers.get("Accept-Encoding"),
                    "authorization": self.headers.get("Authorization"),
                }
            )
        data = srv.payload
        times = int(q.get("times", "1000000"))
        faulty = nth <= times
        try:
            self._dispatch(mode, q, data, faulty)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _dispatch(self, mode: str, q: dict[str, str], data: bytes, faulty: bool) -> None:
        start = self._range_start() or 0
        if mode == "ok" or not faulty:
            self._send_range(data)
        elif mode == "throttle":
            self._throttled(data, float(q.get("rate", "1048576")))
        elif mode == "ignore-range":
            self._send(200, data)
        elif mode == "drop":
            at = int(q.get("at", str(len(data) // 2)))
            if "each" in q:
                at = min(len(data), start + int(q["each"]))
            if start >= at:
                self._send_range(data)
                return
            body = data[start:]
            ranged = self._range_start() is not None  # "bytes=0-..." is a range request too
            self.send_response(206 if ranged else 200)
            if ranged:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(data[start:at])
            self.wfile.flush()
            self.close_connection = True
        elif mode == "trickle":
            self._slow(data, start, float(q.get("interval", "0.05")), 0)
        elif mode == "stall":
            self._slow(data, start, 0.0, int(q.get("after", "100")))
        elif mode == "wrong-bytes":
            at = int(q.get("at", str(len(data) // 2)))
            bad = bytearray(data)
            bad[at] ^= 0xFF
            self._send_range(bytes(bad))
        elif mode == "always-416":
            if self._range_start() is None:
                self._send(200, data)
            else:
                self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"})
        elif mode == "busy":
            self._send(503, b"slow down", {"Retry-After": q.get("retry_after", "0.1")})
        elif mode == "gzip":
            self._send(200, gzip.compress(data), {"Content-Encoding": "gzip"})
        elif mode == "expired":
            body = (
                b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>AccessDenied</Code>"
                b"<Message>Request has expired</Message></Error>"
            )
            self._send(403, body, {"Content-Type": "application/xml"})
        elif mode == "bad-range":
            if self._range_start() is None:
                self._send(200, data)
                return
            shift = int(q.get("shift", "0"))
            total = int(q.get("total", str(len(data))))
            s = start + shift
            cr = f"bytes {s}-{len(data) - 1}/{total}"
            self._send(206, data[s:], {"Content-Range": cr})
        else:
            self._send(404, f"unknown fault mode {mode!r}".encode())


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, payload: bytes) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.payload = payload
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.requests: list[dict[str, Any]] = []


class FaultServer:
    """Serve ``payload`` on 127.0.0.1 with one fault per path (see the module docstring)."""

    def __init__(self, payload: bytes) -> None:
        self._srv = _Server(payload)
        self._thread = threading.Thread(
            target=self._srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def base(self) -> str:
        host, port = self._srv.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self._srv.requests

    @property
    def payload(self) -> bytes:
        return self._srv.payload

    def url(self, mode: str, **params: Any) -> str:
        """URL of ``mode`` with its parameters (``times``, ``at``, ``interval`` ...)."""
        query = f"?{urlencode(params)}" if params else ""
        return f"{self.base}/{mode}{query}"

    def stop(self) -> None:
        self._srv.stop_event.set()
        self._srv.shutdown()
        self._srv.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FaultServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
