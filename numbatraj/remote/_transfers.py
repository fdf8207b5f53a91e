"""Transfers for :class:`~numbatraj.remote.client.RemoteCatalog`: multipart pushes with a
resume sidecar, parallel ranged pulls, and a deterministic project archive.

Every byte moves directly against presigned object-store URLs; the catalog only signs.
A push's sidecar (``$NUMBATRAJ_CACHE/pushes/<digest>.json``, published with
:func:`numbatraj.io.atomic.write_bytes`) records the registration token and which parts are
stored, so a push killed halfway sends only the missing parts when run again.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import requests

from numbatraj.errors import DownloadError, IntegrityError
from numbatraj.io.atomic import discard, publish, temp_path, write_bytes
from numbatraj.io.download import redact_text, redact_url
from numbatraj.io.hashing import sha256_file

__all__ = ["Progress", "cache_root", "pack_directory", "parallel_fetch", "read_sidecar",
           "sidecar_path", "upload_parts", "write_sidecar"]

_RETRYABLE = (429, 500, 502, 503, 504)


def cache_root() -> str:
    """``$NUMBATRAJ_CACHE`` or ``~/.cache/numbatraj``."""
    return os.environ.get("NUMBATRAJ_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "numbatraj")


class Progress:
    """A thread-safe byte counter shown as a tqdm bar when ``show`` (default: stderr is a
    terminal)."""

    def __init__(self, total: int, desc: str, show: bool | None = None) -> None:
        import sys

        if show is None:
            show = sys.stderr.isatty()
        self._bar: Any = None
        if show:
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024,
                             desc=desc, leave=False)
        self._lock = threading.Lock()
        self.done = 0

    def add(self, n: int) -> None:
        with self._lock:
            self.done += n
            if self._bar is not None:
                self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class _Slice:
    """``size`` bytes of ``path`` from ``offset``, as a body requests can stream (a plain
    object with ``read`` and ``__len__``: no ``tell``, which requests would trust)."""

    def __init__(self, path: str, offset: int, size: int, progress: Progress) -> None:
        self._f = open(path, "rb")  # noqa: SIM115 - closed by close()
        self._f.seek(offset)
        self._left = size
        self._progress = progress

    def __len__(self) -> int:
        return self._left

    def read(self, n: int = -1) -> bytes:
        n = self._left if n is None or n < 0 else min(n, self._left)
        data = self._f.read(n)
        self._left -= len(data)
        self._progress.add(len(data))
        return data

    def close(self) -> None:
        self._f.close()


class CountedBody:
    """``size`` bytes of the open binary file ``f`` from where it stands, as a request body
    that advances ``progress`` as requests reads it (``read`` and ``__len__`` only)."""

    def __init__(self, f: Any, size: int, progress: Progress) -> None:
        self._f = f
        self._left = size
        self._progress = progress

    def __len__(self) -> int:
        return self._left

    def read(self, n: int = -1) -> bytes:
        n = self._left if n is None or n < 0 else min(n, self._left)
        data = self._f.read(n)
        self._left -= len(data)
        self._progress.add(len(data))
        return bytes(data)


# -- the resume sidecar -----------------------------------------------------------------


def sidecar_path(*identity: str) -> str:
    """Where the sidecar of one push lives (keyed by service, kind, name, version, digest)."""
    h = hashlib.sha256("\n".join(identity).encode()).hexdigest()[:32]
    return os.path.join(cache_root(), "pushes", f"{h}.json")


def read_sidecar(path: str) -> dict[str, Any] | None:
    """The recorded push state, or None when absent or unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def write_sidecar(path: str, state: dict[str, Any]) -> None:
    """Publish ``state`` atomically (a crash leaves the previous state or this one)."""
    write_bytes(path, json.dumps(state, sort_keys=True).encode())


# -- multipart push ---------------------------------------------------------------------


def upload_parts(
    session: requests.Session,
    path: str,
    size: int,
    part_size: int,
    count: int,
    part_urls: Callable[[list[int]], dict[int, dict[str, Any]]],
    done: set[int],
    on_done: Callable[[int], None],
    *,
    workers: int = 4,
    retries: int = 5,
    backoff: float = 0.5,
    progress: bool | None = None,
) -> None:
    """PUT every part not in ``done`` to its presigned URL, ``workers`` at a time.

    ``part_urls(parts)`` asks the catalog for fresh URLs (also after a failure, so an
    expired URL is replaced); ``on_done(part)`` records a stored part (the sidecar).
    A part is tried ``retries`` times with exponential backoff.

    Raises
    ------
    DownloadError
        A part failed every try (the message names it and the URL without signature).
    """
    todo = [p for p in range(1, count + 1) if p not in done]
    bar = Progress(size, os.path.basename(path), progress)
    bar.add(sum(min(part_size, size - (p - 1) * part_size) for p in done))
    urls: dict[int, dict[str, Any]] = {}
    for i in range(0, len(todo), 1000):
        urls.update(part_urls(todo[i:i + 1000]))

    def put(p: int) -> None:
        offset = (p - 1) * part_size
        n = min(part_size, size - offset)
        err = ""
        for attempt in range(retries):
            if attempt:
                time.sleep(backoff * 2 ** (attempt - 1))
                urls[p] = part_urls([p])[p]
            u = urls[p]
            headers = {str(k): str(v) for k, v in (u.get("headers") or {}).items()}
            headers["Content-Length"] = str(n)
            body = _Slice(path, offset, n, bar)
            try:
                resp = session.request(u.get("method", "PUT"), u["url"], data=body,
                                       headers=headers, timeout=(30, 300))
            except requests.RequestException as exc:
                err = redact_text(exc, u["url"])
                bar.add(len(body) - n)  # what was sent of this part goes again
                continue
            finally:
                sent = n - len(body)
                body.close()
            if resp.status_code < 300:
                on_done(p)
                return
            bar.add(-sent)
            err = f"HTTP {resp.status_code}: {redact_text(resp.text[:200].strip(), u['url'])}"
            if resp.status_code not in _RETRYABLE and resp.status_code != 403:
                break
        raise DownloadError(f"upload of part {p}/{count} of {path} to "
                            f"{redact_url(urls[p]['url'])} failed: {err}")

    try:
        with ThreadPoolExecutor(max(1, min(workers, len(todo) or 1))) as pool:
            for fut in [pool.submit(put, p) for p in todo]:
                fut.result()
    finally:
        bar.close()


