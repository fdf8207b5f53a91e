"""Object stores behind the catalog: presigned URLs, and the check made before ``ready``.

Two backends, chosen by :func:`open_objects` from an object store URL:

``file:///srv/objects``
    :class:`FileObjects`, the embedded default.  Bytes live under a local directory and
    are served by the catalog process's own object endpoint (``/objects/<key>``), which
    answers only URLs this service signed (HMAC-SHA256 over method, key, expiry, and for a
    PUT the declared digest and size).
``s3://bucket[/prefix]?endpoint=https://...&region=auto``
    :class:`S3Objects`, any S3-compatible store (Cloudflare R2, AWS S3, MinIO, Ceph),
    presigned with boto3 using SigV4.  The PUT URL binds ``x-amz-checksum-sha256``, so the
    store itself refuses a body whose digest is not the registered one.

Object keys carry 128 random bits (``datasets/<name>/<version>/<random>.bin``) so they
cannot be guessed, and nothing here makes a bucket public.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qs, quote, urlencode, urlsplit

from numbatraj.errors import CatalogRequestError, IntegrityError
from numbatraj.io.atomic import write_bytes
from numbatraj.io.hashing import sha256_file

__all__ = [
    "MAX_EXPIRY_S",
    "FileObjects",
    "ObjectBackend",
    "Presigned",
    "S3Objects",
    "new_object_key",
    "open_objects",
]

#: SigV4 presigned URLs are valid for at most 7 days.
MAX_EXPIRY_S = 7 * 24 * 3600
#: The embedded store's URL-signing key is this many random bytes; a shorter one is refused.
_MIN_SECRET_BYTES = 32
_KEY = re.compile(r"datasets/[a-z0-9][a-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._+-]*/[0-9a-f]{32}\.bin")


def new_object_key(name: str, version: str) -> str:
    """A fresh, unguessable key for ``name`` + ``version`` (both already validated)."""
    return f"datasets/{name}/{version}/{secrets.token_hex(16)}.bin"


def _cap(expires_s: int) -> int:
    return max(1, min(int(expires_s), MAX_EXPIRY_S))


@dataclass(frozen=True)
class Presigned:
    """A URL the client uses directly against the object store."""

    url: str
    method: str
    expires_at: float
    headers: dict[str, str] = field(default_factory=dict)

    def public(self) -> dict[str, Any]:
        return {
            "url": self.url, "method": self.method, "expires_at": self.expires_at,
            "headers": dict(self.headers),
        }


class ObjectBackend(Protocol):
    """What the catalog service needs from an object store."""

    #: Where the objects live, for logs and ``/v1/health`` (no credentials).
    description: str

    def presign_get(self, key: str, expires_s: int) -> Presigned: ...

    def presign_put(self, key: str, expires_s: int, sha256: str, size: int) -> Presigned: ...

    def check(self, key: str, sha256: str, size: int) -> str | None:
        """None when the stored object has ``size`` bytes and digest ``sha256``, else why not."""
        ...

    def read(self, key: str) -> bytes:
        """The whole object (the service reads small metadata objects, never data)."""
        ...


class FileObjects:
    """Objects as files under ``root``, served by the catalog's own signed endpoint.

    Parameters
    ----------
    root : str
        Directory holding the objects.  A signing secret is kept in ``root/.signing-key``
        (mode 0600) unless ``secret`` is given, so URLs survive a restart.
    secret : bytes, optional
        HMAC key for URL signatures.
    """

    def __init__(self, root: str, *, secret: bytes | None = None) -> None:
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)
        self.secret = secret if secret is not None else self._load_secret()
        self.base_url = ""  # set by the service once it knows its address
        self.description = f"file://{self.root}"

    def _load_secret(self) -> bytes:
        """The signing key in ``root/.signing-key``, made on first use.

        A new key is written whole to a temporary file, synced, then hard-linked into place,
        which fails when another start got there first (its key is then the one read): the
        key file is never seen empty or half written, and concurrent starts share one key.
        """
        path = os.path.join(self.root, ".signing-key")
        if not os.path.exists(path):
            self._make_secret(path)
        with open(path, "rb") as f:
            secret = f.read()
        if len(secret) < _MIN_SECRET_BYTES:
            raise IntegrityError(
                f"signing key {path} holds {len(secret)} bytes, fewer than "
                f"{_MIN_SECRET_BYTES}: URLs signed with it could be forged; delete the file "
                "to make a new key (URLs issued before then stop working)"
            )
        return secret

    @staticmethod
    def _make_secret(path: str) -> None:
        try:  # linked into place: another start that placed its key first wins, and is read
            write_bytes(path, secrets.token_bytes(_MIN_SECRET_BYTES), overwrite=False,
                        mode=0o600)
        except FileExistsError:
            pass

    def path_of(self, key: str) -> str:
        """Local path of ``key``; refuses anything that is not a key this service made."""
        if not _KEY.fullmatch(key) or ".." in key:
            raise CatalogRequestError(f"object key {key!r} is not one this catalog issues")
        return os.path.join(self.root, *key.split("/"))

    def _signature(self, method: str, key: str, expires: int, extra: str = "") -> str:
        msg = f"{method}\n{key}\n{expires}\n{extra}".encode()
        return hmac.new(self.secret, msg, hashlib.sha256).hexdigest()

    def _url(self, method: str, key: str, expires_s: int, extra: dict[str, str]) -> Presigned:
        if not self.base_url:
            raise RuntimeError("FileObjects.base_url is unset: the service has not started")
        expires = int(time.time()) + _cap(expires_s)
        extra_s = "&".join(f"{k}={v}" for k, v in sorted(extra.items()))
        sig = self._signature(method, key, expires, extra_s)
        query = urlencode({**extra, "expires": expires, "sig": sig})
        return Presigned(f"{self.base_url}/objects/{quote(key)}?{query}", method, float(expires))

    def presign_get(self, key: str, expires_s: int) -> Presigned:
        return self._url("GET", key, expires_s, {})

    def presign_put(self, key: str, expires_s: int, sha256: str, size: int) -> Presigned:
        return self._url("PUT", key, expires_s, {"sha256": sha256, "size": str(size)})

    def verify_url(self, method: str, key: str, query: str) -> tuple[str | None, dict[str, str]]:
        """Check a request against its signature: ``(problem or None, query fields)``."""
        q = {k: v[-1] for k, v in parse_qs(query).items()}
        try:
            expires = int(q.get("expires", ""))
        except ValueError:
            return "the URL is not signed (no expiry)", q
        extra = {k: q[k] for k in ("sha256", "size") if k in q} if method == "PUT" else {}
        extra_s = "&".join(f"{k}={v}" for k, v in sorted(extra.items()))
        want = self._signature("GET" if method == "HEAD" else method, key, expires, extra_s)
        if not hmac.compare_digest(want, q.get("sig", "")):
            return "signature does not match (the URL was altered or signed elsewhere)", q
        if time.time() > expires:
            return f"the URL expired at {expires} (unix time)", q
        return None, q

    def check(self, key: str, sha256: str, size: int) -> str | None:
        path = self.path_of(key)
        if not os.path.isfile(path):
            return f"no object was uploaded to {key}"
        got_size = os.path.getsize(path)
        if got_size != size:
            return f"object {key} has {got_size} bytes, registered {size}"
        got = sha256_file(path)
        if got != sha256:
            return f"object {key} has sha256 {got}, registered {sha256}"
        return None

    def read(self, key: str) -> bytes:
        with open(self.path_of(key), "rb") as f:
            return f.read()


class S3Objects:
    """An S3-compatible bucket, presigned with boto3 (SigV4, ``region=auto`` for R2).

    Credentials come the usual boto3 ways (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``,
    a profile, an instance role).  Presigning needs a real key pair.
    """

    def __init__(
        self,
        bucket: str,
        *,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str = "auto",
        addressing_style: str | None = None,
        client: Any = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        if client is None:
            import boto3
            from botocore.config import Config

            style = addressing_style or ("path" if endpoint_url else "auto")
            cfg = Config(
                signature_version="s3v4",
                s3={"addressing_style": style},
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
                retries={"max_attempts": 3, "mode": "standard"},
            )
            client = boto3.client(
                "s3", endpoint_url=endpoint_url, region_name=region, config=cfg
            )
        self.client = client
        where = endpoint_url or f"region {region}"
        self.description = f"s3://{bucket}/{self.prefix} at {where}"

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def presign_get(self, key: str, expires_s: int) -> Presigned:
        exp = _cap(expires_s)
        url = self.client.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": self._key(key)}, ExpiresIn=exp
        )
        return Presigned(url, "GET", time.time() + exp)

    def presign_put(self, key: str, expires_s: int, sha256: str, size: int) -> Presigned:
        exp = _cap(expires_s)
        b64 = base64.b64encode(bytes.fromhex(sha256)).decode()
        params = {"Bucket": self.bucket, "Key": self._key(key), "ChecksumSHA256": b64}
        url = self.client.generate_presigned_url("put_object", Params=params, ExpiresIn=exp)
        return Presigned(url, "PUT", time.time() + exp, {"x-amz-checksum-sha256": b64})

    def check(self, key: str, sha256: str, size: int) -> str | None:
        from botocore.exceptions import ClientError

        k = self._key(key)
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=k, ChecksumMode="ENABLED")
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "?")
            return f"no object at s3://{self.bucket}/{k} ({code})"
        if int(head["ContentLength"]) != size:
            return f"object {k} has {head['ContentLength']} bytes, registered {size}"
        stored = head.get("ChecksumSHA256")
        if stored and "-" not in stored:  # a full-object checksum, not a multipart composite
            got = base64.b64decode(stored).hex()
        else:  # the store keeps no SHA-256: read the object once to hash it
            body = self.client.get_object(Bucket=self.bucket, Key=k)["Body"]
            h = hashlib.sha256()
            for chunk in iter(lambda: body.read(4 << 20), b""):
                h.update(chunk)
            got = h.hexdigest()
        if got != sha256:
            return f"object {k} has sha256 {got}, registered {sha256}"
        return None

    def read(self, key: str) -> bytes:
        body = self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
        return bytes(body.read())


def open_objects(url: str) -> FileObjects | S3Objects:
    """The object backend a URL names: ``file:///dir`` or ``s3://bucket/prefix?...``.

    S3 query parameters: ``endpoint`` (the S3 API URL; omit for AWS), ``region``
    (default ``auto``, which R2 requires), ``addressing`` (``path`` or ``virtual``).
    """
    parts = urlsplit(url)
    if parts.scheme == "file":
        root = parts.netloc + parts.path
        if not root:
            raise CatalogRequestError(f"object store URL {url!r} names no directory")
        return FileObjects(root)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise CatalogRequestError(f"object store URL {url!r} names no bucket (s3://bucket?...)")
        q = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        unknown = sorted(set(q) - {"endpoint", "region", "addressing"})
        if unknown:
            raise CatalogRequestError(
                f"object store URL {url!r}: unknown parameter(s) {', '.join(unknown)}; "
                "valid: endpoint, region, addressing"
            )
        return S3Objects(
            parts.netloc, prefix=parts.path, endpoint_url=q.get("endpoint"),
            region=q.get("region", "auto"), addressing_style=q.get("addressing"),
        )
    raise CatalogRequestError(
        f"object store URL {url!r} is not supported: use file:///dir or s3://bucket?endpoint=..."
    )
