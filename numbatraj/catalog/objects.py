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
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qs, quote, urlencode, urlsplit

from numbatraj.errors import CatalogRequestError, IntegrityError
from numbatraj.io.atomic import publishing, write_bytes
from numbatraj.io.hashing import sha256_file

__all__ = [
    "MAX_EXPIRY_S",
    "MAX_PARTS",
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
_KEY = re.compile(
    r"(datasets|artifacts/[a-z]+)/[a-z0-9][a-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._+-]*/"
    r"[0-9a-f]{32}\.bin"
)
_UPLOAD_ID = re.compile(r"[0-9a-f]{32}")
#: S3's limits on a multipart upload: part numbers 1..10,000, parts of 5 MiB..5 GiB.
MAX_PARTS = 10_000


def new_object_key(name: str, version: str, kind: str = "dataset") -> str:
    """A fresh, unguessable key for ``name`` + ``version`` (both already validated)."""
    top = "datasets" if kind == "dataset" else f"artifacts/{kind}"
    return f"{top}/{name}/{version}/{secrets.token_hex(16)}.bin"


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

    def create_multipart(self, key: str) -> str:
        """Start a multipart upload to ``key``; its upload id."""
        ...

    def presign_part(self, key: str, upload_id: str, part: int, expires_s: int) -> Presigned:
        """A presigned ``PUT`` of part number ``part`` (1-based)."""
        ...

    def complete_multipart(self, key: str, upload_id: str, sizes: list[int]) -> str | None:
        """Join the parts (``sizes[i]`` bytes for part ``i + 1``) into the object; None when
        done, else why not (a missing or short part: the upload stays open to resume)."""
        ...

    def abort_multipart(self, key: str, upload_id: str) -> None:
        """Drop an unfinished multipart upload and its parts (no error when gone)."""
        ...

    def health(self) -> None:
        """Raise :class:`OSError` when the store cannot be reached."""
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

    def _url(self, method: str, key: str, expires_s: int, extra: dict[str, str],
             *, http_method: str | None = None) -> Presigned:
        if not self.base_url:
            raise RuntimeError("FileObjects.base_url is unset: the service has not started")
        expires = int(time.time()) + _cap(expires_s)
        extra_s = "&".join(f"{k}={v}" for k, v in sorted(extra.items()))
        sig = self._signature(method, key, expires, extra_s)
        query = urlencode({**extra, "expires": expires, "sig": sig})
        return Presigned(f"{self.base_url}/objects/{quote(key)}?{query}",
                         http_method or method, float(expires))

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
        extra: dict[str, str]
        if method == "PUT" and "upload" in q:
            method = "PART"
            extra = {k: q[k] for k in ("part", "upload") if k in q}
        elif method == "PUT":
            extra = {k: q[k] for k in ("sha256", "size") if k in q}
        else:
            extra = {}
        extra_s = "&".join(f"{k}={v}" for k, v in sorted(extra.items()))
        want = self._signature("GET" if method == "HEAD" else method, key, expires, extra_s)
        got = q.get("sig", "").encode("utf-8", "surrogateescape")
        if not hmac.compare_digest(want.encode(), got):
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

    # -- multipart: parts under root/.multipart/<upload id>/<n>, joined on complete ---------

    def part_dir(self, upload_id: str) -> str:
        """Where the parts of ``upload_id`` are kept."""
        if not isinstance(upload_id, str) or not _UPLOAD_ID.fullmatch(upload_id):
            raise CatalogRequestError(f"upload id {upload_id!r} is not one this catalog issues")
        return os.path.join(self.root, ".multipart", upload_id)

    def create_multipart(self, key: str) -> str:
        self.path_of(key)
        upload_id = secrets.token_hex(16)
        os.makedirs(self.part_dir(upload_id))
        return upload_id

    def presign_part(self, key: str, upload_id: str, part: int, expires_s: int) -> Presigned:
        self.part_dir(upload_id)
        return self._url("PART", key, expires_s, {"part": str(part), "upload": upload_id},
                         http_method="PUT")

    def complete_multipart(self, key: str, upload_id: str, sizes: list[int]) -> str | None:
        pdir = self.part_dir(upload_id)
        if not os.path.isdir(pdir):
            return f"multipart upload {upload_id} of {key} is unknown or was aborted"
        for i, want in enumerate(sizes, 1):
            p = os.path.join(pdir, str(i))
            if not os.path.isfile(p):
                return f"part {i} of {len(sizes)} was not uploaded"
            if os.path.getsize(p) != want:
                return f"part {i} has {os.path.getsize(p)} bytes, expected {want}"
        dest = self.path_of(key)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with publishing(dest) as tmp, open(tmp, "wb") as out:
            for i in range(1, len(sizes) + 1):
                with open(os.path.join(pdir, str(i)), "rb") as f:
                    shutil.copyfileobj(f, out, 4 << 20)
        shutil.rmtree(pdir, ignore_errors=True)
        return None

    def abort_multipart(self, key: str, upload_id: str) -> None:
        shutil.rmtree(self.part_dir(upload_id), ignore_errors=True)

    def health(self) -> None:
        if not os.path.isdir(self.root) or not os.access(self.root, os.W_OK):
            raise OSError(f"object directory {self.root} is missing or not writable")


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
            # a session of its own: boto3's default session caches the credentials it found
            # first, so a second backend in one process (another bucket, rotated keys)
            # would sign with stale ones
            client = boto3.session.Session().client(
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

    def create_multipart(self, key: str) -> str:
        out = self.client.create_multipart_upload(Bucket=self.bucket, Key=self._key(key))
        return str(out["UploadId"])

    def presign_part(self, key: str, upload_id: str, part: int, expires_s: int) -> Presigned:
        exp = _cap(expires_s)
        params = {"Bucket": self.bucket, "Key": self._key(key), "UploadId": upload_id,
                  "PartNumber": part}
        url = self.client.generate_presigned_url("upload_part", Params=params, ExpiresIn=exp)
        return Presigned(url, "PUT", time.time() + exp)

    def complete_multipart(self, key: str, upload_id: str, sizes: list[int]) -> str | None:
        from botocore.exceptions import ClientError

        k = self._key(key)
        have: dict[int, dict[str, Any]] = {}
        try:
            pages = self.client.get_paginator("list_parts").paginate(
                Bucket=self.bucket, Key=k, UploadId=upload_id)
            for page in pages:
                for p in page.get("Parts", []):
                    have[int(p["PartNumber"])] = p
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "?")
            return f"multipart upload {upload_id} of {k} cannot be listed ({code})"
        for i, want in enumerate(sizes, 1):
            if i not in have:
                return f"part {i} of {len(sizes)} was not uploaded"
            if int(have[i]["Size"]) != want:
                return f"part {i} has {have[i]['Size']} bytes, expected {want}"
        parts = [{"PartNumber": i, "ETag": have[i]["ETag"]} for i in range(1, len(sizes) + 1)]
        try:
            self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=k, UploadId=upload_id, MultipartUpload={"Parts": parts})
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "?")
            return f"multipart upload {upload_id} of {k} could not be completed ({code})"
        return None

    def abort_multipart(self, key: str, upload_id: str) -> None:
        from botocore.exceptions import ClientError

        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=self._key(key),
                                               UploadId=upload_id)
        except ClientError:
            pass

    def health(self) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.head_bucket(Bucket=self.bucket)
        except (BotoCoreError, ClientError) as exc:
            raise OSError(f"bucket {self.bucket} unreachable: {exc}") from None


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
