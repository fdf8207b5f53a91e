"""LeRobot v3.0 and the Hugging Face Hub: find a dataset on disk or download it
(:func:`resolve_dataset_root`), and push a recorded directory (:func:`push_lerobot_dataset`).

Finding a dataset
-----------------
The revision defaults to ``v3.0``, the tag LeRobot 0.6 reads and pushes, falling back to
``main`` when that tag is absent (in a cache and on the Hub alike; the fallback is logged).
Places are tried in this order, every one before any network, so a dataset that LeRobot or
another Python tool already pulled is reused:

1. numbatraj's former download directory, ``<cache>/lerobot/<Org>__<name>``
   (:func:`numbatraj.io.cache.cache_dir`; ``<Org>__<name>@<revision>`` for a revision);
2. LeRobot's home, ``$HF_LEROBOT_HOME/<Org>/<name>`` (default ``$HF_HOME/lerobot``): where
   LeRobot records and where it kept ``local_dir`` downloads.  Only when no revision is asked
   for, since it records none;
3. LeRobot 0.6's own revision-safe hub cache, ``$HF_LEROBOT_HOME/hub``;
4. the shared huggingface_hub cache, ``$HF_HUB_CACHE`` (default ``$HF_HOME/hub``).

In the two hub caches the layout is huggingface_hub's:
``datasets--<Org>--<name>/snapshots/<commit>/``, the commit found through
``refs/<revision>`` or given directly as a 40-hex revision, and a snapshot counts only when
every data and video file its episode table names is there (an interrupted download leaves
``meta/`` first).  A directory counts only when it holds ``meta/info.json``.

5. Otherwise a download with ``huggingface_hub.snapshot_download`` (the ``hub`` extra) into
   the shared cache, where the next tool finds it.  ``HF_HUB_OFFLINE`` is honoured (nothing
   is fetched; the error lists the places tried), and so are ``HF_ENDPOINT`` and the token
   (``HF_TOKEN``, or the hf CLI's login), all read at the call (huggingface_hub itself reads
   ``HF_HUB_CACHE`` and ``HF_ENDPOINT`` once, at its import).  huggingface_hub writes blobs
   under temporary names and links a snapshot file only once it is complete.

Pushing a directory
-------------------
The push walks what is on disk rather than taking a list from the writer, so the two cannot
disagree.  It skips hidden files, temporary files (:func:`numbatraj.io.atomic.is_temp_name`)
and ``*.part`` files, and sends a file under ``videos/`` or ``data/`` only when the episode
table references it: the mp4 of an episode still being recorded is held back (with
``checkpoint=True`` it is still a ``.part`` file; a file of a ``checkpoint=False`` writer that
has not closed yet is not referenced).  Metadata and data files are read into memory first
and ``meta/info.json`` is read again afterwards; if an episode ended in between, the pass is
repeated, so the Hub never holds an ``info.json`` that counts a file it does not have.

Everything goes in one commit through ``huggingface_hub`` (``hub`` extra).  The Hub compares
each file with what it stores and ``huggingface_hub`` drops unchanged ones, so re-pushing after
one new episode sends only that episode's files and the metadata that changed.  A dataset card
(``README.md``) is generated when the directory has none; the revision is tagged ``v3.0`` as
LeRobot's ``push_to_hub`` does.  A new repo is private unless ``private=False``; an existing
repo's visibility is never changed.

The token is the ``token`` argument, else ``HF_TOKEN``, else ``HF_TOKEN=`` in a ``.env`` file
(the current directory, then the dataset directory), else the hf CLI's stored login.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any

import numbatraj.lerobot.schema as S
from numbatraj.errors import (
    DatasetNotFoundError,
    DownloadError,
    HubPushError,
    LeRobotFormatError,
)
from numbatraj.io.atomic import is_temp_name
from numbatraj.io.cache import cache_dir
from numbatraj.io.dotenv import read_dotenv
from numbatraj.io.parquet import read_parquet

__all__ = [
    "DatasetNotFoundError",
    "HubPushError",
    "PushResult",
    "cache_dir",
    "candidate_roots",
    "collect_files",
    "dataset_card",
    "default_store_path",
    "hub_caches",
    "local_dataset_dir",
    "push_lerobot_dataset",
    "resolve_dataset_root",
    "resolve_token",
]

_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_MARKER = os.path.join("meta", "info.json")
log = logging.getLogger(__name__)


def _check_repo(repo_id: str) -> tuple[str, str]:
    if not isinstance(repo_id, str) or not _REPO.match(repo_id) or ".." in repo_id:
        raise ValueError(f"repo_id {repo_id!r} is not of the form ORG/NAME")
    org, name = repo_id.split("/")
    return org, name


def local_dataset_dir(repo_id: str, revision: str | None = None) -> str:
    """numbatraj's former download directory for ``repo_id``: ``<cache>/lerobot/<Org>__<name>``
    (still looked in first, so datasets fetched by numbatraj 0.1 are reused)."""
    org, name = _check_repo(repo_id)
    leaf = f"{org}__{name}" + (f"@{revision}" if revision else "")
    return os.path.join(cache_dir(), "lerobot", leaf.replace("/", "_"))


def default_store_path(repo_id: str, height: int, width: int) -> str:
    """Default import output: ``<cache>/stores/<Org>__<name>_<H>x<W>.h5``."""
    org, name = _check_repo(repo_id)
    return os.path.join(cache_dir(), "stores", f"{org}__{name}_{height}x{width}.h5")


def _hf_home() -> str:
    return os.path.expanduser(os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "huggingface",
    ))


def _lerobot_home() -> str:
    return os.path.expanduser(
        os.environ.get("HF_LEROBOT_HOME") or os.path.join(_hf_home(), "lerobot")
    )


def hub_caches() -> list[str]:
    """The huggingface_hub cache directories looked in: LeRobot 0.6's
    (``$HF_LEROBOT_HOME/hub``) and the shared one (``$HF_HUB_CACHE`` or ``$HF_HOME/hub``)."""
    shared = os.path.expanduser(os.environ.get("HF_HUB_CACHE") or os.path.join(_hf_home(), "hub"))
    return [os.path.join(_lerobot_home(), "hub"), shared]


def _hub_snapshot(hub: str, repo_id: str, revision: str) -> str | None:
    org, name = _check_repo(repo_id)
    repo_dir = os.path.join(hub, f"datasets--{org}--{name}")
    if _COMMIT.match(revision):
        return os.path.join(repo_dir, "snapshots", revision)
    ref = os.path.join(repo_dir, "refs", *revision.split("/"))
    try:
        with open(ref, encoding="utf-8") as fh:
            commit = fh.read().strip()
    except OSError:
        return None
    if not _COMMIT.match(commit):
        return None
    return os.path.join(repo_dir, "snapshots", commit)


def _revisions(revision: str | None) -> list[str]:
    return [revision] if revision else [S.CODEBASE_VERSION, "main"]


def _candidates(repo_id: str, revision: str | None) -> list[tuple[str, str | None, bool]]:
    """``(directory, revision it stands for, is a hub snapshot)`` in search order."""
    org, name = _check_repo(repo_id)
    out: list[tuple[str, str | None, bool]] = [(local_dataset_dir(repo_id, revision), revision,
                                                False)]
    if revision is None:
        out.append((os.path.join(_lerobot_home(), org, name), None, False))
    for rev in _revisions(revision):
        for hub in hub_caches():
            snap = _hub_snapshot(hub, repo_id, rev)
            if snap is not None and all(snap != p for p, _, _ in out):
                out.append((snap, rev, True))
    return out


def candidate_roots(repo_id: str, revision: str | None = None) -> list[str]:
    """The directories :func:`resolve_dataset_root` looks in, in order (some may not exist)."""
    return [place for place, _, _ in _candidates(repo_id, revision)]


def _complete(place: str, snapshot: bool) -> bool:
    if not os.path.isfile(os.path.join(place, _MARKER)):
        return False
    if not snapshot:
        return True
    try:
        used, _ = _referenced(place)
    except Exception:  # unreadable metadata: not a usable snapshot
        return False
    return all(os.path.isfile(os.path.join(place, rel)) for rel in used)


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _download(repo_id: str, revision: str | None) -> str:
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import RevisionNotFoundError
    except ImportError as exc:
        raise DownloadError(
            f"downloading {repo_id!r} needs huggingface_hub: pip install 'numbatraj[hub]'"
        ) from exc
    revs = _revisions(revision)
    for i, rev in enumerate(revs):
        try:
            # The cache and endpoint as they are now: huggingface_hub reads HF_HUB_CACHE,
            # HF_HOME and HF_ENDPOINT once, at its import, so a process that set them later
            # would otherwise download where the search above never looks.
            root = str(snapshot_download(
                repo_id, repo_type="dataset", revision=rev, cache_dir=hub_caches()[-1],
                endpoint=os.environ.get("HF_ENDPOINT") or None,
            ))
        except RevisionNotFoundError as exc:
            if i + 1 < len(revs):
                log.info("%s has no %s tag; using %s", repo_id, rev, revs[i + 1])
                continue
            raise DownloadError(f"{repo_id!r} has no revision {rev!r}: {exc}") from exc
        except Exception as exc:
            raise DownloadError(
                f"downloading {repo_id!r} (revision {rev}) failed: {type(exc).__name__}: {exc}"
            ) from exc
        if not os.path.isfile(os.path.join(root, _MARKER)):
            raise DownloadError(f"{repo_id!r} (revision {rev}) has no {_MARKER}")
        log.info("%s@%s downloaded to %s", repo_id, rev, root)
        return root
    raise AssertionError("unreachable")  # pragma: no cover


def resolve_dataset_root(
    repo_id: str, revision: str | None = None, allow_download: bool = True
) -> str:
    """The local directory of Hub dataset ``repo_id``; see the module docstring for the order.

    Parameters
    ----------
    repo_id : str
        ``ORG/NAME``.
    revision : str, optional
        Branch, tag or commit; ``None`` means ``v3.0``, else ``main``.
    allow_download : bool
        When false (or with ``HF_HUB_OFFLINE=1``), a dataset found nowhere raises instead of
        being fetched.

    Raises
    ------
    DatasetNotFoundError
        Not on disk and downloading is off (the message lists the places tried).
    DownloadError
        The download failed.
    """
    found = _candidates(repo_id, revision)
    for place, rev, snapshot in found:
        if _complete(place, snapshot):
            if revision is None and rev is not None and rev != S.CODEBASE_VERSION:
                log.info("%s: no %s tag in the cache; using %s", repo_id, S.CODEBASE_VERSION,
                         rev)
            log.debug("%s found at %s", repo_id, place)
            return place
    places = [place for place, _, _ in found]
    if not allow_download or _offline():
        why = "downloading is off" if not allow_download else "HF_HUB_OFFLINE is set"
        tried = "\n".join(f"  - {p}" for p in places)
        raise DatasetNotFoundError(
            f"dataset {repo_id!r} (revision {revision or S.CODEBASE_VERSION + ' or main'}) is "
            f"not on disk and {why}; looked for {_MARKER} in:\n{tried}"
        )
    return _download(repo_id, revision)


# -- push ------------------------------------------------------------------------------

_SNAPSHOT_TRIES = 5


@dataclass
class PushResult:
    """What a push did: the commit (``None`` when nothing changed), the files the commit
    carried, and the files held back."""

    repo_id: str
    commit: str | None
    sent: list[str] = field(default_factory=list)
    held_back: list[str] = field(default_factory=list)
    files: int = 0


def resolve_token(token: str | None = None, root: str | None = None) -> str:
    """The Hub token: ``token``, ``HF_TOKEN``, a ``.env`` file, then the hf CLI's login."""
    if token:
        return token
    if os.environ.get("HF_TOKEN"):
        return os.environ["HF_TOKEN"]
    for where in [os.getcwd()] + ([root] if root else []):
        found = read_dotenv(os.path.join(where, ".env")).get("HF_TOKEN")
        if found:
            return found
    from huggingface_hub import get_token

    stored = get_token()
    if stored:
        return stored
    raise HubPushError(
        "no Hugging Face token: set HF_TOKEN, put HF_TOKEN=... in a .env file (current "
        "directory or the dataset's), or log in with `hf auth login`"
    )


