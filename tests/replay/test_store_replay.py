"""StoreReplay on the host: adds, wraps, all-or-nothing checks, sampling, demos, ERE."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from unittest import mock

import numpy as np
import pytest

import numbatraj
from numbatraj.data import ColumnSpec, IndexBatch
from numbatraj.errors import SamplerError, SchemaError
from numbatraj.replay import StoreReplay
from numbatraj.replay.columns import ReplayColumns
from tests.reference import ere_window_ref, time_order_ref
from tests.replay.helpers import row_ids, rows, sac_columns


@contextlib.contextmanager
def _fast_path_only() -> Iterator[None]:
    """Fail any add that leaves the one-row fast path (the batch checks convert and copy)."""
    with mock.patch.object(ReplayColumns, "check_rows", side_effect=AssertionError("slow path")):
        yield


def _held(rep):
    return row_ids(rep.rows()).astype(int).tolist()


@pytest.mark.parametrize("sizes", [[1] * 12, [3, 4, 5], [8], [9], [25], [7, 1, 30, 2]])
def test_ring_keeps_the_newest_rows(sizes):
    rep = StoreReplay(sac_columns(), 8)
    start = 0
    for n in sizes:
        batch = rows(start, n)
        if n == 1:
            batch = {k: v[0] for k, v in batch.items()}  # single rows, not batches of one
        assert rep.add(**batch) == n
        start += n
    expected = list(range(max(0, start - 8), start))
    assert _held(rep) == expected
    assert rep.size == len(expected) and rep.cursor == start % 8 and rep.n_added == start
    assert rep.time_order().tolist() == time_order_ref(0, 0, 8, rep.size, rep.cursor)


def test_other_column_sets_and_scalars():
    cols = [ColumnSpec("qpos", np.float64, (9,)), ColumnSpec("qvel", np.float64, (9,)),
            ColumnSpec("action", np.int64, ()), ColumnSpec("pixels", np.uint8, (2, 4, 4))]
    rep = StoreReplay(cols, 5)
    rep.add(qpos=np.ones(9), qvel=np.zeros(9), action=3, pixels=np.full((2, 4, 4), 7, np.uint8))
    rep.add(qpos=np.ones((2, 9)), qvel=np.zeros((2, 9)), action=np.array([1, 2]),
            pixels=np.zeros((2, 2, 4, 4), np.uint8))
    held = rep.rows()
    assert held["action"].tolist() == [3, 1, 2] and held["pixels"][0].min() == 7
    one = StoreReplay([ColumnSpec("reward", np.float32, ())], 2)
    one.add(reward=1.5)  # a Python float converts to the float column
    one.add(reward=np.float32(2.5))
    assert one.rows()["reward"].tolist() == [1.5, 2.5]


BAD_ADDS = [
    (lambda r: {**r, "obs": r["obs"].astype(np.float64)}, "'obs' is float32, got float64"),
    (lambda r: {**r, "obs": r["obs"][:, :2]}, "'obs' rows have shape"),
    (lambda r: {**r, "reward": r["reward"][:3]}, "'reward' has 3 rows"),
    (lambda r: {k: v for k, v in r.items() if k != "done"}, "missing column"),
    (lambda r: {**r, "extra": r["done"]}, "'extra' is not declared"),
    (lambda r: {**r, "done": 1.5}, "'done' is bool, got the Python float"),
    (lambda r: {**r, "reward": "x"}, "'reward' is float32, got"),
    (lambda r: {**r, "obs": r["obs"][None]}, "'obs' rows have shape"),
]


@pytest.mark.parametrize("mutate, match", BAD_ADDS)
@pytest.mark.parametrize("prioritized", [False, True])
def test_failed_add_changes_nothing(mutate, match, prioritized):
    rep = StoreReplay(sac_columns(), 6, prioritized=prioritized, demo_capacity=2)
    rep.add(**rows(0, 5))
    before = {k: v.copy() for k, v in rep._data.items()}
    state = (rep.size, rep.cursor, rep.n_added)
    leaves = rep.sampler.tree.leaves.copy() if prioritized else None
    with pytest.raises(SchemaError, match=match):
        rep.add(**mutate(rows(100, 4)))
    with pytest.raises(SchemaError, match=match):
        rep.add_demos(**mutate(rows(100, 4)))
    for k, v in rep._data.items():
        np.testing.assert_array_equal(v, before[k])
    assert (rep.size, rep.cursor, rep.n_added, rep.n_demo) == (*state, 0)
    if prioritized:
        np.testing.assert_array_equal(rep.sampler.tree.leaves, leaves)


def test_sample_returns_held_rows_and_sample_into_fills_caller_arrays():
    rep = StoreReplay(sac_columns(), 16, seed=3)
    rep.add(**rows(0, 40))
    batch, idx = rep.sample(64)
    assert isinstance(idx, IndexBatch) and idx.weights is None
    assert set(row_ids(batch).astype(int)) <= set(range(24, 40))
    np.testing.assert_array_equal(row_ids(batch), row_ids(rep.rows(idx.indices)))
    twin = StoreReplay(sac_columns(), 16, seed=3)
    twin.add(**rows(0, 40))
    outs = {k: np.empty((64, *s.shape), s.dtype) for k, s in twin.columns.items()}
    ids = {k: id(v) for k, v in outs.items()}
    got = twin.sample_into(outs, 64)
    np.testing.assert_array_equal(got.indices, idx.indices)  # same seed, same stream
    for k in outs:
        assert id(outs[k]) == ids[k]
        np.testing.assert_array_equal(outs[k], batch[k])


def test_uniform_draws_cover_demo_and_online_rows(rng):
    rep = StoreReplay(sac_columns(), 10, demo_capacity=4, seed=0)
    rep.add_demos(**rows(1000, 4))
    rep.add(**rows(0, 3))
    _, idx = rep.sample(7000)
    counts = np.bincount(idx.indices, minlength=10)
    assert counts[7:].sum() == 0 and counts[:7].min() > 850  # 1000 expected per row


def test_sampling_errors():
    rep = StoreReplay(sac_columns(), 4)
    with pytest.raises(SamplerError, match="empty"):
        rep.sample(2)
    rep.add(**rows(0, 2))
    with pytest.raises(SamplerError, match="batch_size must be >= 1"):
        rep.sample(0)
    with pytest.raises(SamplerError, match="prioritized"):
        rep.update_priorities(IndexBatch(np.zeros(1, np.int64)), [1.0])
    bad = {k: np.empty((3, *s.shape), s.dtype) for k, s in rep.columns.items()}
    with pytest.raises(SchemaError, match=r"outputs\['obs'\] is float32 \(3, 3\), expected float32 \(2, 3\)"):
        rep.sample_into(bad, 2)
    with pytest.raises(SchemaError, match="outputs has columns"):
        rep.sample_into({"obs": bad["obs"]}, 3)
    with pytest.raises(SchemaError, match="demo_capacity 4 leaves no ring rows"):
        StoreReplay(sac_columns(), 4, demo_capacity=4)
    with pytest.raises(SamplerError, match="capacity must be >= 1"):
        StoreReplay(sac_columns(), 0)


def test_sample_into_checks_reused_outputs_on_every_call():
    """The expected (name, dtype, shape) of each output is kept per batch size; the arrays
    passed are still checked on every call, and a refused call fills nothing."""
    rep = StoreReplay(sac_columns(), 16, seed=3)
    rep.add(**rows(0, 16))
    outs = {k: np.empty((8, *s.shape), s.dtype) for k, s in rep.columns.items()}
    rep.sample_into(outs, 8)
    rep.sample_into(outs, 8)  # the kept expectations, the same arrays: fine
    before = {k: v.copy() for k, v in outs.items()}
    outs["obs"].shape = (2, 4, 3)  # the same array object, reshaped in place
    with pytest.raises(SchemaError, match=r"outputs\['obs'\] is float32 \(2, 4, 3\), expected float32 \(8, 3\)"):
        rep.sample_into(outs, 8)
    outs["obs"].shape = (8, 3)
    outs["reward"].flags.writeable = False
    with pytest.raises(SchemaError, match=r"outputs\['reward'\] must be C-contiguous, writeable"):
        rep.sample_into(outs, 8)
    outs["reward"] = np.empty(8, np.float64)
    with pytest.raises(SchemaError, match=r"outputs\['reward'\] is float64 \(8,\), expected float32 \(8,\)"):
        rep.sample_into(outs, 8)
    for k in before:
        if k != "reward":
            np.testing.assert_array_equal(outs[k], before[k])  # nothing drawn into them
    outs["reward"] = np.empty(8, np.float32)
    outs["extra"] = np.empty(8, np.float32)
    with pytest.raises(SchemaError, match="outputs has columns"):
        rep.sample_into(outs, 8)
    del outs["extra"]
    with pytest.raises(SchemaError, match="mapping of column name to array, got list"):
        rep.sample_into(list(outs.values()), 8)

    class Columns(Mapping):  # a Mapping that is not a dict: its keys compared as a set
        def __getitem__(self, k):
            return outs[k]

        def __iter__(self):
            return iter(reversed(list(outs)))

        def __len__(self):
            return len(outs)

    got = rep.sample_into(Columns(), 8)
    np.testing.assert_array_equal(row_ids(outs), row_ids(rep.rows(got.indices)))


def test_demo_prefix_survives_many_wraps_and_refuses_overflow():
    rep = StoreReplay(sac_columns(), 10, demo_capacity=3)
    rep.add_demos(**rows(500, 2))
    for s in range(0, 200, 9):  # many wraps of the 7-row ring, batches of 9 > ring capacity
        rep.add(**rows(s, 9))
        assert row_ids(rep.rows(np.arange(2))).tolist() == [500, 501]
    with pytest.raises(SchemaError, match="do not fit the demonstration prefix"):
        rep.add_demos(**rows(600, 2))
    rep.add_demos(**rows(502, 1))
    assert _held(rep)[:3] == [500, 501, 502] and rep.n_demo == 3
    assert _held(rep)[3:] == list(range(207 - 7, 207))


@pytest.mark.parametrize("fraction, expected_demo", [(0.25, 16), (0.0, 0), (1.0, 64)])
def test_fixed_demo_fraction(fraction, expected_demo):
    rep = StoreReplay(sac_columns(), 20, demo_capacity=5, demo_fraction=fraction, seed=1)
    rep.add_demos(**rows(1000, 5))
    rep.add(**rows(0, 30))
    for _ in range(5):
        _, idx = rep.sample(64)
        assert int((idx.indices < 5).sum()) == expected_demo
    with pytest.raises(SamplerError, match="demo_fraction"):
        StoreReplay(sac_columns(), 20, demo_capacity=5, demo_fraction=1.5)


@pytest.mark.parametrize("n, k, big_k, eta, c_min", [
    (1000, 0, 10, 0.996, 10), (1000, 5, 10, 0.996, 10), (1000, 10, 10, 0.9, 10),
    (1000, 10, 10, 0.9, 400), (50, 3, 10, 0.996, 5000), (7, 7, 7, 0.5, 1),
])
@pytest.mark.parametrize("prioritized", [False, True])
def test_ere_window_and_samples_never_older(n, k, big_k, eta, c_min, prioritized):
    cap = 64
    rep = StoreReplay(sac_columns(), cap, prioritized=prioritized, seed=2)
    rep.add(**rows(0, n))
    rep.configure_ere(True, eta=eta, c_min=c_min)
    size = min(n, cap)
    c = rep.ere_window(k=k, K=big_k)
    assert c == ere_window_ref(size, k, big_k, eta, c_min)
    batch, idx = rep.sample(500, k=k, K=big_k)
    ids = row_ids(batch)
    assert ids.min() >= n - c and ids.max() <= n - 1
    if c >= 3 and not prioritized:
        assert len(set(ids.astype(int))) == c  # every row of the window is reachable
    if prioritized:
        assert idx.weights is not None and idx.stamps is not None


def test_ere_errors():
    rep = StoreReplay(sac_columns(), 8)
    rep.add(**rows(0, 8))
    with pytest.raises(SamplerError, match="ERE is off"):
        rep.ere_window(k=1, K=2)
    rep.configure_ere(True, c_min=2)
    with pytest.raises(SamplerError, match="needs integer k and K"):
        rep.sample(4)
    with pytest.raises(SamplerError, match="0 <= k <= K"):
        rep.sample(4, k=3, K=2)
    with pytest.raises(SamplerError, match="eta"):
        rep.configure_ere(True, eta=0.0)
    with pytest.raises(SamplerError, match="c_min"):
        rep.configure_ere(True, c_min=0)
    rep.configure_ere(False)
    rep.sample(4)


def _mixed_columns():
    # a wide column (stored apart) between record columns, a 2-D one
    return [ColumnSpec("obs", np.float32, (3,)), ColumnSpec("pix", np.uint8, (2, 300)),
            ColumnSpec("grid", np.int16, (2, 3)),
            ColumnSpec("reward", np.float32, ()), ColumnSpec("done", np.bool_, ())]


def _mixed_rows(n):
    rng = np.random.default_rng(4)
    return {"obs": rng.standard_normal((n, 3), dtype=np.float32),
            "pix": rng.integers(0, 256, (n, 2, 300)).astype(np.uint8),
            "grid": rng.integers(-999, 999, (n, 2, 3)).astype(np.int16),
            "reward": rng.standard_normal(n, dtype=np.float32), "done": rng.random(n) < 0.3}


@pytest.mark.parametrize("prioritized", [False, True])
@pytest.mark.parametrize("layout", ["sac", "mixed"])
def test_one_row_adds_equal_batched_adds(prioritized, layout):
    # one-transition adds take a fast path (numpy scalars and row-shaped arrays of the exact
    # dtype); rows given any other way go through the general checks: same stored bits
    cap, n = 7, 19
    cols = sac_columns() if layout == "sac" else _mixed_columns()
    one = StoreReplay(cols, cap, prioritized=prioritized, demo_capacity=2)
    batched = StoreReplay(cols, cap, prioritized=prioritized, demo_capacity=2)
    data = rows(0, n) if layout == "sac" else _mixed_rows(n)
    nan = np.frombuffer(np.uint32(0x7FA00001).tobytes(), np.float32)[0]  # a NaN payload
    data["obs"][3, 1] = nan
    data["reward"][6] = nan  # a scalar on the fast path (i % 3 == 0)
    for i in range(n):
        kind = i % 3
        if kind == 0:  # numpy scalars and rows: the fast path
            r = {k: v[i] for k, v in data.items()}
        elif kind == 1:  # (1, *shape) arrays: the general path
            r = {k: v[i : i + 1] for k, v in data.items()}
        else:  # Python scalars: the general path
            r = {k: (v[i].item() if v.ndim == 1 else v[i]) for k, v in data.items()}
        assert one.add(**r) == 1
    batched.add(**data)
    for name in data:
        np.testing.assert_array_equal(  # bit for bit
            np.ascontiguousarray(one.storage(name)).view(np.uint8),
            np.ascontiguousarray(batched.storage(name)).view(np.uint8),
        )
    assert (one.cursor, one.size, one.n_added) == (batched.cursor, batched.size, batched.n_added)
    if prioritized:
        np.testing.assert_array_equal(one.sampler.tree.sums, batched.sampler.tree.sums)
        np.testing.assert_array_equal(
            one.sampler.generation(np.arange(cap)) > 0, batched.sampler.generation(np.arange(cap)) > 0
        )
    with pytest.raises(SchemaError, match="float32, got float64"):
        one.add(**{**{k: v[0] for k, v in data.items()}, "obs": data["obs"][0].astype(np.float64)})
    with pytest.raises(SchemaError, match="not declared"):
        one.add(**{k: v[0] for k, v in data.items()}, extra=np.float32(1))
    with pytest.raises(SchemaError, match="missing"):
        one.add(**{k: v[0] for k, v in data.items() if k != "done"})
    assert one.n_added == n
    for name in data:  # the failed adds changed nothing
        np.testing.assert_array_equal(
            np.ascontiguousarray(one.storage(name)).view(np.uint8),
            np.ascontiguousarray(batched.storage(name)).view(np.uint8),
        )


@pytest.mark.parametrize("prioritized", [False, True])
@pytest.mark.parametrize("mode", ["joint", "ere", "demo_fraction"])
def test_sample_into_allocates_nothing_on_repeated_calls(prioritized, mode):
    import gc
    import tracemalloc

    b = 4096
    fraction = 0.25 if mode == "demo_fraction" else None
    rep = StoreReplay(sac_columns(), 5000, prioritized=prioritized, demo_capacity=100,
                      demo_fraction=fraction, seed=3)
    rep.add_demos(**rows(0, 100))
    rep.add(**rows(100, 6000))
    kw = {}
    if mode == "ere":
        rep.configure_ere(True, eta=0.9, c_min=100)
        kw = {"k": 3, "K": 10}
    outs = {c.name: np.empty((b, *c.shape), c.dtype) for c in sac_columns()}
    first = rep.sample_into(outs, b, **kw)  # the first call of a batch size allocates
    if prioritized:
        rep.update_priorities(first, np.linspace(0.1, 2.0, b))
    # Numba's argument typing leaves a few hundred bytes of cyclic garbage per call (more
    # with numba 0.58): collected after every call, so the figures below do not depend on
    # when the collector would have run (a full suite's order once put 6 KB in `now`).
    # Three traced calls come first: a one-time growth inside a library (numba 0.58's
    # dispatcher grew a list by 1 KB in one of the first traced calls after a cold cache)
    # is not the replay's; what survives every call still adds up over the five after.
    # One call on two threads first: a kernel's threaded variant (the prioritized draw's
    # here) compiles at the first call that finds a core free, which on a busy machine may
    # come only inside the traced calls (CI once saw 790 KB there: the compiled kernel).
    import numba

    numbatraj.set_num_threads(min(2, int(numba.config.NUMBA_NUM_THREADS)))
    try:
        rep.sample_into(outs, b, **kw)
    finally:
        numbatraj.set_num_threads(None)
    gc.collect()
    tracemalloc.start()
    try:
        for _ in range(3):
            rep.sample_into(outs, b, **kw)
            gc.collect()
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        for _ in range(5):
            batch = rep.sample_into(outs, b, **kw)
            assert batch is first and batch.indices is first.indices  # documented reuse
            gc.collect()
        now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert now - base < 4096  # nothing of any size survives the calls (B entries: 32 KiB)
    # no array of B entries (32 KiB of int64) was allocated, not even as a temporary
    assert peak - base < 8 * b // 4
    # and the draws are those of sample() on an identical replay
    twin = StoreReplay(sac_columns(), 5000, prioritized=prioritized, demo_capacity=100,
                       demo_fraction=fraction, seed=3)
    twin.add_demos(**rows(0, 100))
    twin.add(**rows(100, 6000))
    if mode == "ere":
        twin.configure_ere(True, eta=0.9, c_min=100)
    got, tb = twin.sample(b, **kw)
    if prioritized:
        twin.update_priorities(tb, np.linspace(0.1, 2.0, b))
    for _ in range(1 + 3 + 5):
        got, tb = twin.sample(b, **kw)
    np.testing.assert_array_equal(tb.indices, batch.indices)
    for name in outs:
        np.testing.assert_array_equal(got[name], outs[name])
    if prioritized:
        np.testing.assert_array_equal(tb.weights, batch.weights)
        np.testing.assert_array_equal(tb.stamps, batch.stamps)


def test_row_records_hold_every_column_and_gathers_agree():
    # every physical row is one record of all columns (buffer._record_layout: grouped for
    # the n-step walk, each group widest word first); each column is a strided view into
    # the records. Odd shapes and dtypes, a quantised column, and
    # gathers both through records (small batches) and column by column (large ones).
    from numbatraj.replay import buffer as B

    cols = [
        ColumnSpec("flag", np.bool_, ()),
        ColumnSpec("img", np.float32, (2, 3)),
        ColumnSpec("id", np.int64, ()),
        ColumnSpec("half", np.float16, (3,)),
        ColumnSpec("q", np.float32, (5,)),
    ]
    rep = StoreReplay(cols, 9, quantize={"q": (-1.0, 1.0)}, seed=1)
    size, where = B._record_layout(rep._cols)
    assert size % 8 == 0
    for name, (off, wdt) in where.items():
        assert off % wdt.itemsize == 0
        assert off % rep._cols.storage_dtype(name).itemsize == 0
    rng = np.random.default_rng(0)
    n = 20
    data = {
        "flag": rng.random(n) < 0.5,
        "img": rng.standard_normal((n, 2, 3)).astype(np.float32),
        "id": np.arange(n, dtype=np.int64) * 1_000_003,
        "half": rng.standard_normal((n, 3)).astype(np.float16),
        "q": rng.uniform(-1, 1, (n, 5)).astype(np.float32),
    }
    for i in range(0, 15, 3):  # batches of 3 (wrapping), then one-row adds
        rep.add(**{k: v[i : i + 3] for k, v in data.items()})
    for i in range(15, n):  # the held rows 11..19 mix both paths
        one = {k: v[i] for k, v in data.items()}
        rep.add(**one)  # one row at a time (a quantised column: through the kernels)
    assert rep.n_added == n
    held = rep.rows()
    ids = held["id"] // 1_000_003
    for name in ("flag", "img", "id", "half"):
        np.testing.assert_array_equal(held[name], data[name][ids])
    np.testing.assert_allclose(held["q"], data["q"][ids], atol=rep.quantization["q"].error_bound + 1e-6)
    idx = rng.integers(0, 9, 5000)  # record gather vs column-by-column gather
    small = {c.name: np.empty((5000, *c.shape), rep._cols.sample_dtype(c.name)) for c in cols}
    rep._gather(idx, small)
    monkey = B._RECORD_GATHER_MAX
    try:
        B._RECORD_GATHER_MAX = 10
        big = {c.name: np.empty_like(v) for c, v in zip(cols, small.values())}
        rep._gather(idx, big)
    finally:
        B._RECORD_GATHER_MAX = monkey
    for name in small:
        np.testing.assert_array_equal(small[name], big[name])
        np.testing.assert_array_equal(small[name], rep.rows(idx)[name])


@pytest.mark.parametrize("cap, demo, cursor, n", [(8, 0, 0, 5), (8, 0, 6, 5), (8, 0, 5, 20),
                                                   (8, 3, 4, 3), (8, 3, 0, 11), (16, 2, 13, 14)])
def test_batched_adds_into_row_records_match_ring_put_ref(cap, demo, cursor, n, rng):
    # rows go into the strided record columns as at most two runs: the slots of the ring
    # kernel's reference (the newest ring_capacity rows of a larger batch), neighbours kept
    from tests.reference import ring_put_ref

    rep = StoreReplay(sac_columns(), cap, demo_capacity=demo)
    ring = cap - demo
    rep.add(**rows(1000, cursor % ring))  # move the cursor
    before = {c: rep.storage(c).copy() for c in rep.columns}
    batch = rows(0, n)
    batch["obs"][0, 0] = np.frombuffer(np.uint32(0x7F800001).tobytes(), np.float32)[0]  # sNaN
    rep.add(**batch)
    for c in rep.columns:
        expected = before[c].reshape(cap, -1).copy()
        ring_put_ref(expected, batch[c].reshape(n, -1), demo, ring, cursor % ring)
        got = np.ascontiguousarray(rep.storage(c)).reshape(cap, -1)
        np.testing.assert_array_equal(got.view(np.uint8), expected.view(np.uint8))


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
    with _fast_path_only():
        rep.add(**one)
    assert rep.rows()["x"][-1] == 3


@pytest.mark.parametrize("prioritized", [False, True])
def test_wide_columns_are_stored_apart_and_agree_with_the_record_layout(prioritized, rng):
    # columns wider than WIDE_BYTES (pixels) are contiguous arrays of their own; narrow ones
    # stay in the row record.  Adds (batches wrapping, one-row adds), gathers (small and
    # column by column), quantised wide columns and checkpoints give the same rows as a
    # replay with every column in the record.
    from numbatraj.replay import buffer as B

    cols = [ColumnSpec("pix", np.uint8, (3, 16, 16)), ColumnSpec("reward", np.float32, ()),
            ColumnSpec("feat", np.float32, (600,)), ColumnSpec("done", np.bool_, ())]
    kw = dict(prioritized=prioritized, seed=3, demo_capacity=2, quantize={"feat": (-2.0, 2.0)})
    wide = StoreReplay(cols, 11, **kw)
    assert wide._wide == ("pix", "feat")
    assert wide.storage("pix").flags.c_contiguous
    monkey = B.WIDE_BYTES
    try:
        B.WIDE_BYTES = 1 << 30
        packed = StoreReplay(cols, 11, **kw)
    finally:
        B.WIDE_BYTES = monkey
    assert packed._wide == ()
    n = 30
    data = {"pix": rng.integers(0, 256, (n, 3, 16, 16), dtype=np.uint8),
            "reward": np.arange(n, dtype=np.float32),
            "feat": rng.uniform(-3, 3, (n, 600)).astype(np.float32),
            "done": rng.random(n) < 0.3}
    for rep in (wide, packed):
        rep.add_demos(**{k: v[:2] for k, v in data.items()})
        for i in range(0, 20, 7):
            rep.add(**{k: v[i : i + 7] for k, v in data.items()})
        for i in range(20, n):
            rep.add(**{k: v[i] for k, v in data.items()})
    for name in data:
        np.testing.assert_array_equal(wide.storage(name), packed.storage(name))
    a, b = wide.rows(), packed.rows()
    for name in data:
        np.testing.assert_array_equal(a[name], b[name])
    np.testing.assert_array_equal(a["pix"], data["pix"][a["reward"].astype(int)])
    idx = rng.integers(0, 11, 300)
    for name, v in wide.rows(idx).items():
        np.testing.assert_array_equal(v, packed.rows(idx)[name])
    sa, ia = wide.sample(64)
    sb, ib = packed.sample(64)
    np.testing.assert_array_equal(ia.indices, ib.indices)
    for name in data:
        np.testing.assert_array_equal(sa[name], sb[name])
    state = wide.state_dict()
    again = StoreReplay(cols, 11, **kw)
    again.load_state_dict(state)
    for name in data:
        np.testing.assert_array_equal(again.storage(name), wide.storage(name))


_LAYOUTS = {
    # the bench's 168-byte record: others, then reward + done, then next_obs (no padding)
    "sac": ([ColumnSpec("obs", np.float32, (17,)), ColumnSpec("action", np.float32, (6,)),
             ColumnSpec("reward", np.float32, ()), ColumnSpec("next_obs", np.float32, (17,)),
             ColumnSpec("done", np.bool_, ())], 168, True),
    "truncated": ([ColumnSpec("done", np.bool_, ()), ColumnSpec("next_obs", np.float64, (3,)),
                   ColumnSpec("truncated", np.bool_, ()), ColumnSpec("obs", np.float64, (3,)),
                   ColumnSpec("reward", np.float64, ())], 64, True),
    # grouping would pad the record from 24 to 32 bytes: widest word first instead
    "padded": ([ColumnSpec("obs", np.float64, ()), ColumnSpec("tag", np.uint8, (3,)),
                ColumnSpec("reward", np.float32, ()), ColumnSpec("done", np.bool_, ()),
                ColumnSpec("next_obs", np.float64, ())], 24, False),
    "no walk columns": ([ColumnSpec("a", np.int16, (3,)), ColumnSpec("b", np.float32, ()),
                         ColumnSpec("next_b", np.float32, ())], 16, True),
}


@pytest.mark.parametrize("name", list(_LAYOUTS))
def test_record_layout_keeps_the_walk_columns_together_and_next_columns_after(name):
    # reward / done / truncated adjacent (an n-step walk reads 1-2 lines per row), the
    # next_* columns right after them, every column on its word size, and never a longer
    # record than all columns widest word first
    from numbatraj.replay import buffer as B

    specs, size, grouped = _LAYOUTS[name]
    rep = StoreReplay(specs, 4)
    got, where = B._record_layout(rep._cols)
    nbytes = {s.name: int(np.prod(s.shape, dtype=np.int64)) * np.dtype(s.dtype).itemsize
              for s in specs}
    assert got == size == -(-sum(nbytes.values()) // 8) * 8
    spans = sorted((off, off + nbytes[n], n) for n, (off, _) in where.items())
    for (_, hi, _), (lo, _, _) in zip(spans, spans[1:]):
        assert hi <= lo  # disjoint
    for n, (off, wdt) in where.items():
        assert off % wdt.itemsize == 0 and off % np.dtype(rep._cols.storage_dtype(n)).itemsize == 0
        assert off + nbytes[n] <= size
    order = [n for _, _, n in spans]
    walk = [n for n in order if n in ("reward", "done", "truncated")]
    nxt = [n for n in order if n.startswith("next_")]
    if grouped:
        i = order.index(walk[0]) if walk else len(order) - len(nxt)
        assert order[i : i + len(walk)] == walk  # adjacent
        assert order[i + len(walk) :] == nxt  # then the next_* columns, and nothing else
        assert [where[n][0] for n in walk] == sorted(where[n][0] for n in walk)
        if walk:
            w_hi = max(where[n][0] + nbytes[n] for n in walk)
            assert not nxt or where[nxt[0]][0] - w_hi < 8
    else:
        words = [where[n][1].itemsize for n in order]
        assert words == sorted(words, reverse=True)  # widest word first
    # the draw agrees with the stored rows either way
    rng = np.random.default_rng(0)
    data = {s.name: (rng.random((6, *s.shape)) < 0.3 if s.dtype == np.bool_ else
                     rng.integers(0, 100, (6, *s.shape)).astype(s.dtype)) for s in specs}
    rep.add(**data)
    held = rep.rows()
    for s in specs:
        np.testing.assert_array_equal(held[s.name], data[s.name][2:])


def test_one_row_fast_path_takes_only_rows_given_as_stored():
    """``add`` writes one row without the batch checks only when every declared column is
    given exactly as stored; any other row goes through ``check_rows``, which converts it
    or names the culprit, and a refused row changes nothing."""
    rep = StoreReplay(sac_columns(), 8)
    good = {k: v[0] for k, v in rows(0, 1).items()}
    with _fast_path_only():
        rep.add(**good)
    calls = []
    real = ReplayColumns.check_rows

    def spy(self, r, *a, **kw):  # type: ignore[no-untyped-def]
        calls.append(sorted(r))
        return real(self, r, *a, **kw)

    converted = [  # rows the batch path takes as one row
        dict(good, reward=0.5),  # a Python float for a float32 scalar
        dict(good, obs=list(good["obs"])),  # a list for an array
        dict(good, obs=good["obs"][None]),  # a batch of one
    ]
    refused = [
        (dict(good, obs=good["obs"].astype(np.float64)), "column 'obs' is float32, got float64"),
        (dict(good, obs=good["obs"][:2]), "column 'obs' rows have shape"),
        ({k: v for k, v in good.items() if k != "done"}, "missing column"),
        (dict(good, extra=np.float32(1)), "column 'extra' is not declared"),
        (dict(good, done=np.float32(1)), "column 'done'"),
    ]
    with mock.patch.object(ReplayColumns, "check_rows", spy):
        for row in converted:
            rep.add(**row)
        for row, msg in refused:
            before = rep.rows()
            with pytest.raises(SchemaError, match=msg):
                rep.add(**row)
            after = rep.rows()
            assert before.keys() == after.keys()
            for k in before:
                np.testing.assert_array_equal(before[k], after[k])
    assert len(calls) == len(converted) + len(refused)
    assert rep.n_added == 1 + len(converted)
    np.testing.assert_array_equal(rep.rows()["reward"], [0.0, 0.5, 0.0, 0.0])
