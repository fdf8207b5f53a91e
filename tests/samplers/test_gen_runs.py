"""The generations as intervals (``_gen_runs``): against a dense NumPy reference, and a
sampler reading them against a twin that reads the dense array only (same draws, stamps,
skips and tree, bit for bit)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numbatraj.samplers import PrioritizedSampler
from numbatraj.samplers import _blocked_kernels as B
from numbatraj.samplers import _gen_runs as R


def _segments(rows: np.ndarray) -> list[tuple[int, int]]:
    """The maximal runs of consecutive ascending rows, as ``[a, b)``."""
    out, j = [], 0
    while j < rows.size:
        e = j + 1
        while e < rows.size and rows[e] == rows[e - 1] + 1:
            e += 1
        out.append((int(rows[j]), int(rows[j]) + e - j))
        j = e
    return out


def _dense(runs: np.ndarray) -> np.ndarray:
    """The generations ``runs`` describes, as a dense array."""
    n = int(runs[0])
    starts, values = runs[2 : 2 + R.SLOTS], runs[2 + R.SLOTS :]
    return np.repeat(values[:n], np.diff(starts[: n + 1]))


def _n_runs(gen: np.ndarray) -> int:
    return int(np.count_nonzero(gen[1:] != gen[:-1])) + 1


def _check_canonical(runs: np.ndarray, cap: int) -> None:
    n = int(runs[0])
    starts, values = runs[2 : 2 + R.SLOTS], runs[2 + R.SLOTS :]
    assert 1 <= n <= R.MAX_RUNS
    assert starts[0] == 0 and starts[n] == cap
    assert np.all(np.diff(starts[: n + 1]) > 0)
    assert np.all(values[1:n] != values[: n - 1])  # neighbours merged


_write = st.one_of(
    st.tuples(st.just("ring"), st.integers(0, 200), st.integers(1, 90)),
    st.tuples(st.just("rows"), st.lists(st.integers(0, 1000), min_size=1, max_size=12)),
)


@settings(max_examples=300, deadline=None)
@given(cap=st.integers(1, 40), writes=st.lists(_write, min_size=1, max_size=25))
def test_intervals_follow_the_dense_generations(cap, writes):
    """After every write the intervals are valid exactly while no partial write (one run of
    consecutive rows after another) needed more than MAX_RUNS intervals, and then they are
    the reference's generations, canonical (merged, increasing starts)."""
    runs = R.new_runs(cap)
    gen = np.zeros(cap, np.int64)
    valid = True
    for kind, a, *rest in writes:
        if kind == "ring":
            rows = (a + np.arange(rest[0])) % cap
        else:
            rows = np.asarray(a, np.int64) % cap
        rows = rows.astype(np.int64)
        R.bump(runs, rows)
        for lo, hi in _segments(rows):
            gen[lo:hi] += 1
            valid = valid and _n_runs(gen) <= R.MAX_RUNS
        assert bool(runs[1]) == valid
        if valid:
            _check_canonical(runs, cap)
            np.testing.assert_array_equal(_dense(runs), gen)
            stamps = np.empty(cap, np.int64)
            order = np.random.default_rng(cap).permutation(cap)  # any order, not only drawn
            R.stamps_of(runs, order, stamps)
            np.testing.assert_array_equal(stamps, gen[order])


def test_a_replay_ring_keeps_its_intervals():
    """A demo prefix, then ring writes of one row and of batches that wrap, three laps:
    never more than three intervals, always the dense generations."""
    cap, demo = 1000, 37
    runs, gen = R.new_runs(cap), np.zeros(cap, np.int64)
    rows = np.arange(demo)
    R.bump(runs, rows)
    gen[rows] += 1
    pos, rng = 0, np.random.default_rng(3)
    while gen[demo:].min() < 3:
        n = 1 if rng.random() < 0.5 else int(rng.integers(2, 300))
        rows = demo + (pos + np.arange(n)) % (cap - demo)
        pos = (pos + n) % (cap - demo)
        R.bump(runs, rows)
        np.add.at(gen, rows, 1)
        assert runs[1] == 1 and runs[0] <= 3
        np.testing.assert_array_equal(_dense(runs), gen)


def test_encode_round_trips_and_gives_up_past_max_runs():
    for gen in (np.zeros(5, np.int64), np.array([3, 3, 2, 2, 2, 7]), np.repeat(np.arange(8), 3)):
        runs = R.new_runs(gen.size)
        R.encode(runs, gen)
        assert runs[1] == 1
        _check_canonical(runs, gen.size)
        np.testing.assert_array_equal(_dense(runs), gen)
    runs = R.new_runs(9)
    R.encode(runs, np.arange(9))  # nine intervals
    assert runs[1] == 0
    R.bump(runs, np.arange(9))  # invalid stays invalid: the dense array is read
    assert runs[1] == 0


def _twins(cap: int, seed: int) -> tuple[PrioritizedSampler, PrioritizedSampler]:
    a = PrioritizedSampler(cap, alpha=0.7, beta=0.5, seed=seed)
    b = PrioritizedSampler(cap, alpha=0.7, beta=0.5, seed=seed)
    b._runs[1] = 0  # the twin reads the dense generations only
    return a, b


