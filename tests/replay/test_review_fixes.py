"""Regression tests for review findings in the replay buffers (dump, .demo, checks, load)."""

from __future__ import annotations

from numbatraj.data import TrajectoryStore
from numbatraj.replay import StoreReplay

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
