"""resolve_dataset_root: each cache layout built by hand (numbatraj's, LeRobot 0.6's home and
hub cache, the shared huggingface_hub cache), the search order, v3.0 then main, offline;
real ``snapshot_download`` runs against the loopback Hub stand-in (tests/hubstub.py): into the
shared cache, found again without a request, the token, the revision fallback, errors;
cache_dir()."""

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


def test_v3_tag_wins_over_main_in_the_cache(homes):
    _hub_snapshot(str(homes / "hub"), OTHER, ref="main")
    tagged = _hub_snapshot(str(homes / "hub"), COMMIT, ref="v3.0")
    assert resolve_dataset_root(REPO, allow_download=False) == tagged


def test_lerobot_06_hub_cache_is_found(homes):
    snap = _hub_snapshot(str(homes / "lerobot" / "hub"), COMMIT, ref="v3.0")
    assert resolve_dataset_root(REPO, allow_download=False) == snap


# -- downloads from a served Hub (tests/hubstub.py on 127.0.0.1) ---------------------------

TOKEN = "hf_read_token"


@pytest.fixture(scope="module")
def dataset_files(tmp_path_factory):
    """The files of a small LeRobot v3.0 dataset (parquet, AV1 and H.264 videos), by path."""
    pytest.importorskip("pyarrow")
    from tests.lerobot.lerobot_fixtures import adversarial_spec, write_dataset

    root = write_dataset(tmp_path_factory.mktemp("served") / "ds", adversarial_spec())
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            path = os.path.join(d, n)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, root).replace(os.sep, "/")] = fh.read()
    return out


@pytest.fixture
def served(homes, monkeypatch):
    """A Hub stand-in as ``HF_ENDPOINT``, Xet off, ``HF_TOKEN`` its token, no stored login.
    ``HF_HUB_CACHE`` (the ``homes`` fixture) is set after huggingface_hub's import, so a
    download landing there shows numbatraj passes the cache it searches."""
    import huggingface_hub.constants as constants

    from tests.hubstub import HubStub, no_public_hub

    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(homes / "no-token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(homes / "no-tokens"))
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    with HubStub(token=TOKEN) as stub:
        monkeypatch.setenv("HF_ENDPOINT", stub.url)
        no_public_hub(monkeypatch)
        # huggingface_hub's import-time cache is a directory of its own: a download that
        # did not go to $HF_HUB_CACHE lands there (and never in the real home)
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(homes / "import-time-hub"))
        yield stub


def _repo_dir(homes):
    return homes / "hub" / "datasets--DenisLabs--record-test"


def test_download_lands_in_the_shared_cache_and_is_found_without_a_request(
        served, homes, dataset_files, monkeypatch):
    tagged = served.add_repo(REPO, dataset_files, tags=("v3.0",))
    head = served.add_repo(REPO, {"README.md": b"a later commit on main"})
    root = resolve_dataset_root(REPO)
    repo = _repo_dir(homes)
    assert root == str(repo / "snapshots" / tagged) and head != tagged
    assert (repo / "refs" / "v3.0").read_text().strip() == tagged
    assert not (repo / "refs" / "main").exists()  # main was never asked for
    for rel, data in dataset_files.items():  # huggingface_hub's layout: links into blobs/
        path = os.path.join(root, rel)
        assert os.path.islink(path) and open(path, "rb").read() == data, rel
        assert os.path.dirname(os.path.realpath(path)) == str((repo / "blobs").resolve())
    assert not os.path.exists(os.path.join(root, "README.md"))  # v3.0's tree, not main's
    reads = served.reads()
    assert ("GET", "/api/datasets/DenisLabs/record-test/revision/v3.0") in reads
    assert {p.rsplit("/resolve/", 1)[1].split("/", 1)[1] for m, p in reads
            if m == "GET" and "/resolve/" in p} == set(dataset_files)
    assert set(served.auth) <= {f"Bearer {TOKEN}", None}
    assert all(a == f"Bearer {TOKEN}" for (m, p), a in zip(served.requests, served.auth)
               if (m, p) in reads)  # every read carried the token
    assert not os.path.exists(homes / "nt" / "lerobot")  # nothing copied into numbatraj's cache

    n = len(served.requests)
    assert resolve_dataset_root(REPO) == root  # found in the cache: nothing sent
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_dataset_root(REPO) == root
    assert len(served.requests) == n


