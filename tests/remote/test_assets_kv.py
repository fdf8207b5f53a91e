"""assets.kv parsing: strict, and every error names the file, the line and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from numbatraj.errors import DeclarationError
from numbatraj.remote._assets_kv import find_assets_kv, parse_assets_kv

SHA = "8c7616b2" + "0" * 56

GOOD = f"""# two packs
pack=libero@v1
provider=hf
url=https://huggingface.co/datasets/org/assets/resolve/main/libero_v1.tar.zst
sha256={SHA.upper()}
bytes=188991117
dest=assets

pack=robots@2.0
provider=https
url=http://127.0.0.1:9/robots.tar.gz
token_env=ROBOTS_TOKEN
sha256={SHA}
bytes=0
dest=sub/robots
pack=tables@v3
provider=catalog
id=tables-assets@v3
sha256={SHA}
bytes=12
dest=tables
"""


def test_parse_good_file(tmp_path: Path) -> None:
    kv = tmp_path / "env" / "assets.kv"
    kv.parent.mkdir()
    kv.write_text(GOOD)
    a, b, c = parse_assets_kv(kv)
    assert (a.label, a.provider, a.sha256, a.bytes, a.line) == ("libero@v1", "hf", SHA,
                                                                 188991117, 2)
    assert a.dest == str(tmp_path / "env" / "assets")
    assert (b.label, b.token_env, b.dest, b.line) == ("robots@2.0", "ROBOTS_TOKEN",
                                                      str(tmp_path / "env/sub/robots"), 9)
    assert (c.provider, c.locator, c.token_env) == ("catalog", "tables-assets@v3", None)
    assert a.where == f"{kv}:2"


BASE = [
    "pack=p@v1", "provider=https", "url=https://h/x.tar.zst", f"sha256={SHA}", "bytes=3",
    "dest=assets",
]


def _with(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


CASES = {
    "unknown key": (BASE + ["colour=red"], 7, "colour", "unknown key; valid: pack"),
    "no equals": (BASE[:2] + ["just text"] + BASE[2:], 3, "just text", "not a key=value"),
    "repeated": (BASE + ["bytes=4"], 7, "bytes", "repeated \\(first on line 5\\)"),
    "before pack": (["provider=https"] + BASE, 1, "provider", "before the first pack="),
    "missing sha": ([x for x in BASE if not x.startswith("sha")], 1, "sha256", "missing"),
    "missing url": ([x for x in BASE if not x.startswith("url")], 1, "url", "needs url="),
    "bad pack": (["pack=noversion"] + BASE[1:], 1, "pack", "not NAME@VERSION"),
    "bad provider": (BASE[:1] + ["provider=ftp"] + BASE[2:], 2, "provider", "not one of"),
    "bad sha": (BASE[:3] + ["sha256=abc"] + BASE[4:], 4, "sha256", "not 64 hex"),
    "bad bytes": (BASE[:4] + ["bytes=-5"] + BASE[5:], 5, "bytes", "non-negative integer"),
    "float bytes": (BASE[:4] + ["bytes=1.5"] + BASE[5:], 5, "bytes", "non-negative integer"),
    "abs dest": (BASE[:5] + ["dest=/etc"], 6, "dest", "relative"),
    "dotdot dest": (BASE[:5] + ["dest=../up"], 6, "dest", "without '..'"),
    "dot dest": (BASE[:5] + ["dest=."], 6, "dest", "sub-directory"),
    "empty value": (BASE + ["token_env="], 7, "token_env", "empty value"),
    "url not http": (BASE[:2] + ["url=file:///etc/x"] + BASE[3:], 3, "url", "not an http"),
    "id on https": (BASE + ["id=x"], 7, "id", "not used by provider=https"),
    "token on hf": (
        BASE[:1] + ["provider=hf"] + BASE[2:] + ["token_env=X"], 7, "token_env",
        "only provider=https",
    ),
    "bad env name": (BASE + ["token_env=1BAD"], 7, "token_env", "not a variable name"),
    "catalog needs id": (BASE[:1] + ["provider=catalog"] + BASE[3:], 1, "id", "needs id="),
    "bad catalog id": (
        BASE[:1] + ["provider=catalog", "id=Bad Name"] + BASE[3:], 3, "id", "catalog NAME",
    ),
    "twice": (BASE + BASE, 7, "pack", "declared twice \\(also line 1\\)"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_names_file_line_key(tmp_path: Path, case: str) -> None:
    lines, line, key, why = CASES[case]
    kv = tmp_path / "assets.kv"
    kv.write_text(_with(lines))
    with pytest.raises(DeclarationError, match=f"{kv}:{line}: {key}: .*{why}") as err:
        parse_assets_kv(kv)
    assert isinstance(err.value, ValueError)


def test_empty_file(tmp_path: Path) -> None:
    kv = tmp_path / "assets.kv"
    kv.write_text("# nothing\n\n")
    with pytest.raises(DeclarationError, match=f"{kv}: declares no pack"):
        parse_assets_kv(kv)


def test_find_with_pattern(tmp_path: Path) -> None:
    for d in ("envs/libero", "envs/metaworld", ".hidden/x", "envs/libero/deep", "node_modules"):
        (tmp_path / d).mkdir(parents=True)
        (tmp_path / d / "assets.kv").write_text(_with(BASE))
    rel = [str(Path(p).relative_to(tmp_path)) for p in find_assets_kv(tmp_path)]
    assert rel == [
        "envs/libero/assets.kv", "envs/libero/deep/assets.kv", "envs/metaworld/assets.kv",
    ]
    assert [Path(p).parent.name for p in find_assets_kv(tmp_path, "meta")] == ["metaworld"]
    assert len(find_assets_kv(tmp_path, "libero")) == 2
    assert [Path(p).parent.name for p in find_assets_kv(tmp_path, "envs/*o/assets.kv")] == [
        "libero",  # fnmatch: '*' also crosses '/', so deep/ would match '*p/assets.kv'
    ]
    assert find_assets_kv(tmp_path, "nothing-matches") == []
