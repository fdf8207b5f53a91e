"""StoreReplayGpu streams, n-step targets and sequences equal StoreReplay (and the host
twins of the device draws) bit for bit under the CUDA simulator.

Runs in its own pytest process with NUMBA_ENABLE_CUDASIM=1 (tests/conftest.py marks it
``cuda``).  Tiny rings and batches: the simulator runs one Python thread per lane.
"""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj._cuda import cuda_available
from numbatraj.data import ColumnSpec
from numbatraj.errors import SamplerError, SchemaError
from numbatraj.replay import StoreReplay
from numbatraj.replay import _lanes as L
from numbatraj.replay import _stream_kernels as sk

pytestmark = pytest.mark.skipif(
    not cuda_available(), reason="no CUDA device and NUMBA_ENABLE_CUDASIM is not 1"
)

E = 2
CAP = 14  # 4 demo rows + a ring of 10 = 5 steps of 2 envs


def _cols(trunc: bool = True) -> list[ColumnSpec]:
    c = [ColumnSpec("obs", np.float32, (2,)), ColumnSpec("reward", np.float32, ()),
         ColumnSpec("next_obs", np.float32, (2,)), ColumnSpec("done", np.bool_, ())]
    return c + [ColumnSpec("truncated", np.bool_, ())] if trunc else c


def _steps(rng, t, e=E, trunc=True):
    n = t * e
    out = {"obs": rng.standard_normal((t, e, 2), dtype=np.float32),
           "reward": rng.standard_normal((t, e), dtype=np.float32),
           "next_obs": rng.standard_normal((t, e, 2), dtype=np.float32),
           "done": (rng.random(n) < 0.25).reshape(t, e)}
    if trunc:
        out["truncated"] = (rng.random(n) < 0.15).reshape(t, e)
    return out


def _pair(trunc=True, demos=3, seed=5, **kw):
    from numbatraj.replay import StoreReplayGpu

    args = dict(seed=seed, n_envs=E, demo_capacity=4, **kw)
    gpu, cpu = StoreReplayGpu(_cols(trunc), CAP, **args), StoreReplay(_cols(trunc), CAP, **args)
    rng = np.random.default_rng(seed)
    if demos:
        d = {k: v.reshape(-1, *v.shape[2:])[:demos] for k, v in _steps(rng, 2, trunc=trunc).items()}
        gpu.add_demos(**d)
        cpu.add_demos(**d)
    return gpu, cpu, rng


def _fill(gpu, cpu, rng, plan=(1, 3, 2, 7, 1), trunc=True):
    """One step, T steps, a wrap, more steps than the ring, a wrap."""
    from numba import cuda

    for j, t in enumerate(plan):
        s = _steps(rng, t, trunc=trunc)
        if t == 1:
            s = {k: v[0] for k, v in s.items()}
        cpu.add(**s)
        if j % 2 and t > 1:  # device rows on some adds
            gpu.add(**{k: cuda.to_device(np.ascontiguousarray(v)) for k, v in s.items()})
        else:
            gpu.add(**s)


def _host_geom(cpu):
    return cpu._geom()


@pytest.mark.parametrize("trunc", [True, False])
def test_stream_adds_equal_the_host_replay(trunc):
    gpu, cpu, rng = _pair(trunc)
    _fill(gpu, cpu, rng, trunc=trunc)
    for name in cpu.columns:
        np.testing.assert_array_equal(gpu.storage(name), cpu.storage(name))
    assert (gpu.size, gpu.cursor, gpu.n_demo, gpu.n_envs) == (cpu.size, cpu.cursor, cpu.n_demo, E)
    np.testing.assert_array_equal(gpu.cut_first(), cpu.cut_first())
    st = gpu.state_array.copy_to_host()
    assert (st[L.CURSOR], st[L.SIZE], st[L.N_DEMO]) == (cpu.cursor, cpu.size, cpu.n_demo)
    with pytest.raises(SchemaError, match="n_envs=2"):
        gpu.add(**{k: v[:, :1] for k, v in _steps(rng, 2, trunc=trunc).items()})


@pytest.mark.parametrize("n, gamma, trunc", [(1, 0.9, True), (3, 0.99, True), (4, 0.5, False),
                                             (9, 0.9, True)])
def test_nstep_targets_equal_the_host_kernel_bit_for_bit(n, gamma, trunc):
    gpu, cpu, rng = _pair(trunc)
    _fill(gpu, cpu, rng, trunc=trunc)
    for _ in range(2):
        out, batch = gpu.sample(24, n_step=n, gamma=gamma)
        idx = batch.indices.copy_to_host()
        ret = np.empty(24, np.float32)
        disc = np.empty(24, np.float32)
        last = np.empty(24, np.int64)
        sk.nstep_cpu(idx, n, gamma, *cpu._nstep_arrays(), *_host_geom(cpu), ret, disc, last)
        np.testing.assert_array_equal(out["return"].copy_to_host(), ret)
        np.testing.assert_array_equal(out["discount"].copy_to_host(), disc)
        at_t, at_last = cpu.rows(idx), cpu.rows(last)
        for name in ("obs", "reward", "done"):
            np.testing.assert_array_equal(out[name].copy_to_host(), at_t[name])
        np.testing.assert_array_equal(out["next_obs"].copy_to_host(), at_last["next_obs"])


