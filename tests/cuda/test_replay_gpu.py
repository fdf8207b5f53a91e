"""StoreReplayGpu equals StoreReplay and its host twin under the CUDA simulator.

Runs in its own pytest process with NUMBA_ENABLE_CUDASIM=1 (tests/conftest.py marks it
``cuda``).  Capacities and batches stay tiny: the simulator runs one Python thread per lane.
"""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj._cuda import cuda_available
from numbatraj.errors import SamplerError, SchemaError
from numbatraj.replay import StoreReplay
from numbatraj.replay import _lanes as L
from tests.cuda.trees import assert_trees_match
from tests.reference import philox_rows_ref, sumtree_find_ref, time_order_ref
from tests.replay.helpers import row_ids, rows, sac_columns

pytestmark = pytest.mark.skipif(
    not cuda_available(), reason="no CUDA device and NUMBA_ENABLE_CUDASIM is not 1"
)

QUANT = {"next_obs": (-1.0, 200.0)}
ADDS = [1, 5, 3, 17, 2]  # single row, batch, wrap, batch larger than the ring, wrap


def _pair(prioritized=False, **kw):
    from numbatraj.replay import StoreReplayGpu

    args = dict(prioritized=prioritized, seed=7, quantize=QUANT, **kw)
    return StoreReplayGpu(sac_columns(), 12, **args), StoreReplay(sac_columns(), 12, **args)


def _fill(gpu, cpu, demos=0):
    from numba import cuda

    if demos:
        gpu.add_demos(**rows(900, demos))
        cpu.add_demos(**rows(900, demos))
    start = 0
    for j, n in enumerate(ADDS):
        batch = rows(start, n)
        if n == 1:
            batch = {k: v[0] for k, v in batch.items()}
        cpu.add(**batch)
        if j % 2:  # device rows on every other add
            batch = {k: cuda.to_device(np.ascontiguousarray(v)) for k, v in batch.items()}
        gpu.add(**batch)
        start += n


def _host_state(gpu):
    return gpu.state_array.copy_to_host()


@pytest.mark.parametrize("demos", [0, 3])
def test_adds_and_wraps_equal_the_host_replay(demos):
    gpu, cpu = _pair(demo_capacity=4 if demos else 0)
    _fill(gpu, cpu, demos)
    for name in cpu.columns:
        np.testing.assert_array_equal(gpu.storage(name), cpu.storage(name))
    assert (gpu.size, gpu.cursor, gpu.n_demo) == (cpu.size, cpu.cursor, cpu.n_demo)
    st = _host_state(gpu)
    assert (st[L.CURSOR], st[L.SIZE], st[L.N_DEMO]) == (cpu.cursor, cpu.size, cpu.n_demo)


@pytest.mark.parametrize("kw, ere", [
    ({}, None), ({"demo_capacity": 4}, None), ({"demo_capacity": 4, "demo_fraction": 0.25}, None),
    ({}, (0.5, 3)), ({"demo_capacity": 4, "demo_fraction": 0.5}, (0.9, 2)),
])
def test_uniform_draws_equal_host_twin_and_gather_equals_host_rows(kw, ere):
    from numba import cuda

    gpu, cpu = _pair(**kw)
    _fill(gpu, cpu, demos=3 if kw.get("demo_capacity") else 0)
    if ere:
        gpu.configure_ere(True, eta=ere[0], c_min=ere[1])
        cpu.configure_ere(True, eta=ere[0], c_min=ere[1])
    held = set(cpu.time_order().tolist())
    for step in range(3):
        k = {"k": step, "K": 3} if ere else {}
        before = _host_state(gpu)
        if ere:
            before[L.ERE_K], before[L.ERE_BIGK] = step, 3
        out = {n: cuda.device_array((40, *s.shape), np.float32 if n in QUANT else s.dtype)
               for n, s in cpu.columns.items()}
        batch = gpu.sample_into(out, 40, **k)
        idx = batch.indices.copy_to_host()
        twin = np.empty(40, np.int64)
        frac = -1.0 if gpu._fraction is None else gpu._fraction
        eta, c_min = ere if ere else (1.0, 1)
        L.uniform_lanes_cpu(before, gpu._k0, gpu._k1, gpu.demo_capacity, gpu.ring_capacity, frac,
                            bool(ere), eta, c_min, twin)
        np.testing.assert_array_equal(idx, twin)
        assert _host_state(gpu)[L.DRAW] == step + 1 == before[L.DRAW]
        assert set(idx.tolist()) <= held
        host_rows = cpu.rows(idx)
        for n in cpu.columns:
            np.testing.assert_array_equal(out[n].copy_to_host(), host_rows[n])
        if ere:
            c = gpu.ere_window(k=step, K=3)
            assert c == cpu.ere_window(k=step, K=3)
            online = row_ids(host_rows)[row_ids(host_rows) < 900]
            assert online.min() >= 28 - c


