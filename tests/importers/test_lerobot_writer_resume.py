"""Checkpoints: a writer killed mid-episode leaves an importable dataset that resume carries
on; every refusal of resume, refuse_existing_dataset and reject_episode, with its message."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from numbatraj.errors import EpisodeError
from numbatraj.importers.lerobot_writer import (
    DatasetExistsError,
    LeRobotWriter,
    ResumeError,
    refuse_existing_dataset,
    reject_episode,
)
from numbatraj.lerobot import schema as S
from tests.importers.test_lerobot_writer_support import (
    Recorded,
    add_episodes,
    import_and_check,
    record,
    writer_args,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

KILLED_RECORDER = """
import os, signal, sys
import numpy as np
from tests.importers.test_lerobot_writer_support import *
from numbatraj.importers.lerobot_writer import LeRobotWriter
rec = Recorded(sys.argv[1], [], [])
w = LeRobotWriter(sys.argv[1], **writer_args(codec="libx264"))
add_episodes(w, rec, [6, 11], ["pick the cube", "place it"])
w.begin_episode("pick the cube")
for j in range(9):
    w.add_frame(state_of(2, j), action_of(2, j), {c: frame_of(i, 2, j) for i, c in enumerate(w.cameras)})
sys.stdout.write("mid-episode\\n"); sys.stdout.flush()
os.kill(os.getpid(), signal.SIGKILL)
"""


def _expected(root: str, lengths: list[int], tasks: list[str]) -> Recorded:
    """What the killed recorder's finished episodes hold (recomputed from the same inputs)."""
    from tests.importers.test_lerobot_writer_support import CAMERAS, action_of, frame_of, state_of

    rec = Recorded(root, list(lengths), list(tasks))
    for e, n in enumerate(lengths):
        rec.state.append(np.stack([state_of(e, j) for j in range(n)]))
        rec.action.append(np.stack([action_of(e, j) for j in range(n)]))
        for i, c in enumerate(CAMERAS):
            rec.frames.setdefault(c, []).append(np.stack([frame_of(i, e, j) for j in range(n)]))
    return rec


@pytest.fixture()
def killed(tmp_path):
    root = str(tmp_path / "ds")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(KILLED_RECORDER), root],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert proc.stdout.strip() == "mid-episode"
    return root


def test_kill_mid_episode_then_import(killed, tmp_path):
    parts = glob.glob(os.path.join(killed, "videos/*/chunk-000/file-002.mp4.part"))
    assert len(parts) == 2  # the episode in progress, never renamed into place
    rec = _expected(killed, [6, 11], ["pick the cube", "place it"])
    import_and_check(rec, str(tmp_path / "out.h5"))


def test_kill_then_resume_then_import(killed, tmp_path):
    w = LeRobotWriter.resume(killed, **writer_args(codec="libx264"))
    assert sorted(os.path.basename(p) for p in w.resumed_removed) == ["file-002.mp4.part"] * 2
    assert (w.n_episodes, w.total_frames, w.tasks) == (2, 17, ["pick the cube", "place it"])
    rec = _expected(killed, [6, 11], ["pick the cube", "place it"])
    add_episodes(w, rec, [4, 8], ["stack it", "pick the cube"], first_episode=2)
    w.close()
    import_and_check(rec, str(tmp_path / "out.h5"))
    info = json.load(open(os.path.join(killed, S.INFO_PATH)))
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (4, 29, 3)
    side = json.load(open(os.path.join(killed, "meta/numbatraj_writer_stats.json")))
    assert [e["episode_index"] for e in side["episodes"]] == [0, 1, 2, 3]
    stats = json.load(open(os.path.join(killed, S.STATS_PATH)))
    allrows = np.concatenate(rec.action).astype(np.float64)
    np.testing.assert_allclose(stats["action"]["mean"], allrows.mean(0), rtol=1e-9)
    np.testing.assert_allclose(stats["action"]["std"], allrows.std(0), rtol=1e-9)
    assert stats["action"]["count"] == [29]


