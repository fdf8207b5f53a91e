"""Regression tests for review findings in the replay buffers (dump, .demo, checks, load)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from numbatraj.data import ColumnSpec, TrajectoryStore
from numbatraj.errors import IntegrityError, SchemaError
from numbatraj.replay import DemoFile, DemoWriter, StoreReplay

from .helpers import rows, sac_columns


def test_dump_cuts_after_the_demo_prefix(tmp_path):
    rep = StoreReplay(sac_columns(), 8, demo_capacity=4)
    demo = rows(0, 3)
    demo["done"][:] = False
    rep.add_demos(**demo)
    online = rows(100, 4)
    online["done"][:] = [False, False, False, True]
    rep.add(**online)
    path = tmp_path / "d.h5"
    assert rep.dump(path) == 2
    with TrajectoryStore(path) as st:
        assert st.episode_lengths.tolist() == [3, 4]
    # demo rows only, no done: one open episode, as before
    only = StoreReplay(sac_columns(), 8, demo_capacity=4)
    only.add_demos(**demo)
    assert only.dump(tmp_path / "o.h5") == 1


def test_demo_writer_exit_aborts_when_close_fails(tmp_path, monkeypatch):
    path = tmp_path / "x.demo"

    def broken_fsync(fd):
        raise OSError(5, "fsync failed")

    with pytest.raises(OSError, match="fsync failed"):
        with DemoWriter(path, sac_columns()) as w:
            w.append(**rows(0, 3))
            monkeypatch.setattr(os, "fsync", broken_fsync)
    assert not os.path.exists(str(path) + ".tmp") and not path.exists()


@pytest.mark.parametrize("links", [True, False])
def test_demo_writer_does_not_clobber_a_file_that_appeared(tmp_path, monkeypatch, links):
    if not links:  # a file system without hard links: check, then rename

        def no_link(src, dst):
            raise OSError(1, "links not supported")

        monkeypatch.setattr(os, "link", no_link)
    path = tmp_path / "x.demo"
    with pytest.raises(FileExistsError) as info:
        with DemoWriter(path, sac_columns()) as w:
            w.append(**rows(0, 3))
            path.write_bytes(b"someone else's")
    tmp = str(path) + ".tmp"
    assert repr(str(path)) in str(info.value) and repr(tmp) in str(info.value)
    assert path.read_bytes() == b"someone else's"
    assert DemoFile(tmp).n_rows == 3  # the finished file is kept, not deleted
    with DemoWriter(tmp_path / "y.demo", sac_columns()) as w:  # the normal case still works
        w.append(**rows(0, 2))
    assert DemoFile(tmp_path / "y.demo").n_rows == 2 and not os.path.exists(
        str(tmp_path / "y.demo") + ".tmp"
    )


def _small_columns():
    return [ColumnSpec("a", np.uint8, ()), ColumnSpec("i", np.int16, ()),
            ColumnSpec("x", np.float16, ())]


@pytest.mark.parametrize("bad, value", [("a", 300), ("a", -1), ("i", 40_000), ("x", 1e6),
                                        ("x", 70_000), ("x", 10**400)])
def test_python_scalars_out_of_the_column_range_name_the_column(bad, value):
    rep = StoreReplay(_small_columns(), 4, prioritized=False)
    good = {"a": 255, "i": -32768, "x": 65504.0}
    row = dict(good, **{bad: value})
    with pytest.raises(SchemaError, match=rf"column '{bad}'.*{value!r}.*outside its range"):
        rep.add(**row)
    assert rep.size == 0
    rep.add(**good)  # the extremes fit
    rep.add(a=0, i=32767, x=float("inf"))  # inf given is inf stored
    held = rep.rows()
    assert held["a"].tolist() == [255, 0] and held["i"].tolist() == [-32768, 32767]
    assert held["x"][0] == 65504 and np.isinf(held["x"][1])
    one = {"a": np.uint8(1), "i": np.int16(2), "x": np.float16(3)}  # the fast path
    assert rep._cols.single_row(one) is not None


def _edited_checkpoint(tmp_path, edit):
    import json

    import h5py

    rep = StoreReplay(sac_columns(), 12, demo_capacity=3, prioritized=True, seed=3)
    rep.add_demos(**rows(0, 2))
    rep.add(**rows(10, 4))  # ring of 9, not wrapped: size 4, cursor 4
    path = tmp_path / "r.ckpt"
    rep.save(path)
    StoreReplay.load(path)  # the untouched file loads
    with h5py.File(path, "r+") as f:
        state = json.loads(f.attrs["state"])
        edit(f, state)
        f.attrs["state"] = json.dumps(state)
    return path


def test_load_refuses_a_cursor_that_does_not_match_an_unwrapped_ring(tmp_path):
    def edit(f, state):
        state["cursor"] = 2

    path = _edited_checkpoint(tmp_path, edit)
    with pytest.raises(IntegrityError, match=r"r\.ckpt.*size=4, cursor=2"):
        StoreReplay.load(path)


@pytest.mark.parametrize("what", ["present", "leaves", "nan"])
def test_load_refuses_sampler_rows_that_disagree_with_the_ring(tmp_path, what):
    def edit(f, state):
        if what == "present":
            f["sampler/present"][7] = True  # an unfilled ring slot
        elif what == "leaves":
            f["sampler/leaves"][8] = 1.0  # a leaf where no row is held
        else:
            f["sampler/leaves"][0] = np.nan

    path = _edited_checkpoint(tmp_path, edit)
    match = {"present": r"r\.ckpt.*present marks 7 rows \(row 7 is present\).*2 demo rows "
                        r"and 4 ring rows",
             "leaves": r"r\.ckpt.*row 8: leaf 1\.0, present=False",
             "nan": r"r\.ckpt.*row 0: leaf nan, present=True"}[what]
    with pytest.raises(IntegrityError, match=match):
        StoreReplay.load(path)
