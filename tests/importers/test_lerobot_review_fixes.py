"""Review fixes: a checkpoint interrupted between its renames is completed by resume (for
every crash point); videos are fsynced before the metadata naming them; two imports to the
same ``out`` do not share a temporary file."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from numbatraj.importers import lerobot as lerobot_import
from numbatraj.importers._lerobot_write_meta import JOURNAL_PATH
from numbatraj.importers.lerobot_writer import LeRobotWriter, ResumeError
from numbatraj.lerobot import schema as S
from tests.importers.test_lerobot_writer_support import (
    Recorded,
    add_episodes,
    import_and_check,
    record,
    writer_args,
)

ARGS = writer_args(codec="libx264")


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
            if f.endswith((".tmp", ".part")) or f == os.path.basename(JOURNAL_PATH)
        ]
        assert left == [], (k, left)


def test_resume_refuses_a_journal_naming_nothing(tmp_path):
    rec = record(tmp_path / "ds", [3], codec="libx264")
    journal = os.path.join(rec.root, JOURNAL_PATH)
    with open(journal, "w") as fh:
        json.dump({"version": 1, "renames": [["meta/.gone.1.tmp", "meta/gone.json"]]}, fh)
    with pytest.raises(ResumeError, match="neither"):
        LeRobotWriter.resume(rec.root, **ARGS)  # type: ignore[arg-type]
    with open(journal, "w") as fh:
        json.dump({"version": 1, "renames": [["../.x.tmp", "meta/info.json"]]}, fh)
    with pytest.raises(ResumeError, match="outside the dataset"):
        LeRobotWriter.resume(rec.root, **ARGS)  # type: ignore[arg-type]


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "?"


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_video_is_durable_before_the_metadata_naming_it(tmp_path, monkeypatch):
    root = str(tmp_path / "ds")
    rec = Recorded(root, [], [])
    w = LeRobotWriter(root, **ARGS)  # type: ignore[arg-type]
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", _fd_path(fd)))
        return real_fsync(fd)

    def replace(src, dst, *a, **kw):
        events.append(("replace", os.path.abspath(os.fspath(dst))))
        return real_replace(src, dst, *a, **kw)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    add_episodes(w, rec, [4], ["pick the cube"])
    monkeypatch.setattr(os, "fsync", real_fsync)
    monkeypatch.setattr(os, "replace", real_replace)
    w.close()
    info = events.index(("replace", os.path.join(root, S.INFO_PATH)))
    for key in w.camera_keys:
        mp4 = os.path.join(root, S.video_file(S.DEFAULT_VIDEO_PATH, key, 0, 0))
        synced = events.index(("fsync", mp4 + ".part"))
        renamed = events.index(("replace", mp4))
        dir_synced = events.index(("fsync", os.path.dirname(mp4)), renamed)
        assert synced < renamed < dir_synced < info, (synced, renamed, dir_synced, info)


def test_failed_import_keeps_a_concurrent_imports_temp_file(tmp_path, monkeypatch):
    rec = record(tmp_path / "ds", [3], codec="libx264")
    out = str(tmp_path / "store.h5")
    others = [out + ".tmp", out + ".tmp.tmp", out + ".0badf00d.tmp", out + ".0badf00d.tmp.tmp"]
    for p in others:
        with open(p, "wb") as fh:
            fh.write(b"another import's bytes")

    def boom(*a, **kw):
        raise RuntimeError("decoder failed")

    monkeypatch.setattr(lerobot_import, "_write_rows", boom)
    with pytest.raises(RuntimeError, match="decoder failed"):
        lerobot_import.import_lerobot_v3(rec.root, out, height=8, width=8, progress=False)
    assert not os.path.exists(out)
    assert sorted(os.listdir(tmp_path)) == sorted(["ds"] + [os.path.basename(p) for p in others])
    for p in others:
        with open(p, "rb") as fh:
            assert fh.read() == b"another import's bytes"
    monkeypatch.undo()
    lerobot_import.import_lerobot_v3(rec.root, out, height=8, width=8, progress=False)
    assert os.path.isfile(out)
    assert np.all([os.path.exists(p) for p in others])