def test_joint_uniform_lanes_are_the_philox_reference():
    gpu, cpu = _pair()
    _fill(gpu, cpu)
    batch = gpu.sample_indices(20)
    n = cpu.n_rows
    logical = philox_rows_ref(gpu.seed, n, 20, 0)
    order = np.array(time_order_ref(0, 0, 12, cpu.size, cpu.cursor))
    np.testing.assert_array_equal(batch.indices.copy_to_host(), order[logical])


@pytest.mark.parametrize("kw", [{}, {"demo_capacity": 4, "demo_fraction": 0.5}])
def test_prioritized_tree_draws_and_updates_equal_host(kw):
    gpu, cpu = _pair(prioritized=True, alpha=0.7, beta=0.5, **kw)
    _fill(gpu, cpu, demos=2 if kw else 0)
    np.testing.assert_array_equal(gpu.tree_leaves(), cpu.sampler.tree.leaves)
    rng = np.random.default_rng(0)
    skips = []
    for step in range(3):
        st, fs = _host_state(gpu), gpu._fstate.copy_to_host()
        sums, mins, gen = gpu._sums.copy_to_host(), gpu._mins.copy_to_host(), gpu._gen.copy_to_host()
        batch = gpu.sample_indices(24)
        idx, w, stamps = (a.copy_to_host() for a in (batch.indices, batch.weights, batch.stamps))
        t_idx, t_w, t_st = np.empty(24, np.int64), np.empty(24, np.float32), np.empty(24, np.int64)
        frac = -1.0 if gpu._fraction is None else gpu._fraction
        L.per_lanes_cpu(st.copy(), fs, sums, mins, gpu._p, gen, gpu._k0, gpu._k1, gpu.demo_capacity,
                        gpu.ring_capacity, frac, False, 1.0, 1, t_idx, t_w, t_st)
        np.testing.assert_array_equal(idx, t_idx)
        np.testing.assert_array_equal(w, t_w)
        np.testing.assert_array_equal(stamps, t_st)
        if not kw:  # joint draws are the sum-tree search of their masses
            u = np.array([L.philox_uniform(np.uint64(st[L.DRAW]), np.uint64(i), gpu._k0, gpu._k1)
                          for i in range(24)])
            leaves = cpu.sampler.tree.leaves
            np.testing.assert_array_equal(idx, sumtree_find_ref(leaves, (np.arange(24) + u) * (leaves.sum() / 24)))
        pr = rng.random(24) * 3
        if step == 1:  # overwrite some sampled rows: their updates are stale on both sides
            gpu.add(**rows(500, 2))
            cpu.add(**rows(500, 2))
        skipped = gpu.update_priorities(batch, pr)
        host_skipped = cpu.sampler.update_priorities(idx, pr, stamps)
        assert skipped == host_skipped
        skips.append(skipped)
        assert_trees_match(gpu, cpu.sampler)  # bit for bit under the simulator
    assert skips[1] > 0 and skips[0] == skips[2] == 0  # the overwrite made updates stale


