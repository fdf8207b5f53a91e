"""resolve_dataset_root: each cache layout built by hand, the search order, downloads."""

from __future__ import annotations

import json
import os

import pytest

from numbatraj.errors import DownloadError
from numbatraj.io.atomic import is_temp_name
from numbatraj.lerobot import hub
from numbatraj.lerobot.hub import (
    DatasetNotFoundError,
    default_store_path,
    local_dataset_dir,
    resolve_dataset_root,
)

REPO = "DenisLabs/record-test"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
OTHER = "fedcba9876543210fedcba9876543210fedcba98"


def _dataset(path, tag):
    os.makedirs(os.path.join(path, "meta"), exist_ok=True)
    with open(os.path.join(path, "meta", "info.json"), "w") as fh:
        json.dump({"codebase_version": "v3.0", "tag": tag}, fh)
    return str(path)


@pytest.fixture
def homes(tmp_path, monkeypatch):
    for var in ("NUMBATRAJ_CACHE", "HF_LEROBOT_HOME", "HF_HUB_CACHE", "HF_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NUMBATRAJ_CACHE", str(tmp_path / "nt"))
    monkeypatch.setenv("HF_LEROBOT_HOME", str(tmp_path / "lerobot"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path


def _hub_snapshot(hub, commit, ref="main"):
    repo = os.path.join(hub, "datasets--DenisLabs--record-test")
    os.makedirs(os.path.join(repo, "refs", *ref.split("/")[:-1]), exist_ok=True)
    with open(os.path.join(repo, "refs", *ref.split("/")), "w") as fh:
        fh.write(commit + "\n")
    return _dataset(os.path.join(repo, "snapshots", commit), f"hub-{commit[:4]}")


def test_numbatraj_cache_first(homes):
    mine = _dataset(homes / "nt" / "lerobot" / "DenisLabs__record-test", "nt")
    _dataset(homes / "lerobot" / "DenisLabs" / "record-test", "lerobot")
    _hub_snapshot(str(homes / "hub"), COMMIT)
    assert resolve_dataset_root(REPO, allow_download=False) == mine


def test_lerobot_home_before_hub_cache(homes):
    lr = _dataset(homes / "lerobot" / "DenisLabs" / "record-test", "lerobot")
    _hub_snapshot(str(homes / "hub"), COMMIT)
    assert resolve_dataset_root(REPO, allow_download=False) == lr


def test_lerobot_home_defaults_under_hf_home(homes, monkeypatch):
    monkeypatch.delenv("HF_LEROBOT_HOME")
    monkeypatch.setenv("HF_HOME", str(homes / "hfhome"))
    lr = _dataset(homes / "hfhome" / "lerobot" / "DenisLabs" / "record-test", "lerobot")
    assert resolve_dataset_root(REPO, allow_download=False) == lr


def test_hub_cache_through_refs(homes):
    snap = _hub_snapshot(str(homes / "hub"), COMMIT)
    assert resolve_dataset_root(REPO, allow_download=False) == snap


def test_hub_cache_under_hf_home_and_by_branch_and_commit(homes, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(homes / "hfhome"))
    hub = str(homes / "hfhome" / "hub")
    main = _hub_snapshot(hub, COMMIT)
    dev = _hub_snapshot(hub, OTHER, ref="feature/dev")
    assert resolve_dataset_root(REPO, allow_download=False) == main
    assert resolve_dataset_root(REPO, revision="feature/dev", allow_download=False) == dev
    assert resolve_dataset_root(REPO, revision=OTHER, allow_download=False) == dev


def test_revision_skips_lerobot_home(homes):
    _dataset(homes / "lerobot" / "DenisLabs" / "record-test", "lerobot")
    snap = _hub_snapshot(str(homes / "hub"), OTHER, ref="v3.0")
    assert resolve_dataset_root(REPO, revision="v3.0", allow_download=False) == snap


def test_incomplete_directories_do_not_count(homes):
    os.makedirs(homes / "nt" / "lerobot" / "DenisLabs__record-test" / "data")
    os.makedirs(homes / "lerobot" / "DenisLabs" / "record-test" / "meta")
    with pytest.raises(DatasetNotFoundError) as info:
        resolve_dataset_root(REPO, allow_download=False)
    msg = str(info.value)
    assert REPO in msg and "DenisLabs__record-test" in msg and "meta/info.json" in msg
    assert isinstance(info.value, FileNotFoundError)


def test_bad_repo_id(homes):
    for bad in ("noslash", "a/b/c", "../x", "a/.."):
        with pytest.raises(ValueError, match="ORG/NAME"):
            resolve_dataset_root(bad, allow_download=False)


def test_download_goes_through_a_partial_directory(homes, monkeypatch):
    import huggingface_hub

    seen = {}

    def fake(repo_id, *, repo_type, revision, local_dir):
        seen.update(repo_id=repo_id, repo_type=repo_type, revision=revision, local_dir=local_dir)
        assert is_temp_name(local_dir)
        _dataset(local_dir, "downloaded")
        os.makedirs(os.path.join(local_dir, ".cache", "huggingface"))
        return local_dir

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    root = resolve_dataset_root(REPO, revision="v3.0")
    assert root == local_dataset_dir(REPO, "v3.0")
    assert seen["repo_type"] == "dataset" and seen["revision"] == "v3.0"
    assert json.load(open(os.path.join(root, "meta", "info.json")))["tag"] == "downloaded"
    assert not os.path.exists(os.path.join(root, ".cache"))
    assert os.listdir(os.path.dirname(root)) == [os.path.basename(root)]
    # now cached: found without downloading
    assert resolve_dataset_root(REPO, revision="v3.0", allow_download=False) == root


def test_interrupted_download_leaves_nothing_that_looks_complete(homes, monkeypatch):
    import huggingface_hub

    def dies(repo_id, *, repo_type, revision, local_dir):
        _dataset(local_dir, "half")
        raise ConnectionError("connection reset after 3 files")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", dies)
    with pytest.raises(DownloadError, match="connection reset"):
        resolve_dataset_root(REPO)
    parent = os.path.dirname(local_dataset_dir(REPO))
    assert os.listdir(parent) == []
    with pytest.raises(DatasetNotFoundError):
        resolve_dataset_root(REPO, allow_download=False)


def test_download_without_info_json_is_refused(homes, monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(
        huggingface_hub, "snapshot_download", lambda repo_id, **k: os.makedirs(k["local_dir"])
    )
    with pytest.raises(DownloadError, match="meta/info.json"):
        resolve_dataset_root(REPO)
    assert os.listdir(os.path.dirname(local_dataset_dir(REPO))) == []


def test_default_store_path(homes):
    assert default_store_path(REPO, 240, 320) == str(
        homes / "nt" / "stores" / "DenisLabs__record-test_240x320.h5"
    )
    assert hub.cache_dir() == str(homes / "nt")


def test_download_replaces_a_leftover_without_info_json(homes, monkeypatch):
    import huggingface_hub

    dest = local_dataset_dir(REPO)
    os.makedirs(os.path.join(dest, "data"))
    open(os.path.join(dest, "data", "stale.parquet"), "w").close()  # no meta/info.json
    monkeypatch.setattr(
        huggingface_hub, "snapshot_download",
        lambda repo_id, **k: _dataset(k["local_dir"], "fresh"),
    )
    assert resolve_dataset_root(REPO) == dest
    assert json.load(open(os.path.join(dest, "meta", "info.json")))["tag"] == "fresh"
    assert not os.path.exists(os.path.join(dest, "data", "stale.parquet"))
    assert os.listdir(os.path.dirname(dest)) == [os.path.basename(dest)]
