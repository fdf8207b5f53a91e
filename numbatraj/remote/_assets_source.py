"""Where a pack's bytes come from, and which credential goes with them.

The URL alone cannot say which credential to send; ``provider=`` does:

=========  ========  ==============================================  =========================
provider   locator   credential                                      how the bytes are reached
=========  ========  ==============================================  =========================
https      url=      none, or ``Bearer $<token_env>``                one GET
hf         url=      ``HF_TOKEN``, else the hf CLI's saved token     one GET with a bearer
                     (only to huggingface.co or ``$HF_ENDPOINT``)
catalog    id=       the catalog API key (to the catalog only)       catalog call -> presigned
                                                                     URL -> unauthenticated GET
=========  ========  ==============================================  =========================

A credential never travels over plain ``http://`` (except to a loopback host), and the
Hugging Face token goes only to ``huggingface.co``, its sub-domains, or the host of
``$HF_ENDPOINT``; any other declaration that would send one is a
:class:`~numbatraj.errors.DeclarationError` naming the ``assets.kv`` file and line.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from numbatraj.errors import CatalogRequestError, DeclarationError
from numbatraj.io.dotenv import read_dotenv
from numbatraj.io.download import redact_url
from numbatraj.remote._assets_kv import PackDecl, is_loopback_host, url_host
from numbatraj.remote.client import ENV_KEY, ENV_URL, RemoteCatalog

__all__ = ["Source", "describe_source", "hf_token", "resolve_source"]


@dataclass(frozen=True)
class Source:
    """A resolved GET: the URL, the headers to send and, in words, the credential."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)
    credential: str = "none"


def hf_token(env: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """The Hugging Face token and where it came from: ``HF_TOKEN``, then the hf CLI's file.

    The file is ``$HF_TOKEN_PATH``, else ``$HF_HOME/token``, else
    ``~/.cache/huggingface/token`` (where ``hf auth login`` saves it).
    """
    env = os.environ if env is None else env
    tok = (env.get("HF_TOKEN") or "").strip()
    if tok:
        return tok, "HF_TOKEN"
    path = env.get("HF_TOKEN_PATH") or os.path.join(
        env.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"),
        "token",
    )
    try:
        with open(path, encoding="utf-8") as f:
            tok = f.read().strip()
    except OSError:
        tok = ""
    return (tok, f"the hf CLI token ({path})") if tok else (None, "none")


def _hf_host_allowed(host: str, env: Mapping[str, str]) -> bool:
    if host == "huggingface.co" or host.endswith(".huggingface.co"):
        return True
    endpoint = url_host((env.get("HF_ENDPOINT") or "").strip())
    return bool(endpoint) and host == endpoint


def _check_credential_target(decl: PackDecl, env: Mapping[str, str], what: str) -> None:
    """Refuse to send ``what`` (a credential) where ``decl.locator`` points."""
    host = url_host(decl.locator)
    if decl.provider == "hf" and not _hf_host_allowed(host, env):
        raise DeclarationError(
            f"{decl.where}: url: pack {decl.label} (provider=hf) points at host {host!r}, "
            f"not huggingface.co or $HF_ENDPOINT; {what} is not sent there (use "
            "provider=https for another host, or set HF_ENDPOINT for a mirror)"
        )
    if not decl.locator.startswith("https://") and not is_loopback_host(host):
        raise DeclarationError(
            f"{decl.where}: url: pack {decl.label} would send {what} over plain http to "
            f"host {host!r}; use https://"
        )


def _catalog_id(decl: PackDecl) -> tuple[str, str | None]:
    name, _, version = decl.locator.partition("@")
    return name, version or None


def _catalog_url(env: Mapping[str, str], env_file: str | None) -> str | None:
    file_vals = read_dotenv(env_file) if env_file else {}
    return (env.get(ENV_URL) or file_vals.get(ENV_URL) or "").strip() or None


def describe_source(
    decl: PackDecl, env: Mapping[str, str] | None = None, env_file: str | None = ".env"
) -> tuple[str, str]:
    """``(URL, credential in words)`` for ``assets where``: no network, no secret shown."""
    env = os.environ if env is None else env
    if decl.provider == "https":
        if decl.token_env is None:
            return redact_url(decl.locator), "none"
        state = "set" if (env.get(decl.token_env) or "").strip() else "NOT SET"
        return redact_url(decl.locator), f"bearer from ${decl.token_env} ({state})"
    if decl.provider == "hf":
        tok, where = hf_token(env)
        if tok:
            try:
                _check_credential_target(decl, env, f"the bearer from {where}")
            except DeclarationError as exc:
                return redact_url(decl.locator), f"REFUSED: {exc}"
        return redact_url(decl.locator), (f"bearer from {where}" if tok else "none (no "
                                          "HF_TOKEN, no hf login): public repos only")
    name, version = _catalog_id(decl)
    base = _catalog_url(env, env_file) or f"<${ENV_URL} not set>"
    url = f"{base}/v1/datasets/{name}" + (f"?version={version}" if version else "")
    return url, f"${ENV_KEY} to the catalog; the presigned GET carries no credential"


def resolve_source(
    decl: PackDecl,
    env: Mapping[str, str] | None = None,
    env_file: str | None = ".env",
    catalog: Callable[[], Any] | None = None,
) -> Source:
    """The GET to make for ``decl``; for ``catalog`` this asks the catalog for a URL.

    Parameters
    ----------
    catalog : callable, optional
        Returns a :class:`~numbatraj.remote.client.RemoteCatalog` (default: from the
        environment and ``env_file``).

    Raises
    ------
    DeclarationError
        ``token_env`` names an unset variable, or the catalog's digest contradicts ``sha256=``.
    CatalogError
        The catalog refused the call or is unreachable.
    """
    env = os.environ if env is None else env
    if decl.provider == "https":
        if decl.token_env is None:
            return Source(decl.locator)
        tok = (env.get(decl.token_env) or "").strip()
        if not tok:
            raise DeclarationError(
                f"{decl.where}: token_env: pack {decl.label} sends ${decl.token_env}, "
                "which is not set or empty"
            )
        _check_credential_target(decl, env, f"${decl.token_env}")
        return Source(decl.locator, {"Authorization": f"Bearer {tok}"},
                      f"bearer from ${decl.token_env}")
    if decl.provider == "hf":
        hf, where = hf_token(env)
        if hf is None:
            return Source(decl.locator)
        _check_credential_target(decl, env, f"the Hugging Face token ({where})")
        return Source(decl.locator, {"Authorization": f"Bearer {hf}"}, f"bearer from {where}")
    name, version = _catalog_id(decl)
    try:
        cat = catalog() if catalog is not None else RemoteCatalog.from_env(env_file)
    except CatalogRequestError as exc:
        raise CatalogRequestError(f"{decl.where}: pack {decl.label}: {exc}") from None
    try:
        rec = cat.describe(name, version)
    finally:
        cat.close()
    if rec.get("sha256") != decl.sha256 or rec.get("bytes") != decl.bytes:
        raise DeclarationError(
            f"{decl.where}: sha256: pack {decl.label} declares {decl.sha256} ({decl.bytes} "
            f"bytes) but catalog {name} {rec.get('version')} holds {rec.get('sha256')} "
            f"({rec.get('bytes')} bytes)"
        )
    dl = rec["download"]
    headers = {str(k): str(v) for k, v in (dl.get("headers") or {}).items()}
    return Source(dl["url"], headers, "none on the GET (presigned by the catalog)")