# -- parallel ranged pull ---------------------------------------------------------------


def parallel_fetch(
    session: requests.Session,
    url: str,
    dest: str,
    sha256: str,
    size: int,
    *,
    connections: int = 4,
    retries: int = 5,
    backoff: float = 0.5,
    progress: bool | None = None,
    headers: dict[str, str] | None = None,
) -> bool:
    """Download ``url`` as ``connections`` concurrent byte ranges into ``dest``.

    The ranges are written in place into a temporary file beside ``dest``, which is hashed
    once complete and renamed over ``dest`` only when its SHA-256 is ``sha256``.  A range
    that breaks is resumed from where it stopped.  Returns False (and writes nothing) when
    the server does not honour ``Range``: the caller then streams the file in one piece.

    Raises
    ------
    DownloadError, IntegrityError
    """
    tmp = temp_path(dest)
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    bar = Progress(size, os.path.basename(dest), progress)
    step = -(-size // connections)
    spans = [(a, min(a + step, size) - 1) for a in range(0, size, step)]
    no_range = threading.Event()
    try:
        os.ftruncate(fd, size)

        def span(a: int, b: int) -> None:
            pos, err = a, ""
            for attempt in range(retries):
                if no_range.is_set():
                    return
                if attempt:
                    time.sleep(backoff * 2 ** (attempt - 1))
                h = {**(headers or {}), "Range": f"bytes={pos}-{b}",
                     "Accept-Encoding": "identity"}
                try:
                    with session.get(url, headers=h, stream=True, timeout=(30, 60)) as r:
                        if r.status_code == 200:
                            no_range.set()
                            return
                        if r.status_code != 206:
                            err = f"HTTP {r.status_code}"
                            if r.status_code not in _RETRYABLE:
                                break
                            continue
                        start = r.headers.get("Content-Range", "")[6:].partition("-")[0]
                        if start != str(pos):
                            err = f"Content-Range {r.headers.get('Content-Range')!r}"
                            continue
                        for chunk in r.iter_content(1 << 20):
                            chunk = chunk[: b + 1 - pos]
                            os.pwrite(fd, chunk, pos)
                            pos += len(chunk)
                            bar.add(len(chunk))
                            if pos > b:
                                break
                    if pos > b:
                        return
                    err = f"range ended at byte {pos} of {b + 1}"
                except requests.RequestException as exc:
                    err = redact_text(exc, url)
            raise DownloadError(f"ranged download of {redact_url(url)} bytes {a}-{b} "
                                f"failed: {err}")

        with ThreadPoolExecutor(len(spans)) as pool:
            for fut in [pool.submit(span, a, b) for a, b in spans]:
                fut.result()
        os.close(fd)
        fd = -1
        if no_range.is_set():
            discard(tmp)
            return False
        got = sha256_file(tmp)
        if got != sha256:
            raise IntegrityError(f"download of {redact_url(url)} has sha256 {got}, "
                                 f"expected {sha256}")
        publish(tmp, dest)
        return True
    except BaseException:
        discard(tmp)
        raise
    finally:
        if fd >= 0:
            os.close(fd)
        bar.close()


# -- project archives -------------------------------------------------------------------


def _members(root: str) -> Iterable[tuple[str, str]]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            full = os.path.join(dirpath, name)
            yield full, os.path.relpath(full, root).replace(os.sep, "/")


def pack_directory(root: str, dest: str) -> str:
    """Write ``root`` as a deterministic ``.tar.gz`` at ``dest`` (sorted members, zero
    mtimes and owners, modes 0644/0755); symbolic links and special files are refused."""
    import gzip

    if not os.path.isdir(root):
        raise NotADirectoryError(f"project {root!r} is not a directory")
    with open(dest, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for full, rel in _members(root):
            st = os.lstat(full)
            info = tarfile.TarInfo(rel)
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if os.path.islink(full):
                raise ValueError(f"project {root!r}: {rel} is a symbolic link; not packed")
            if os.path.isdir(full):
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif os.path.isfile(full):
                info.size = st.st_size
                info.mode = 0o755 if st.st_mode & 0o111 else 0o644
                with open(full, "rb") as f:
                    tar.addfile(info, f)
            else:
                raise ValueError(f"project {root!r}: {rel} is not a file or directory")
    return dest
