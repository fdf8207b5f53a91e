"""The catalog's HTTP plumbing: one :class:`Request` per call, and :class:`HTTPError`.

Route code takes a :class:`Request` (its method, path parts, query, JSON body, key check
and answer), never the server's handler, so the routes do not depend on
``http.server``.  This layer is deliberately thin: it is the part an ASGI app replaces.
"""

from __future__ import annotations

import json
import re
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from numbatraj.io.hashing import check_sha256_hex

__all__ = ["MAX_JSON_BYTES", "HTTPError", "KeyRoles", "Request", "body_int", "body_sha256",
           "body_size", "body_text"]

#: A JSON request body larger than this is refused with 413.
MAX_JSON_BYTES = 64 << 10
_TEXT = re.compile(r"[\x20-\x7e]{0,200}")


class HTTPError(Exception):
    """Answer the request with ``status`` and ``{"error": message}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class KeyRoles(Protocol):
    """Where a request's API key is looked up (the catalog database)."""

    def role_of(self, key: str) -> str | None: ...


class Request:
    """One HTTP request to the catalog.

    Parameters
    ----------
    handler : BaseHTTPRequestHandler
        The connection the request arrived on.
    keys : KeyRoles
        Looks up the role of the request's API key.
    """

    def __init__(self, handler: BaseHTTPRequestHandler, keys: KeyRoles) -> None:
        self._h = handler
        self._keys = keys
        self._body_read = False
        parts = urlsplit(handler.path)
        self.method = handler.command
        self.path = parts.path
        self.raw_query = parts.query
        self.query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        self.segs = [unquote(s) for s in parts.path.strip("/").split("/")]

    def read_json(self) -> dict[str, Any]:
        """The body as a JSON object (``{}`` when empty); 400 or 413 when it is not one."""
        self._body_read = True
        n = int(self._h.headers.get("Content-Length") or 0)
        if n > MAX_JSON_BYTES:
            self._h.close_connection = True
            raise HTTPError(413, f"request body of {n} bytes exceeds {MAX_JSON_BYTES}")
        try:
            obj = json.loads(self._h.rfile.read(n) or b"{}")
        except json.JSONDecodeError as exc:
            raise HTTPError(400, f"request body is not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise HTTPError(400, "request body must be a JSON object")
        return obj

    def auth(self, need: str) -> str:
        """The role of the request's key; 401 without a known key, 403 when ``need`` is
        ``write`` and the key only reads."""
        header = self._h.headers.get("Authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise HTTPError(401, "missing API key: send 'Authorization: Bearer <key>'")
        role = self._keys.role_of(key.strip())
        if role is None:
            raise HTTPError(401, "API key not recognised")
        if need == "write" and role != "write":
            raise HTTPError(403, f"a {role} key cannot {self.method} {self.path}")
        return role

    def respond(self, status: int, obj: Any) -> None:
        """Answer with ``obj`` as JSON."""
        body = json.dumps(obj).encode()
        h = self._h
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def drain(self) -> None:
        """Consume an unread request body so the kept-alive connection stays in step."""
        if self._body_read:
            return
        n = self._h.headers.get("Content-Length") or "0"
        if n.isdigit() and int(n) <= MAX_JSON_BYTES:
            self._h.rfile.read(int(n))
        else:
            self._h.close_connection = True


# -- fields of a JSON body ---------------------------------------------------------------


def body_int(body: dict[str, Any], key: str) -> int | None:
    """``body[key]`` as an integer or None; 400 for anything else."""
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise HTTPError(400, f"{key} must be an integer or null, got {v!r}")
    return v


def body_text(body: dict[str, Any], key: str) -> str | None:
    """``body[key]`` as printable ASCII of at most 200 chars, or None; 400 otherwise."""
    v = body.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or not _TEXT.fullmatch(v):
        raise HTTPError(400, f"{key} must be printable ASCII of at most 200 chars, got {v!r}")
    return v


def body_sha256(value: Any, what: str) -> str:
    """A SHA-256 hex digest; 400 naming ``what`` otherwise."""
    try:
        return check_sha256_hex(value, what=what)
    except ValueError as exc:
        raise HTTPError(400, str(exc)) from None


def body_size(value: Any, what: str) -> int:
    """A byte count; 400 naming ``what`` unless a non-negative integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise HTTPError(400, f"{what} must be a non-negative integer, got {value!r}")
    return value
