"""resolve_dataset_root: each cache layout built by hand (numbatraj's, LeRobot 0.6's home and
hub cache, the shared huggingface_hub cache), the search order, v3.0 then main, offline,
downloads into the shared cache; cache_dir()."""

from __future__ import annotations

import json
import os

import pytest

from numbatraj.errors import DownloadError
from numbatraj.lerobot import hub
from numbatraj.lerobot.hub import (
    DatasetNotFoundError,
    default_store_path,
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
    for var in ("NUMBATRAJ_CACHE", "HF_LEROBOT_HOME", "HF_HUB_CACHE", "HF_HOME", "HF_HUB_OFFLINE",
                "XDG_CACHE_HOME"):
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


def _fake_hub(homes, tags):
    """A snapshot_download stand-in writing huggingface_hub's cache layout under
    $HF_HUB_CACHE for the revisions in ``tags``; records each call's arguments."""
    from huggingface_hub.errors import RevisionNotFoundError

    calls = []

    def fake(repo_id, *, repo_type, revision, **kw):
        calls.append(dict(repo_id=repo_id, repo_type=repo_type, revision=revision, **kw))
        if revision not in tags:
            raise RevisionNotFoundError(f"no revision {revision}", response=_Resp())
        return _hub_snapshot(str(homes / "hub"), tags[revision], ref=revision)

    return fake, calls


class _Resp:
    status_code = 404
    headers: dict = {}
    request = None

    def json(self):
        return {}


def test_download_goes_to_the_shared_hub_cache(homes, monkeypatch):
    import huggingface_hub

    fake, calls = _fake_hub(homes, {"v3.0": COMMIT})
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    root = resolve_dataset_root(REPO)
    assert root == str(homes / "hub" / "datasets--DenisLabs--record-test" / "snapshots" / COMMIT)
    assert calls == [dict(repo_id=REPO, repo_type="dataset", revision="v3.0")]  # no local_dir
    assert not os.path.exists(homes / "nt" / "lerobot")  # nothing copied into numbatraj's cache
    assert resolve_dataset_root(REPO, allow_download=False) == root  # found, no network


def test_default_revision_falls_back_to_main_and_says_so(homes, monkeypatch, caplog):
    import huggingface_hub

    fake, calls = _fake_hub(homes, {"main": OTHER})
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    with caplog.at_level("INFO", logger="numbatraj"):
        root = resolve_dataset_root(REPO)
    assert root.endswith(OTHER) and [c["revision"] for c in calls] == ["v3.0", "main"]
    assert "no v3.0 tag; using main" in caplog.text
    caplog.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline: the cache's main, said in the log
    with caplog.at_level("INFO", logger="numbatraj"):
        assert resolve_dataset_root(REPO) == root
    assert "no v3.0 tag in the cache; using main" in caplog.text


def test_v3_tag_wins_over_main_in_the_cache(homes):
    _hub_snapshot(str(homes / "hub"), OTHER, ref="main")
    tagged = _hub_snapshot(str(homes / "hub"), COMMIT, ref="v3.0")
    assert resolve_dataset_root(REPO, allow_download=False) == tagged


def test_lerobot_06_hub_cache_is_found(homes):
    snap = _hub_snapshot(str(homes / "lerobot" / "hub"), COMMIT, ref="v3.0")
    assert resolve_dataset_root(REPO, allow_download=False) == snap


def test_offline_never_downloads(homes, monkeypatch):
    import huggingface_hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub, "snapshot_download",
                        lambda *a, **k: pytest.fail("downloaded while offline"))
    with pytest.raises(DatasetNotFoundError, match="HF_HUB_OFFLINE"):
        resolve_dataset_root(REPO)


def test_failed_download_is_a_download_error(homes, monkeypatch):
    import huggingface_hub

    def dies(repo_id, **k):
        raise ConnectionError("connection reset after 3 files")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", dies)
    with pytest.raises(DownloadError, match="connection reset"):
        resolve_dataset_root(REPO)
    with pytest.raises(DatasetNotFoundError):
        resolve_dataset_root(REPO, allow_download=False)


def test_download_without_info_json_is_refused(homes, monkeypatch):
    import huggingface_hub

    empty = homes / "hub" / "empty"
    empty.mkdir(parents=True)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo_id, **k: str(empty))
    with pytest.raises(DownloadError, match="meta/info.json"):
        resolve_dataset_root(REPO)


def test_snapshot_missing_a_referenced_file_does_not_count(homes):
    pytest.importorskip("pyarrow")
    from tests.lerobot.lerobot_fixtures import adversarial_spec, write_dataset

    repo = homes / "hub" / "datasets--DenisLabs--record-test"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "v3.0").write_text(COMMIT)
    snap = write_dataset(repo / "snapshots" / COMMIT, adversarial_spec())
    assert resolve_dataset_root(REPO, allow_download=False) == str(snap)
    data = sorted((repo / "snapshots" / COMMIT / "data").rglob("*.parquet"))
    data[0].unlink()  # an interrupted download: meta/ arrived, a data file did not
    with pytest.raises(DatasetNotFoundError):
        resolve_dataset_root(REPO, allow_download=False)


def test_cache_dir_honours_xdg_and_numbatraj_cache(homes, monkeypatch):
    from numbatraj.io.cache import cache_dir

    assert cache_dir() == str(homes / "nt")
    monkeypatch.delenv("NUMBATRAJ_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(homes / "xdg"))
    assert cache_dir() == str(homes / "xdg" / "numbatraj")
    assert default_store_path(REPO, 24, 32).startswith(str(homes / "xdg" / "numbatraj"))
    from numbatraj.remote.assets import asset_cache_dir

    assert asset_cache_dir() == str(homes / "xdg" / "numbatraj" / "assets")


def test_default_store_path(homes):
    assert default_store_path(REPO, 240, 320) == str(
        homes / "nt" / "stores" / "DenisLabs__record-test_240x320.h5"
    )
    assert hub.cache_dir() == str(homes / "nt")
