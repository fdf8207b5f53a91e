"""The prioritized draw on Numba's threads (``_blocked_kernels.sample_par``): the same
draws, stamps and leaf values as the serial kernel and the level-by-level one, bit for bit,
against the NumPy reference of the descent, and the thread policy's floor for its kind."""

from __future__ import annotations

import numba
import numpy as np
import pytest

import numbatraj
import numbatraj._jit as J
from numbatraj.samplers import PrioritizedSampler
from numbatraj.samplers import _blocked_kernels as B
from numbatraj.samplers import _sumtree_kernels as K
from numbatraj.samplers.prioritized import DRAW_KIND
from tests.reference import sumtree_find_ref
from tests.replay.helpers import parallel_kernel_spy


def _filled(cap: int, seed: int) -> PrioritizedSampler:
    rng = np.random.default_rng(seed)
    s = PrioritizedSampler(cap, alpha=0.7, beta=0.5, seed=seed)
    s.note_added(np.arange(cap))
    # some zero priorities (empty subtrees the descent must step around), repeated rows
    rows = rng.integers(0, cap, 2 * cap)
    s.update_priorities(rows, rng.random(2 * cap) * (rng.random(2 * cap) < 0.8))
    s.note_added(rng.integers(0, cap, max(1, cap // 10)))  # some generations above 1
    return s


@pytest.mark.parametrize("cap", [1, 5, 9, 33, 1000, 4097, 70000])
@pytest.mark.parametrize("b", [1, 2, 7, 1000, 4099])
def test_parallel_draw_matches_serial_and_reference(cap, b):
    """sample_par in 1, 2, 3 and 5 parts (more parts than draws too) gives the indices,
    stamps and leaf values of the serial kernel and of the level-by-level kernel, and the
    indices of a cumulative-sum search wherever the mass is not on a rounding boundary."""
    s = _filled(cap, cap + b)
    u = np.random.default_rng(b).random(b)
    args = (s._sums, s._p, s._r0, s._nb, s._stamps, u)
    want = np.empty(b, np.int64), np.empty(b, np.int64), np.empty((2, b))
    B.sample(*args, *want)
    ref = s.tree.snapshot()
    lv = np.empty(b, np.int64), np.empty(b, np.int64), np.empty((2, b))
    K._sample_prioritized_cpu(ref.sums, ref.n_leaves_padded, s._stamps, u, *lv)
    np.testing.assert_array_equal(want[0], lv[0])
    np.testing.assert_array_equal(want[1], lv[1])
    np.testing.assert_array_equal(want[2][1].view(np.int64), lv[2][1].view(np.int64))
    for parts in (1, 2, 3, 5):
        got = np.full(b, -7, np.int64), np.full(b, -7, np.int64), np.full((2, b), np.nan)
        B.sample_par(*args, *got, parts)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[2].view(np.int64), want[2].view(np.int64))
    leaves = s.tree.leaves
    total = leaves.sum()
    masses = (np.arange(b) + u) * (total / b)
    cum = np.cumsum(leaves)
    clear = np.min(np.abs(masses[:, None] - cum[None, :]), axis=1) > 1e-9 * total
    np.testing.assert_array_equal(want[0][clear], sumtree_find_ref(leaves, masses)[clear])
    np.testing.assert_array_equal(want[1], s._stamps[want[0]])


@pytest.fixture
def on_threads(monkeypatch):
    """Every draw takes the parallel kernel on all of Numba's threads; yields the list of
    its calls' part counts."""
    with parallel_kernel_spy(monkeypatch, B, "draw_par", "AUTO_MIN_BYTES",
                             {DRAW_KIND: 0}) as calls:
        yield calls


@pytest.mark.parametrize("cap", [17, 70000])
def test_sampler_draws_on_threads_as_alone(on_threads, cap):
    """sample and sample_into on threads: the batch (indices, weights, stamps) and the
    generator's next state of a twin sampler drawing on one thread."""
    a, b = _filled(cap, 3), _filled(cap, 3)
    got = a.sample(3001)
    idx, w, st = np.empty(3001, np.int64), np.empty(3001, np.float32), np.empty(3001, np.int64)
    a.sample_into(idx, w, st)
    top = int(numba.config.NUMBA_NUM_THREADS)
    assert on_threads == [top, top]
    numbatraj.set_num_threads(1)
    want = b.sample(3001)
    want2 = b.sample(3001)
    assert on_threads == [top, top]  # one thread: the serial kernel
    for k in ("indices", "weights", "stamps"):
        np.testing.assert_array_equal(getattr(got, k), getattr(want, k))
    np.testing.assert_array_equal(idx, want2.indices)
    np.testing.assert_array_equal(w, want2.weights)
    np.testing.assert_array_equal(st, want2.stamps)
    assert a._gen.bit_generator.state == b._gen.bit_generator.state


def test_draw_kind_has_its_own_floor():
    """A draw may go parallel from AUTO_MIN_BYTES[DRAW_KIND] (1,024 draws at 2^16 rows),
    below the global floor; a smaller draw stays serial even after set_num_threads(n)."""
    floor = J.AUTO_MIN_BYTES[DRAW_KIND]
    assert 0 < floor < J.PARALLEL_MIN_BYTES and J.min_bytes(DRAW_KIND) == floor
    assert floor == 64 * 1024 * (B.layout(1 << 16)[1] + 1)
    top = int(numba.config.NUMBA_NUM_THREADS)
    try:
        numbatraj.set_num_threads(top)
        assert J.parallel_threads(floor - 1, auto=DRAW_KIND) == 1
        assert J.parallel_threads(floor, auto=DRAW_KIND) == top
    finally:
        numbatraj.set_num_threads(None)


def test_small_draw_never_starts_a_region(monkeypatch):
    """Below the floor the serial kernel runs whatever the thread count."""
    calls: list[int] = []
    real = B.draw_par
    monkeypatch.setattr(B, "draw_par", lambda *a: calls.append(a[-1]) or real(*a))
    s = _filled(1 << 16, 1)
    top = int(numba.config.NUMBA_NUM_THREADS)
    try:
        numbatraj.set_num_threads(top)
        s.sample(1023)
        assert calls == []
        s.sample(1024)
        assert calls == ([top] if top > 1 else [])
    finally:
        numbatraj.set_num_threads(None)


def test_each_tree_depth_is_calibrated_apart(monkeypatch):
    """Two samplers of different depths keep verdicts of their own (the threads win on a
    tree past the caches and not on one inside them, at the same bytes), two of the same
    depth share one, and a variant takes its kind's floor."""
    monkeypatch.setattr(J, "_verdict", {})
    monkeypatch.setattr(J, "_trials", {})
    monkeypatch.setattr(J, "_retry_at", {})
    monkeypatch.setattr(J, "_retry_wait", {})
    monkeypatch.setattr(J, "_clock", lambda: 1000.0)
    monkeypatch.setattr(J, "AUTO_TRIALS", 4)
    monkeypatch.setattr(J, "AUTO_WARMUP", 1)
    monkeypatch.setattr(J, "_CORES", 2)
    monkeypatch.setattr(J, "_last_region", [float("-inf"), 1.0])
    monkeypatch.setattr(J, "numba_threads", lambda: 2)
    monkeypatch.setattr(J, "_running_now", lambda: 1)  # idle: one free core besides ours
    numbatraj.set_num_threads(None)
    small, big, big2 = PrioritizedSampler(1 << 6), PrioritizedSampler(1 << 12), \
        PrioritizedSampler(3000)
    assert small._draw_kind != big._draw_kind == big2._draw_kind
    assert small._draw_kind.startswith(DRAW_KIND)
    floor = J.AUTO_MIN_BYTES[DRAW_KIND]
    for kind in (small._draw_kind, big._draw_kind):
        assert J.min_bytes(kind) == floor
        assert J.parallel_threads(floor - 1, auto=kind) == 1
    # the threads win on the large tree only (seconds per byte: serial 1, threaded 0.5)
    for _ in range(2 * J.AUTO_TRIALS):
        for kind, win in ((small._draw_kind, False), (big._draw_kind, True)):
            th = J.parallel_threads(floor, auto=kind)
            J.note_time(kind, th, 0.5 if (th > 1 and win) else 1.0, floor)
    assert J.auto_verdicts() == {small._draw_kind: False, big._draw_kind: True}
    assert J.parallel_threads(floor, auto=big2._draw_kind) == 2
    assert J.parallel_threads(floor, auto=small._draw_kind) == 1


def test_draw_calls_the_policy_with_its_depth(monkeypatch):
    """A draw past the floor hands the policy its own depth's variant, not the kind."""
    kinds: list[str] = []

    def spy(kind, nbytes, items, serial, parallel, *args):  # type: ignore[no-untyped-def]
        kinds.append(kind)
        return serial(*args)

    monkeypatch.setattr(J, "auto_call", spy)
    a, b = _filled(1 << 6, 1), _filled(1 << 12, 2)
    b.sample(4096)
    a.sample(1 << 13)
    assert kinds == [b._draw_kind, a._draw_kind] and b._draw_kind != a._draw_kind != DRAW_KIND
