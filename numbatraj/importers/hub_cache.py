"""Find a Hugging Face dataset already on disk, or download it: :func:`resolve_dataset_root`.

Places are tried in this order, so a dataset that a Python tool already pulled is reused:

1. numbatraj's own cache, ``$NUMBATRAJ_CACHE/lerobot/<Org>__<name>`` (default cache
   ``~/.cache/numbatraj``; ``<Org>__<name>@<revision>`` when a revision is asked for);
2. LeRobot's home, ``$HF_LEROBOT_HOME/<Org>/<name>`` (default ``$HF_HOME/lerobot``), only when
   no revision is asked for, since it records none;
3. the huggingface_hub cache, ``$HF_HUB_CACHE`` or ``$HF_HOME/hub``:
   ``datasets--<Org>--<name>/snapshots/<commit>/``, the commit found through
   ``refs/<revision>`` (default ``main``) or given directly as a 40-hex revision;
4. a download with huggingface_hub (the ``hub`` extra) into numbatraj's cache.  It goes to a
   ``.partial`` directory renamed only when every file has arrived, so an interrupted
   download never leaves a directory that looks complete.

A place counts only when it holds ``meta/info.json``.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid

from numbatraj.errors import DatasetNotFoundError, DownloadError, NumbatrajError

__all__ = [
    "DatasetNotFoundError",
    "cache_dir",
    "candidate_roots",
    "default_store_path",
    "local_dataset_dir",
    "resolve_dataset_root",
]

_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_MARKER = os.path.join("meta", "info.json")


def _check_repo(repo_id: str) -> tuple[str, str]:
    if not isinstance(repo_id, str) or not _REPO.match(repo_id) or ".." in repo_id:
        raise ValueError(f"repo_id {repo_id!r} is not of the form ORG/NAME")
    org, name = repo_id.split("/")
    return org, name


def cache_dir() -> str:
    """numbatraj's cache root: ``$NUMBATRAJ_CACHE`` or ``~/.cache/numbatraj``."""
    return os.environ.get("NUMBATRAJ_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "numbatraj"
    )


def local_dataset_dir(repo_id: str, revision: str | None = None) -> str:
    """Where numbatraj keeps (or downloads) ``repo_id``: ``<cache>/lerobot/<Org>__<name>``."""
    org, name = _check_repo(repo_id)
    leaf = f"{org}__{name}" + (f"@{revision}" if revision else "")
    return os.path.join(cache_dir(), "lerobot", leaf.replace("/", "_"))


def default_store_path(repo_id: str, height: int, width: int) -> str:
    """Default import output: ``<cache>/stores/<Org>__<name>_<H>x<W>.h5``."""
    org, name = _check_repo(repo_id)
    return os.path.join(cache_dir(), "stores", f"{org}__{name}_{height}x{width}.h5")


def _hf_home() -> str:
    return os.environ.get("HF_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache", "huggingface"
    )


def _hub_snapshot(repo_id: str, revision: str | None) -> str | None:
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(_hf_home(), "hub")
    org, name = _check_repo(repo_id)
    repo_dir = os.path.join(hub, f"datasets--{org}--{name}")
    rev = revision or "main"
    if _COMMIT.match(rev):
        return os.path.join(repo_dir, "snapshots", rev)
    ref = os.path.join(repo_dir, "refs", *rev.split("/"))
    try:
        with open(ref, encoding="utf-8") as fh:
            commit = fh.read().strip()
    except OSError:
        return None
    if not _COMMIT.match(commit):
        return None
    return os.path.join(repo_dir, "snapshots", commit)


def candidate_roots(repo_id: str, revision: str | None = None) -> list[str]:
    """The directories :func:`resolve_dataset_root` looks in, in order (some may not exist)."""
    org, name = _check_repo(repo_id)
    places = [local_dataset_dir(repo_id, revision)]
    if revision is None:
        lerobot_home = os.environ.get("HF_LEROBOT_HOME") or os.path.join(_hf_home(), "lerobot")
        places.append(os.path.join(lerobot_home, org, name))
    snap = _hub_snapshot(repo_id, revision)
    if snap is not None:
        places.append(snap)
    return places


def _download(repo_id: str, revision: str | None, dest: str) -> str:
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:  # pragma: no cover - the hub extra is installed in CI
        raise DownloadError(
            f"downloading {repo_id!r} needs huggingface_hub: pip install 'numbatraj[hub]'"
        ) from exc
    parent = os.path.dirname(dest)
    os.makedirs(parent, exist_ok=True)
    partial = f"{dest}.partial-{uuid.uuid4().hex[:8]}"
    try:
        snapshot_download(repo_id, repo_type="dataset", revision=revision, local_dir=partial)
        if not os.path.isfile(os.path.join(partial, _MARKER)):
            raise DownloadError(f"{repo_id!r} (revision {revision or 'main'}) has no {_MARKER}")
        shutil.rmtree(os.path.join(partial, ".cache"), ignore_errors=True)
        os.replace(partial, dest)
    except BaseException as exc:
        shutil.rmtree(partial, ignore_errors=True)
        if isinstance(exc, NumbatrajError) or not isinstance(exc, Exception):
            raise
        raise DownloadError(
            f"downloading {repo_id!r} (revision {revision or 'main'}) failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    return dest


def resolve_dataset_root(
    repo_id: str, revision: str | None = None, allow_download: bool = True
) -> str:
    """The local directory of Hub dataset ``repo_id``; see the module docstring for the order.

    Parameters
    ----------
    repo_id : str
        ``ORG/NAME``.
    revision : str, optional
        Branch, tag or commit; ``None`` means the default branch.
    allow_download : bool
        When false, a dataset found nowhere raises instead of being fetched.

    Raises
    ------
    DatasetNotFoundError
        Not on disk and ``allow_download`` is false (the message lists the places tried).
    DownloadError
        The download failed; nothing is left under the cache's final name.
    """
    places = candidate_roots(repo_id, revision)
    for place in places:
        if os.path.isfile(os.path.join(place, _MARKER)):
            return place
    if not allow_download:
        tried = "\n".join(f"  - {p}" for p in places)
        raise DatasetNotFoundError(
            f"dataset {repo_id!r} (revision {revision or 'default'}) is not on disk and "
            f"downloading is off; looked for {_MARKER} in:\n{tried}"
        )
    return _download(repo_id, revision, places[0])
