"""WindowedColumn: windowed gather equals full residency in every window."""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj import (
    ColumnSpec,
    IndexBatch,
    RowIndexError,
    SchemaError,
    TrajectoryStore,
    TrajectoryStoreWriter,
)
from numbatraj.data import ResidentColumn, WindowedColumn
from tests.reference import gather_rows_ref, windows_ref

N_ROWS = 1003  # not a multiple of any window size used below


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    rng = np.random.default_rng(7)
    path = tmp_path_factory.mktemp("windowed") / "w.h5"
    cols = [
        ColumnSpec("state", np.float32, (26,)),
        ColumnSpec("pix", np.uint8, (3, 6, 6)),
        ColumnSpec("done", np.bool_),
    ]
    lengths = [300, 1, 402, 300]
    assert sum(lengths) == N_ROWS
    with TrajectoryStoreWriter(path, cols, chunk_rows={"state": 64}) as w:
        for n in lengths:
            done = np.zeros(n, np.bool_)
            done[-1] = True
            w.append_rows({
                "state": rng.standard_normal((n, 26), dtype=np.float32),
                "pix": rng.integers(0, 256, (n, 3, 6, 6), dtype=np.uint8),
                "done": done,
            })
            w.end_episode()
    return path


@pytest.fixture
def store(store_path):
    with TrajectoryStore(store_path) as s:
        yield s


@pytest.mark.parametrize("name", ["state", "pix", "done"])
@pytest.mark.parametrize("window_rows", [7, 64, 100, 1003, 5000])
def test_every_window_matches_full_residency(store, rng, name, window_rows):
    full = ResidentColumn.load(store, name)
    w = WindowedColumn.make(store, name, window_rows)
    buf = w.rows.base if w.rows.base is not None else w.rows
    seen = [w.window]
    while w.advance():
        seen.append(w.window)
    assert seen == windows_ref(N_ROWS, window_rows)
    assert w.advance() is False and w.window == seen[-1]  # exhausted exactly, stays put
    n_gathers = 8
    for start, stop in seen[:: max(1, len(seen) // n_gathers)] + [seen[-1]]:
        w.seek(start)
        assert w.window == (start, stop)
        assert np.shares_memory(w.rows, buf)  # the buffer is never reallocated
        inside = np.concatenate([
            np.arange(start, stop)[::-1],
            rng.integers(start, stop, 50),
            [start, stop - 1, start, start],
        ])
        got = w.gather(inside)
        assert got.tobytes() == full.gather(inside).tobytes()
        assert got.tobytes() == gather_rows_ref(full.data, inside).tobytes()
        assert w.rows.tobytes() == full.data[start:stop].tobytes()


def test_one_row_windows(store):
    full = ResidentColumn.load(store, "pix")
    w = WindowedColumn.make(store, "pix", 1)
    for row in range(5):
        assert w.window == (row, row + 1)
        assert w.gather([row, row]).tobytes() == full.gather([row, row]).tobytes()
        with pytest.raises(RowIndexError):
            w.gather([row + 1])
        assert w.advance()
    w.seek(N_ROWS - 1)
    assert w.advance() is False and w.window == (N_ROWS - 1, N_ROWS)


def test_sequence_indices_index_batch_and_out(store, rng):
    full = ResidentColumn.load(store, "state")
    w = WindowedColumn.make(store, "state", 256)
    w.seek(500)
    idx = rng.integers(500, 756, (8, 4))
    out = np.empty((8, 4, 26), np.float32)
    assert w.gather(IndexBatch(idx), out=out) is out
    assert np.array_equal(out, full.gather(idx))


@pytest.mark.parametrize("offender", ["below", "at_stop", "negative", "far"])
def test_out_of_window_raises_and_writes_nothing(store, rng, offender):
    w = WindowedColumn.make(store, "state", 100)
    w.seek(300)
    bad = {"below": 299, "at_stop": 400, "negative": -1, "far": 10**9}[offender]
    idx = rng.integers(300, 400, 40)
    idx[17] = bad
    idx[30] = 0
    out = np.full((40, 26), -3.0, np.float32)
    with pytest.raises(RowIndexError) as ei:
        w.gather(idx, out=out)
    msg = str(ei.value)
    assert f"index {bad} at position 17" in msg
    assert "[300, 400)" in msg and "never refill" in msg and "'state'" in msg
    assert np.all(out == -3.0)
    assert w.window == (300, 400)  # no refill on a miss


def test_seek_bounds_and_last_row(store):
    w = WindowedColumn.make(store, "done", 10)
    w.seek(N_ROWS - 1)
    assert w.window == (N_ROWS - 1, N_ROWS)
    assert w.gather([N_ROWS - 1]).tolist() == [True]
    assert w.advance() is False
    for bad in (-1, N_ROWS, N_ROWS + 5):
        with pytest.raises(RowIndexError, match=rf"seek\({bad}\) is outside the rows \[0, {N_ROWS}\)"):
            w.seek(bad)
    assert w.window == (N_ROWS - 1, N_ROWS)
    w.seek(17)  # unaligned seeks are allowed; advance continues from their stop
    assert w.window == (17, 27)
    assert w.advance() and w.window == (27, 37)


def test_buffer_is_capped_at_the_store_length(store):
    w = WindowedColumn.make(store, "state", 10**7)
    assert w.window == (0, N_ROWS)
    assert w.rows.shape == (N_ROWS, 26)
    assert w.advance() is False
    assert "window=(0, 1003)" in repr(w)


@pytest.mark.parametrize("window_rows, match", [(0, ">= 1"), (-4, ">= 1"), (2.5, "must be an int")])
def test_bad_window_rows(store, window_rows, match):
    with pytest.raises(SchemaError, match=match):
        WindowedColumn.make(store, "state", window_rows)


def test_unknown_column(store):
    with pytest.raises(SchemaError, match="no column 'nope'"):
        WindowedColumn.make(store, "nope", 10)


def test_failed_read_leaves_an_empty_window(store_path):
    s = TrajectoryStore(store_path)
    w = WindowedColumn.make(s, "state", 100)
    s.close()
    with pytest.raises(ValueError, match="closed"):
        w.seek(200)
    assert w.window == (200, 200)
    with pytest.raises(RowIndexError, match=r"\[200, 200\)"):
        w.gather([200])
