"""push_lerobot_dataset against the loopback Hub stand-in (tests/hubstub.py); no network."""

from __future__ import annotations

import argparse
import os
import shutil

import numpy as np
import pytest

from numbatraj.cli.lerobot import register
from numbatraj.errors import LeRobotFormatError
from numbatraj.io.atomic import is_temp_name
from numbatraj.lerobot.hub import HubPushError, collect_files, push_lerobot_dataset
from numbatraj.lerobot.write import LeRobotWriter
from tests.hubstub import HubStub, StubRepo, no_public_hub
from tests.lerobot.test_lerobot_writer_support import (
    Recorded,
    add_episodes,
    frame_of,
    import_and_check,
    writer_args,
)

TOKEN = "hf_stub_token"


@pytest.fixture(autouse=True)
def no_xet(monkeypatch, tmp_path):
    import huggingface_hub.constants as constants

    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "no-tokens"))
    monkeypatch.chdir(tmp_path)


@pytest.fixture()
def hub(monkeypatch):
    with HubStub(token=TOKEN) as stub:
        no_public_hub(monkeypatch)
        yield stub


def _disk_files(root: str) -> set[str]:
    out = set()
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        for f in files:
            if not f.startswith(".") and not f.endswith(".part"):
                out.add(os.path.relpath(os.path.join(d, f), root))
    return out


def _record(root: str, lengths: list[int]) -> tuple[LeRobotWriter, Recorded]:
    rec = Recorded(root, [], [])
    w = LeRobotWriter(root, **writer_args(codec="libx264"))
    add_episodes(w, rec, lengths, ["pick the cube"] * len(lengths))
    return w, rec


def test_first_push_sends_all_then_nothing_then_one_episode(hub, tmp_path):
    root = str(tmp_path / "ds")
    w, rec = _record(root, [5, 7])
    # The writer is still open and an episode is in progress: its .part videos stay home.
    w.begin_episode("pick the cube")
    w.add_frame(np.zeros(6), np.zeros(5), {c: frame_of(i, 2, 0) for i, c in enumerate(w.cameras)})
    first = push_lerobot_dataset(root, "lab/so101", token=TOKEN, endpoint=hub.url)
    repo = hub.repos["lab/so101"]
    assert repo.private and repo.tags == {"v3.0": repo.head}
    assert set(repo.commits[0]) == _disk_files(root) | {"README.md"}
    assert set(first.sent) == set(repo.commits[0]) and first.held_back == []
    assert not any(p.endswith(".part") for p in repo.commits[0])
    for rel in _disk_files(root):
        assert repo.files[rel] == open(os.path.join(root, rel), "rb").read(), rel
    card = repo.files["README.md"].decode()
    assert card.startswith("---\nlicense: apache-2.0\n") and "- LeRobot" in card
    assert '"total_episodes": 2' in card
    n_puts = len(hub.puts)
    assert n_puts == 7  # LFS: 4 videos, the data file, the episode table, tasks.parquet

    again = push_lerobot_dataset(root, "lab/so101", token=TOKEN, endpoint=hub.url)
    assert again.commit is None and again.sent == []
    assert len(repo.commits) == 1 and len(hub.puts) == n_puts

    w.discard_episode()
    add_episodes(w, rec, [4], ["pick the cube"], first_episode=2)
    w.close()
    third = push_lerobot_dataset(root, "lab/so101", token=TOKEN, endpoint=hub.url)
    assert sorted(repo.commits[1]) == sorted(third.sent) == sorted([
        "README.md",
        "data/chunk-000/file-000.parquet",
        "meta/episodes/chunk-000/file-000.parquet",
        "meta/info.json",
        "meta/numbatraj_writer_stats.json",
        "meta/stats.json",
        "videos/observation.images.front/chunk-000/file-002.mp4",
        "videos/observation.images.wrist/chunk-000/file-002.mp4",
    ])
    assert len(hub.puts) == n_puts + 4  # two videos, data file, episode table (same tasks)
    # What the Hub holds is a complete dataset: download it and import it.
    got = tmp_path / "downloaded"
    for rel, data in repo.files.items():
        os.makedirs(got / os.path.dirname(rel), exist_ok=True)
        (got / rel).write_bytes(data)
    rec.root = str(got)
    import_and_check(rec, str(tmp_path / "out.h5"))


