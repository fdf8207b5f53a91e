"""RemoteCatalog: resolve a dataset (or a policy, or a project) name to verified bytes.

The catalog answers with metadata and presigned URLs; the bytes move directly between
this machine and the object store: :func:`numbatraj.io.download.fetch` (or parallel byte
ranges for a large object) for a pull, one streamed ``PUT`` or a multipart upload with
parallel, retried, resumable parts for a push.  ``pull`` is a cache: when the destination
already holds the catalog's digest, no bytes move.  Transfers share one HTTP session that
never carries the API key (presigned URLs need none).
"""

from __future__ import annotations

import builtins
import os
import tempfile
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any

import requests
from requests.adapters import HTTPAdapter

from numbatraj.catalog.protocol import (
    alias_route,
    artifact_action_route,
    artifact_base,
    artifact_route,
    check_alias,
    check_kind,
    check_name,
    check_version,
)
from numbatraj.errors import CatalogAuthError, CatalogError, CatalogRequestError, DownloadError
from numbatraj.io.archive import read_marker, safe_extract
from numbatraj.io.dotenv import read_dotenv
from numbatraj.io.download import FetchResult, fetch, redact_text, redact_url
from numbatraj.io.hashing import sha256_file
from numbatraj.remote._transfers import (
    CountedBody,
    Progress,
    cache_root,
    pack_directory,
    parallel_fetch,
    read_sidecar,
    sidecar_path,
    upload_parts,
    write_sidecar,
)

__all__ = ["ENV_KEY", "ENV_URL", "MULTIPART_THRESHOLD", "PART_SIZE", "PullResult",
           "RemoteCatalog"]

ENV_URL = "NUMBATRAJ_CATALOG_URL"
ENV_KEY = "NUMBATRAJ_CATALOG_API_KEY"
#: Pushes of at least this many bytes use a multipart upload (S3 caps one PUT at 5 GB).
MULTIPART_THRESHOLD = 256 << 20
#: Bytes per part of a multipart upload (S3: 5 MiB to 5 GiB, at most 10,000 parts).
PART_SIZE = 64 << 20
#: Pulls of at least this many bytes are fetched as parallel byte ranges.
PARALLEL_PULL_THRESHOLD = 64 << 20


@dataclass(frozen=True)
class PullResult:
    """What :meth:`RemoteCatalog.pull` did: the path, the row, and the bytes moved."""

    path: str
    record: dict[str, Any]
    bytes_downloaded: int
    cached: bool


