"""io/atomic.py: the one publish primitive (temp name, fsync, rename, fsync dir, discard)."""

from __future__ import annotations

import json
import os

import pytest

from numbatraj.io import atomic


def _names(d) -> list[str]:
    return sorted(os.listdir(d))


def test_temp_path_is_unique_beside_the_destination(tmp_path):
    dest = tmp_path / "store.h5"
    names = {atomic.temp_path(dest) for _ in range(200)}
    assert len(names) == 200
    for n in names:
        assert os.path.dirname(n) == str(tmp_path)
        assert os.path.basename(n).startswith("store.h5.") and n.endswith(".tmp")
        assert atomic.is_temp_name(n)
    assert not atomic.is_temp_name(tmp_path / "store.h5.tmp")  # the old fixed scheme
    assert not atomic.is_temp_name(tmp_path / "store.h5")
    assert not atomic.is_temp_name(tmp_path / "notes.deadbeef.tmp")  # too short to be ours


def test_publish_replaces_and_leaves_no_temporary(tmp_path):
    dest = tmp_path / "a.bin"
    dest.write_bytes(b"old")
    tmp = atomic.temp_path(dest)
    with open(tmp, "wb") as f:
        f.write(b"new")
    assert atomic.publish(tmp, dest) == str(dest)
    assert dest.read_bytes() == b"new"
    assert _names(tmp_path) == ["a.bin"]


def test_publish_without_overwrite_never_clobbers(tmp_path):
    dest = tmp_path / "a.bin"
    dest.write_bytes(b"someone else's")
    tmp = atomic.temp_path(dest)
    with open(tmp, "wb") as f:
        f.write(b"mine")
    with pytest.raises(FileExistsError, match="appeared while writing; the finished file is left"):
        atomic.publish(tmp, dest, overwrite=False)
    assert dest.read_bytes() == b"someone else's"
    with open(tmp, "rb") as f:  # nothing lost: the finished file is where the message says
        assert f.read() == b"mine"


def test_publishing_discards_on_error_and_publishes_on_success(tmp_path):
    dest = tmp_path / "sub" / "x.json"
    with pytest.raises(RuntimeError):
        with atomic.publishing(dest) as tmp:
            with open(tmp, "w") as f:
                f.write("half")
            raise RuntimeError("writer died")
    assert _names(tmp_path / "sub") == []
    with atomic.publishing(dest) as tmp:
        with open(tmp, "w") as f:
            f.write("{}")
    assert dest.read_text() == "{}" and _names(tmp_path / "sub") == ["x.json"]


def test_write_bytes_mode_and_no_clobber(tmp_path):
    dest = tmp_path / "key"
    atomic.write_bytes(dest, b"k" * 32, mode=0o600)
    assert (os.stat(dest).st_mode & 0o777) == 0o600
    with pytest.raises(FileExistsError):
        atomic.write_bytes(dest, b"other", overwrite=False)
    assert dest.read_bytes() == b"k" * 32 and _names(tmp_path) == ["key"]


def test_replace_dir_swaps_whole_trees(tmp_path):
    dest = tmp_path / "tree"
    dest.mkdir()
    (dest / "old.txt").write_text("old")
    new = tmp_path / atomic.temp_path("tree")
    new.mkdir()
    (new / "new.txt").write_text("new")
    atomic.replace_dir(new, dest)
    assert _names(dest) == ["new.txt"] and _names(tmp_path) == ["tree"]


def test_discard_missing_is_fine(tmp_path):
    atomic.discard(tmp_path / "nothing")
    d = tmp_path / "d"
    d.mkdir()
    (d / "f").write_text("x")
    atomic.discard(d)
    assert not d.exists()


def test_file_batch_with_journal_and_replay(tmp_path, monkeypatch):
    root = tmp_path / "ds"
    (root / "meta").mkdir(parents=True)
    journal = str(root / "meta" / ".checkpoint.json")
    batch = atomic.FileBatch()
    batch.add(str(root / "meta" / "a.json"), lambda t: open(t, "w").write("A"))
    batch.add(str(root / "meta" / "b.json"), lambda t: open(t, "w").write("B"))
    assert len(batch) == 2
    # a crash after the journal and the first rename: replay_journal finishes the second
    real_replace = os.replace
    calls = []

    def crash_on_second(src, dst):
        calls.append(dst)
        if len(calls) == 3:  # journal publish, a.json, then b.json
            raise KeyboardInterrupt("killed")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        batch.apply(journal, root=str(root))
    monkeypatch.setattr(os, "replace", real_replace)
    assert (root / "meta" / "a.json").read_text() == "A"
    assert not (root / "meta" / "b.json").exists()
    with open(journal) as f:
        doc = json.load(f)
    assert doc["renames"][1][1] == "meta/b.json"
    assert atomic.replay_journal(journal, root=str(root)) == [str(root / "meta" / "b.json")]
    assert (root / "meta" / "b.json").read_text() == "B"
    assert _names(root / "meta") == ["a.json", "b.json"]
    assert atomic.replay_journal(journal, root=str(root)) == []  # done: nothing left