def test_walk_skips_hidden_temporary_and_part_and_holds_back_unreferenced(tmp_path):
    root = str(tmp_path / "ds")
    w, _ = _record(root, [3])
    w.close()
    src = os.path.join(root, "videos/observation.images.front/chunk-000/file-000.mp4")
    shutil.copy(src, src.replace("file-000", "file-007"))
    open(os.path.join(root, "meta/.info.json.123.tmp"), "w").close()
    open(os.path.join(root, "meta/stats.json.0123456789abcdef.tmp"), "w").close()  # a FileBatch's
    open(os.path.join(root, "data/chunk-000/file-000.parquet.fedcba9876543210.tmp"), "w").close()
    os.makedirs(os.path.join(root, ".cache/huggingface"))
    open(os.path.join(root, ".cache/huggingface/x"), "w").close()
    open(os.path.join(root, "data/chunk-000/file-001.parquet.part"), "w").close()
    send, held, info = collect_files(root)
    assert held == ["videos/observation.images.front/chunk-000/file-007.mp4"]
    assert not any("/." in "/" + p or p.endswith(".part") for p in send)
    assert not any(is_temp_name(p) for p in send + held)
    assert "meta/info.json" in send and info["total_episodes"] == 1


def test_existing_repo_keeps_its_visibility(hub, tmp_path):
    root = str(tmp_path / "ds")
    w, _ = _record(root, [3])
    w.close()
    hub.repos["lab/public"] = StubRepo(private=False)
    push_lerobot_dataset(root, "lab/public", token=TOKEN, endpoint=hub.url, private=True)
    assert hub.repos["lab/public"].private is False
    push_lerobot_dataset(root, "lab/new-public", token=TOKEN, endpoint=hub.url, private=False)
    assert hub.repos["lab/new-public"].private is False


def test_token_sources_and_refusals(hub, tmp_path, monkeypatch):
    root = str(tmp_path / "ds")
    w, _ = _record(root, [3])
    w.close()
    with pytest.raises(HubPushError, match="no Hugging Face token: set HF_TOKEN"):
        push_lerobot_dataset(root, "lab/x", endpoint=hub.url)
    (tmp_path / ".env").write_text(f"# secrets\nexport HF_TOKEN='{TOKEN}'\n")
    assert push_lerobot_dataset(root, "lab/x", endpoint=hub.url).commit is not None
    monkeypatch.setenv("HF_TOKEN", "wrong")  # the environment wins over .env
    with pytest.raises(HubPushError, match=r"refused the push .*'lab/x'.*HTTP 401"):
        push_lerobot_dataset(root, "lab/x", endpoint=hub.url)
    with pytest.raises(LeRobotFormatError, match="is not a LeRobot dataset"):
        push_lerobot_dataset(tmp_path / "nothing", "lab/x", token=TOKEN, endpoint=hub.url)
    with pytest.raises(ValueError, match="not of the form ORG/NAME"):
        push_lerobot_dataset(root, "no-slash", token=TOKEN, endpoint=hub.url)


def test_cli_push_and_reject(hub, tmp_path, capsys, monkeypatch):
    root = str(tmp_path / "ds")
    w, _ = _record(root, [3, 4])
    w.close()
    parser = argparse.ArgumentParser(prog="numbatraj")
    register(parser.add_subparsers(dest="command"))
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    args = parser.parse_args(["lerobot", "reject", "--root", root, "--episode", "1", "--note", "x"])
    assert args.func(args) == 0
    args = parser.parse_args(["lerobot", "push", "--root", root, "--repo", "lab/cli",
                              "--endpoint", hub.url, "--public", "--message", "first"])
    assert args.func(args) == 0
    assert "lab/cli: sent" in capsys.readouterr().out
    assert hub.repos["lab/cli"].private is False
    assert "meta/rejected_episodes.json" in hub.repos["lab/cli"].files
    assert args.func(args) == 0
    assert "up to date" in capsys.readouterr().out
