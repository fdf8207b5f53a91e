"""Where a pack's bytes come from: credentials only to the hosts and schemes they belong to,
never over plain http."""

from __future__ import annotations

from pathlib import Path

import pytest

from numbatraj.errors import DeclarationError
from numbatraj.remote._assets_kv import parse_assets_kv
from numbatraj.remote._assets_source import describe_source, resolve_source

SHA = "0" * 64


def write_kv(tmp_path: Path, provider: str, url: str, extra: str = "") -> Path:
    kv = tmp_path / "assets.kv"
    kv.write_text(f"# packs\npack=x@v1\nprovider={provider}\nurl={url}\nsha256={SHA}\n"
                  f"bytes=1\ndest=assets\n{extra}")
    return kv


def _resolve(kv: Path, env: dict[str, str]):
    (decl,) = parse_assets_kv(kv)
    return resolve_source(decl, env=env, env_file=None)


def test_token_env_over_plain_http_is_refused_at_parse(tmp_path: Path) -> None:
    kv = write_kv(tmp_path, "https", "http://assets.example.com/a.tar.zst", "token_env=T\n")
    with pytest.raises(DeclarationError) as ei:
        parse_assets_kv(kv)
    msg = str(ei.value)
    assert f"{kv}:4: url:" in msg and "plain http" in msg and "assets.example.com" in msg
    # https, or http to a loopback mirror, still work
    for url in ("https://assets.example.com/a", "http://127.0.0.1:8/a", "http://localhost/a"):
        src = _resolve(write_kv(tmp_path, "https", url, "token_env=T\n"), {"T": "tok"})
        assert src.headers == {"Authorization": "Bearer tok"}
    # no credential: plain http stays allowed
    assert _resolve(write_kv(tmp_path, "https", "http://assets.example.com/a"), {}).headers == {}


def test_hf_token_only_to_huggingface_hosts(tmp_path: Path) -> None:
    env = {"HF_TOKEN": "hf_SECRET", "HF_HOME": str(tmp_path / "none")}
    for url in ("https://huggingface.co/datasets/o/r/resolve/main/a.tar.zst",
                "https://cdn-lfs.huggingface.co/x"):
        assert _resolve(write_kv(tmp_path, "hf", url), env).headers == {
            "Authorization": "Bearer hf_SECRET"}
    kv = write_kv(tmp_path, "hf", "https://evil.example.net/steal")
    with pytest.raises(DeclarationError) as ei:
        _resolve(kv, env)
    msg = str(ei.value)
    assert f"{kv}:2:" in msg and "evil.example.net" in msg and "hf_SECRET" not in msg
    with pytest.raises(DeclarationError, match="evil.example.net"):
        _resolve(write_kv(tmp_path, "hf", "https://huggingface.co.evil.example.net/x"), env)
    # a mirror named by HF_ENDPOINT gets the token; plain http to it only on loopback
    mirror = {**env, "HF_ENDPOINT": "https://hf-mirror.example.org"}
    assert _resolve(write_kv(tmp_path, "hf", "https://hf-mirror.example.org/a"), mirror).headers
    local = {**env, "HF_ENDPOINT": "http://127.0.0.1:9999"}
    assert _resolve(write_kv(tmp_path, "hf", "http://127.0.0.1:9999/a"), local).headers
    plain = {**env, "HF_ENDPOINT": "http://hf-mirror.example.org"}
    with pytest.raises(DeclarationError, match="plain http"):
        _resolve(write_kv(tmp_path, "hf", "http://hf-mirror.example.org/a"), plain)
    with pytest.raises(DeclarationError, match="plain http"):
        _resolve(write_kv(tmp_path, "hf", "http://huggingface.co/a"), env)
    # without a token nothing is sent, so any host is fine (public files)
    anon = {"HF_HOME": str(tmp_path / "none")}
    assert _resolve(write_kv(tmp_path, "hf", "http://evil.example.net/a"), anon).headers == {}


def test_where_shows_a_refused_hf_token(tmp_path: Path) -> None:
    (decl,) = parse_assets_kv(write_kv(tmp_path, "hf", "https://evil.example.net/x"))
    _, cred = describe_source(decl, env={"HF_TOKEN": "hf_SECRET"}, env_file=None)
    assert cred.startswith("REFUSED") and "hf_SECRET" not in cred