def test_errors_and_buffer_reuse():
    from numba import cuda

    gpu, _ = _pair()
    with pytest.raises(SamplerError, match="empty"):
        gpu.sample(4)
    gpu.add(**rows(0, 5))
    with pytest.raises(SchemaError, match="'obs' is float32, got a device array of float64"):
        gpu.add(**{**rows(0, 2), "obs": cuda.to_device(np.zeros((2, 3)))})
    assert gpu.size == 5
    out = {n: np.zeros((4, *s.shape), s.dtype) for n, s in gpu.columns.items()}
    with pytest.raises(SchemaError, match="must be a device array"):
        gpu.sample_into(out, 4)
    b1 = gpu.sample_indices(4)
    b2 = gpu.sample_indices(4)
    assert b1.indices is b2.indices  # preallocated per batch size: no allocation per call
    with pytest.raises(SamplerError, match="prioritized"):
        gpu.update_priorities(b1, np.ones(4))
    gpu.configure_ere(True, c_min=2)
    with pytest.raises(SamplerError, match="set_ere_step"):
        gpu.sample_indices(4)
    gpu.set_ere_step(k=1, K=2)
    gpu.sample_indices(4)  # k, K now live in device memory


@pytest.mark.parametrize("prioritized", [False, True])
def test_checkpoint_resumes_the_device_streams(tmp_path, prioritized):
    gpu, cpu = _pair(prioritized=prioritized, demo_capacity=4, demo_fraction=0.25)
    _fill(gpu, cpu, demos=2)
    first = gpu.sample_indices(16)
    if prioritized:
        gpu.update_priorities(first, np.linspace(0, 2, 16))
    path = tmp_path / "gpu.ckpt"
    gpu.save(path)
    back = type(gpu).load(path)
    for name in cpu.columns:
        np.testing.assert_array_equal(back.storage(name), gpu.storage(name))
    if prioritized:
        np.testing.assert_array_equal(back._sums.copy_to_host(), gpu._sums.copy_to_host())
        np.testing.assert_array_equal(back._mins.copy_to_host(), gpu._mins.copy_to_host())
    for _ in range(2):
        a, b = gpu.sample_indices(16), back.sample_indices(16)
        np.testing.assert_array_equal(a.indices.copy_to_host(), b.indices.copy_to_host())
        if prioritized:
            np.testing.assert_array_equal(a.weights.copy_to_host(), b.weights.copy_to_host())
            assert gpu.update_priorities(a, np.ones(16)) == back.update_priorities(b, np.ones(16))
    from numbatraj.errors import IntegrityError

    with pytest.raises(IntegrityError, match="StoreReplayGpu checkpoint"):
        StoreReplay.load(path)
    cpu.save(tmp_path / "cpu.ckpt")
    with pytest.raises(IntegrityError, match="StoreReplay checkpoint"):
        type(gpu).load(tmp_path / "cpu.ckpt")


def test_dump_and_from_store_through_the_host(tmp_path):
    gpu, cpu = _pair()
    _fill(gpu, cpu)
    assert gpu.dump(tmp_path / "g.h5") == cpu.dump(tmp_path / "c.h5")
    back = type(gpu).from_store(tmp_path / "g.h5", 6, quantize=QUANT)
    host = back.to_host()
    np.testing.assert_array_equal(row_ids(host.rows()), row_ids(cpu.rows())[-6:])


def test_checkpoint_with_an_impossible_cursor_is_refused(tmp_path):
    import json

    import h5py

    from numbatraj.errors import IntegrityError

    gpu, cpu = _pair()
    _fill(gpu, cpu, demos=0)
    path = tmp_path / "gpu.ckpt"
    gpu.save(path)
    with h5py.File(path, "r+") as f:
        state = json.loads(f.attrs["state"])
        r = gpu.ring_capacity
        state["size"], state["cursor"] = r - 1, 0  # not wrapped, yet the cursor is not size
        f.attrs["state"] = json.dumps(state)
        _unseal(f)
    with pytest.raises(IntegrityError, match="is impossible"):
        type(gpu).load(path)