def test_nstep_sample_into_refills_device_outputs():
    from numba import cuda

    gpu, cpu, rng = _pair()
    _fill(gpu, cpu, rng)
    outs = {n: cuda.device_array((8, *s.shape), s.dtype) for n, s in cpu.columns.items()}
    outs["return"] = cuda.device_array(8, np.float32)
    outs["discount"] = cuda.device_array(8, np.float32)
    batch = gpu.sample_into(outs, 8, n_step=2, gamma=0.9)
    idx = batch.indices.copy_to_host()
    ret = np.empty(8, np.float32)
    disc = np.empty(8, np.float32)
    last = np.empty(8, np.int64)
    sk.nstep_cpu(idx, 2, 0.9, *cpu._nstep_arrays(), *_host_geom(cpu), ret, disc, last)
    np.testing.assert_array_equal(outs["return"].copy_to_host(), ret)
    np.testing.assert_array_equal(outs["next_obs"].copy_to_host(), cpu.rows(last)["next_obs"])
    with pytest.raises(SchemaError, match="outputs has columns"):
        gpu.sample_into({n: outs[n] for n in cpu.columns}, 8, n_step=2)


@pytest.mark.parametrize("t, within", [(1, False), (3, False), (2, True), (5, True)])
def test_sequences_equal_the_host_twin_and_the_host_windows(t, within):
    gpu, cpu, rng = _pair()
    _fill(gpu, cpu, rng)
    k0, k1 = np.uint64(gpu.seed & 0xFFFFFFFF), np.uint64(gpu.seed >> 32)
    for _ in range(2):
        draw = int(gpu.state_array.copy_to_host()[L.DRAW])
        out, batch = gpu.sample_sequences(16, t, within_episode=within)
        rows = batch.indices.copy_to_host()
        g = _host_geom(cpu)
        starts = np.empty(16, np.int64)
        sk.sequence_starts_cpu(np.uint64(draw), k0, k1, t, within, cpu.n_demo, cpu.size, E,
                               cpu._d, cpu._r, g[4], starts)
        np.testing.assert_array_equal(rows[:, 0], starts)
        want = np.empty((16, t), np.int64)
        first = np.empty((16, t), np.bool_)
        pad = np.empty((16, t), np.bool_)
        cut = cpu.cut_first()
        cut[0] = True
        sk.window_rows_cpu(starts, t, within, cpu._done_v, cpu._trunc_v, *g, cut, want, first,
                           pad)
        np.testing.assert_array_equal(rows, want)
        np.testing.assert_array_equal(out["is_first"].copy_to_host(), first)
        host = cpu.rows(want.reshape(-1))
        for name in cpu.columns:
            got = out[name].copy_to_host()
            np.testing.assert_array_equal(got.reshape(-1, *got.shape[2:]), host[name])
        if within:
            np.testing.assert_array_equal(out["obs_is_pad"].copy_to_host(), pad)
        assert int(gpu.state_array.copy_to_host()[L.DRAW]) == draw + 1


def test_sequence_windows_stay_inside_one_stream():
    gpu, cpu, rng = _pair(demos=0)
    _fill(gpu, cpu, rng, plan=(5, 5, 3))
    _, batch = gpu.sample_sequences(32, 4)
    rows = batch.indices.copy_to_host()
    order = cpu.time_order()  # env e's rows are every E-th held ring row
    pos = {int(p): k for k, p in enumerate(order)}
    for w in rows:
        ks = [pos[int(p)] for p in w]
        assert all(b - a == E for a, b in zip(ks, ks[1:]))


def test_a_window_longer_than_every_stream_is_refused():
    # next_of, frame stacks and prioritized sequences run on the device too:
    # tests/cuda/test_replay_gpu_next_of.py
    gpu = _pair()[0]  # 3 demo rows, an empty ring
    with pytest.raises(SamplerError, match="T=9 is longer than every stream"):
        gpu.sample_sequences(2, 9)


def test_to_host_keeps_the_streams():
    gpu, cpu, rng = _pair()
    _fill(gpu, cpu, rng)
    host = gpu.to_host()
    assert host.n_envs == E
    np.testing.assert_array_equal(host.cut_first(), cpu.cut_first())
    np.testing.assert_array_equal(host.time_order(), cpu.time_order())


def test_nstep_with_a_quantised_reward_is_refused_on_the_device():
    """The device walk reads the stored words: a quantised reward would be summed as codes
    (the host dequantises).  Refused by name, nothing drawn; other draws still work."""
    from numbatraj.replay import StoreReplayGpu

    rep = StoreReplayGpu(_cols(), CAP, seed=1, n_envs=E, quantize={"reward": (-4.0, 4.0)})
    rep.add(**_steps(np.random.default_rng(0), 4))
    with pytest.raises(SamplerError, match="quantised 'reward'"):
        rep.sample(4, n_step=2, gamma=0.9)
    out = rep.sample(4)
    out = out[0] if isinstance(out, tuple) else out
    assert out["reward"].shape == (4,)
    host = StoreReplay(_cols(), CAP, seed=1, n_envs=E, quantize={"reward": (-4.0, 4.0)})
    host.add(**_steps(np.random.default_rng(0), 4))
    out = host.sample(4, n_step=2, gamma=0.9)
    out = out[0] if isinstance(out, tuple) else out
    assert out["return"].shape == (4,)
