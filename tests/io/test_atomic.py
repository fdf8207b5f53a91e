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
