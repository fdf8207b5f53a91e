"""The catalog's wire protocol: names, versions, route paths and JSON keys.

This is the one module of :mod:`numbatraj.catalog` the client
(:mod:`numbatraj.remote`) imports, so it uses the standard library and
:mod:`numbatraj.errors` only: importing it loads no HTTP, SQL or S3 library.

Name rules
----------
=================  ==========================================================
dataset name       1-128 of ``a-z 0-9 . _ -``, starting with a letter or digit
version            1-64 of ``A-Z a-z 0-9 . _ + -``, starting with one
project            the dataset-name rule
recording dataset  the version rule
file path          relative POSIX, no hidden or ``..`` part, <= 512 chars
=================  ==========================================================

None of them allows ``..``.  Each check returns its input unchanged or raises
:class:`~numbatraj.errors.CatalogRequestError` quoting the input exactly.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from numbatraj.errors import CatalogRequestError

__all__ = [
    "API",
    "ARTIFACTS",
    "DATASETS",
    "KINDS",
    "HEALTH",
    "MAX_PATH_CHARS",
    "RECORDINGS",
    "ROLES",
    "STATE_HELD",
    "STATE_UNCHANGED",
    "STATE_UPLOAD",
    "alias_route",
    "artifact_action_route",
    "artifact_base",
    "artifact_route",
    "blob_complete_route",
    "check_alias",
    "check_kind",
    "check_dataset",
    "check_name",
    "check_project",
    "check_rel_path",
    "check_version",
    "commit_route",
    "dataset_complete_route",
    "dataset_route",
    "offer_route",
    "project_route",
    "recording_route",
]

#: Roles an API key can have: ``read`` may only GET, ``write`` may also register and upload.
ROLES = ("read", "write")

# -- routes ------------------------------------------------------------------------------

API = "/v1"
HEALTH = f"{API}/health"
DATASETS = f"{API}/datasets"
RECORDINGS = f"{API}/recordings"
ARTIFACTS = f"{API}/artifacts"

#: Kinds of artifact: a dataset file, a policy's weights, a project directory (an archive).
KINDS = ("dataset", "policy", "project")

# -- JSON: the ``state`` an offer is answered with ------------------------------------------

#: The committed snapshot already holds that path with that digest.
STATE_UNCHANGED = "unchanged"
#: The service holds the bytes (under another path, or from an earlier pass).
STATE_HELD = "held"
#: The service lacks the bytes: the answer carries a presigned ``upload``.
STATE_UPLOAD = "upload"


def dataset_route(name: str) -> str:
    """``/v1/datasets/<name>`` (``GET``: a ready row and its presigned download)."""
    return f"{DATASETS}/{quote(name)}"


def dataset_complete_route(name: str, version: str) -> str:
    """``/v1/datasets/<name>/<version>/complete`` (``POST``: check the upload, then ready)."""
    return f"{DATASETS}/{quote(name)}/{quote(version)}/complete"


def artifact_base(kind: str) -> str:
    """``/v1/datasets`` for datasets, ``/v1/artifacts/<kind>`` for the other kinds."""
    return DATASETS if check_kind(kind) == "dataset" else f"{ARTIFACTS}/{kind}"


def artifact_route(kind: str, name: str) -> str:
    """``GET``: a ready version (``?version=`` or ``?alias=``) and its presigned download."""
    return f"{artifact_base(kind)}/{quote(name)}"


def artifact_action_route(kind: str, name: str, version: str, action: str) -> str:
    """``POST`` ``.../<version>/complete|parts|abort`` of one registration (``token``)."""
    return f"{artifact_base(kind)}/{quote(name)}/{quote(version)}/{action}"


def alias_route(kind: str, name: str, alias: str) -> str:
    """``POST`` ``{version}``: point ``alias`` at a ready version."""
    return f"{artifact_base(kind)}/{quote(name)}/aliases/{quote(alias)}"


def project_route(project: str) -> str:
    """``/v1/recordings/<project>`` (``GET``: the project's committed datasets)."""
    return f"{RECORDINGS}/{quote(project)}"


def recording_route(project: str, dataset: str) -> str:
    """``/v1/recordings/<project>/<dataset>`` (``GET``: snapshot + presigned downloads)."""
    return f"{project_route(project)}/{quote(dataset)}"


def offer_route(project: str, dataset: str) -> str:
    """``POST`` ``{path, sha256, bytes}``: answered with a ``state``."""
    return recording_route(project, dataset) + "/offer"


def blob_complete_route(project: str, dataset: str, sha256: str) -> str:
    """``POST``: check an uploaded blob, then ready."""
    return f"{recording_route(project, dataset)}/blobs/{sha256}/complete"


def commit_route(project: str, dataset: str) -> str:
    """``POST`` ``{files: {path: {sha256, bytes}}}``: replace the snapshot."""
    return recording_route(project, dataset) + "/commit"


# -- names -------------------------------------------------------------------------------

_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
_PATH_PART = re.compile(r"[A-Za-z0-9_+=,@-][A-Za-z0-9._+=,@-]{0,127}")
MAX_PATH_CHARS = 512

_NAME_RULE = "use 1-128 of a-z 0-9 . _ - starting with a letter or digit, without '..'"
_VERSION_RULE = "use 1-64 of A-Z a-z 0-9 . _ + - starting with a letter or digit, without '..'"


def _checked(value: object, pattern: re.Pattern[str], what: str, rule: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value) or ".." in value:
        raise CatalogRequestError(f"{what} {value!r} is not allowed: {rule}")
    return value


def check_name(name: object) -> str:
    """A dataset name: lower-case letters, digits, ``.``, ``_``, ``-``; at most 128 chars."""
    return _checked(name, _NAME, "dataset name", _NAME_RULE)


def check_version(version: object) -> str:
    """A version: letters, digits, ``.``, ``_``, ``+``, ``-``; at most 64 chars."""
    return _checked(version, _VERSION, "version", _VERSION_RULE)


def check_kind(kind: object) -> str:
    """One of :data:`KINDS`."""
    if kind not in KINDS:
        raise CatalogRequestError(f"artifact kind {kind!r} is not one of {', '.join(KINDS)}")
    return str(kind)


def check_alias(alias: object) -> str:
    """An alias (``promoted``, ``staging``...): the dataset-name rule."""
    return _checked(alias, _NAME, "alias", _NAME_RULE)


def check_project(project: object) -> str:
    """A project name: the dataset-name rule (a-z 0-9 . _ -)."""
    return _checked(project, _NAME, "project", _NAME_RULE)


def check_dataset(dataset: object) -> str:
    """A recording's dataset name: the version rule (A-Z a-z 0-9 . _ + -)."""
    return _checked(dataset, _VERSION, "dataset", _VERSION_RULE)


def check_rel_path(path: object) -> str:
    """A file's path inside a recording: relative POSIX, no hidden part, no ``..``."""
    parts = path.split("/") if isinstance(path, str) else []
    if (
        not isinstance(path, str) or not parts or len(path) > MAX_PATH_CHARS
        or not all(_PATH_PART.fullmatch(p) for p in parts) or ".." in parts
    ):
        raise CatalogRequestError(
            f"file path {path!r} is not allowed: relative, '/'-separated, no hidden or '..' "
            f"part, at most {MAX_PATH_CHARS} chars of A-Z a-z 0-9 . _ + = , @ -"
        )
    return path
