"""Asset packs: meshes and textures declared in ``assets.kv`` files, fetched and placed.

:func:`pull_packs` makes every declared pack present on this machine.  An archive is fetched
with :func:`~numbatraj.io.download.fetch` (resumable, verified) into a cache keyed by its
SHA-256 -- not by the pack's name, so two declarations of the same bytes share one download
-- and extracted there once with :func:`~numbatraj.io.archive.safe_extract`.  The extracted
files are then hard-linked into ``dest`` (copied where a link is impossible, for example
across filesystems; never symlinked), through a temporary directory renamed into place with
a marker written last.  One failing pack does not stop the others.

Cache layout (``$NUMBATRAJ_CACHE/assets``, default ``~/.cache/numbatraj/assets``)::

    <sha256>/archive     the verified archive (``archive.part`` while downloading)
    <sha256>/tree/       its extracted files + completion marker
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from numbatraj.errors import DeclarationError, NumbatrajError, UnsafeArchiveError
from numbatraj.io.archive import (
    MAX_RATIO,
    MAX_TOTAL_BYTES,
    read_marker,
    safe_extract,
    sniff_kind,
    write_marker,
)
from numbatraj.io.atomic import publish_lock, remove_stale_temps, replace_dir, temp_path
from numbatraj.io.cache import cache_dir
from numbatraj.io.download import fetch
from numbatraj.remote._assets_kv import PackDecl, find_assets_kv, parse_assets_kv
from numbatraj.remote._assets_source import describe_source, resolve_source

__all__ = [
    "DEFAULT_MAX_MEMBER_BYTES",
    "PackResult",
    "PackStatus",
    "asset_cache_dir",
    "declared_packs",
    "pack_status",
    "pull_packs",
    "where_packs",
]

#: Largest single file accepted from a pack archive.
DEFAULT_MAX_MEMBER_BYTES = 16 << 30


def asset_cache_dir(env: Mapping[str, str] | None = None) -> str:
    """``<cache>/assets``: ``NUMBATRAJ_CACHE`` from ``env`` when it is set there, else
    :func:`numbatraj.io.cache.cache_dir` (``$NUMBATRAJ_CACHE``, else the user cache dir)."""
    root = (env or {}).get("NUMBATRAJ_CACHE") or cache_dir()
    return os.path.join(root, "assets")


def declared_packs(
    root: str | os.PathLike[str], pattern: str | None = None
) -> tuple[list[PackDecl], list[tuple[str, str]]]:
    """Packs of every ``assets.kv`` under ``root`` matching ``pattern``.

    Returns the packs, and ``(file, error)`` for each file that could not be parsed (a bad
    file does not hide the good ones).
    """
    packs: list[PackDecl] = []
    bad: list[tuple[str, str]] = []
    for kv in find_assets_kv(root, pattern):
        try:
            packs.extend(parse_assets_kv(kv))
        except (DeclarationError, OSError, UnicodeDecodeError) as exc:
            bad.append((kv, str(exc)))
    return packs, bad


@dataclass(frozen=True)
class PackStatus:
    """Where one pack stands on this machine.

    ``state`` is ``present`` (``dest`` holds exactly this archive's files), ``cached``
    (extracted in the cache, not placed), ``stale`` (``dest`` holds another version),
    ``foreign`` (``dest`` exists but was not placed by numbatraj) or ``missing``.
    """

    decl: PackDecl
    state: str


def _placed_sha(dest: str) -> str | None:
    m = read_marker(dest) if os.path.isdir(dest) else None
    return str(m.get("sha256")) if m and m.get("kind") == "asset-pack" else None


def pack_status(decl: PackDecl, cache: str | None = None) -> PackStatus:
    """The :class:`PackStatus` of ``decl`` (reads markers only; no hashing, no network)."""
    cache = asset_cache_dir() if cache is None else cache
    placed = _placed_sha(decl.dest)
    if placed == decl.sha256:
        return PackStatus(decl, "present")
    if placed is not None:
        return PackStatus(decl, "stale")
    if os.path.lexists(decl.dest):
        return PackStatus(decl, "foreign")
    tree = read_marker(os.path.join(cache, decl.sha256, "tree"))
    if tree and tree.get("sha256") == decl.sha256:
        return PackStatus(decl, "cached")
    return PackStatus(decl, "missing")


@dataclass(frozen=True)
class PackResult:
    """What :func:`pull_packs` did for one pack.

    ``state`` is ``present`` (nothing to do), ``pulled`` or ``failed`` (see ``error``).
    ``downloaded`` counts archive bytes fetched by this call; ``linked`` / ``copied`` count
    files placed each way.
    """

    decl: PackDecl
    state: str
    downloaded: int = 0
    linked: int = 0
    copied: int = 0
    error: str | None = None


def _ensure_tree(
    decl: PackDecl,
    cache: str,
    force: bool,
    fetch_options: Mapping[str, Any],
    source: Callable[[PackDecl], Any],
    fetched: set[str],
) -> tuple[str, int]:
    """The cache's extracted tree for ``decl.sha256``; returns ``(tree, bytes fetched)``.

    Holds the cache entry's publish lock: a second pull of the same pack (another
    process sharing the cache) waits, then finds the extracted tree and uses it."""
    entry = os.path.join(cache, decl.sha256)
    os.makedirs(entry, exist_ok=True)
    with publish_lock(entry, wait=True, what="assets pull (cache)"):
        return _ensure_tree_locked(decl, entry, force, fetch_options, source, fetched)


def _ensure_tree_locked(
    decl: PackDecl,
    entry: str,
    force: bool,
    fetch_options: Mapping[str, Any],
    source: Callable[[PackDecl], Any],
    fetched: set[str],
) -> tuple[str, int]:
    tree, archive = os.path.join(entry, "tree"), os.path.join(entry, "archive")
    if force and decl.sha256 not in fetched:
        for p in (tree, archive):
            if os.path.isdir(p):
                shutil.rmtree(p)
            elif os.path.exists(p):
                os.unlink(p)
    marker = read_marker(tree)
    if marker and marker.get("sha256") == decl.sha256:
        return tree, 0
    src = source(decl)
    opts = {k: v for k, v in fetch_options.items() if k not in ("max_total_bytes", "max_ratio")}
    res = fetch(src.url, archive, sha256=decl.sha256, size=decl.bytes,
                headers=src.headers or None, **opts)
    fetched.add(decl.sha256)
    max_total_bytes = fetch_options.get("max_total_bytes", MAX_TOTAL_BYTES)
    max_ratio = fetch_options.get("max_ratio", MAX_RATIO)
    kind = sniff_kind(archive)
    if kind is None:
        raise UnsafeArchiveError(
            f"{decl.where}: pack {decl.label}: the archive is neither zstandard nor gzip "
            "compressed (expected .tar.zst or .tar.gz)"
        )
    try:
        safe_extract(archive, tree, max_member_bytes=DEFAULT_MAX_MEMBER_BYTES, kind=kind,
                     marker={"sha256": decl.sha256, "kind": "asset-cache"},
                     max_total_bytes=max_total_bytes, max_ratio=max_ratio)
    except UnsafeArchiveError as exc:
        raise UnsafeArchiveError(f"pack {decl.label} ({decl.where}): {exc}") from None
    return tree, res.bytes_downloaded


def _link_or_copy(src: str, dst: str) -> bool:
    """Hard-link ``src`` to ``dst``; copy when a link is impossible.  True when linked."""
    try:
        os.link(src, dst, follow_symlinks=False)
        return True
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP,
                             errno.EACCES, errno.EOPNOTSUPP):
            raise
    shutil.copy2(src, dst, follow_symlinks=False)
    return False


def _place(decl: PackDecl, tree: str) -> tuple[int, int]:
    """Link the tree's files into ``decl.dest`` atomically; returns ``(linked, copied)``."""
    marker = read_marker(tree)
    assert marker is not None
    parent = os.path.dirname(decl.dest)
    os.makedirs(parent, exist_ok=True)
    tmp = temp_path(decl.dest)
    os.mkdir(tmp)
    linked = copied = 0
    try:
        for rel in marker["files"]:
            dst = os.path.join(tmp, *rel.split("/"))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            if _link_or_copy(os.path.join(tree, *rel.split("/")), dst):
                linked += 1
            else:
                copied += 1
        for d, _, _ in os.walk(tree):  # empty directories of the archive
            os.makedirs(os.path.join(tmp, os.path.relpath(d, tree)), exist_ok=True)
        write_marker(tmp, {
            "kind": "asset-pack", "pack": decl.label, "sha256": decl.sha256,
            "files": marker["files"], "declared_in": decl.where,
        })
        replace_dir(tmp, decl.dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return linked, copied


def _pull_one(
    decl: PackDecl, cache: str, force: bool, fetch_options: Mapping[str, Any],
    source: Callable[[PackDecl], Any], fetched: set[str],
) -> PackResult:
    # one placement per dest: a second pull waits, then finds the pack present
    with publish_lock(decl.dest, wait=True, what="assets pull"):
        remove_stale_temps(decl.dest)
        return _pull_one_locked(decl, cache, force, fetch_options, source, fetched)


def _pull_one_locked(
    decl: PackDecl, cache: str, force: bool, fetch_options: Mapping[str, Any],
    source: Callable[[PackDecl], Any], fetched: set[str],
) -> PackResult:
    placed = _placed_sha(decl.dest)
    if placed == decl.sha256 and not force:
        return PackResult(decl, "present")
    if placed is None and os.path.lexists(decl.dest) and not force:
        raise DeclarationError(
            f"{decl.where}: dest: {decl.dest} exists and was not placed by numbatraj; move it "
            "away, or force the pull to replace it"
        )
    tree, got = _ensure_tree(decl, cache, force, fetch_options, source, fetched)
    linked, copied = _place(decl, tree)
    return PackResult(decl, "pulled", got, linked, copied)


def pull_packs(
    packs: Sequence[PackDecl],
    *,
    force: bool = False,
    cache: str | None = None,
    env: Mapping[str, str] | None = None,
    env_file: str | None = ".env",
    catalog: Callable[[], Any] | None = None,
    fetch_options: Mapping[str, Any] | None = None,
    on_result: Callable[[PackResult], None] | None = None,
) -> list[PackResult]:
    """Make every pack in ``packs`` present; a failure is recorded and the rest go on.

    Parameters
    ----------
    force : bool
        Fetch, extract and place again even when present (and replace a ``foreign`` dest).
    cache : str, optional
        Cache directory (default :func:`asset_cache_dir`).
    env, env_file, catalog
        Where credentials come from (see :func:`~numbatraj.remote._assets_source.
        resolve_source`).
    fetch_options : mapping, optional
        Extra arguments for :func:`~numbatraj.io.download.fetch` (retries, ...), and the
        extraction limits ``max_total_bytes`` (default 256 GiB) and ``max_ratio`` (default
        1000: extracted bytes per archive byte) of
        :func:`~numbatraj.io.archive.safe_extract`.
    on_result : callable, optional
        Called with each :class:`PackResult` as soon as it is known.

    Returns
    -------
    list of PackResult
        In the order of ``packs``; check ``state == "failed"``.
    """
    cache = asset_cache_dir(env) if cache is None else cache
    opts = dict(fetch_options or {})
    fetched: set[str] = set()

    def source(d: PackDecl) -> Any:
        return resolve_source(d, env, env_file, catalog)

    out: list[PackResult] = []
    for decl in packs:
        try:
            res = _pull_one(decl, cache, force, opts, source, fetched)
        except (NumbatrajError, OSError) as exc:
            res = PackResult(decl, "failed", error=f"{type(exc).__name__}: {exc}")
        out.append(res)
        if on_result is not None:
            on_result(res)
    return out


def where_packs(
    packs: Sequence[PackDecl], env: Mapping[str, str] | None = None, env_file: str | None = ".env"
) -> list[tuple[PackDecl, str, str]]:
    """``(pack, URL, credential in words)`` for each pack; no request is made."""
    return [(d, *describe_source(d, env, env_file)) for d in packs]