def _unseal(f):
    """Drop a checkpoint's digests after a deliberate edit: the load checks these tests
    exercise are about content, not corruption (which the digests would catch first)."""
    objs = [f]
    f.visititems(lambda _name, obj: objs.append(obj))
    for obj in objs:
        for attr in ("digests", "nbh64"):
            if attr in obj.attrs:
                del obj.attrs[attr]


def _corrupt_text(path, state):
    path.write_text("hello")


def _corrupt_no_attr(path, state):
    import h5py

    with h5py.File(path, "w") as f:
        f["x"] = np.zeros(3)


def _edit_attrs(fn):
    def edit(path, state):
        import json

        import h5py

        with h5py.File(path, "r+") as f:
            st = json.loads(f.attrs["state"])
            fn(f, st)
            f.attrs["state"] = json.dumps(st)
            _unseal(f)

    return edit


def _set(key, value):
    def fn(f, st):
        st[key] = value

    return fn


def _dataset(key, fn):
    def edit(f, st):
        fn(f, key)

    return edit


def _replace_ring_obs(f, key):
    del f[key]
    f[key] = np.zeros((2, 3), np.float32)


def _set_item(index, value):
    def fn(f, key):
        f[key][index] = value

    return fn


def _delete(f, key):
    del f[key]


def _version(f, st):
    f.attrs["numbatraj_replay"] = 99


def _bad_json(f, st):
    f.attrs["config"] = "{not json"


def _max_priority(f, st):  # the device keeps it in its state, the host in the sampler's
    if "sampler" in st:
        st["sampler"]["max_priority"] = -1.0
    else:
        st["max_priority"] = -1.0


#: every check the host loader makes, as (edit, error, message); the same edit of a device
#: checkpoint must fail the same way (the device loader used to skip four of them)
CORRUPTIONS = {
    "not hdf5": (_corrupt_text, "IntegrityError", r"not a readable replay checkpoint"),
    "no format attr": (_corrupt_no_attr, "IntegrityError", r"not a replay checkpoint \(no"),
    "format version": (_edit_attrs(_version), "IntegrityError", r"format version 99"),
    "unreadable json": (_edit_attrs(_bad_json), "IntegrityError", r"unreadable config/state"),
    "missing state key": (_edit_attrs(lambda f, st: st.pop("n_added")), "IntegrityError",
                          r"unreadable ring state"),
    "ring state out of range": (_edit_attrs(_set("n_demo", 5)), "IntegrityError",
                                r"n_demo=5, size=4, cursor=4 does not fit demo_capacity 3"),
    "cursor of an unwrapped ring": (_edit_attrs(_set("cursor", 2)), "IntegrityError",
                                    r"size=4, cursor=2 is impossible"),
    "dataset shape": (_edit_attrs(_dataset("ring/obs", _replace_ring_obs)), "IntegrityError",
                      r"'ring/obs' is float32 \(2, 3\), expected float32 \(4, 3\)"),
    "dataset missing": (_edit_attrs(_dataset("sampler/stamps", _delete)), "IntegrityError",
                        r"'sampler/stamps' is missing"),
    "present vs ring": (_edit_attrs(_dataset("sampler/present", _set_item(7, True))),
                        "IntegrityError", r"present marks 7 rows \(row 7 is present\)"),
    "leaf where no row": (_edit_attrs(_dataset("sampler/leaves", _set_item(8, 1.0))),
                          "IntegrityError", r"row 8: leaf 1\.0, present=False"),
    "nan leaf": (_edit_attrs(_dataset("sampler/leaves", _set_item(0, np.nan))),
                 "IntegrityError", r"row 0: leaf nan, present=True"),
    "max priority": (_edit_attrs(_max_priority), "SamplerError", r"max_priority must be in"),
}


