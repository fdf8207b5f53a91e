"""StoreReplayGpu's next_of, frame stacks and prioritized sequences equal StoreReplay (and the
host twins of the device draws) bit for bit under the CUDA simulator.

The device draws its rows; the host replay, fed the same adds, gathers those same rows
through its own code (``_gather_ext``, ``rows``, ``update_priorities``), and every output is
compared exactly.  Runs in its own pytest process with NUMBA_ENABLE_CUDASIM=1
(tests/conftest.py marks it ``cuda``).  Tiny rings and batches: the simulator runs one Python
thread per lane.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from numbatraj._cuda import cuda_available
from numbatraj.data import ColumnSpec
from numbatraj.data.index_batch import IndexBatch
from numbatraj.errors import SamplerError, SchemaError
from numbatraj.replay import StoreReplay
from numbatraj.replay import _lanes as L
from numbatraj.replay import _stream_kernels as sk
from tests.cuda.trees import assert_trees_match

pytestmark = pytest.mark.skipif(
    not cuda_available(), reason="no CUDA device and NUMBA_ENABLE_CUDASIM is not 1"
)

E = 2
CAP = 16  # 4 demo rows + a ring of 12 = 6 steps of 2 envs
NEXT = {"next_obs": "obs", "next_pix": "pix"}
STACK = {"pix": 3}


def _cols(trunc: bool = True) -> list[ColumnSpec]:
    c = [ColumnSpec("obs", np.float32, (2,)), ColumnSpec("pix", np.uint8, (2, 2)),
         ColumnSpec("reward", np.float32, ()), ColumnSpec("done", np.bool_, ())]
    return c + [ColumnSpec("truncated", np.bool_, ())] if trunc else c


def _steps(rng, t, e=E, trunc=True):
    n = t * e
    out = {"obs": rng.standard_normal((t, e, 2), dtype=np.float32),
           "pix": rng.integers(0, 255, (t, e, 2, 2), dtype=np.uint8),
           "reward": rng.standard_normal((t, e), dtype=np.float32),
           "done": (rng.random(n) < 0.25).reshape(t, e),
           "next_obs": rng.standard_normal((t, e, 2), dtype=np.float32),
           "next_pix": rng.integers(0, 255, (t, e, 2, 2), dtype=np.uint8)}
    if trunc:
        out["truncated"] = (rng.random(n) < 0.15).reshape(t, e)
    return out


def _pair(trunc=True, demos=3, seed=5, next_of=NEXT, frame_stack=STACK, cap=CAP, **kw):
    from numbatraj.replay import StoreReplayGpu

    args = dict(seed=seed, n_envs=E, demo_capacity=4, next_of=next_of, frame_stack=frame_stack,
                **kw)
    gpu, cpu = StoreReplayGpu(_cols(trunc), cap, **args), StoreReplay(_cols(trunc), cap, **args)
    rng = np.random.default_rng(seed)
    if demos:
        d = {k: v.reshape(-1, *v.shape[2:])[:demos] for k, v in _steps(rng, 2, trunc=trunc).items()}
        gpu.add_demos(**d)
        cpu.add_demos(**d)
    return gpu, cpu, rng


def _fill(gpu, cpu, rng, plan=(1, 3, 2, 9, 1, 2), trunc=True):
    """One step, T steps, a wrap, more steps than the ring, wraps; device rows on some."""
    from numba import cuda

    for j, t in enumerate(plan):
        s = _steps(rng, t, trunc=trunc)
        if t == 1:
            s = {k: v[0] for k, v in s.items()}
        cpu.add(**s)
        if j % 2 and t > 1:
            gpu.add(**{k: cuda.to_device(np.ascontiguousarray(v)) for k, v in s.items()})
        else:
            gpu.add(**s)


def _host(out):
    return {k: v.copy_to_host() for k, v in out.items()}


def _assert_same(got, want):
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def _side_state(rep):
    rows, values = rep._side.state()
    return rows, values


@pytest.mark.parametrize("trunc", [True, False])
def test_adds_keep_the_host_side_table_and_its_device_mirror(trunc):
    gpu, cpu, rng = _pair(trunc)
    _fill(gpu, cpu, rng, trunc=trunc)
    for name in cpu.columns:
        np.testing.assert_array_equal(gpu.storage(name), cpu.storage(name))
    (gr, gv), (cr, cv) = _side_state(gpu), _side_state(cpu)
    np.testing.assert_array_equal(gr, cr)
    _assert_same(gv, cv)
    side = gpu._side
    slot = side.d_slot.copy_to_host()[:, 0]
    np.testing.assert_array_equal(slot, side.slot)  # the mirror holds the host's slots
    kept = slot[slot >= 0]
    for t, pool in side.pool.items():
        dev = side.d_pool[t].copy_to_host()
        np.testing.assert_array_equal(dev[kept], pool[kept].reshape(kept.shape[0], -1))
    assert side.n_kept >= E  # every stream's newest row at least


@pytest.mark.parametrize("n_step, gamma", [(None, 0.9), (1, 0.9), (3, 0.99), (8, 0.5)])
@pytest.mark.parametrize("trunc", [True, False])
def test_transitions_equal_the_host_gather_bit_for_bit(n_step, gamma, trunc):
    gpu, cpu, rng = _pair(trunc)
    _fill(gpu, cpu, rng, trunc=trunc)
    ns = None if n_step is None else (n_step, gamma)
    for _ in range(2):
        out, batch = gpu.sample(24, n_step=n_step, gamma=gamma)
        got = _host(out)
        idx = batch.indices.copy_to_host()
        want = cpu._new_outputs_ext(24, ns)
        cpu._gather_ext(idx, want, 24, ns)  # the host's own code at the device's rows
        _assert_same(got, want)
        assert got["pix"].shape == (24, 3, 2, 2) and got["next_pix"].shape == (24, 3, 2, 2)
        assert got["next_obs"].shape == (24, 2)


def test_sample_into_device_outputs_with_next_of_and_stacks():
    from numba import cuda

    gpu, cpu, rng = _pair()
    _fill(gpu, cpu, rng)
    specs = cpu._out_specs((2, 0.9))
    outs = {n: cuda.device_array((8, *shp), dt) for n, (dt, shp) in specs.items()}
    for _ in range(2):  # the same buffers refilled
        batch = gpu.sample_into(outs, 8, n_step=2, gamma=0.9)
        want = cpu._new_outputs_ext(8, (2, 0.9))
        cpu._gather_ext(batch.indices.copy_to_host(), want, 8, (2, 0.9))
        _assert_same(_host(outs), want)
    bad = dict(outs)
    bad["next_pix"] = cuda.device_array((8, 2, 2), np.uint8)  # the unstacked shape
    with pytest.raises(SchemaError, match=r"outputs\['next_pix'\] is uint8 \(8, 2, 2\), "
                                          r"expected a C-contiguous uint8 \(8, 3, 2, 2\)"):
        gpu.sample_into(bad, 8, n_step=2)


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_the_stack_body_equals_the_host_stack_kernel(depth):
    _, cpu, rng = _pair()
    _fill(cpu, cpu, rng)  # host only: the body against the host kernel
    g = cpu._geom()
    rows = cpu.time_order()
    want = np.empty((rows.shape[0], depth), np.int64)
    sk.stack_rows_cpu(rows, depth, cpu._done_v, cpu._trunc_v, *g, want)
    got = np.empty_like(want)
    sk.stack_rows_twin_cpu(rows, depth, False, cpu._done_v, cpu._trunc_v, *g, got)
    np.testing.assert_array_equal(got, want)
    nxt = np.empty(rows.shape[0], np.int64)
    sk.next_rows_cpu(rows, *g, nxt)
    sk.stack_rows_twin_cpu(rows, depth, True, cpu._done_v, cpu._trunc_v, *g, got)
    np.testing.assert_array_equal(got, np.concatenate([want[:, 1:], nxt[:, None]], axis=1))


@pytest.mark.parametrize("t, within", [(1, False), (3, False), (2, True), (4, True)])
def test_sequences_with_next_of_equal_the_host_rows(t, within):
    gpu, cpu, rng = _pair()
    _fill(gpu, cpu, rng)
    out, batch = gpu.sample_sequences(12, t, within_episode=within)
    rows = batch.indices.copy_to_host()
    host = cpu.rows(rows.reshape(-1))  # every column and next_of target, unstacked
    got = _host(out)
    for name in (*cpu.columns, *NEXT):
        np.testing.assert_array_equal(got[name].reshape(-1, *got[name].shape[2:]), host[name])
    if within:
        np.testing.assert_array_equal(got["next_obs_is_pad"], got["obs_is_pad"])


def _tree_state(gpu):
    return (gpu.state_array.copy_to_host(), gpu._fstate.copy_to_host(), gpu._sums.copy_to_host(),
            gpu._mins.copy_to_host(), gpu._gen.copy_to_host())


@pytest.mark.parametrize("t, within", [(1, False), (3, False), (2, True), (5, True)])
def test_prioritized_window_starts_equal_the_host_twin(t, within):
    gpu, cpu, rng = _pair(prioritized=True, alpha=0.7, beta=0.5)
    _fill(gpu, cpu, rng)
    np.testing.assert_array_equal(gpu.tree_leaves(), cpu.sampler.tree.leaves)
    gpu.update_priorities(np.arange(CAP - 6, CAP), np.linspace(0.1, 4, 6))  # uneven mass
    for _ in range(2):
        st, fs, sums, mins, gen = _tree_state(gpu)
        out, batch = gpu.sample_sequences(16, t, within_episode=within)
        starts, w, stamps = np.empty(16, np.int64), np.empty(16, np.float32), np.empty(16, np.int64)
        st2 = st.copy()
        sk.per_sequence_starts_cpu(st2, fs, sums, mins, gpu._p, gen, gpu._k0, gpu._k1, t, within,
                                   gpu.demo_capacity, gpu.ring_capacity, E, starts, w, stamps)
        rows = batch.indices.copy_to_host()
        np.testing.assert_array_equal(rows[:, 0], starts)
        np.testing.assert_array_equal(batch.weights.copy_to_host(), w)
        np.testing.assert_array_equal(batch.stamps.copy_to_host(), stamps)
        np.testing.assert_array_equal(gpu.state_array.copy_to_host(), st2)  # draw advanced
        held = {int(p): k for k, p in enumerate(cpu.time_order())}
        ks = np.array([held[int(p)] for p in starts])  # the starts are held rows
        if not within:  # spanning: online rows with T steps of their stream held
            assert (starts >= gpu.demo_capacity).all()
            assert (ks - cpu.n_demo < cpu.size - (t - 1) * E).all()
        want, first, pad = (np.empty((16, t), np.int64), np.empty((16, t), np.bool_),
                            np.empty((16, t), np.bool_))
        cut = cpu.cut_first()
        cut[0] = True
        sk.window_rows_cpu(starts, t, within, cpu._done_v, cpu._trunc_v, *cpu._geom(), cut, want,
                           first, pad)
        np.testing.assert_array_equal(rows, want)
        np.testing.assert_array_equal(out["is_first"].copy_to_host(), first)


def test_prioritized_window_starts_follow_the_priorities():
    """A window start with all the mass is drawn by every lane (spanning and within)."""
    gpu, cpu, rng = _pair(prioritized=True, demos=0)
    _fill(gpu, cpu, rng, plan=(6,))
    order = cpu.time_order()
    target = int(order[2])  # logical row 2: a spanning start for T = 2
    pr = np.zeros(CAP)
    pr[target] = 1.0
    gpu.update_priorities(order, pr[order])
    for within in (False, True):
        _, batch = gpu.sample_sequences(8, 2, within_episode=within)
        assert (batch.indices.copy_to_host()[:, 0] == target).all()


def test_window_priorities_match_numpy_bit_for_bit():
    rng = np.random.default_rng(3)
    for t in [1, 5, 8, 9, 64, 127, 128, 129, 300, 1031]:
        for dt in (np.float32, np.float64, np.int16):
            td = (rng.standard_normal((5, t)) * 10 ** rng.uniform(-4, 4, (5, t))).astype(dt)
            for eta in (0.9, 0.0, 1.0):
                a = np.abs(td.astype(np.float64))
                want = eta * a.max(axis=1) + (1.0 - eta) * a.mean(axis=1)
                got = np.empty(5)
                sk.window_priorities_cpu(td, eta, got)
                np.testing.assert_array_equal(got, want)


def test_window_priority_kernel_equals_the_host_twin():
    from numba import cuda

    from numbatraj.replay import _ring_cuda as rc
    from numbatraj.replay import _stream_cuda as stc

    rng = np.random.default_rng(4)
    for t, dt in [(3, np.float32), (130, np.float64)]:
        td = rng.standard_normal((6, t)).astype(dt)
        rows = rng.integers(0, 99, (6, t))
        pr, starts = cuda.device_array(6, np.float64), cuda.device_array(6, np.int64)
        stc._window_priorities_cuda[rc.blocks(6), rc.THREADS_PER_BLOCK](
            cuda.to_device(td), cuda.to_device(rows), 0.9, pr, starts)
        want = np.empty(6)
        sk.window_priorities_cpu(td, 0.9, want)
        np.testing.assert_array_equal(pr.copy_to_host(), want)
        np.testing.assert_array_equal(starts.copy_to_host(), rows[:, 0])


@pytest.mark.parametrize("within", [False, True])
def test_window_updates_equal_the_host_replay_bit_for_bit(within):
    from numba import cuda

    gpu, cpu, rng = _pair(prioritized=True, alpha=0.7)
    _fill(gpu, cpu, rng)
    skips = []
    for step in range(4):
        out, batch = gpu.sample_sequences(10, 3, within_episode=within)
        rows, w, st = (a.copy_to_host() for a in (batch.indices, batch.weights, batch.stamps))
        td = rng.standard_normal((10, 3)).astype(np.float32) * 2
        if step == 1:  # overwrite sampled rows: their updates are stale on both sides
            s = _steps(rng, 6)
            gpu.add(**s)
            cpu.add(**s)
        eta = 0.9 if step < 2 else 0.5
        dev_td = cuda.to_device(td) if step % 2 else td  # device and host TD errors
        skipped = gpu.update_priorities(batch, dev_td, eta=eta)
        host_skipped = cpu.update_priorities(IndexBatch(rows, weights=w, stamps=st), td, eta=eta)
        assert skipped == host_skipped
        skips.append(skipped)
        assert_trees_match(gpu, cpu.sampler)  # bit for bit under the simulator
        assert gpu._fstate.copy_to_host()[L.MAXP] == cpu.sampler.state_dict()["max_priority"]
    assert skips[1] > 0 and skips[0] == 0


def test_checkpoints_keep_the_side_table_in_the_host_format(tmp_path):
    from numbatraj.replay import StoreReplayGpu

    gpu, cpu, rng = _pair()
    _fill(gpu, cpu, rng)
    gs, cs = gpu.state_dict()["side"], cpu.state_dict()["side"]
    _assert_same(gs, cs)  # one format: the same rows and values
    gpu.save(tmp_path / "g.ckpt")
    cpu.save(tmp_path / "c.ckpt")
    with h5py.File(tmp_path / "g.ckpt") as fg, h5py.File(tmp_path / "c.ckpt") as fc:
        assert set(fg["side"]) == set(fc["side"]) == {"rows", *NEXT}
        for k in fc["side"]:
            np.testing.assert_array_equal(fg["side"][k][()], fc["side"][k][()])
    back = StoreReplayGpu.load(tmp_path / "g.ckpt")
    _assert_same(_side_state(back)[1], _side_state(gpu)[1])
    slot = back._side.d_slot.copy_to_host()[:, 0]  # the mirror of the reloaded table
    np.testing.assert_array_equal(slot, back._side.slot)
    np.testing.assert_array_equal(slot >= 0, gpu._side.slot >= 0)
    a, _ = gpu.sample(16, n_step=3)
    b, _ = back.sample(16, n_step=3)
    _assert_same(_host(b), _host(a))  # the resumed replay draws exactly what the saved one would
    s = _steps(rng, 2)  # and keeps going alike
    for r in (gpu, back, cpu):
        r.add(**s)
    a, ba = gpu.sample_sequences(8, 2)
    b, bb = back.sample_sequences(8, 2)
    _assert_same(_host(b), _host(a))
    other = StoreReplayGpu(_cols(), CAP, seed=5, n_envs=E, demo_capacity=4, next_of=NEXT,
                           frame_stack=STACK)
    other.load_state_dict(gpu.state_dict())
    a, _ = gpu.sample(8)
    b, _ = other.sample(8)
    _assert_same(_host(b), _host(a))


def test_to_host_carries_next_of_frame_stacks_and_the_side_table(tmp_path):
    gpu, cpu, rng = _pair()
    _fill(gpu, cpu, rng)
    host = gpu.to_host()
    assert host.next_of == NEXT and host.frame_stack == STACK
    _assert_same(host.rows(), cpu.rows())
    assert gpu.dump(tmp_path / "g.h5") == cpu.dump(tmp_path / "c.h5")


def test_device_next_obs_on_the_side_table_growth():
    """Many episode ends: the side pool doubles past its first 16 rows, the mirror follows."""
    gpu, cpu, rng = _pair(demos=0, cap=36)  # a ring of 32 rows
    for t in (2, 9, 9):
        s = _steps(rng, t)
        s["done"][:] = True  # every row ends an episode: every next_obs is kept
        gpu.add(**s)
        cpu.add(**s)
    assert gpu._side.pool["next_obs"].shape[0] > 16 and gpu._side.n_kept == 32
    assert gpu._side.d_pool["next_obs"].shape[0] == gpu._side.pool["next_obs"].shape[0]
    out, batch = gpu.sample(24)
    want = cpu._new_outputs_ext(24, None)
    cpu._gather_ext(batch.indices.copy_to_host(), want, 24, None)
    _assert_same(_host(out), want)


def _message(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the caller compares the two
        return type(exc), str(exc)
    raise AssertionError("no error")


def test_bad_inputs_fail_as_on_the_host_and_write_nothing():
    from numba import cuda

    from numbatraj.replay import StoreReplayGpu

    for kw in [dict(next_of={"next_obs": "nope"}), dict(next_of={"obs": "obs"}),
               dict(frame_stack={"nope": 2}), dict(frame_stack={"obs": 0})]:
        got = _message(lambda kw=kw: StoreReplayGpu(_cols(), CAP, demo_capacity=4, **kw))
        assert got == _message(lambda kw=kw: StoreReplay(_cols(), CAP, demo_capacity=4, **kw))
    no_ends = [c for c in _cols() if c.name not in ("done", "truncated")]
    got = _message(lambda: StoreReplayGpu(no_ends, 8, frame_stack={"obs": 2}))
    assert got == _message(lambda: StoreReplay(no_ends, 8, frame_stack={"obs": 2}))
    assert got[0] is SchemaError and "frame_stack needs episode boundaries" in got[1]

    gpu, cpu, rng = _pair(prioritized=True)
    _fill(gpu, cpu, rng)
    before = (gpu.state_array.copy_to_host(), gpu.storage("obs"), _side_state(gpu)[0],
              gpu.tree_leaves())
    s = _steps(rng, 2)
    cases = [
        lambda r: r.add(**{k: v for k, v in s.items() if k != "next_pix"}),  # a target missing
        lambda r: r.add(**{**s, "next_obs": s["next_obs"][:1]}),  # targets of another length
        lambda r: r.add(**{k: v[:, :1] for k, v in s.items()}),  # n_envs mismatch
        lambda r: r.add(**{**s, "next_obs": s["next_obs"].astype(np.float64)}),  # a cast
        lambda r: r.sample_sequences(4, 99),  # T longer than every stream
        lambda r: r.sample(4, n_step=0),
    ]
    for case in cases:
        got = _message(lambda case=case: case(gpu))
        assert got == _message(lambda case=case: case(cpu)), got
    _, batch = gpu.sample_sequences(4, 3)
    rows, w, st = (a.copy_to_host() for a in (batch.indices, batch.weights, batch.stamps))
    hb = IndexBatch(rows, weights=w, stamps=st)
    for td, kw in [(np.ones((4, 2)), {}), (np.ones(4), {}), (np.array([["a"] * 3] * 4), {}),
                   (np.ones((4, 3)), dict(eta=1.5)), (np.ones((4, 3)), dict(eta=-0.1)),
                   (np.full((4, 3), np.nan), {})]:
        got = _message(lambda td=td, kw=kw: gpu.update_priorities(batch, td, **kw))
        assert got == _message(lambda td=td, kw=kw: cpu.update_priorities(hb, td, **kw)), got
        assert got[0] is SamplerError
    got = _message(lambda: gpu.update_priorities(batch, cuda.to_device(np.ones((4, 2)))))
    assert got[0] is SamplerError and "needs td of shape (4, 3)" in got[1]
    got = _message(lambda: gpu.update_priorities(batch, cuda.to_device(np.ones((4, 3), np.int32))))
    assert got[0] is SamplerError and "float32 or float64" in got[1]
    after = (gpu.state_array.copy_to_host(), gpu.storage("obs"), _side_state(gpu)[0],
             gpu.tree_leaves())
    before[0][L.DRAW] += 1  # the one draw above
    for x, y in zip(before, after):
        np.testing.assert_array_equal(x, y)  # nothing written


def test_prioritized_spanning_windows_need_online_rows():
    gpu, cpu, _ = _pair(prioritized=True, demos=4)  # demos only, an empty ring
    got = _message(lambda: gpu.sample_sequences(2, 2))
    assert got == _message(lambda: cpu.sample_sequences(2, 2))
    assert got[0] is SamplerError and "no online window of T=2" in got[1]
    out, _ = gpu.sample_sequences(2, 2, within_episode=True)  # within: the demos
    assert out["obs"].shape == (2, 2, 2)