@pytest.mark.parametrize(
    ("renames", "needle"),
    [
        ([["../x.0123456789abcdef.tmp", "meta/a.json"]], "outside"),
        ([["meta/a.json.tmp", "meta/a.json"]], "not a temporary file"),
        ([["meta/a.json.0123456789abcdef.tmp", "meta/a.json"]], "neither"),
    ],
)
def test_replay_journal_refuses_bad_journals(tmp_path, renames, needle):
    (tmp_path / "meta").mkdir()
    journal = tmp_path / "meta" / ".checkpoint.json"
    journal.write_text(json.dumps({"version": 1, "renames": renames}))
    with pytest.raises(ValueError, match=needle):
        atomic.replay_journal(str(journal), root=str(tmp_path))


# ------------------------------------------------------------------ issue 15: locks, kill windows


def test_second_writer_fails_at_once_naming_the_holder(tmp_path):
    import multiprocessing as mp

    import numpy as np

    from numbatraj import ColumnSpec, TrajectoryStoreWriter
    from numbatraj.errors import LockedError
    from numbatraj.io.atomic import publish_lock

    dest = tmp_path / "s.h5"
    ctx = mp.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_hold_lock, args=(str(dest), ready, release))
    p.start()
    try:
        assert ready.wait(60)
        with pytest.raises(LockedError, match=rf"pid {p.pid} \(holder test\)"):
            TrajectoryStoreWriter(dest, [ColumnSpec("x", np.float32)])
        with pytest.raises(LockedError, match="after waiting 0.2 s"):
            publish_lock(dest, wait=0.2).acquire()
    finally:
        release.set()
        p.join(30)
    with publish_lock(dest, wait=5):  # free again
        pass
    assert sorted(x.name for x in tmp_path.iterdir()) == []  # the lock file goes with it


def _hold_lock(dest, ready, release):
    from numbatraj.io.atomic import publish_lock

    with publish_lock(dest, what="holder test"):
        ready.set()
        release.wait(60)


def test_lock_is_reentrant_in_one_thread_and_excludes_another(tmp_path):
    import threading

    from numbatraj.errors import LockedError
    from numbatraj.io.atomic import publish_lock

    dest = tmp_path / "x"
    with publish_lock(dest), publish_lock(dest):
        errors = []

        def other():
            try:
                publish_lock(dest, wait=False).acquire()
            except LockedError as exc:
                errors.append(exc)

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert len(errors) == 1


def test_kill_between_link_and_remove_cannot_truncate_the_finished_file(tmp_path, rng):
    """A writer killed between os.link(tmp, path) and os.remove(tmp) leaves a second name of
    the finished store; the next overwrite writer must leave the finished bytes alone and
    remove the stale name."""
    import numpy as np

    from numbatraj import ColumnSpec, TrajectoryStore, TrajectoryStoreWriter
    from numbatraj.io.atomic import temp_path

    dest = tmp_path / "s.h5"
    with TrajectoryStoreWriter(dest, [ColumnSpec("x", np.float32, (4,))]) as w:
        w.append("x", np.ones((100, 4), np.float32))
        w.end_episode()
    finished = dest.read_bytes()
    stale = temp_path(dest)
    os.link(dest, stale)  # the state a kill between link and remove leaves
    w = TrajectoryStoreWriter(dest, [ColumnSpec("x", np.float32, (4,))], overwrite=True)
    assert not os.path.exists(stale)  # removed by the new holder of the lock, not opened
    assert dest.read_bytes() == finished
    w.append("x", np.zeros((3, 4), np.float32))
    w.end_episode()
    assert dest.read_bytes() == finished  # untouched until the new store is published
    w.close()
    with TrajectoryStore(dest) as s:
        assert s.n_rows == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.h5"]


def test_replace_dir_swaps_atomically(tmp_path, monkeypatch):
    from numbatraj.io import atomic

    dest = tmp_path / "tree"
    dest.mkdir()
    (dest / "old.txt").write_text("old")
    new = tmp_path / "new"
    new.mkdir()
    (new / "new.txt").write_text("new")
    renames = []
    real = os.rename
    monkeypatch.setattr(os, "rename", lambda a, b: (renames.append((a, b)), real(a, b))[1])
    atomic.replace_dir(new, dest)
    assert sorted(p.name for p in dest.iterdir()) == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tree"]
    # with the exchange, dest itself is never renamed away (no moment without a tree)
    assert all(os.fspath(a) != os.fspath(dest) for a, _ in renames)
