"""RemoteCatalog: resolve a dataset name to verified bytes at a local path.

The catalog answers with metadata and a presigned URL; the bytes move directly between
this machine and the object store (:func:`numbatraj.io.download.fetch` for a pull, one
streamed ``PUT`` for a push).  ``pull`` is a cache: when the destination already holds the
catalog's digest, no bytes move.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, Any

import requests

from numbatraj.catalog.protocol import (
    DATASETS,
    check_name,
    check_version,
    dataset_complete_route,
    dataset_route,
)
from numbatraj.errors import CatalogAuthError, CatalogError, CatalogRequestError, DownloadError
from numbatraj.io.dotenv import read_dotenv
from numbatraj.io.download import FetchResult, fetch, redact_text, redact_url
from numbatraj.io.hashing import sha256_file

__all__ = ["ENV_KEY", "ENV_URL", "PullResult", "RemoteCatalog"]

ENV_URL = "NUMBATRAJ_CATALOG_URL"
ENV_KEY = "NUMBATRAJ_CATALOG_API_KEY"


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
    """

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        fetch_options: Mapping[str, Any] | None = None,
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
        self._session = requests.Session()
        self._session.headers["Authorization"] = f"Bearer {api_key.strip()}"

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
            resp = self._session.request(method, url, timeout=self.timeout, **kwargs)
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
                raise CatalogAuthError(msg)
            err = CatalogError(msg)
            err.status = resp.status_code  # type: ignore[attr-defined]
            raise err
        if not isinstance(body, dict):
            raise CatalogError(f"catalog {method} {path}: expected a JSON object, got {body!r}")
        return body

    # -- API -------------------------------------------------------------------------------

    def describe(self, name: str, version: str | None = None) -> dict[str, Any]:
        """Metadata of a ready dataset (latest ready version when ``version`` is None).

        The answer includes ``download``: a presigned URL and its ``expires_at``.  A pending
        version (an upload never completed) is refused with :class:`CatalogError` (409).
        """
        check_name(name)
        params = {} if version is None else {"version": check_version(version)}
        return self.request("GET", dataset_route(name), params=params)

    def list(self, name: str | None = None) -> list[dict[str, Any]]:
        """Every row, pending ones included (see ``status``)."""
        params = {} if name is None else {"name": check_name(name)}
        rows = self.request("GET", DATASETS, params=params).get("datasets", [])
        return list(rows)

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
        rec = self.describe(name, version)
        dest = os.fspath(dest)
        dl = rec.pop("download")
        if os.path.isfile(dest) and os.path.getsize(dest) == rec["bytes"]:
            if sha256_file(dest) == rec["sha256"]:
                return PullResult(dest, rec, 0, True)
        res: FetchResult = fetch(
            dl["url"], dest, sha256=rec["sha256"], size=rec["bytes"],
            headers=dl.get("headers") or None, **self.fetch_options,
        )
        return PullResult(res.path, rec, res.bytes_downloaded, False)

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
        interrupted push leaves it that way, and pushing again resumes the protocol.  Pushing
        identical bytes to a ready version is a no-op; different bytes are refused.
        """
        path = os.fspath(path)
        body = {
            "name": check_name(name), "version": check_version(version),
            "sha256": sha256_file(path), "bytes": os.path.getsize(path), "env_id": env_id,
            "n_rows": n_rows, "seed": seed, "source_commit": source_commit,
        }
        reg = self.request("POST", DATASETS, json=body)
        upload = reg.pop("upload", None)
        if upload is None:
            return reg  # already ready with these bytes
        self.upload(path, upload)
        return self.request("POST", dataset_complete_route(name, version))

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

    @staticmethod
    def _put(
        path: str, url: str, upload: Mapping[str, Any], f: IO[bytes], headers: dict[str, str]
    ) -> requests.Response:
        try:
            return requests.request(
                upload.get("method", "PUT"), url, data=f, headers=headers, timeout=(30, 300),
            )
        except requests.RequestException as exc:
            msg = f"upload of {path} to {redact_url(url)} failed: {redact_text(exc, url)}"
            raise DownloadError(msg) from None

    def close(self) -> None:
        """Close the HTTP session."""
        self._session.close()

    def __enter__(self) -> RemoteCatalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