def test_resume_twice_rolls_no_file_over(tmp_path):
    rec = record(tmp_path / "ds", [5, 6], codec="libx264", data_mb=1e-3)
    w = LeRobotWriter.resume(rec.root, **writer_args())
    add_episodes(w, rec, [7], ["place it"], first_episode=2)
    w.close()
    w = LeRobotWriter.resume(rec.root, **writer_args(), codec="h264")
    add_episodes(w, rec, [3], ["pick the cube"], first_episode=3)
    w.close()
    assert len(glob.glob(os.path.join(rec.root, "data/*/*.parquet"))) == 4  # 1 KB: one each
    import_and_check(rec, str(tmp_path / "out.h5"))


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return record(tmp_path_factory.mktemp("small") / "ds", [3, 4], codec="libx264")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"fps": 15}, r"fps differ: this session has 15.0, the directory 30.0"),
        ({"cameras": ["front"]}, r"cameras differ: this session has \['observation.images.front'\]"),
        ({"cameras": ["wrist", "side"]}, r"'observation.images.side', 'observation.images.wrist'\]"),
        ({"height": 48}, r"resolutions of camera 'observation.images.front' \(height, width\) differ: "
                         r"this session has \[48, 32\], the directory \[24, 32\]"),
        ({"state_names": ["a"] * 1}, r"state names differ: this session has \['a'\]"),
        ({"action_names": [f"m{i}" for i in range(5)]}, r"action names differ: .*'m0'.*'motor0.pos'"),
        ({"codec": "libsvtav1"}, r"video codecs differ: this session has 'libsvtav1', the directory 'libx264'"),
        ({"crf": 30}, r"CRF settings differ: this session has 30, the directory 15"),
    ],
)
def test_resume_refuses_other_settings(small, change, message):
    with pytest.raises(ResumeError, match=message):
        LeRobotWriter.resume(small.root, **writer_args(**change))


def test_resume_refuses_uncheckpointed_and_foreign(tmp_path):
    rec = record(tmp_path / "stream", [3, 3], codec="libx264", checkpoint=False)
    with pytest.raises(ResumeError, match=r"written with checkpoint=False \(episodes share video"):
        LeRobotWriter.resume(rec.root, **writer_args())
    os.remove(os.path.join(rec.root, "meta/numbatraj_writer_stats.json"))
    with pytest.raises(ResumeError, match=r"numbatraj_writer_stats.json is missing, so it was not"):
        LeRobotWriter.resume(rec.root, **writer_args())
    with pytest.raises(ResumeError, match=r"meta/info.json does not exist; there is no dataset"):
        LeRobotWriter.resume(tmp_path / "empty", **writer_args())
    with pytest.raises(ValueError):  # ResumeError is a SchemaError is a ValueError
        LeRobotWriter.resume(tmp_path / "empty", **writer_args())


def test_reject_episode_now_and_importer_skips(small, tmp_path):
    root = str(tmp_path / "ds")
    rec = Recorded(root, [], [])
    w = LeRobotWriter(root, **writer_args(codec="libx264"))
    add_episodes(w, rec, [4, 6, 5], ["a", "b", "a"])
    # Rejected while the writer is still open: the file is there at once.
    assert w.reject_episode(1, note="gripper slipped") == [1]
    doc = json.load(open(os.path.join(root, S.REJECTED_PATH)))
    assert doc == {"rejected_episodes": [1], "note": "gripper slipped"}
    add_episodes(w, rec, [3], ["b"], first_episode=3)
    w.close()
    assert reject_episode(root, 3, note="camera blocked") == [1, 3]
    assert reject_episode(root, 1) == [1, 3]  # twice is once
    doc = json.load(open(os.path.join(root, S.REJECTED_PATH)))
    assert doc == {"rejected_episodes": [1, 3], "note": "gripper slipped; camera blocked"}
    assert not glob.glob(os.path.join(root, "meta/.*"))  # no temporary left behind
    with pytest.raises(EpisodeError, match=r"cannot reject episode 4 of .*: it has episodes 0..3"):
        reject_episode(root, 4)
    with pytest.raises(EpisodeError, match=r"cannot reject episode -1"):
        reject_episode(root, -1)
    with pytest.raises(FileNotFoundError, match="is not a LeRobot dataset"):
        reject_episode(tmp_path / "nowhere", 0)
    import_and_check(rec, str(tmp_path / "out.h5"), skip=(1, 3))


def test_refuse_existing_dataset(small, tmp_path):
    with pytest.raises(DatasetExistsError, match=r"meta/info.json exists"):
        refuse_existing_dataset(small.root)
    only_rejections = tmp_path / "r"
    os.makedirs(only_rejections / "meta")
    (only_rejections / S.REJECTED_PATH).write_text('{"rejected_episodes": []}')
    with pytest.raises(DatasetExistsError, match=r"meta/rejected_episodes.json exists"):
        refuse_existing_dataset(only_rejections)
    with pytest.raises(DatasetExistsError):
        LeRobotWriter(only_rejections, **writer_args())
    refuse_existing_dataset(tmp_path / "fresh")  # nothing there: fine