def _referenced(root: str) -> tuple[set[str], dict[str, Any]]:
    """Data and video files the episode table references, and ``info.json``."""
    with open(os.path.join(root, S.INFO_PATH), encoding="utf-8") as fh:
        info = json.load(fh)
    cams = sorted(k for k, ft in info.get("features", {}).items() if ft.get("dtype") == "video")
    used: set[str] = set()
    for path in sorted(glob.glob(os.path.join(root, S.EPISODES_DIR, "chunk-*", "file-*.parquet"))):
        rows = read_parquet(path).to_pylist()
        for r in rows:
            used.add(S.data_file(info["data_path"], r[S.EP_DATA_CHUNK], r[S.EP_DATA_FILE]))
            for cam in cams:
                used.add(S.video_file(
                    info["video_path"], cam, r[S.video_column(cam, "chunk_index")],
                    r[S.video_column(cam, "file_index")],
                ))
    return used, info


def collect_files(root: str | os.PathLike[str]) -> tuple[list[str], list[str], dict[str, Any]]:
    """``(files to push, files held back, info.json)``, paths relative to ``root`` with ``/``.

    Hidden files and directories, temporary files (:func:`~numbatraj.io.atomic.is_temp_name`)
    and ``*.part`` files are skipped silently; files under
    ``data/`` or ``videos/`` that the episode table does not reference are held back.
    """
    root = os.fspath(root)
    if not os.path.isfile(os.path.join(root, S.INFO_PATH)):
        raise LeRobotFormatError(
            f"{root!r} is not a LeRobot dataset: {S.INFO_PATH} does not exist"
        )
    used, info = _referenced(root)
    send, held = [], []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith(".") or name.endswith(".part") or is_temp_name(name):
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
            if rel.split("/", 1)[0] in ("data", "videos") and rel not in used:
                held.append(rel)
            else:
                send.append(rel)
    return send, held, info