class RemoteCatalog:
    """Client of a numbatraj catalog service.

    Parameters
    ----------
    url : str
        The service, e.g. ``http://127.0.0.1:8600``.
    api_key : str
        Sent as ``Authorization: Bearer <api_key>``; never empty.
    timeout : float
        Seconds for each catalog call (transfers have no total timeout, see ``fetch``).
    fetch_options : mapping, optional
        Extra keyword arguments for :func:`numbatraj.io.download.fetch` on pulls.
    multipart_threshold, part_size : int
        Pushes of ``multipart_threshold`` bytes or more go as parts of ``part_size``.
    workers : int
        Parts uploaded, files downloaded, or byte ranges of one large object fetched at
        the same time.
    parallel_threshold : int
        Pulls of at least this many bytes are fetched as ``workers`` byte ranges.
    progress : bool, optional
        Progress bars on push and pull (default: when stderr is a terminal).
    """

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        fetch_options: Mapping[str, Any] | None = None,
        multipart_threshold: int = MULTIPART_THRESHOLD,
        part_size: int = PART_SIZE,
        workers: int = 4,
        parallel_threshold: int = PARALLEL_PULL_THRESHOLD,
        progress: bool | None = None,
    ) -> None:
        if not url:
            raise CatalogRequestError(f"catalog URL is empty (set {ENV_URL})")
        if not api_key or not api_key.strip():
            raise CatalogRequestError(
                f"API key is empty (set {ENV_KEY}): an empty key would send a bare "
                "'Authorization: Bearer' header the server cannot tell from a wrong key"
            )
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.fetch_options = dict(fetch_options or {})
        self.multipart_threshold = int(multipart_threshold)
        self.part_size = int(part_size)
        self.workers = max(1, int(workers))
        self.parallel_threshold = int(parallel_threshold)
        self.progress = progress
        self._session = requests.Session()
        self._session.headers["Authorization"] = f"Bearer {api_key.strip()}"
        #: Transfers to presigned URLs: one pooled session, never holding the API key.
        self.transfers = requests.Session()
        pool = HTTPAdapter(pool_connections=4, pool_maxsize=max(8, 2 * self.workers))
        self.transfers.mount("http://", pool)
        self.transfers.mount("https://", pool)

    @classmethod
    def from_env(
        cls, env_file: str | os.PathLike[str] | None = ".env", **kwargs: Any
    ) -> RemoteCatalog:
        """Build from ``NUMBATRAJ_CATALOG_URL`` and ``NUMBATRAJ_CATALOG_API_KEY``.

        The process environment wins over ``env_file`` (a dotenv file; skipped when absent).

        Raises
        ------
        CatalogRequestError
            Naming the missing or empty variable and where it was looked for.
        """
        file_vals = read_dotenv(env_file) if env_file is not None else {}
        vals: dict[str, str] = {}
        for k in (ENV_URL, ENV_KEY):
            v = os.environ.get(k) or file_vals.get(k, "")
            if not v.strip():
                where = "the environment"
                if env_file is not None:
                    where += f" or {os.fspath(env_file)}"
                state = "is empty" if (k in os.environ or k in file_vals) else "is not set"
                raise CatalogRequestError(f"{k} {state} (looked in {where})")
            vals[k] = v.strip()
        return cls(vals[ENV_URL], vals[ENV_KEY], **kwargs)

    # -- HTTP ------------------------------------------------------------------------------

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """One catalog call: ``method`` on ``path`` (below the service URL), with the key.

        ``kwargs`` go to :meth:`requests.Session.request` (``json=``, ``params=``).  Returns
        the JSON object answered.

        Raises
        ------
        CatalogAuthError
            401 or 403: no, an unknown, or a read-only key.
        CatalogError
            Any other HTTP error (its ``status`` attribute holds the code), an answer that
            is not a JSON object, or a service that cannot be reached.
        """
        url = self.url + path
        try:
            kwargs.setdefault("timeout", self.timeout)
            resp = self._session.request(method, url, **kwargs)
        except requests.RequestException as exc:
            raise CatalogError(
                f"catalog {redact_url(self.url)} unreachable ({method} {path}): "
                f"{redact_text(exc, self.url)}"
            ) from None
        try:
            body = resp.json()
        except ValueError:
            body = {"error": resp.text[:300]}
        if resp.status_code >= 400:
            msg = f"catalog {method} {path}: HTTP {resp.status_code}: {body.get('error', body)}"
            if resp.status_code in (401, 403):
                auth = CatalogAuthError(msg)
                auth.status = resp.status_code  # type: ignore[attr-defined]
                raise auth
            err = CatalogError(msg)
            err.status = resp.status_code  # type: ignore[attr-defined]
            raise err
        if not isinstance(body, dict):
            raise CatalogError(f"catalog {method} {path}: expected a JSON object, got {body!r}")
        return body

    # -- datasets (the artifact kind "dataset") --------------------------------------------

    def describe(self, name: str, version: str | None = None) -> dict[str, Any]:
        """Metadata of a ready dataset (latest ready version when ``version`` is None).

        The answer includes ``download``: a presigned URL and its ``expires_at``.  A pending
        version (an upload never completed) is refused with :class:`CatalogError` (409).
        """
        return self.describe_artifact("dataset", name, version)

    def list(self, name: str | None = None) -> list[dict[str, Any]]:
        """Every row, pending ones included (see ``status``)."""
        return self.list_artifacts("dataset", name)

    def pull(
        self, name: str, dest: str | os.PathLike[str], version: str | None = None
    ) -> PullResult:
        """Make ``dest`` hold ``name`` (at ``version``), moving bytes only when needed.

        Raises
        ------
        CatalogError
            Unknown or pending dataset, or the catalog is unreachable.
        DownloadError, IntegrityError
            The transfer failed or the bytes do not match the catalog's digest.
        """
        return self._pull_file(self.describe(name, version), os.fspath(dest))

    def push(
        self,
        path: str | os.PathLike[str],
        name: str,
        version: str,
        *,
        env_id: str | None = None,
        n_rows: int | None = None,
        seed: int | None = None,
        source_commit: str | None = None,
    ) -> dict[str, Any]:
        """Register, upload, complete.  Returns the ready row.

        Between register and complete the row is ``pending`` and cannot be downloaded; an
        interrupted push leaves it that way, and pushing again resumes the protocol (only
        the missing parts of a multipart upload are sent again).  Pushing identical bytes to
        a ready version is a no-op; different bytes are refused, also when another push of
        that version completes first: this never returns for bytes that were not kept.
        """
        return self._push("dataset", os.fspath(path), name, version, {
            "env_id": env_id, "n_rows": n_rows, "seed": seed, "source_commit": source_commit})

    # -- artifacts of any kind ---------------------------------------------------------------

    def describe_artifact(self, kind: str, name: str, version: str | None = None,
                          alias: str | None = None) -> dict[str, Any]:
        """A ready version of ``kind/name``: by ``version``, by ``alias``, or the latest."""
        check_name(name)
        params: dict[str, str] = {}
        if version is not None:
            params["version"] = check_version(version)
        if alias is not None:
            params["alias"] = check_alias(alias)
        return self.request("GET", artifact_route(kind, name), params=params)

    def list_artifacts(
        self, kind: str, name: str | None = None
    ) -> builtins.list[dict[str, Any]]:
        """Every row of ``kind`` (pending included), each with its ``aliases``."""
        params = {} if name is None else {"name": check_name(name)}
        ans = self.request("GET", artifact_base(kind), params=params)
        return list(ans.get("datasets" if kind == "dataset" else "artifacts", []))

    def push_artifact(
        self,
        path: str | os.PathLike[str],
        kind: str,
        name: str,
        version: str,
        *,
        alias: str | None = None,
        run: str | None = None,
        **meta: Any,
    ) -> dict[str, Any]:
        """Push a file (``dataset``, ``policy``) or a directory (``project``, sent as a
        checksummed ``.tar.gz``) as ``kind/name/version``; returns the ready row.

        ``alias`` (``promoted``, say) is pointed at the version once it is ready; ``run``
        records the training run that made it.  ``meta``: ``env_id``, ``n_rows``, ``seed``,
        ``source_commit``.
        """
        check_kind(kind)
        path = os.fspath(path)
        extra = {"run": run, **meta}
        if kind == "project":
            with tempfile.TemporaryDirectory(prefix="numbatraj-project-") as tmp:
                archive = pack_directory(path, os.path.join(tmp, "project.tar.gz"))
                extra["filename"] = os.path.basename(os.path.abspath(path)) + ".tar.gz"
                row = self._push(kind, archive, name, version, extra)
        else:
            extra["filename"] = os.path.basename(path)
            row = self._push(kind, path, name, version, extra)
        if alias is not None:
            self.promote(kind, name, version, alias)
            row = self.describe_artifact(kind, name, version)
            row.pop("download", None)
        return row

    def promote(self, kind: str, name: str, version: str, alias: str) -> dict[str, Any]:
        """Point ``alias`` of ``kind/name`` at the ready ``version``."""
        check_name(name)
        return self.request("POST", alias_route(kind, name, check_alias(alias)),
                            json={"version": check_version(version)})

    def pull_artifact(
        self,
        kind: str,
        name: str,
        version: str | None = None,
        alias: str | None = None,
        *,
        dest: str | os.PathLike[str] | None = None,
    ) -> PullResult:
        """Fetch a ready ``kind/name`` (by version, alias, or the latest) to ``dest``.

        ``dest`` defaults to ``$NUMBATRAJ_CACHE/artifacts/<kind>/<name>/<version>/<file>``.
        A ``project`` is a directory: its archive is verified, then extracted atomically
        (:func:`numbatraj.io.archive.safe_extract`) to ``dest``; a ``dest`` whose marker
        already names the archive's digest is kept as it is.
        """
        rec = self.describe_artifact(kind, name, version, alias)
        base = os.path.join(cache_root(), "artifacts", kind, rec["name"], rec["version"])
        if kind != "project":
            target = os.fspath(dest) if dest is not None else os.path.join(
                base, rec.get("filename") or "artifact.bin")
            return self._pull_file(rec, target)
        target = os.fspath(dest) if dest is not None else os.path.join(base, "project")
        marker = read_marker(target) if os.path.isdir(target) else None
        if marker is not None and marker.get("sha256") == rec["sha256"]:
            rec.pop("download", None)
            return PullResult(target, rec, 0, True)
        archive = self._pull_file(dict(rec), os.path.join(base, "archive.tar.gz"))
        safe_extract(archive.path, target, kind="gz",
                     marker={"sha256": rec["sha256"], "kind": kind, "name": rec["name"],
                             "version": rec["version"]})
        rec.pop("download", None)
        return PullResult(target, rec, archive.bytes_downloaded, archive.cached)

    # -- the transfers ---------------------------------------------------------------------

    def _pull_file(self, rec: dict[str, Any], dest: str) -> PullResult:
        dl = rec.pop("download")
        if os.path.isfile(dest) and os.path.getsize(dest) == rec["bytes"]:
            if sha256_file(dest) == rec["sha256"]:
                return PullResult(dest, rec, 0, True)
        headers = dl.get("headers") or None
        if rec["bytes"] >= self.parallel_threshold and self.workers > 1:
            if parallel_fetch(self.transfers, dl["url"], dest, rec["sha256"], rec["bytes"],
                              connections=self.workers, progress=self.progress,
                              headers=headers):
                return PullResult(dest, rec, rec["bytes"], False)
        opts = {"progress": self.progress, **self.fetch_options}
        res: FetchResult = fetch(dl["url"], dest, sha256=rec["sha256"], size=rec["bytes"],
                                 headers=headers, session=self.transfers, **opts)
        return PullResult(res.path, rec, res.bytes_downloaded, False)

    def fetch_many(
        self, files: Iterable[tuple[Mapping[str, Any], str]]
    ) -> builtins.list[FetchResult]:
        """Download several ``(entry, dest)`` at once (``entry``: ``sha256``, ``bytes``,
        ``download``), ``workers`` at a time over the shared transfer session."""
        jobs = list(files)

        def one(job: tuple[Mapping[str, Any], str]) -> FetchResult:
            entry, dest = job
            dl = entry["download"]
            return fetch(dl["url"], dest, sha256=entry["sha256"], size=entry["bytes"],
                         headers=dl.get("headers") or None, session=self.transfers,
                         **{"progress": False, **self.fetch_options})

        if len(jobs) <= 1 or self.workers == 1:
            return [one(j) for j in jobs]
        with ThreadPoolExecutor(min(self.workers, len(jobs))) as pool:
            return list(pool.map(one, jobs))

    def _push(self, kind: str, path: str, name: str, version: str,
              meta: dict[str, Any]) -> dict[str, Any]:
        size = os.path.getsize(path)
        digest = sha256_file(path)
        body: dict[str, Any] = {"name": check_name(name), "version": check_version(version),
                                "sha256": digest, "bytes": size, **meta}
        multipart = size >= self.multipart_threshold
        side = sidecar_path(self.url, kind, name, version, digest, str(size))
        state = read_sidecar(side) if multipart else None
        reg: dict[str, Any] | None = None
        if state is not None and state.get("part_size"):
            try:  # resume: the registration is still open if its token is known
                parts = self.request("POST", artifact_action_route(kind, name, version,
                                                                   "parts"),
                                     json={"token": state["token"], "parts": [1]})
                reg = {"token": state["token"], "upload": {
                    "multipart": True, "part_size": parts["part_size"],
                    "parts": parts["count"]}}
            except CatalogError as exc:
                if getattr(exc, "status", None) == 409:
                    raise  # another push of this version is ready
                state = None
        if reg is None:
            if multipart:
                body["part_size"] = max(self.part_size, -(-size // 10_000))
            reg = self.request("POST", artifact_base(kind), json=body)
            upload = reg.get("upload")
            if upload is None:
                return self._kept(reg, digest, size)
            state = {"token": reg["token"], "done": []}
            if upload.get("multipart"):
                state["part_size"] = upload["part_size"]
                write_sidecar(side, state)
        token = reg["token"]
        upload = reg["upload"]
        assert state is not None
        if upload.get("multipart"):
            self._upload_multipart(kind, name, version, path, size, upload, state, side)
        else:
            self.upload(path, upload)
        timeout = max(self.timeout, size / (20 << 20))  # the service hashes the object
        try:
            row = self.request("POST", artifact_action_route(kind, name, version, "complete"),
                               json={"token": token, "sha256": digest}, timeout=timeout)
        except CatalogError as exc:
            if getattr(exc, "status", None) == 409 and "another push" in str(exc):
                self._forget(side)
            raise
        self._forget(side)
        return self._kept(row, digest, size)

    def _upload_multipart(self, kind: str, name: str, version: str, path: str, size: int,
                          upload: Mapping[str, Any], state: dict[str, Any],
                          side: str) -> None:
        lock = threading.Lock()
        done = {int(p) for p in state.get("done", [])}
        route = artifact_action_route(kind, name, version, "parts")

        def part_urls(parts: list[int]) -> dict[int, dict[str, Any]]:
            ans = self.request("POST", route, json={"token": state["token"], "parts": parts})
            return {int(u["part"]): u for u in ans["parts"]}

        def on_done(p: int) -> None:
            with lock:
                done.add(p)
                state["done"] = sorted(done)
                write_sidecar(side, state)

        upload_parts(self.transfers, path, size, int(upload["part_size"]),
                     int(upload["parts"]), part_urls, done, on_done, workers=self.workers,
                     progress=self.progress)

    @staticmethod
    def _forget(side: str) -> None:
        try:
            os.unlink(side)
        except FileNotFoundError:
            pass

    @staticmethod
    def _kept(row: dict[str, Any], digest: str, size: int) -> dict[str, Any]:
        """``row`` when it holds our bytes; :class:`CatalogError` otherwise."""
        row.pop("upload", None)
        row.pop("token", None)
        if row.get("status") != "ready" or row.get("sha256") != digest or \
                row.get("bytes") != size:
            raise CatalogError(
                f"catalog answered {row.get('name')} {row.get('version')} as "
                f"{row.get('status')} with sha256 {row.get('sha256')}, not the pushed "
                f"{digest}: the pushed bytes were not kept"
            )
        return row

    def upload(
        self,
        path: str | os.PathLike[str],
        upload: Mapping[str, Any],
        *,
        file: IO[bytes] | None = None,
        size: int | None = None,
    ) -> None:
        """Send the bytes of ``path`` to a presigned ``upload`` the catalog answered.

        Parameters
        ----------
        path : path-like
            The file; read from its start unless ``file`` is given.
        upload : mapping
            The catalog's ``upload``: ``url``, ``method`` (default ``PUT``), ``headers``.
        file : binary file, optional
            An open descriptor of ``path`` to send from (rewound first): the version of
            the file it holds, whatever was renamed over ``path`` since.
        size : int, optional
            Bytes to send (``Content-Length``); default: the size of ``path``.

        Raises
        ------
        DownloadError
            The object store could not be reached or refused the body; the message names
            the file and the URL with its signature removed.
        """
        path = os.fspath(path)
        headers = {str(k): str(v) for k, v in (upload.get("headers") or {}).items()}
        headers["Content-Length"] = str(os.path.getsize(path) if size is None else size)
        url = upload["url"]
        if file is None:
            with open(path, "rb") as f:
                resp = self._put(path, url, upload, f, headers)
        else:
            file.seek(0)
            resp = self._put(path, url, upload, file, headers)
        if resp.status_code >= 300:
            raise DownloadError(
                f"upload of {path} to {redact_url(url)}: HTTP {resp.status_code}: "
                f"{redact_text(resp.text[:300].strip(), url)}"
            )

    def _put(
        self, path: str, url: str, upload: Mapping[str, Any], f: IO[bytes],
        headers: dict[str, str],
    ) -> requests.Response:
        n = int(headers.get("Content-Length", "0"))
        bar = Progress(n, os.path.basename(path), None)  # shown on a terminal only
        body: Any = CountedBody(f, n, bar) if n else b""
        try:
            return self.transfers.request(
                upload.get("method", "PUT"), url, data=body, headers=headers,
                timeout=(30, 300),
            )
        except requests.RequestException as exc:
            msg = f"upload of {path} to {redact_url(url)} failed: {redact_text(exc, url)}"
            raise DownloadError(msg) from None
        finally:
            bar.close()

    def close(self) -> None:
        """Close the HTTP sessions."""
        self._session.close()
        self.transfers.close()

    def __enter__(self) -> RemoteCatalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

