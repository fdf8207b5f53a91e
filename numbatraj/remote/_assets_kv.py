"""``assets.kv`` declarations: parse them strictly, and find them under a tree.

A file declares one or more packs, ``key=value`` per line; ``pack=`` starts each one::

    # LIBERO meshes and textures
    pack=libero@v1
    provider=hf
    url=https://huggingface.co/datasets/org/assets/resolve/main/libero_v1.tar.zst
    sha256=8c7616b2...
    bytes=188991117
    dest=assets

Blank lines and ``#`` comments are ignored.  Anything else that is wrong (an unknown or
repeated key, a key before the first ``pack=``, a missing one, a value of the wrong form) is
a :class:`~numbatraj.errors.DeclarationError` naming the file, the line and the key.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import os
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from numbatraj.errors import DeclarationError

__all__ = [
    "KV_NAME", "PROVIDERS", "PackDecl", "find_assets_kv", "is_loopback_host", "parse_assets_kv",
    "url_host",
]

KV_NAME = "assets.kv"
PROVIDERS = ("https", "hf", "catalog")
_KEYS = ("pack", "provider", "url", "id", "sha256", "bytes", "dest", "token_env")
_PACK = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]{0,127})@([A-Za-z0-9][A-Za-z0-9._+-]{0,63})")
_CATALOG_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}(@[A-Za-z0-9][A-Za-z0-9._+-]{0,63})?")
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SKIP_DIRS = frozenset({"node_modules", "__pycache__", "site-packages"})


@dataclass(frozen=True)
class PackDecl:
    """One declared pack.

    Attributes
    ----------
    name, version : str
        From ``pack=NAME@VERSION``.
    provider : str
        ``https``, ``hf`` or ``catalog``.
    locator : str
        ``url=`` (https, hf) or ``id=`` (catalog: ``NAME`` or ``NAME@VERSION``).
    sha256 : str
        Lower-case hex digest of the archive.
    bytes : int
        Size of the archive.
    dest : str
        Absolute path of the directory the pack is placed in.
    token_env : str or None
        For ``https``: the environment variable holding a bearer token.
    source : str
        The ``assets.kv`` file, and ``line`` the line of its ``pack=``.
    """

    name: str
    version: str
    provider: str
    locator: str
    sha256: str
    bytes: int
    dest: str
    token_env: str | None
    source: str
    line: int

    @property
    def label(self) -> str:
        """``NAME@VERSION``."""
        return f"{self.name}@{self.version}"

    @property
    def where(self) -> str:
        """``file:line`` of the declaration, for messages."""
        return f"{self.source}:{self.line}"


def url_host(url: str) -> str:
    """The lower-case host of ``url`` ('' when it has none or cannot be parsed)."""
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def is_loopback_host(host: str) -> bool:
    """``localhost`` or a loopback address: a credential sent there never leaves the
    machine, so plain ``http://`` is allowed for it (test and local mirror servers)."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _fail(path: str, line: int, key: str, problem: str) -> DeclarationError:
    return DeclarationError(f"{path}:{line}: {key}: {problem}")


