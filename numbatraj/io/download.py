"""Resumable, verified HTTP downloads: :func:`fetch`.

The bytes go to ``<dest>.part`` (see :class:`numbatraj.io.atomic.PartFile`) and are renamed
to ``dest`` only once the transfer is complete and its SHA-256 matches.  A dropped
connection resumes with an HTTP ``Range`` request, within a bounded number of retries and
across runs.  A part file left by an earlier run is resumed only when the response that
started it gave a validator (strong ``ETag`` or ``Last-Modified``, kept in the sidecar
``<dest>.part.meta``), sent back as ``If-Range`` so a changed resource answers ``200``, or
when ``sha256`` is given; a resumed transfer whose digest then mismatches restarts from
zero once before the mismatch is raised.  Error messages never carry a URL's query string
or credentials (:func:`redact_text`).  A resumed body is accepted only as ``206`` with a
``Content-Range`` that starts where the part file ends and has the expected total (and no
other validator than the part file's); a ``200`` answer to a ``Range`` request carries the
whole file, so the part file is emptied and the transfer restarts from zero with that body.

There is no total timeout.  A throughput guard declares the connection dead when fewer than
``min_rate`` bytes per second arrived over the last ``rate_window`` seconds, at any file
size, so a server trickling a byte every few seconds cannot hang a run.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections import deque
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import requests
import urllib3

from numbatraj.errors import DownloadError, IntegrityError
from numbatraj.io.atomic import (
    SYNC_EVERY_BYTES,
    PartFile,
    part_path,
    publish_lock,
    write_bytes,
)
from numbatraj.io.hashing import check_sha256_hex, sha256_file

__all__ = ["FetchResult", "fetch", "redact_text", "redact_url"]

_RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class FetchResult:
    """What :func:`fetch` did.

    Attributes
    ----------
    path : str
        The destination, complete and verified.
    sha256 : str
        Hex digest of the file at ``path``.
    size : int
        Bytes in the file.
    bytes_downloaded : int
        Body bytes received by this call (0 when nothing had to move).
    requests : int
        HTTP requests made by this call.
    resumed_from : int
        Bytes already in ``<dest>.part`` when this call started.
    """

    path: str
    sha256: str
    size: int
    bytes_downloaded: int
    requests: int
    resumed_from: int


class _Retryable(Exception):
    """One attempt failed in a way another attempt may fix."""

    def __init__(self, message: str, wait: float | None = None) -> None:
        super().__init__(message)
        self.wait = wait


def redact_url(url: str) -> str:
    """``url`` without its query string (a presigned URL's signature), fragment and
    ``user:password@``: the network location is rebuilt from host and port only."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<unparsable URL>"
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "..." if parts.query else "", ""))


_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
_QUERY_IN_TEXT = re.compile(r"(/[^\s?'\"<>]*)\?[^\s'\"<>()]+")


def redact_text(text: object, *urls: str) -> str:
    """``str(text)`` with every URL in it passed through :func:`redact_url`, every
    ``/path?query`` (as in a ``requests`` error's ``url: /p?X-Amz-Signature=...``) cut to
    ``/path?...``, and the query string and credentials of each of ``urls`` removed wherever
    they appear; for exception texts put into messages."""
    out = str(text)
    for url in urls:
        try:
            parts = urlsplit(url)
            secrets = [parts.query, parts.password or "", parts.netloc.rpartition("@")[0]]
        except ValueError:
            continue
        out = out.replace(url, redact_url(url))
        for secret in secrets:
            if secret:
                out = out.replace(secret, "...")
    out = _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), out)
    return _QUERY_IN_TEXT.sub(r"\1?...", out)


def _meta_path(dest: str) -> str:
    """The sidecar of ``<dest>.part``: the validators of the response that started it."""
    return part_path(dest) + ".meta"


def _validators(headers: Any) -> dict[str, str]:
    """The strong ``ETag`` and the ``Last-Modified`` of a response, where given."""
    out: dict[str, str] = {}
    etag = (headers.get("ETag") or "").strip()
    if etag and not etag.startswith("W/"):  # a weak ETag cannot go into If-Range
        out["etag"] = etag
    modified = (headers.get("Last-Modified") or "").strip()
    if modified:
        out["last_modified"] = modified
    return out