def _unwrapped(cls):
    rep = cls(sac_columns(), 12, demo_capacity=3, prioritized=True, seed=3, quantize=QUANT)
    rep.add_demos(**rows(0, 2))
    rep.add(**rows(10, 4))  # ring of 9, not wrapped: size 4, cursor 4
    return rep


@pytest.mark.parametrize("what", sorted(CORRUPTIONS))
def test_corrupted_device_checkpoint_fails_every_host_check(tmp_path, what):
    from numbatraj import errors
    from numbatraj.replay import StoreReplayGpu

    edit, err, match = CORRUPTIONS[what]
    for cls in (StoreReplay, StoreReplayGpu):
        path = tmp_path / f"{cls.__name__}.ckpt"
        _unwrapped(cls).save(path)
        cls.load(path)  # the untouched file loads
        edit(path, None)
        with pytest.raises(getattr(errors, err), match=rf"{match}") as info:
            cls.load(path)
        if err == "IntegrityError":
            assert repr(str(path)) in str(info.value), (cls.__name__, str(info.value))


def test_device_checkpoint_state_words_must_match_the_ring(tmp_path):
    import json

    import h5py

    from numbatraj.errors import IntegrityError
    from numbatraj.replay import StoreReplayGpu

    path = tmp_path / "gpu.ckpt"
    _unwrapped(StoreReplayGpu).save(path)
    with h5py.File(path, "r+") as f:
        state = json.loads(f.attrs["state"])
        state["istate"][L.SIZE] = 3
        f.attrs["state"] = json.dumps(state)
        _unseal(f)
    with pytest.raises(IntegrityError, match=r"device state .* does not match the ring state"):
        StoreReplayGpu.load(path)


def test_device_checkpoint_without_present_rebuilds_it_from_the_ring(tmp_path):
    import h5py

    from numbatraj.replay import StoreReplayGpu

    gpu = _unwrapped(StoreReplayGpu)
    path = tmp_path / "gpu.ckpt"
    gpu.save(path)
    with h5py.File(path, "r+") as f:  # as written before the device stored it
        del f["sampler/present"]
    back = StoreReplayGpu.load(path)
    np.testing.assert_array_equal(back._sums.copy_to_host(), gpu._sums.copy_to_host())
    np.testing.assert_array_equal(back._mins.copy_to_host(), gpu._mins.copy_to_host())


@pytest.mark.parametrize("prioritized", [False, True])
def test_device_state_dict_resumes_the_streams(prioritized):
    gpu, cpu = _pair(prioritized=prioritized, demo_capacity=4, demo_fraction=0.25)
    _fill(gpu, cpu, demos=2)
    gpu.sample_indices(8)
    back, _ = _pair(prioritized=prioritized, demo_capacity=4, demo_fraction=0.25)
    back.load_state_dict(gpu.state_dict())
    for _ in range(2):
        a = gpu.sample_indices(8).indices.copy_to_host()
        b = back.sample_indices(8).indices.copy_to_host()
        np.testing.assert_array_equal(a, b)


def test_stream_options_run_on_the_device_like_on_the_host():
    # next_of, frame stacks and prioritized sequences are compared with StoreReplay bit for
    # bit in tests/cuda/test_replay_gpu_next_of.py; here: they are accepted and draw
    from numbatraj.replay import StoreReplayGpu

    rep = StoreReplayGpu(sac_columns(), 8, prioritized=True, frame_stack={"obs": 2})
    rep.add(**rows(0, 5))
    state = rep.state_array.copy_to_host()
    seq, batch = rep.sample_sequences(2, 3)
    assert seq["obs"].shape == (2, 3, 3) and batch.weights.shape == (2,)
    assert rep.state_array.copy_to_host()[1:3].tolist() == state[1:3].tolist()
    out, _ = rep.sample(4)
    assert out["obs"].shape == (4, 2, 3)
    host = rep.to_host()  # the host replay does the same on the same rows
    assert host.frame_stack == {"obs": 2}