def test_default_revision_falls_back_to_main_and_says_so(served, homes, monkeypatch, caplog):
    sha = served.add_repo(REPO, {"meta/info.json": b'{"codebase_version": "v3.0"}'})
    with caplog.at_level("INFO", logger="numbatraj"):
        root = resolve_dataset_root(REPO)
    assert root == str(_repo_dir(homes) / "snapshots" / sha)
    revs = [p.rsplit("/", 1)[1] for _, p in served.reads() if "/revision/" in p]
    assert revs == ["v3.0", "main"]
    assert "no v3.0 tag; using main" in caplog.text
    caplog.clear()
    n = len(served.requests)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline: the cache's main, said in the log
    with caplog.at_level("INFO", logger="numbatraj"):
        assert resolve_dataset_root(REPO) == root
    assert "no v3.0 tag in the cache; using main" in caplog.text
    assert len(served.requests) == n


def test_explicit_revision_is_the_only_one_asked_for(served, homes):
    served.add_repo(REPO, {"meta/info.json": b"{}"})
    with pytest.raises(DownloadError, match="no revision 'v9.9'"):
        resolve_dataset_root(REPO, revision="v9.9")
    assert [p for _, p in served.reads()] == [
        "/api/datasets/DenisLabs/record-test/revision/v9.9"]
    assert not os.path.exists(homes / "hub" / "datasets--DenisLabs--record-test" / "snapshots")


def test_offline_never_downloads(served, monkeypatch):
    served.add_repo(REPO, {"meta/info.json": b"{}"}, tags=("v3.0",))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DatasetNotFoundError, match="HF_HUB_OFFLINE"):
        resolve_dataset_root(REPO)
    assert served.requests == []


def test_bad_token_is_a_401_download_error(served, homes, monkeypatch):
    served.add_repo(REPO, {"meta/info.json": b"{}"}, tags=("v3.0",))
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    with pytest.raises(DownloadError, match="401") as info:
        resolve_dataset_root(REPO)
    assert REPO in str(info.value)
    assert served.reads() and set(served.auth) <= {"Bearer hf_wrong", None}
    assert not os.path.exists(_repo_dir(homes) / "snapshots")


def test_missing_or_private_repo_is_a_download_error(served, homes, monkeypatch):
    with pytest.raises(DownloadError, match="RepositoryNotFound"):
        resolve_dataset_root(REPO)
    served.add_repo(REPO, {"meta/info.json": b"{}"}, tags=("v3.0",), private=True)
    monkeypatch.delenv("HF_TOKEN")  # a private repo without the token: not found
    with pytest.raises(DownloadError, match="RepositoryNotFound"):
        resolve_dataset_root(REPO)
    assert not os.path.exists(_repo_dir(homes) / "snapshots")


def test_unreachable_hub_is_a_download_error(served, homes, monkeypatch):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    served.add_repo(REPO, {"meta/info.json": b"{}"}, tags=("v3.0",))
    monkeypatch.setenv("HF_ENDPOINT", dead)  # HF_ENDPOINT as it is now, not at the import
    with pytest.raises(DownloadError, match=REPO):
        resolve_dataset_root(REPO)
    assert served.requests == []
    with pytest.raises(DatasetNotFoundError):
        resolve_dataset_root(REPO, allow_download=False)


def test_download_without_info_json_is_refused(served):
    served.add_repo(REPO, {"README.md": b"not a LeRobot dataset"}, tags=("v3.0",))
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
