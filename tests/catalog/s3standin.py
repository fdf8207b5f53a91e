"""An S3-compatible stand-in on 127.0.0.1 that checks SigV4 the way S3 does.

Enough of the S3 API for the catalog: ``PUT`` / ``GET`` (with ``Range``) / ``HEAD`` of
objects in one bucket, authorised either by a presigned query string or by an
``Authorization: AWS4-HMAC-SHA256`` header.  Every request's signature is recomputed from the
request as received (canonical request, string to sign, derived key), so a URL whose
signature, expiry, key or signed headers were altered is refused with 403, as S3 refuses it.
A PUT that carries ``x-amz-checksum-sha256`` is refused (400 BadDigest) unless the body
matches; HEAD with ``x-amz-checksum-mode: ENABLED`` returns the stored checksum.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import threading
import time
from calendar import timegm
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

__all__ = ["S3StandIn"]

ACCESS_KEY = "AKIDSTANDIN"
SECRET_KEY = "standin-secret-key"


def _h(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def _signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    return _h(_h(_h(_h(("AWS4" + secret).encode(), date), region), service), "aws4_request")


def _canonical_query(pairs: list[tuple[str, str]]) -> str:
    enc = sorted((quote(k, safe="-_.~"), quote(v, safe="-_.~")) for k, v in pairs)
    return "&".join(f"{k}={v}" for k, v in enc)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _error(self, status: int, code: str, message: str) -> None:
        body = f"<Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _auth_problem(self) -> str | None:
        parts = urlsplit(self.path)
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        q = dict(pairs)
        if "X-Amz-Signature" in q:
            cred, amz_date = q.get("X-Amz-Credential", ""), q.get("X-Amz-Date", "")
            signed, sig = q.get("X-Amz-SignedHeaders", ""), q["X-Amz-Signature"]
            payload = "UNSIGNED-PAYLOAD"
            pairs = [(k, v) for k, v in pairs if k != "X-Amz-Signature"]
            try:
                t0 = timegm(time.strptime(amz_date, "%Y%m%dT%H%M%SZ"))
                expires = int(q.get("X-Amz-Expires", "0"))
            except ValueError:
                return "malformed X-Amz-Date or X-Amz-Expires"
            if time.time() > t0 + expires:
                return "Request has expired"
        elif self.headers.get("Authorization", "").startswith("AWS4-HMAC-SHA256 "):
            fields = dict(
                f.strip().split("=", 1)
                for f in self.headers["Authorization"][17:].split(",")
            )
            cred, signed, sig = fields["Credential"], fields["SignedHeaders"], fields["Signature"]
            amz_date = self.headers.get("X-Amz-Date", "")
            payload = self.headers.get("x-amz-content-sha256", "UNSIGNED-PAYLOAD")
        else:
            return "anonymous access is not allowed"
        try:
            access, date, region, service, _ = cred.split("/")
        except ValueError:
            return "malformed credential"
        if access != self.server.access_key:
            return "The AWS Access Key Id you provided does not exist"
        names = signed.split(";")
        if "host" not in names:
            return "host must be a signed header"
        headers = ""
        for n in names:
            value = self.headers.get(n)
            if value is None:
                return f"signed header {n} is missing from the request"
            headers += f"{n}:{' '.join(value.split())}\n"
        canonical = "\n".join(
            [self.command, parts.path or "/", _canonical_query(pairs), headers, signed, payload]
        )
        scope = f"{date}/{region}/{service}/aws4_request"
        to_sign = "\n".join(
            ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
        )
        key = _signing_key(self.server.secret_key, date, region, service)
        want = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(want, sig):
            return "SignatureDoesNotMatch"
        return None

    def _object(self) -> tuple[str, str]:
        path = unquote(urlsplit(self.path).path)
        bucket, _, key = path.lstrip("/").partition("/")
        return bucket, key

    def _handle(self) -> None:
        srv = self.server
        with srv.lock:
            srv.log.append((self.command, self.path))
        problem = self._auth_problem()
        if problem is not None:
            if self.command == "PUT":
                self.close_connection = True
            self._error(403, "AccessDenied", problem)
            return
        bucket, key = self._object()
        if bucket != srv.bucket:
            self._error(404, "NoSuchBucket", bucket)
            return
        if self.command == "PUT":
            n = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(n)
            want = self.headers.get("x-amz-checksum-sha256")
            got = base64.b64encode(hashlib.sha256(body).digest()).decode()
            if want is not None and want != got:
                self._error(400, "BadDigest", f"checksum {got} != {want}")
                return
            with srv.lock:
                srv.objects[key] = (body, got if want is not None else None)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if key not in srv.objects:
            self._error(404, "NoSuchKey", key)
            return
        data, checksum = srv.objects[key]
        start, end, status = 0, len(data) - 1, 200
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            start = int(a)
            end = min(int(b), len(data) - 1) if b else len(data) - 1
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        self.send_response(status)
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        if checksum and srv.keep_checksums and self.headers.get("x-amz-checksum-mode", "").upper() == "ENABLED":
            self.send_header("x-amz-checksum-sha256", checksum)
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(data[start : end + 1])
            with srv.lock:
                srv.bytes_served += end - start + 1

    do_GET = do_PUT = do_HEAD = _handle


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, bucket: str, keep_checksums: bool) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.bucket = bucket
        self.keep_checksums = keep_checksums
        self.access_key = ACCESS_KEY
        self.secret_key = SECRET_KEY
        self.objects: dict[str, tuple[bytes, str | None]] = {}
        self.lock = threading.Lock()
        self.log: list[tuple[str, str]] = []
        self.bytes_served = 0


class S3StandIn:
    """One-bucket S3 stand-in on 127.0.0.1; use as a context manager.

    ``keep_checksums=False`` behaves like a store that verifies ``x-amz-checksum-sha256`` on
    upload but does not return it on HEAD.
    """

    def __init__(self, bucket: str = "datasets", *, keep_checksums: bool = True) -> None:
        self._srv = _Server(bucket, keep_checksums)
        self._thread = threading.Thread(
            target=self._srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def endpoint(self) -> str:
        host, port = self._srv.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def objects(self) -> dict[str, tuple[bytes, str | None]]:
        return self._srv.objects

    @property
    def bytes_served(self) -> int:
        return self._srv.bytes_served

    @property
    def log(self) -> list[tuple[str, str]]:
        return self._srv.log

    def credentials_env(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}

    def stop(self) -> None:
        self._srv.shutdown()
        self._srv.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> S3StandIn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