def _finish(path: str, fields: dict[str, tuple[int, str]]) -> PackDecl:
    start = fields["pack"][0]
    pack = fields["pack"][1]
    m = _PACK.fullmatch(pack)
    if m is None:
        raise _fail(path, start, "pack", f"{pack!r} is not NAME@VERSION")
    for key in ("provider", "sha256", "bytes", "dest"):
        if key not in fields:
            raise _fail(path, start, key, f"missing from the declaration of pack {pack}")
    line, provider = fields["provider"]
    if provider not in PROVIDERS:
        raise _fail(path, line, "provider", f"{provider!r} is not one of {', '.join(PROVIDERS)}")
    want, other = ("id", "url") if provider == "catalog" else ("url", "id")
    if want not in fields:
        raise _fail(path, start, want, f"missing: provider={provider} needs {want}=")
    if other in fields:
        raise _fail(path, fields[other][0], other, f"not used by provider={provider} ({want}=)")
    line, locator = fields[want]
    if want == "url" and not locator.startswith(("https://", "http://")):
        raise _fail(path, line, "url", f"{locator!r} is not an http(s) URL")
    if want == "id" and not _CATALOG_ID.fullmatch(locator):
        raise _fail(path, line, "id", f"{locator!r} is not a catalog NAME[@VERSION]")
    line, digest = fields["sha256"]
    if not _HEX64.fullmatch(digest):
        raise _fail(path, line, "sha256", f"{digest!r} is not 64 hex digits")
    line, size_s = fields["bytes"]
    if not size_s.isdigit():
        raise _fail(path, line, "bytes", f"{size_s!r} is not a non-negative integer")
    line, dest = fields["dest"]
    parts = dest.replace("\\", "/").split("/")
    if not dest or dest.startswith(("/", "\\", "~")) or ".." in parts or dest in (".", "./"):
        raise _fail(path, line, "dest", f"{dest!r} must be a sub-directory relative to the "
                    "assets.kv, without '..'")
    token_env = None
    if "token_env" in fields:
        line, token_env = fields["token_env"]
        if provider != "https":
            raise _fail(path, line, "token_env", f"only provider=https takes it (provider="
                        f"{provider} has its own credential)")
        if not _ENV.fullmatch(token_env):
            raise _fail(path, line, "token_env", f"{token_env!r} is not a variable name")
        url_line = fields["url"][0]
        if not locator.startswith("https://") and not is_loopback_host(url_host(locator)):
            raise _fail(path, url_line, "url", f"token_env={token_env} would send a bearer "
                        f"token over plain http to {url_host(locator) or locator!r}; use "
                        "https://")
    base = os.path.dirname(os.path.abspath(path))
    return PackDecl(
        name=m.group(1), version=m.group(2), provider=provider, locator=locator,
        sha256=digest.lower(), bytes=int(size_s), dest=os.path.normpath(os.path.join(base, dest)),
        token_env=token_env, source=path, line=start,
    )


def parse_assets_kv(path: str | os.PathLike[str]) -> list[PackDecl]:
    """Every pack declared in one ``assets.kv``.

    Raises
    ------
    DeclarationError
        Naming the file, line and key of the first problem.
    """
    path = os.fspath(path)
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    packs: list[PackDecl] = []
    fields: dict[str, tuple[int, str]] | None = None
    for n, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        key, sep, value = text.partition("=")
        key, value = key.strip(), value.strip()
        if not sep:
            raise _fail(path, n, key or "?", "not a key=value line")
        if key not in _KEYS:
            raise _fail(path, n, key, f"unknown key; valid: {', '.join(_KEYS)}")
        if not value:
            raise _fail(path, n, key, "empty value")
        if key == "pack":
            if fields is not None:
                packs.append(_finish(path, fields))
            fields = {}
        elif fields is None:
            raise _fail(path, n, key, "comes before the first pack= line")
        if key in fields:
            raise _fail(path, n, key, f"repeated (first on line {fields[key][0]})")
        fields[key] = (n, value)
    if fields is None:
        raise DeclarationError(f"{path}: declares no pack (no pack= line)")
    packs.append(_finish(path, fields))
    seen: dict[str, PackDecl] = {}
    for p in packs:
        if p.name in seen:
            raise _fail(path, p.line, "pack", f"{p.name} is declared twice (also line "
                        f"{seen[p.name].line})")
        seen[p.name] = p
    return packs


def find_assets_kv(root: str | os.PathLike[str], pattern: str | None = None) -> list[str]:
    """Every ``assets.kv`` under ``root`` (hidden directories skipped), sorted.

    Parameters
    ----------
    pattern : str, optional
        Keep only files whose path relative to ``root`` matches: an ``fnmatch`` glob when
        it holds ``*?[`` (``*`` also crosses ``/``), else a substring.
    """
    root = os.fspath(root)
    found: list[str] = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith(".") and x not in _SKIP_DIRS)
        if KV_NAME in files:
            found.append(os.path.join(d, KV_NAME))
    if pattern:
        def rel(p: str) -> str:
            return os.path.relpath(p, root).replace(os.sep, "/")

        if any(c in pattern for c in "*?["):
            found = [p for p in found if fnmatch.fnmatch(rel(p), pattern)]
        else:
            found = [p for p in found if pattern in rel(p)]
    return sorted(found)