def _read_meta(dest: str) -> dict[str, str]:
    try:
        with open(_meta_path(dest), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if k in ("etag", "last_modified") and
            isinstance(v, str) and v}


def _write_meta(dest: str, validators: dict[str, str]) -> None:
    """Record (atomically) or, with no validators, remove the part file's sidecar."""
    path = _meta_path(dest)
    if not validators:
        _remove_meta(dest)
        return
    write_bytes(path, json.dumps(validators).encode("utf-8"))


def _remove_meta(dest: str) -> None:
    try:
        os.unlink(_meta_path(dest))
    except FileNotFoundError:
        pass


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds, or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _content_range(value: str | None) -> tuple[int | None, int | None, int | None]:
    """``(start, end, total)`` from ``bytes a-b/n`` or ``bytes */n``; None where absent."""
    if not value or not value.strip().lower().startswith("bytes "):
        return None, None, None
    spec, _, total_s = value.strip()[6:].partition("/")
    total = int(total_s) if total_s.strip().isdigit() else None
    if spec.strip() == "*":
        return None, None, total
    a, _, b = spec.partition("-")
    if not (a.strip().isdigit() and b.strip().isdigit()):
        return None, None, total
    return int(a), int(b), total


class _ThroughputGuard:
    """Dead-connection test: under ``min_rate`` B/s over the last ``window`` seconds."""

    def __init__(self, min_rate: float, window: float) -> None:
        self.min_rate = float(min_rate)
        self.window = float(window)
        self.start = time.monotonic()
        self._events: deque[tuple[float, int]] = deque()
        self._in_window = 0

    def add(self, n: int) -> None:
        now = time.monotonic()
        self._events.append((now, n))
        self._in_window += n
        cutoff = now - self.window
        while self._events and self._events[0][0] < cutoff:
            self._in_window -= self._events.popleft()[1]
        if now - self.start >= self.window and self._in_window < self.min_rate * self.window:
            raise _Retryable(
                f"connection too slow: {self._in_window} bytes in the last {self.window:g} s "
                f"(the guard needs at least {self.min_rate:g} B/s)"
            )


def _describe_response(resp: requests.Response, url: str) -> str:
    try:
        text = resp.content[:300].decode("utf-8", "replace").strip()
    except (requests.RequestException, urllib3.exceptions.HTTPError, OSError):
        text = ""  # the body only decorates the message
    text = redact_text(text, url)
    msg = f"HTTP {resp.status_code} {resp.reason or ''} from {redact_url(url)}".rstrip()
    if resp.status_code == 403:
        msg += " (access denied: a presigned URL may have expired or been altered)"
    return msg + (f": {text}" if text else "")


