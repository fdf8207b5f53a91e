"""The record gather of a StoreReplay's narrow columns on Numba's threads
(``_record_kernels.gather_cols_par_cpu``) against plain NumPy indexing, and the
thread policy's floor for its kind."""

from __future__ import annotations

import numba
import numpy as np
import pytest

import numbatraj
import numbatraj._jit as J
from numbatraj.data.column import ColumnSpec
from numbatraj.replay import StoreReplay
from numbatraj.replay import _record_kernels as rck
from numbatraj.replay import _stream_kernels as sk
from tests.replay.helpers import parallel_kernel_spy

KIND = "replay record gather"


def _cols() -> list[ColumnSpec]:
    # 68 + 68 + 24 + 4 + 1 bytes: records of 168 bytes, 3-4 cache lines, odd column sizes
    return [ColumnSpec("obs", np.float32, (17,)), ColumnSpec("action", np.float32, (6,)),
            ColumnSpec("reward", np.float32, ()), ColumnSpec("next_obs", np.float32, (17,)),
            ColumnSpec("done", np.bool_, ())]


def _rows(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    return {"obs": rng.standard_normal((n, 17)).astype(np.float32),
            "action": rng.standard_normal((n, 6)).astype(np.float32),
            "reward": rng.standard_normal(n).astype(np.float32),
            "next_obs": rng.standard_normal((n, 17)).astype(np.float32),
            "done": rng.random(n) < 0.1}


@pytest.fixture
def on_threads(monkeypatch):
    """Every record gather of at least 64 lanes takes the parallel kernel on all of
    Numba's threads; yields the list of its calls' part counts."""
    with parallel_kernel_spy(monkeypatch, rck, "gather_cols_par_cpu", "AUTO_MIN_BYTES",
                             {KIND: 0}) as calls:
        yield calls


@pytest.mark.parametrize("b", [64, 65, 127, 1000, 4096])
def test_record_gather_on_threads_matches_numpy(on_threads, b):
    """sample / sample_into on threads: every column equal to indexing what was added
    (bit for bit), over a wrapped ring, for batch sizes that split unevenly."""
    rng = np.random.default_rng(b)
    cap = 3000
    rep = StoreReplay(_cols(), cap, seed=b)
    rows = _rows(rng, cap + 777)
    rep.add(**rows)  # wraps: the first 777 rows are overwritten
    held = {k: v[777:] for k, v in rows.items()}
    order = rep.time_order()  # physical rows, oldest first
    logical = np.empty(cap, dtype=np.int64)
    logical[order] = np.arange(cap)
    out, batch = rep.sample(b)
    into = {k: np.full_like(v, 7) for k, v in out.items()}
    batch2 = rep.sample_into(into, b)
    for got, bt in ((out, batch), (into, batch2)):
        want_rows = logical[bt.indices]
        for k, v in held.items():
            assert got[k].dtype == v.dtype and got[k].shape == (b, *v.shape[1:])
            assert np.array_equal(got[k].view(np.uint8), v[want_rows].view(np.uint8)), k
    top = int(numba.config.NUMBA_NUM_THREADS)
    want = [top, top] if b >= 2 * top * sk.NSTEP_BLOCK else []
    assert on_threads == want


def test_record_gather_threads_and_serial_agree(on_threads):
    """The parallel and the serial kernel on the same rows give the same bytes."""
    rng = np.random.default_rng(5)
    rep = StoreReplay(_cols(), 5000, seed=5)
    rep.add(**_rows(rng, 5000))
    idx = rng.integers(0, 5000, 2049)
    threaded = {k: np.empty((idx.size, *v.shape[1:]), v.dtype)
                for k, v in _rows(rng, 1).items()}
    rep._gather(idx, threaded)
    numbatraj.set_num_threads(1)
    serial = {k: np.empty_like(v) for k, v in threaded.items()}
    rep._gather(idx, serial)
    assert on_threads  # the first gather ran on threads
    for k in threaded:
        assert np.array_equal(threaded[k].view(np.uint8), serial[k].view(np.uint8)), k


def test_record_kind_has_its_own_floor(monkeypatch):
    """The record gather may go parallel from AUTO_MIN_BYTES[kind] (below the global
    PARALLEL_MIN_BYTES); other kinds and non-auto callers keep the global floor; the smaller
    of the two holds (a test that sets the global floor to 0 reaches every kind)."""
    top = int(numba.config.NUMBA_NUM_THREADS)
    floor = J.AUTO_MIN_BYTES[KIND]
    assert 0 < floor < J.PARALLEL_MIN_BYTES
    assert J.min_bytes(KIND) == floor
    assert J.min_bytes("replay wide gather") == J.min_bytes(None) == J.PARALLEL_MIN_BYTES
    try:
        numbatraj.set_num_threads(top)
        assert J.parallel_threads(floor - 1, auto=KIND) == 1
        assert J.parallel_threads(floor, auto=KIND) == top
        assert J.parallel_threads(floor, auto="replay wide gather") == (
            top if floor >= J.PARALLEL_MIN_BYTES else 1)
        assert J.parallel_threads(floor) == 1
    finally:
        numbatraj.set_num_threads(None)
    assert J.calibrating(KIND, floor) == (KIND not in J.auto_verdicts())
    assert not J.calibrating(KIND, floor - 1)
    monkeypatch.setattr(J, "PARALLEL_MIN_BYTES", 0)
    assert J.min_bytes(KIND) == 0 and J.min_bytes(None) == 0


def test_record_gather_outputs_passed_again_or_not():
    """sample_into into the same outputs again (the addresses kept from the call before),
    into other outputs, back, and sample()'s new outputs in between: every draw lands in
    the outputs it was given, equal to indexing what was added, and the others keep what
    they held."""
    rng = np.random.default_rng(9)
    rep = StoreReplay(_cols(), 500, seed=9)
    rows = _rows(rng, 500)
    rep.add(**rows)
    order = rep.time_order()
    logical = np.empty(500, dtype=np.int64)
    logical[order] = np.arange(500)
    b = 40
    a_out = {k: np.empty((b, *v.shape[1:]), v.dtype) for k, v in rows.items()}
    b_out = {k: np.empty((b, *v.shape[1:]), v.dtype) for k, v in rows.items()}

    def check(out, batch):
        for k, v in rows.items():
            assert np.array_equal(out[k].view(np.uint8),
                                  v[logical[batch.indices]].view(np.uint8)), k

    for target in (a_out, a_out, b_out, a_out, "new", a_out, b_out, b_out):
        before = {id(d): {k: x.copy() for k, x in d.items()} for d in (a_out, b_out)}
        if target == "new":
            out, batch = rep.sample(b)
            check(out, batch)
            del out
            untouched = (a_out, b_out)
        else:
            batch = rep.sample_into(target, b)  # the replay's own batch: checked at once
            check(target, batch)
            untouched = (b_out,) if target is a_out else (a_out,)
        for d in untouched:
            for k, x in d.items():
                assert np.array_equal(x.view(np.uint8), before[id(d)][k].view(np.uint8)), k
