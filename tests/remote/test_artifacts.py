"""Artifacts beyond datasets: policy weights with aliases (promote, pull by alias), project
directories pushed as checksummed archives and extracted atomically, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from numbatraj.cli import main
from numbatraj.errors import CatalogError
from numbatraj.remote.client import ENV_KEY, ENV_URL
from tests.catalog.conftest import Catalog


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("NUMBATRAJ_CACHE", str(tmp_path / "cache"))


def test_policy_alias_promote_and_pull(catalog: Catalog, tmp_path: Path) -> None:
    w1, w2 = tmp_path / "policy-1.pt", tmp_path / "policy-2.pt"
    w1.write_bytes(b"weights one" * 100)
    w2.write_bytes(b"weights two" * 100)
    with catalog.client() as cat:
        row = cat.push_artifact(w1, "policy", "walker-sac", "v1", alias="promoted",
                                run="run-17")
        assert row["kind"] == "policy" and row["aliases"] == ["promoted"]
        assert row["run"] == "run-17" and row["filename"] == "policy-1.pt"
        cat.push_artifact(w2, "policy", "walker-sac", "v2")
        got = cat.pull_artifact("policy", "walker-sac", alias="promoted")
        assert Path(got.path).read_bytes() == w1.read_bytes()  # v2 is newer, v1 promoted
        assert got.path.startswith(str(tmp_path / "cache")) and got.record["version"] == "v1"
        cat.promote("policy", "walker-sac", "v2", "promoted")
        got = cat.pull_artifact("policy", "walker-sac", alias="promoted")
        assert Path(got.path).read_bytes() == w2.read_bytes() and not got.cached
        assert cat.pull_artifact("policy", "walker-sac", alias="promoted").cached
        assert cat.pull_artifact("policy", "walker-sac", "v1").record["aliases"] == []
        rows = cat.list_artifacts("policy")
        assert [(r["version"], r["aliases"]) for r in rows] == [("v1", []),
                                                                ("v2", ["promoted"])]
        assert cat.list() == []  # datasets are another kind
        with pytest.raises(CatalogError, match="has no alias 'staging'"):
            cat.pull_artifact("policy", "walker-sac", alias="staging")
        with pytest.raises(CatalogError, match="it does not exist"):
            cat.promote("policy", "walker-sac", "v9", "promoted")
        with pytest.raises(CatalogError, match="ready and immutable"):
            cat.push_artifact(w1, "policy", "walker-sac", "v2")


def test_project_directory_roundtrip(catalog: Catalog, tmp_path: Path) -> None:
    proj = tmp_path / "so101-tower"
    (proj / "configs").mkdir(parents=True)
    (proj / "configs" / "train.yaml").write_text("lr: 3e-4\n")
    (proj / "README.md").write_text("tower stacking\n")
    (proj / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (proj / "run.sh").chmod(0o755)
    with catalog.client() as cat:
        row = cat.push_artifact(proj, "project", "so101-tower", "v1")
        assert row["filename"] == "so101-tower.tar.gz"
        # the same directory packs to the same bytes: pushing again is a no-op
        assert cat.push_artifact(proj, "project", "so101-tower", "v1")["sha256"] == row["sha256"]
        dest = tmp_path / "checkout"
        got = cat.pull_artifact("project", "so101-tower", dest=dest)
        assert got.path == str(dest) and not got.cached
        assert (dest / "configs" / "train.yaml").read_text() == "lr: 3e-4\n"
        assert (dest / "README.md").read_text() == "tower stacking\n"
        assert (dest / "run.sh").stat().st_mode & 0o111
        assert cat.pull_artifact("project", "so101-tower", dest=dest).cached
        default = cat.pull_artifact("project", "so101-tower")
        assert Path(default.path, "README.md").is_file()
    (proj / "link").symlink_to(proj / "README.md")
    with catalog.client() as cat, pytest.raises(ValueError, match="symbolic link"):
        cat.push_artifact(proj, "project", "so101-tower", "v2")


def test_cli_kind_and_alias(catalog: Catalog, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv(ENV_URL, catalog.url)
    monkeypatch.setenv(ENV_KEY, catalog.write_key)
    monkeypatch.chdir(tmp_path)
    w = tmp_path / "w.pt"
    w.write_bytes(b"w" * 1000)
    assert main(["remote", "push", "--kind", "policy", "--alias", "promoted", str(w),
                 "walker-sac", "v1", "--run", "run-3"]) == 0
    assert "aliases promoted" in capsys.readouterr().out
    w.write_bytes(b"v" * 1000)
    assert main(["remote", "push", "--kind", "policy", str(w), "walker-sac", "v2"]) == 0
    capsys.readouterr()
    assert main(["remote", "list", "--kind", "policy", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["version"], r["aliases"]) for r in rows] == [("v1", ["promoted"]), ("v2", [])]
    assert main(["remote", "describe", "--kind", "policy", "walker-sac", "--alias",
                 "promoted", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == "v1"
    assert main(["remote", "promote", "--kind", "policy", "walker-sac", "v2", "promoted"]) == 0
    assert "promoted -> v2" in capsys.readouterr().out
    assert main(["remote", "pull", "--kind", "policy", "walker-sac", "got.pt", "--alias",
                 "promoted"]) == 0
    assert (tmp_path / "got.pt").read_bytes() == b"v" * 1000
    assert main(["remote", "list", "--kind", "policy"]) == 0
    assert "promoted" in capsys.readouterr().out
