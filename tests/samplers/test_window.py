"""WindowSampler: uniform rows inside a windowed column's resident window."""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj import ColumnSpec, TrajectoryStore, TrajectoryStoreWriter
from numbatraj.errors import SamplerError
from numbatraj.samplers import WindowSampler
from tests.reference import bounded_ref


class _Slab:
    """Tiny stand-in: anything with ``window -> (start, stop)``."""

    def __init__(self, start: int, stop: int) -> None:
        self.window = (start, stop)


def test_golden_and_reference():
    s = WindowSampler(_Slab(100, 150), seed=42)
    got = s.sample(300).indices
    raw = np.random.Generator(np.random.PCG64(42)).bit_generator.random_raw(300)
    assert got.tolist() == [100 + bounded_ref(int(w), 50) for w in raw]
    assert got[:6].tolist() == [138, 121, 142, 134, 104, 148]
    assert set(got.tolist()) == set(range(100, 150))


def test_follows_the_window():
    slab = _Slab(0, 10)
    s = WindowSampler(slab, seed=0)
    assert s.sample(200).indices.max() < 10
    slab.window = (10, 13)
    idx = s.sample(200).indices
    assert set(idx.tolist()) == {10, 11, 12}


def test_with_a_real_windowed_column(tmp_path):
    from numbatraj.data import WindowedColumn

    path = tmp_path / "w.h5"
    with TrajectoryStoreWriter(path, [ColumnSpec("x", np.float32)]) as w:
        w.append("x", np.arange(250, dtype=np.float32))
        w.end_episode()
    with TrajectoryStore(path) as store:
        col = WindowedColumn.make(store, "x", 100)
        s = WindowSampler(col, seed=1)
        seen = []
        while True:
            start, stop = col.window
            idx = s.sample(64).indices
            assert idx.min() >= start and idx.max() < stop
            np.testing.assert_array_equal(col.gather(idx), idx.astype(np.float32))
            seen.append((start, stop))
            if not col.advance():
                break
    assert seen == [(0, 100), (100, 200), (200, 250)]


def test_state_dict_and_bad_inputs():
    s = WindowSampler(_Slab(5, 9), seed=3)
    s.sample(3)
    state = s.state_dict()
    a = s.sample(10).indices
    t = WindowSampler(_Slab(5, 9), seed=0)
    t.load_state_dict(state)
    assert t.sample(10).indices.tolist() == a.tolist()
    with pytest.raises(SamplerError, match=r"resident window is \[4, 4\)"):
        WindowSampler(_Slab(4, 4), seed=0).sample(1)
    with pytest.raises(SamplerError, match="window must be a \\(start, stop\\) pair"):
        WindowSampler(_Slab(None, 3), seed=0).sample(1)
    with pytest.raises(SamplerError, match="needs an object with a 'window'"):
        WindowSampler(object(), seed=0)
    with pytest.raises(SamplerError, match="batch_size must be >= 1"):
        s.sample(0)
    with pytest.raises(SamplerError, match="state is for 'UniformSampler'"):
        s.load_state_dict({"kind": "UniformSampler"})
