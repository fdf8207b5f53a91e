"""The catalog's HTTP plumbing: one :class:`Request` per call, and :class:`HTTPError`.

Route code takes a :class:`Request` (its method, path parts, query, JSON body, key check
and answer), never the ASGI scope, so the routes are plain synchronous functions that the
app runs on a worker thread: the body has already been read (size-capped) by then.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote

from numbatraj.io.hashing import check_sha256_hex

__all__ = ["INT64_MAX", "MAX_JSON_BYTES", "HTTPError", "KeyRoles", "Request", "body_int",
           "body_sha256", "body_size", "body_text"]

#: A JSON request body larger than this is refused with 413 (before it is read).
MAX_JSON_BYTES = 64 << 10
#: Integers in a body must fit the database's BIGINT.
INT64_MAX = (1 << 63) - 1
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
    """One HTTP request to the catalog, its body already read.

    Parameters
    ----------
    method : str
        ``GET``, ``HEAD`` (routed as ``GET``; the server sends no body), ``POST`` ...
    path, query_string : str
        The raw path and query.
    headers : mapping
        Header names in lower case.
    body : bytes
        The whole request body (at most :data:`MAX_JSON_BYTES`).
    keys : KeyRoles
        Looks up the role of the request's API key.
    """

    def __init__(self, method: str, path: str, query_string: str, headers: Mapping[str, str],
                 body: bytes, keys: KeyRoles) -> None:
        self.method = "GET" if method == "HEAD" else method
        self.path = path
        self.raw_query = query_string
        self.headers = headers
        self.body = body
        self._keys = keys
        self.query = {k: v[-1] for k, v in parse_qs(query_string).items()}
        self.segs = [unquote(s) for s in path.strip("/").split("/")]
        self.status = 500
        self.answer: Any = None

    def read_json(self) -> dict[str, Any]:
        """The body as a JSON object (``{}`` when empty); 400 when it is not one."""
        try:
            obj = json.loads(self.body or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise HTTPError(400, f"request body is not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise HTTPError(400, "request body must be a JSON object")
        return obj

    def auth(self, need: str) -> str:
        """The role of the request's key; 401 without a known key, 403 when ``need`` is
        ``write`` and the key only reads."""
        header = self.headers.get("authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise HTTPError(401, "missing API key: send 'Authorization: Bearer <key>'")
        role = self._keys.role_of(key.strip())
        if role is None:
            raise HTTPError(401, "API key not recognised (unknown or revoked)")
        if need == "write" and role != "write":
            raise HTTPError(403, f"a {role} key cannot {self.method} {self.path}")
        return role

    def respond(self, status: int, obj: Any) -> None:
        """Answer with ``obj`` as JSON."""
        self.status = status
        self.answer = obj


# -- fields of a JSON body ---------------------------------------------------------------


def body_int(body: dict[str, Any], key: str) -> int | None:
    """``body[key]`` as a 64-bit integer or None; 400 naming ``key`` for anything else."""
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise HTTPError(400, f"{key} must be an integer or null, got {v!r}")
    if not -INT64_MAX - 1 <= v <= INT64_MAX:
        raise HTTPError(400, f"{key} must fit in 64 bits (|{key}| < 2**63), got {v}")
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
    """A byte count; 400 naming ``what`` unless a non-negative 64-bit integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise HTTPError(400, f"{what} must be a non-negative integer, got {value!r}")
    if value > INT64_MAX:
        raise HTTPError(400, f"{what} must be below 2**63, got {value}")
    return value
