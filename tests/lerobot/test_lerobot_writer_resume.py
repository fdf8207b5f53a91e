"""Checkpoints: a writer killed mid-episode leaves an importable dataset that resume carries
on; a checkpoint interrupted between its renames is completed by resume (for every crash
point); every refusal of resume, refuse_existing_dataset and reject_episode, with its
message."""

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
from numbatraj.io.atomic import is_temp_name
from numbatraj.lerobot import schema as S
from numbatraj.lerobot._tables import JOURNAL_PATH
from numbatraj.lerobot.write import (
    DatasetExistsError,
    LeRobotWriter,
    ResumeError,
    refuse_existing_dataset,
    reject_episode,
)
from tests.lerobot.test_lerobot_writer_support import (
    Recorded,
    add_episodes,
    import_and_check,
    record,
    writer_args,
)

ARGS = writer_args(codec="libx264")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

KILLED_RECORDER = """
import os, signal, sys
import numpy as np
from tests.lerobot.test_lerobot_writer_support import *
from numbatraj.lerobot.write import LeRobotWriter
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
    from tests.lerobot.test_lerobot_writer_support import CAMERAS, action_of, frame_of, state_of

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
    assert not [f for f in os.listdir(os.path.join(root, "meta")) if is_temp_name(f)]
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


# -- a checkpoint interrupted between its renames ----------------------------------------


class Crash(Exception):
    """The simulated power cut."""


def _checkpoint_replaces(tmp_path) -> list[str]:
    """Destinations of every ``os.replace`` one checkpoint (``end_episode``) makes."""
    root = str(tmp_path / "probe")
    rec = Recorded(root, [], [])
    w = LeRobotWriter(root, **ARGS)  # type: ignore[arg-type]
    add_episodes(w, rec, [3], ["pick the cube"])
    seen: list[str] = []
    real = os.replace

    def spy(src, dst, *a, **kw):
        seen.append(os.fspath(dst))
        return real(src, dst, *a, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "replace", spy)
        add_episodes(w, rec, [4], ["place it"], first_episode=1)
    w.close()
    return seen


def _crash_in_third_episode(root, monkeypatch, fail_at: int | None, fail_remove: bool):
    """Record two episodes, then crash the checkpoint of the third at ``os.replace`` call
    ``fail_at`` (or at the journal's deletion)."""
    rec = Recorded(root, [], [])
    w = LeRobotWriter(root, **ARGS)  # type: ignore[arg-type]
    add_episodes(w, rec, [5, 7], ["pick the cube", "place it"])
    calls = [0]
    real_replace, real_remove = os.replace, os.remove

    def replace(src, dst, *a, **kw):
        calls[0] += 1
        if fail_at is not None and calls[0] > fail_at:
            raise Crash(dst)
        return real_replace(src, dst, *a, **kw)

    def remove(path, *a, **kw):
        if fail_remove and os.fspath(path).endswith(os.path.basename(JOURNAL_PATH)):
            raise Crash(path)
        return real_remove(path, *a, **kw)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "remove", remove)
    with pytest.raises(Crash):
        add_episodes(w, rec, [6], ["pick the cube"], first_episode=2)
    monkeypatch.setattr(os, "replace", real_replace)
    monkeypatch.setattr(os, "remove", real_remove)
    for cam in w._videos:  # the process is gone: its open encoders with it
        if cam._enc is not None:
            cam._enc.abort()
            cam._enc = None
    return rec


class _Inputs:
    """Stands in for a writer so that :func:`add_episodes` yields an episode's inputs."""

    def __init__(self, rec: Recorded) -> None:
        self.cameras = tuple(ARGS["cameras"])  # type: ignore[call-overload]
        self._n = 2

    def begin_episode(self, task: str) -> int:
        return self._n

    def add_frame(self, *a: object) -> None:
        pass

    def end_episode(self) -> int:
        return self._n


def _extend(rec: Recorded, more: Recorded) -> None:
    rec.lengths += more.lengths
    rec.tasks += more.tasks
    rec.state += more.state
    rec.action += more.action
    for c, frames in more.frames.items():
        rec.frames[c] += frames


def test_crash_between_checkpoint_renames_resumes(tmp_path, monkeypatch):
    dests = _checkpoint_replaces(tmp_path)
    journal_call = next(
        i for i, d in enumerate(dests) if d.endswith(os.path.basename(JOURNAL_PATH))
    )
    assert dests[-1].endswith(S.INFO_PATH.split("/")[-1])  # info.json last
    assert journal_call < len(dests) - 1
    # fail at every replace (k = replaces that succeed), and once at the journal's deletion
    cases = [(k, False) for k in range(len(dests))] + [(None, True)]
    for k, fail_remove in cases:
        root = str(tmp_path / f"ds{k}")
        rec = _crash_in_third_episode(root, monkeypatch, k, fail_remove)
        kept = fail_remove or k > journal_call  # the journal was in place: rolls forward
        w = LeRobotWriter.resume(root, **ARGS)  # type: ignore[arg-type]
        assert not os.path.exists(os.path.join(root, JOURNAL_PATH))
        assert w.n_episodes == (3 if kept else 2), (k, fail_remove)
        if k is not None and k > journal_call:
            assert w.resumed_completed, k
        if kept:  # add_episodes records an episode only once end_episode returns
            crashed = Recorded(root, [], [])
            probe = _Inputs(crashed)
            add_episodes(probe, crashed, [6], ["pick the cube"], first_episode=2)
            _extend(rec, crashed)
        first = w.n_episodes
        add_episodes(w, rec, [4, 8], ["place it", "stack"], first_episode=first)
        w.close()
        with open(os.path.join(root, S.INFO_PATH)) as fh:
            assert json.load(fh)["total_episodes"] == first + 2
        import_and_check(rec, str(tmp_path / f"out{k}.h5"))
        left = [
            os.path.join(d, f)
            for d, _, fs in os.walk(root)
            for f in fs
            if is_temp_name(f) or f.endswith((".tmp", ".part"))
            or f == os.path.basename(JOURNAL_PATH)
        ]
        assert left == [], (k, left)


def test_resume_refuses_a_journal_naming_nothing(tmp_path):
    rec = record(tmp_path / "ds", [3], codec="libx264")
    journal = os.path.join(rec.root, JOURNAL_PATH)
    with open(journal, "w") as fh:
        gone = "meta/gone.json.0123456789abcdef.tmp"  # a temporary name, and nothing there
        json.dump({"version": 1, "renames": [[gone, "meta/gone.json"]]}, fh)
    with pytest.raises(ResumeError, match="neither"):
        LeRobotWriter.resume(rec.root, **ARGS)  # type: ignore[arg-type]
    with open(journal, "w") as fh:
        json.dump({"version": 1, "renames": [["../x.0123456789abcdef.tmp", "meta/info.json"]]}, fh)
    with pytest.raises(ResumeError, match="outside"):
        LeRobotWriter.resume(rec.root, **ARGS)  # type: ignore[arg-type]
    with open(journal, "w") as fh:  # the journal only ever renames temporary files
        json.dump({"version": 1, "renames": [["meta/info.json", "meta/tasks.parquet"]]}, fh)
    with pytest.raises(ResumeError, match="not a temporary file"):
        LeRobotWriter.resume(rec.root, **ARGS)  # type: ignore[arg-type]