def fetch(
    url: str,
    dest: str | os.PathLike[str],
    *,
    sha256: str | None = None,
    size: int | None = None,
    headers: dict[str, str] | None = None,
    retries: int = 5,
    min_rate: float = 1024.0,
    rate_window: float = 60.0,
    max_wait: float = 300.0,
    backoff: float = 0.5,
    connect_timeout: float = 30.0,
    chunk_size: int = 1 << 20,
    sync_every: int = SYNC_EVERY_BYTES,
    progress: bool | None = None,
    session: requests.Session | None = None,
) -> FetchResult:
    """Download ``url`` to ``dest`` through ``<dest>.part``; resume, verify, then rename.

    Parameters
    ----------
    url : str
        An ``http(s)`` URL (presigned URLs work unchanged).
    dest : path-like
        Final path.  When it already exists and ``sha256`` matches it, nothing is fetched;
        otherwise it is replaced once the new file is complete and verified.
    sha256 : str, optional
        Expected hex digest.  A mismatch deletes the part file and raises.
    size : int, optional
        Expected size in bytes; also checked against the server's ``Content-Length`` and
        ``Content-Range`` totals.
    headers : dict, optional
        Extra request headers (an ``Authorization`` bearer, say).  ``Accept-Encoding`` is
        always ``identity``: a transparently decoded body would break the digest.
    retries : int
        Further attempts after a failed one (dropped connection, stall, 5xx, refused range).
    min_rate, rate_window : float
        The throughput guard: fewer than ``min_rate`` bytes/s over ``rate_window`` seconds
        is a dead connection.  ``rate_window`` is also the socket read timeout.
    max_wait : float
        Total seconds this call may sleep between attempts, ``Retry-After`` included.
    backoff : float
        First pause between attempts, doubling each time (unless ``Retry-After`` says).
    connect_timeout : float
        Seconds allowed to establish a connection.
    chunk_size : int
        Largest read from the socket.
    sync_every : int
        Bytes between ``fdatasync`` + page-cache drops of written data; 0 disables.
    progress : bool, optional
        Show a progress bar; by default only when stderr is a terminal.
    session : requests.Session, optional
        Reuse a session (connection pool); a private one is used otherwise.

    Returns
    -------
    FetchResult

    Raises
    ------
    DownloadError
        An HTTP status that retrying cannot fix (403, 404, ...), an encoded body, a size
        contradiction, or retries / waiting time used up.
    IntegrityError
        The complete file's SHA-256 is not ``sha256`` (both digests are named).

    Notes
    -----
    Holds ``dest``'s publish lock (:func:`numbatraj.io.atomic.publish_lock`) for the whole
    transfer: concurrent fetches of one ``dest`` run one after the other, and the later
    ones return the verified file without a request when ``sha256`` is given.
    """
    dest = os.fspath(dest)
    if sha256 is not None:
        sha256 = check_sha256_hex(sha256)
    if size is not None and int(size) < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    # one transfer per destination: a second fetch of the same dest (another rank, another
    # process) waits, then finds the finished file and verifies it instead of fetching
    # again (with sha256; without one it fetches again, into its own turn of the part file)
    with publish_lock(dest, wait=True, what="fetch"):
        return _fetch_locked(url, dest, sha256, size, headers, retries, min_rate,
                             rate_window, max_wait, backoff, connect_timeout, chunk_size,
                             sync_every, progress, session)


def _fetch_locked(
    url: str, dest: str, sha256: str | None, size: int | None,
    headers: dict[str, str] | None, retries: int, min_rate: float, rate_window: float,
    max_wait: float, backoff: float, connect_timeout: float, chunk_size: int,
    sync_every: int, progress: bool | None, session: requests.Session | None,
) -> FetchResult:
    if (
        sha256 is not None
        and os.path.isfile(dest)
        and (size is None or os.path.getsize(dest) == size)
        and sha256_file(dest) == sha256
    ):
        return FetchResult(dest, sha256, os.path.getsize(dest), 0, 0, 0)
    if progress is None:
        progress = sys.stderr.isatty()
    own_session = session is None
    sess = session if session is not None else requests.Session()
    try:
        meta = _read_meta(dest)
        # a part file from an earlier run is resumed only when the resource can be shown to
        # be the same one (If-Range on its validator) or the final digest is checked
        keep = bool(meta) or sha256 is not None
        if not keep:
            _remove_meta(dest)
        with PartFile(dest, sync_every=sync_every, keep_existing=keep, background=True) as part:
            t = _Transfer(url, part, sha256, size, headers, sess, connect_timeout, chunk_size)
            t.validators = meta if part.size > 0 else {}
            return t.run(retries, min_rate, rate_window, max_wait, backoff, bool(progress))
    finally:
        if own_session:
            sess.close()