def dataset_card(info: dict[str, Any], repo_id: str, license: str = "apache-2.0") -> str:
    """A dataset card in the shape LeRobot's ``create_lerobot_dataset_card`` produces."""
    structure = json.dumps(info, indent=4, ensure_ascii=False)
    return (
        "---\n"
        f"license: {license}\n"
        "task_categories:\n- robotics\n"
        "tags:\n- LeRobot\n"
        "configs:\n- config_name: default\n  data_files: data/*/*.parquet\n"
        "---\n\n"
        "This dataset was recorded with numbatraj's LeRobotWriter in the "
        "[LeRobot](https://github.com/huggingface/lerobot) v3.0 format.\n\n"
        f"Repository: `{repo_id}`\n\n"
        "## Dataset Structure\n\n"
        f"[meta/info.json](meta/info.json):\n```json\n{structure}\n```\n"
    )


def _snapshot(root: str) -> tuple[dict[str, bytes | str], list[str], dict[str, Any]]:
    """Path or bytes per file to send; metadata and data read now, videos (never rewritten
    once in place) sent from their path.  Repeated while ``info.json`` changes under it."""
    info_path = os.path.join(root, S.INFO_PATH)
    for _ in range(_SNAPSHOT_TRIES):
        with open(info_path, "rb") as fh:
            before = fh.read()
        send, held, info = collect_files(root)
        content: dict[str, bytes | str] = {}
        for rel in send:
            path = os.path.join(root, rel)
            if rel.startswith("videos/"):
                content[rel] = path
            else:
                with open(path, "rb") as fh:
                    content[rel] = fh.read()
        with open(info_path, "rb") as fh:
            if fh.read() == before and content.get(S.INFO_PATH) == before:
                return content, held, info
    raise HubPushError(
        f"{root!r} kept changing while it was read ({_SNAPSHOT_TRIES} tries); push again"
    )