def _same(a: PrioritizedSampler, b: PrioritizedSampler) -> None:
    np.testing.assert_array_equal(a._sums.view(np.int64), b._sums.view(np.int64))
    np.testing.assert_array_equal(a._mins.view(np.int64), b._mins.view(np.int64))
    np.testing.assert_array_equal(a._stamps, b._stamps)
    assert a.max_priority == b.max_priority


@pytest.mark.parametrize("cap", [9, 300, 5000])
def test_sampler_on_intervals_matches_its_dense_twin(cap):
    """Ring adds with draws and stamped updates in between (some stale: their rows were
    written after the draw), then writes out of ring order that end the intervals: the
    batches, skip counts and trees of both twins are equal at every step, and the intervals
    were in use for the ring part."""
    a, b = _twins(cap, cap)
    rng = np.random.default_rng(cap)
    pos, used = 0, 0
    for step in range(60):
        if step >= 40:  # out of ring order from here on
            rows = rng.permutation(cap)[: max(3, cap // 3)]
        else:
            n = int(rng.integers(1, max(2, cap // 4)))
            rows = (pos + np.arange(n)) % cap
            pos = (pos + n) % cap
        held = (a.sample(64), b.sample(64)) if a.n_rows else None
        a.note_added(rows)
        b.note_added(rows)
        used += int(a._runs[1])
        if step < 40:
            assert a._runs[1] == 1
        np.testing.assert_array_equal(_dense(a._runs) if a._runs[1] else a._stamps, a._stamps)
        x, y = a.sample(257), b.sample(257)
        for k in ("indices", "weights", "stamps"):
            np.testing.assert_array_equal(getattr(x, k), getattr(y, k))
        td = rng.random(257) * (rng.random(257) < 0.9)
        assert a.update_priorities(x, td) == b.update_priorities(y, td) == 0
        if a.n_rows == cap:  # restricted draws (a demo prefix and a recent window)
            lo = int(rng.integers(0, cap - 2))
            got = []
            for s in (a, b):
                out = np.empty(50, np.int64), np.empty(50, np.float32), np.full(50, -1, np.int64)
                s.sample_ranges_into(*out, lo, cap, 0, 2)
                got.append(out)
            for g, w in zip(*got):
                np.testing.assert_array_equal(g, w)
            np.testing.assert_array_equal(got[0][2], a._stamps[got[0][0]])
        if held is not None:  # drawn before this step's add: the rewritten rows are stale
            for k in ("indices", "weights", "stamps"):
                np.testing.assert_array_equal(getattr(held[0], k), getattr(held[1], k))
            td = rng.random(64)
            sa = a.update_priorities(held[0], td)
            assert sa == b.update_priorities(held[1], td)
            assert sa == int(np.isin(held[0].indices, rows).sum())
        _same(a, b)
    assert used >= 40
    if cap >= 300:
        assert a._runs[1] == 0


def test_draw_on_threads_reads_the_intervals_as_alone():
    """draw_par with valid intervals: the indices, stamps and leaf values of draw and of the
    dense kernel, in 1, 2, 3 and 5 parts."""
    s = PrioritizedSampler(70000, alpha=0.7, beta=0.5, seed=4)
    s.note_added(np.arange(70000))
    s.note_added(np.arange(20000, 50000))
    s.update_priorities(np.arange(70000), np.random.default_rng(4).random(70000))
    assert s._runs[1] == 1 and s._runs[0] == 3
    u = np.random.default_rng(5).random(4099)
    want = np.empty(4099, np.int64), np.empty(4099, np.int64), np.empty((2, 4099))
    B.sample(s._sums, s._p, s._r0, s._nb, s._stamps, u, *want)
    assert set(want[1]) == {1, 2}
    args = (s._sums, s._p, s._r0, s._nb, s._gr, u)
    for parts in (0, 1, 2, 3, 5):
        got = np.full(4099, -7, np.int64), np.full(4099, -7, np.int64), np.full((2, 4099), np.nan)
        if parts:
            B.draw_par(*args, *got, parts)
        else:
            B.draw(*args, *got)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.view(np.int64), w.view(np.int64))


@pytest.mark.parametrize("ring", [True, False])
def test_load_state_dict_rebuilds_the_intervals(ring):
    """A loaded state gets intervals when its generations are few runs and the dense path
    when not; either way the next draws and updates are the source sampler's."""
    cap = 500
    a = PrioritizedSampler(cap, seed=9)
    a.note_added(np.arange(cap))
    a.note_added(np.arange(100, 260) if ring else np.random.default_rng(9).permutation(cap)[:200])
    c = PrioritizedSampler(cap, seed=1)
    c.note_added(np.random.default_rng(1).permutation(cap))  # its own intervals, then loaded
    c.load_state_dict(a.state_dict())
    assert c._runs[1] == int(ring)
    if ring:
        np.testing.assert_array_equal(_dense(c._runs), a._stamps)
    x, y = a.sample(300), c.sample(300)
    for k in ("indices", "weights", "stamps"):
        np.testing.assert_array_equal(getattr(x, k), getattr(y, k))
    y.stamps[::7] -= 1  # stale
    td = np.linspace(0.1, 3, 300)
    assert a.update_priorities(y, td) == c.update_priorities(y, td) == len(range(0, 300, 7))
    _same(a, c)