class _Transfer:
    """State of one :func:`fetch` call: the part file, the expected total, counters."""

    def __init__(
        self,
        url: str,
        part: PartFile,
        sha256: str | None,
        size: int | None,
        headers: dict[str, str] | None,
        session: requests.Session,
        connect_timeout: float,
        chunk_size: int,
    ) -> None:
        self.url = url
        self.part = part
        self.sha256 = sha256
        self.total = None if size is None else int(size)
        self.size_from_caller = size is not None
        self.headers = {k: v for k, v in (headers or {}).items() if k.lower() != "range"}
        self.headers["Accept-Encoding"] = "identity"
        self.session = session
        self.connect_timeout = connect_timeout
        self.chunk_size = int(chunk_size)
        self.resumed_from = part.size
        self.validators: dict[str, str] = {}
        self.restarted = False
        self.downloaded = 0
        self.requests = 0
        self.bar: Any = None

    # -- the loop --------------------------------------------------------------------------

    def run(
        self,
        retries: int,
        min_rate: float,
        rate_window: float,
        max_wait: float,
        backoff: float,
        progress: bool,
    ) -> FetchResult:
        if progress:
            from tqdm import tqdm  # type: ignore[import-untyped]

            self.bar = tqdm(
                total=self.total, initial=self.part.size, unit="B", unit_scale=True,
                unit_divisor=1024, desc=os.path.basename(self.part.dest), leave=False,
            )
        waited = 0.0
        failures: list[str] = []
        try:
            while True:
                try:
                    if self.total is not None and self.part.size > self.total:
                        self.part.truncate()  # longer than the object: stale, start over
                    if self.total is None or self.part.size < self.total:
                        self._attempt(min_rate, rate_window)
                    if self.total is None or self.part.size == self.total:
                        result = self._finish()
                        if result is not None:
                            return result
                        continue  # a resumed part was stale: restarted from zero
                    raise _Retryable(
                        f"body ended at byte {self.part.size} of {self.total}"
                    )
                except _Retryable as exc:
                    failures.append(str(exc))
                    if len(failures) > retries:
                        raise DownloadError(
                            f"download of {redact_url(self.url)} failed after "
                            f"{len(failures)} attempts ({self.part.size} bytes kept in "
                            f"{self.part.path} for a later resume); last error: "
                            f"{redact_text(exc, self.url)}"
                        ) from None
                    pause = backoff * (2 ** (len(failures) - 1)) if exc.wait is None else exc.wait
                    if waited + pause > max_wait:
                        raise DownloadError(
                            f"download of {redact_url(self.url)} gave up: waiting {pause:g} s "
                            f"more would exceed max_wait={max_wait:g} s ({waited:g} s already "
                            f"waited); last error: {redact_text(exc, self.url)}"
                        ) from None
                    time.sleep(pause)
                    waited += pause
        finally:
            if self.bar is not None:
                self.bar.close()

    def _restart(self) -> None:
        """Empty the part file; the next request starts from zero."""
        self.part.truncate()
        self.validators = {}
        _remove_meta(self.part.dest)
        if not self.size_from_caller:
            self.total = None

    def _finish(self) -> FetchResult | None:
        got = self.part.hexdigest()
        if self.sha256 is not None and got != self.sha256:
            if self.resumed_from > 0 and not self.restarted:
                # the part left by an earlier run may hold another version's bytes
                self.restarted = True
                self._restart()
                return None
            size = self.part.size
            self.part.discard()
            _remove_meta(self.part.dest)
            raise IntegrityError(
                f"sha256 mismatch for {redact_url(self.url)}: expected {self.sha256}, "
                f"got {got} ({size} bytes); the partial file {self.part.path} was deleted"
            )
        size = self.part.size
        path = self.part.commit()
        _remove_meta(self.part.dest)
        return FetchResult(path, got, size, self.downloaded, self.requests, self.resumed_from)

    # -- one request -----------------------------------------------------------------------

    def _attempt(self, min_rate: float, rate_window: float) -> None:
        offset = self.part.size
        headers = dict(self.headers)
        if offset > 0:
            headers["Range"] = f"bytes={offset}-"
            validator = self.validators.get("etag") or self.validators.get("last_modified")
            if validator:
                headers["If-Range"] = validator  # a changed resource answers 200, whole
        self.requests += 1
        try:
            resp = self.session.get(
                self.url, headers=headers, stream=True,
                timeout=(self.connect_timeout, rate_window),
            )
        except (requests.ConnectionError, requests.Timeout) as exc:
            raise _Retryable(
                f"request to {redact_url(self.url)} failed: {redact_text(exc, self.url)}"
            ) from None
        with resp:
            body_len = self._accept(resp, offset)
            if body_len == 0:
                return
            self._stream(resp, body_len, min_rate, rate_window)

    def _expect_total(self, total: int | None, what: str) -> None:
        if total is None:
            return
        if self.total is None:
            self.total = total
        elif total != self.total:
            raise DownloadError(
                f"{redact_url(self.url)}: {what} says the file has {total} bytes, expected "
                f"{self.total}" + ("" if self.size_from_caller else " (an earlier response)")
            )

    def _accept(self, resp: requests.Response, offset: int) -> int | None:
        """Check status and headers; returns the body length to read (None if unknown)."""
        status = resp.status_code
        if status in _RETRY_STATUS:
            wait = _retry_after(resp.headers.get("Retry-After"))
            note = f" (Retry-After: {resp.headers['Retry-After']})" if wait is not None else ""
            raise _Retryable(_describe_response(resp, self.url) + note, wait)
        if status == 416:
            _, _, total = _content_range(resp.headers.get("Content-Range"))
            if total is not None and total == offset and self.total in (None, offset):
                self.total = offset  # the part file already holds the whole object
                return 0
            self.part.truncate()
            raise _Retryable(
                f"HTTP 416 for bytes={offset}- from {redact_url(self.url)} "
                f"(server total {total}); restarting from zero"
            )
        if status not in (200, 206):
            raise DownloadError(_describe_response(resp, self.url))
        encoding = resp.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise DownloadError(
                f"{redact_url(self.url)} answered with Content-Encoding: {encoding} although "
                "identity was requested; the decoded bytes could not be verified or resumed"
            )
        length = resp.headers.get("Content-Length")
        body_len = int(length) if length is not None and length.isdigit() else None
        if status == 200:
            if offset:
                self._restart()  # a Range request answered with the whole file
            self.validators = _validators(resp.headers)
            _write_meta(self.part.dest, self.validators)
            self._expect_total(body_len, "Content-Length")
            return body_len
        got = _validators(resp.headers)
        changed = [k for k in ("etag", "last_modified")
                   if k in got and k in self.validators and got[k] != self.validators[k]]
        if changed:
            msg = (
                f"{redact_url(self.url)} changed since the part file was started ("
                + ", ".join(f"{k} {self.validators[k]!r} -> {got[k]!r}" for k in changed)
                + "); restarting from zero"
            )
            self._restart()
            raise _Retryable(msg)
        start, end, total = _content_range(resp.headers.get("Content-Range"))
        if (
            start != offset
            or total is None
            or end != total - 1  # an open-ended range must run to the end
            or (self.total is not None and total != self.total)
        ):
            self.part.truncate()
            raise _Retryable(
                f"refused a 206 from {redact_url(self.url)} with Content-Range "
                f"{resp.headers.get('Content-Range')!r}: expected bytes {offset}-.../"
                f"{self.total if self.total is not None else '<total>'}; restarting from zero"
            )
        self._expect_total(total, "Content-Range")
        assert end is not None
        return end - start + 1

    def _stream(
        self, resp: requests.Response, body_len: int | None, min_rate: float, rate_window: float
    ) -> None:
        guard = _ThroughputGuard(min_rate, rate_window)
        raw = resp.raw
        got = 0
        read = raw.read1 if hasattr(raw, "read1") else raw.read
        while body_len is None or got < body_len:
            want = self.chunk_size if body_len is None else min(self.chunk_size, body_len - got)
            try:
                data = read(want, decode_content=False)
            except (urllib3.exceptions.HTTPError, requests.RequestException, OSError) as exc:
                raise _Retryable(
                    f"connection to {redact_url(self.url)} broke after {got} body bytes: "
                    f"{redact_text(exc, self.url)}"
                ) from None
            if not data:
                break
            self.part.write(data)
            got += len(data)
            self.downloaded += len(data)
            if self.bar is not None:
                self.bar.update(len(data))
            guard.add(len(data))
        if body_len is not None and got < body_len:
            raise _Retryable(
                f"connection to {redact_url(self.url)} closed after {got} of {body_len} "
                "body bytes"
            )
        if body_len is None and self.total is None:
            self.total = self.part.size  # no length given: the end of the body is the end