def push_lerobot_dataset(
    root: str | os.PathLike[str],
    repo_id: str,
    *,
    private: bool = True,
    message: str | None = None,
    token: str | None = None,
    endpoint: str | None = None,
) -> PushResult:
    """Upload the LeRobot v3.0 directory ``root`` to the dataset repo ``repo_id``.

    Parameters
    ----------
    root : path-like
        The dataset directory (holding ``meta/info.json``).
    repo_id : str
        ``ORG/NAME``.
    private : bool
        Visibility of a repo this push creates (an existing repo keeps its own).
    message : str, optional
        Commit message (default: a summary of episodes and frames).
    token : str, optional
        Hub token; see :func:`resolve_token` for where it is looked for otherwise.
    endpoint : str, optional
        Hub URL (default: ``HF_ENDPOINT`` or the public Hub).

    Returns
    -------
    PushResult

    Raises
    ------
    LeRobotFormatError
        ``root`` is not a LeRobot dataset.
    HubPushError
        No token, or the Hub refused a request (the message names the repo and the status).
    """
    from huggingface_hub import CommitOperationAdd, HfApi
    from huggingface_hub.errors import HfHubHTTPError, RevisionNotFoundError

    root = os.path.abspath(os.fspath(root))
    _check_repo(repo_id)
    if not os.path.isfile(os.path.join(root, S.INFO_PATH)):
        raise LeRobotFormatError(f"{root!r} is not a LeRobot dataset: {S.INFO_PATH} does not exist")
    api = HfApi(endpoint=endpoint, token=resolve_token(token, root))
    content, held, info = _snapshot(root)
    if "README.md" not in content:
        content["README.md"] = dataset_card(info, repo_id).encode()
    ops = [CommitOperationAdd(path_in_repo=r, path_or_fileobj=src) for r, src in content.items()]
    summary = message or (
        f"LeRobot {info.get('codebase_version')} dataset: {info.get('total_episodes')} episodes, "
        f"{info.get('total_frames')} frames"
    )
    where = f"{api.endpoint}, dataset {repo_id!r}"
    try:
        api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        commit = api.create_commit(repo_id, ops, commit_message=summary, repo_type="dataset")
        try:
            api.delete_tag(repo_id, tag=S.CODEBASE_VERSION, repo_type="dataset")
        except RevisionNotFoundError:
            pass
        api.create_tag(repo_id, tag=S.CODEBASE_VERSION, repo_type="dataset")
    except HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", "?")
        raise HubPushError(f"the Hub refused the push ({where}): HTTP {status}: {exc}") from exc
    except OSError as exc:
        raise HubPushError(f"the Hub could not be reached ({where}): {exc}") from exc
    sent = [
        op.path_in_repo for op in ops
        if getattr(op, "_remote_oid", None) is None
        or op._remote_oid != op._local_oid  # noqa: SLF001 - huggingface_hub's no-op test
    ]
    return PushResult(repo_id, commit.oid if sent else None, sent, held, len(ops))
