"""StoreReplay against cpprb (and flashbax when installed) in the same run.

Layout from the issue: capacity 1,000,000 (times ``NUMBATRAJ_BENCH_SCALE``), obs 17 float32,
action 6 float32, reward float32, next_obs 17 float32, done.  Figures:

* ``add`` of one transition, 1,000 calls per round (rows/s);
* ``add`` of 1,000 transitions per call, plus a plain numpy slice copy of the same bytes;
* uniform ``sample(4096)`` with every column gathered;
* prioritized ``sample(4096)`` + ``update_priorities(4096)``.

Each benchmark runs once untimed first (pytest-benchmark's warmup plus an explicit call), so
Numba compile time is excluded.  cpprb stores ``done`` as float32 (its default); numbatraj as
bool, which is what the issue's layout asks for.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np
import pytest

from bench.conftest import bench_scale
from bench.report import load_line
from numbatraj.data import ColumnSpec
from numbatraj.replay import StoreReplay

cpprb = pytest.importorskip("cpprb")

CAP = max(10_000, int(1_000_000 * bench_scale()))
OBS, ACT, BATCH, CHUNK, SINGLE_CALLS = 17, 6, 4096, 1000, 1000
ROW_BYTES = 4 * (OBS + ACT + 1 + OBS) + 1
G_ADD1 = "replay add 1 transition (rows/s)"
G_ADD1K = "replay add 1,000 transitions (rows/s)"
G_UNI = "replay uniform sample(4096), all columns"
G_PER = "replay prioritized sample(4096) + update_priorities(4096)"


def _columns() -> list[ColumnSpec]:
    return [
        ColumnSpec("obs", np.float32, (OBS,)),
        ColumnSpec("action", np.float32, (ACT,)),
        ColumnSpec("reward", np.float32, ()),
        ColumnSpec("next_obs", np.float32, (OBS,)),
        ColumnSpec("done", np.bool_, ()),
    ]


def _batch(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.standard_normal((n, OBS), dtype=np.float32),
        "action": rng.standard_normal((n, ACT), dtype=np.float32),
        "reward": rng.standard_normal(n, dtype=np.float32),
        "next_obs": rng.standard_normal((n, OBS), dtype=np.float32),
        "done": rng.random(n) < 0.01,
    }


def _cpprb(prioritized: bool = False):  # type: ignore[no-untyped-def]
    env = {"obs": {"shape": OBS}, "act": {"shape": ACT}, "rew": {}, "next_obs": {"shape": OBS},
           "done": {}}
    cls = cpprb.PrioritizedReplayBuffer if prioritized else cpprb.ReplayBuffer
    return cls(CAP, env)


def _cp_rows(b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"obs": b["obs"], "act": b["action"], "rew": b["reward"], "next_obs": b["next_obs"],
            "done": b["done"].astype(np.float32)}


def _filled_cpprb(prioritized: bool):  # type: ignore[no-untyped-def]
    rb = _cpprb(prioritized)
    fill = _cp_rows(_batch(CAP))
    rb.add(**fill)
    return rb


def _filled_replay(prioritized: bool, **kw: Any) -> StoreReplay:
    rep = StoreReplay(_columns(), CAP, prioritized=prioritized, seed=0, **kw)
    rep.add(**_batch(CAP))
    return rep


# The add benchmarks time every contender on a ring filled once (its pages touched), as the
# pixel adds do: a long run adds into a ring it has already wrapped.  On fresh rings each
# contender's first pass also pays the kernel's page faults (the Intel Xeon VM: 48-51 us
# per 1,000 rows for StoreReplay on the first pass against 33-35 us after, cpprb 83-88
# against 87-107 us), and which share of the rounds fell in that pass depended on how many
# rounds pytest-benchmark chose for each.


# ---------------------------------------------------------------------- add one transition
def test_add1_cpprb(benchmark, ratios):
    rb = _filled_cpprb(False)
    one = {k: v[0] for k, v in _cp_rows(_batch(1)).items()}

    def run():
        for _ in range(SINGLE_CALLS):
            rb.add(**one)

    run()
    benchmark(run)
    ratios.record(G_ADD1, "cpprb ReplayBuffer.add", benchmark, baseline=True, items=SINGLE_CALLS)


def add1_loop():  # type: ignore[no-untyped-def]
    """SINGLE_CALLS one-transition adds into a filled StoreReplay, run once (compiled)."""
    rep = _filled_replay(False)
    one = {k: v[0] for k, v in _batch(1).items()}

    def run():
        for _ in range(SINGLE_CALLS):
            rep.add(**one)

    run()
    return run


def test_add1_numbatraj(benchmark, ratios):
    benchmark(add1_loop())
    ratios.record(G_ADD1, "StoreReplay.add", benchmark, items=SINGLE_CALLS)


def test_add1_numbatraj_kept(benchmark, ratios):
    """The same adds into a replay that keeps its n-step targets (each add refreshes the
    row's targets and those of the n - 1 rows before it)."""
    rep = _filled_replay(False, n_step=3, gamma=0.99)
    one = {k: v[0] for k, v in _batch(1).items()}

    def run():
        for _ in range(SINGLE_CALLS):
            rep.add(**one)

    run()
    benchmark(run)
    ratios.record(G_ADD1, "StoreReplay(n_step=3).add (kept n-step targets)", benchmark,
                  items=SINGLE_CALLS)


# ---------------------------------------------------------------------- add 1,000 transitions
def test_add1k_cpprb(benchmark, ratios):
    rb = _filled_cpprb(False)
    rows = _cp_rows(_batch(CHUNK))
    rb.add(**rows)
    benchmark(lambda: rb.add(**rows))
    ratios.record(G_ADD1K, "cpprb ReplayBuffer.add", benchmark, baseline=True, items=CHUNK)


def _slice_copier(columns: list[ColumnSpec], cap: int, rows: dict[str, np.ndarray]) -> Any:
    """The add baseline: the same bytes as plain slice assignments into one array per
    column (written once before: ``np.ones``), moving on through the arrays, no wrap
    handling."""
    cols = {c.name: np.ones((cap, *c.shape), c.dtype) for c in columns}
    n = len(next(iter(rows.values())))
    state = {"pos": 0}

    def run() -> None:
        p = state["pos"]
        for k, a in cols.items():
            a[p : p + n] = rows[k]
        state["pos"] = (p + n) % (cap - n + 1)

    return run


def test_add1k_numpy_slice_copy(benchmark, ratios):
    run = _slice_copier(_columns(), CAP, _batch(CHUNK))
    run()
    benchmark(run)
    ratios.record(G_ADD1K, "numpy slice copy", benchmark, items=CHUNK, nbytes=CHUNK * ROW_BYTES)


def test_add1k_numbatraj(benchmark, ratios):
    rep = _filled_replay(False)
    rows = _batch(CHUNK)
    rep.add(**rows)
    benchmark(lambda: rep.add(**rows))
    ratios.record(G_ADD1K, "StoreReplay.add", benchmark, items=CHUNK, nbytes=CHUNK * ROW_BYTES)


def test_add1k_numbatraj_kept(benchmark, ratios):
    rep = _filled_replay(False, n_step=3, gamma=0.99)
    rows = _batch(CHUNK)
    rep.add(**rows)
    benchmark(lambda: rep.add(**rows))
    ratios.record(G_ADD1K, "StoreReplay(n_step=3).add (kept n-step targets)", benchmark,
                  items=CHUNK, nbytes=CHUNK * ROW_BYTES)


# ---------------------------------------------------------------------- uniform sampling
def test_uniform_sample_cpprb(benchmark, ratios):
    rb = _filled_cpprb(False)
    rb.sample(BATCH)
    benchmark(lambda: rb.sample(BATCH))
    ratios.record(G_UNI, "cpprb ReplayBuffer.sample", benchmark, baseline=True, items=BATCH)


def test_uniform_sample_numbatraj(benchmark, ratios):
    rep = _filled_replay(False)
    rep.sample(BATCH)
    benchmark(lambda: rep.sample(BATCH))
    ratios.record(G_UNI, "StoreReplay.sample", benchmark, items=BATCH, note=record_note())


def test_uniform_sample_into_numbatraj(benchmark, ratios):
    rep = _filled_replay(False)
    outs = {c.name: np.empty((BATCH, *c.shape), c.dtype) for c in _columns()}
    rep.sample_into(outs, BATCH)
    benchmark(lambda: rep.sample_into(outs, BATCH))
    ratios.record(G_UNI, "StoreReplay.sample_into", benchmark, items=BATCH, note=record_note())


def record_note() -> str:
    """What the default thread policy decided for the record gather (docs/residency.md,
    "Threads"), to read a low-dim sample row by."""
    from numbatraj import _jit

    verdict = _jit.auto_verdicts().get("replay record gather")
    return (f"threads verdict {'open' if verdict is None else verdict}, "
            f"free cores after {_jit.free_cores()}")


# ---------------------------------------------------------------------- prioritized
def test_per_cpprb(benchmark, ratios):
    rb = _filled_cpprb(True)
    rng = np.random.default_rng(1)

    def run():
        s = rb.sample(BATCH, beta=0.4)
        rb.update_priorities(s["indexes"], rng.random(BATCH) + 0.01)

    run()
    benchmark(run)
    ratios.record(G_PER, "cpprb PrioritizedReplayBuffer", benchmark, baseline=True, items=BATCH)


def test_per_numbatraj(benchmark, ratios):
    rep = _filled_replay(True)
    rng = np.random.default_rng(1)

    def run():
        _, idx = rep.sample(BATCH)
        rep.update_priorities(idx, rng.random(BATCH) + 0.01)

    run()
    benchmark(run)
    ratios.record(G_PER, "StoreReplay(prioritized=True)", benchmark, items=BATCH)


# ---------------------------------------------------------------------- pixel replay
# 3x84x84 uint8 obs and next_obs (Atari-shaped) plus action/reward/done.  Capacity
# 20,000 rows x NUMBATRAJ_BENCH_SCALE (847 MB per buffer: far beyond every cache, and small
# enough for a shared machine).  Baselines in the same run: cpprb, and two plain
# ``np.take(..., out=)`` gathers of the same rows (the floor a replay can reach).
PIX = (3, 84, 84)
PIX_CAP = max(2_000, int(20_000 * bench_scale()))
PIX_BATCH, PIX_CHUNK = 256, 1000
PIX_ROW = 2 * int(np.prod(PIX))
G_PIX = "pixel replay sample(256) 3x84x84 uint8, vs cpprb"
G_PIX_TAKE = "pixel replay sample(256) 3x84x84 uint8, vs two np.take gathers"
G_PIX_ADD = "pixel replay add 1,000 rows 3x84x84 uint8, vs a numpy slice copy"


def _pix_columns() -> list[ColumnSpec]:
    return [ColumnSpec("obs", np.uint8, PIX), ColumnSpec("action", np.float32, (ACT,)),
            ColumnSpec("reward", np.float32, ()), ColumnSpec("next_obs", np.uint8, PIX),
            ColumnSpec("done", np.bool_, ())]


def _pix_batch(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"obs": rng.integers(0, 256, (n, *PIX), dtype=np.uint8),
            "action": rng.standard_normal((n, ACT), dtype=np.float32),
            "reward": rng.standard_normal(n, dtype=np.float32),
            "next_obs": rng.integers(0, 256, (n, *PIX), dtype=np.uint8),
            "done": rng.random(n) < 0.01}


def _pix_cpprb():  # type: ignore[no-untyped-def]
    return cpprb.ReplayBuffer(PIX_CAP, {
        "obs": {"shape": PIX, "dtype": np.uint8}, "act": {"shape": ACT}, "rew": {},
        "next_obs": {"shape": PIX, "dtype": np.uint8}, "done": {}})


def _pix_fill(add) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    b = _pix_batch(PIX_CHUNK)
    for _ in range(-(-PIX_CAP // PIX_CHUNK)):
        add(b)
    return b


def test_pix_sample_cpprb(benchmark, ratios):
    rb = _pix_cpprb()
    _pix_fill(lambda b: rb.add(**_cp_rows(b)))
    rb.sample(PIX_BATCH)
    benchmark(lambda: rb.sample(PIX_BATCH))
    ratios.record(G_PIX, "cpprb ReplayBuffer.sample", benchmark, baseline=True, items=PIX_BATCH)


def test_pix_sample_two_takes(benchmark, ratios):
    obs = np.ones((PIX_CAP, *PIX), np.uint8)  # ones: the pages are touched, as in a replay
    nxt = np.ones((PIX_CAP, *PIX), np.uint8)
    o1, o2 = np.empty((PIX_BATCH, *PIX), np.uint8), np.empty((PIX_BATCH, *PIX), np.uint8)
    rng = np.random.default_rng(2)

    def run():
        i = rng.integers(0, PIX_CAP, PIX_BATCH)
        np.take(obs, i, axis=0, out=o1)
        np.take(nxt, i, axis=0, out=o2)

    run()
    benchmark(run)
    ratios.record(G_PIX, "two np.take(out=) gathers", benchmark, items=PIX_BATCH)
    ratios.record(G_PIX_TAKE, "two np.take(out=) gathers", benchmark, baseline=True,
                  items=PIX_BATCH)


def test_pix_sample_memcpy_floor(benchmark, ratios):
    # the same bytes as one contiguous copy: no gather can beat this on the machine
    src = np.ones(2 * PIX_BATCH * int(np.prod(PIX)), np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    benchmark(lambda: np.copyto(dst, src))
    for g in (G_PIX, G_PIX_TAKE):
        ratios.record(g, "floor: one contiguous copy of the same bytes", benchmark,
                      items=PIX_BATCH)


def _pix_replay() -> StoreReplay:
    rep = StoreReplay(_pix_columns(), PIX_CAP)
    _pix_fill(lambda b: rep.add(**b))
    return rep


def _pix_next_of_cpprb():  # type: ignore[no-untyped-def]
    return cpprb.ReplayBuffer(PIX_CAP, {
        "obs": {"shape": PIX, "dtype": np.uint8}, "act": {"shape": ACT}, "rew": {},
        "done": {}}, next_of="obs")


def test_pix_sample_cpprb_next_of(benchmark, ratios):
    # cpprb's own next_of: obs stored once, next_obs read from the following row
    rb = _pix_next_of_cpprb()
    _pix_fill(lambda b: rb.add(**_cp_rows(b)))
    rb.sample(PIX_BATCH)
    benchmark(lambda: rb.sample(PIX_BATCH))
    ratios.record(G_PIX, "cpprb ReplayBuffer(next_of='obs').sample", benchmark,
                  items=PIX_BATCH)


def _pix_next_of_replay() -> StoreReplay:
    cols = [c for c in _pix_columns() if c.name != "next_obs"]
    rep = StoreReplay(cols, PIX_CAP, next_of={"next_obs": "obs"})
    _pix_fill(lambda b: rep.add(**b))
    return rep


@pytest.mark.parametrize("cores", [False, True], ids=["default", "set_num_threads"])
@pytest.mark.parametrize("into", [False, True], ids=["sample", "sample_into"])
@pytest.mark.parametrize("next_of", [False, True], ids=["stored", "next_of"])
def test_pix_sample_numbatraj(benchmark, ratios, next_of, into, cores):
    """obs and next_obs stored, or obs with ``next_of``; ``sample`` or ``sample_into``; the
    default (serial) or after ``numbatraj.set_num_threads(NUMBA_NUM_THREADS)`` (the user
    says the cores are free: the wide gathers run on every thread)."""
    import numba

    import numbatraj

    top = int(numba.config.NUMBA_NUM_THREADS)
    if cores and top < 2:
        pytest.skip("one Numba thread (NUMBA_NUM_THREADS=1): nothing to run in parallel")
    rep = _pix_next_of_replay() if next_of else _pix_replay()
    if into:
        outs = {c.name: np.empty((PIX_BATCH, *c.shape), c.dtype) for c in _pix_columns()}
        draw = lambda: rep.sample_into(outs, PIX_BATCH)  # noqa: E731
    else:
        draw = lambda: rep.sample(PIX_BATCH)  # noqa: E731
    if cores:
        numbatraj.set_num_threads(top)
    try:
        draw()
        benchmark(draw)
    finally:
        numbatraj.set_num_threads(None)
    name = f"StoreReplay{'(next_of)' if next_of else ''}.{'sample_into' if into else 'sample'}"
    note = ""
    if cores:
        name += f", set_num_threads({top})"
    else:  # what the default policy decided (docs/residency.md, "Threads"), to read the row
        from numbatraj import _jit

        verdict = _jit.auto_verdicts().get("replay wide gather")
        note = (f"threads verdict {'open' if verdict is None else verdict}, "
                f"free cores after {_jit.free_cores()}, {load_line()}")
    for g in (G_PIX, G_PIX_TAKE):
        ratios.record(g, name, benchmark, items=PIX_BATCH, note=note)


def test_pix_add_numpy_slice_copy(benchmark, ratios):
    run = _slice_copier(_pix_columns(), PIX_CAP, _pix_batch(PIX_CHUNK))
    run()
    benchmark(run)
    ratios.record(G_PIX_ADD, "numpy slice copy", benchmark, baseline=True, items=PIX_CHUNK,
                  nbytes=PIX_CHUNK * PIX_ROW)


def test_pix_add_cpprb(benchmark, ratios):
    rb = _pix_cpprb()
    b = _pix_fill(lambda b: rb.add(**_cp_rows(b)))
    rows = _cp_rows(b)
    benchmark(lambda: rb.add(**rows))
    ratios.record(G_PIX_ADD, "cpprb ReplayBuffer.add", benchmark, items=PIX_CHUNK,
                  nbytes=PIX_CHUNK * PIX_ROW)


def test_pix_add_numbatraj(benchmark, ratios):
    rep = StoreReplay(_pix_columns(), PIX_CAP)
    rows = _pix_fill(lambda b: rep.add(**b))
    benchmark(lambda: rep.add(**rows))
    ratios.record(G_PIX_ADD, "StoreReplay.add", benchmark, items=PIX_CHUNK,
                  nbytes=PIX_CHUNK * PIX_ROW)


# ---------------------------------------------------------------------- issue 17: streams
G_NSTEP = "replay sample(4096) with n_step=3 vs plain sample(4096)"
G_SEQ = "replay sample_sequences(256, 64), 16-byte record"
G_PIXSTACK = "pixel replay 3x84x84 uint8, next_of + 4-stack, sample(256)"
#: rows of the large sequence ring (the issue's figure is 10^8 = 1.6 GB of records; set
#: NUMBATRAJ_BENCH_SEQ_ROWS=100000000 on a machine with the memory to spare)
SEQ_ROWS = int(os.environ.get("NUMBATRAJ_BENCH_SEQ_ROWS", str(10**7)))


def test_nstep_plain_sample(benchmark, ratios):
    rep = _filled_replay(False)
    rep.sample(BATCH)
    benchmark(lambda: rep.sample(BATCH))
    ratios.record(G_NSTEP, "StoreReplay.sample(4096)", benchmark, baseline=True, items=BATCH)


def test_nstep_sample(benchmark, ratios):
    rep = _filled_replay(False)
    rep.sample(BATCH, n_step=3, gamma=0.99)
    benchmark(lambda: rep.sample(BATCH, n_step=3, gamma=0.99))
    ratios.record(G_NSTEP, "StoreReplay.sample(4096, n_step=3)", benchmark, items=BATCH)


def test_nstep_sample_kept(benchmark, ratios):
    """A replay built with ``n_step=3, gamma=0.99``: its rows keep their targets (and
    next_obs at the window's last row), so the draw reads one record per row."""
    rep = StoreReplay(_columns(), CAP, seed=0, n_step=3, gamma=0.99)
    rep.add(**_batch(CAP))
    rep.sample(BATCH)
    benchmark(lambda: rep.sample(BATCH))
    ratios.record(G_NSTEP, "StoreReplay(n_step=3, gamma=0.99).sample(4096), kept targets",
                  benchmark, items=BATCH)


#: (n_envs, prioritized, n_step, kept) of the n-step matrix, each case's plain baseline
#: first; kept: a replay built with that n_step (its rows keep their targets)
NSTEP_MATRIX = [(e, per, n, kept) for e in (1, 8) for per in (False, True)
                for n, kept in ((None, False), (3, False), (5, False), (3, True), (5, True))]


@functools.lru_cache(maxsize=1)
def _stream_replay(n_envs: int, prioritized: bool, kept: int | None = None) -> StoreReplay:
    """The issue's layout with ``n_envs`` streams (``(CAP / E, E)`` steps added), filled;
    ``kept``: built with ``n_step=kept, gamma=0.99``."""
    rep = StoreReplay(_columns(), CAP, n_envs=n_envs, prioritized=prioritized, seed=0,
                      n_step=kept, gamma=0.99)
    rows = _batch(CAP)
    if n_envs > 1:
        rows = {k: v.reshape(CAP // n_envs, n_envs, *v.shape[1:]) for k, v in rows.items()}
    rep.add(**rows)
    return rep


@pytest.mark.parametrize(
    "n_envs, prioritized, n_step, kept", NSTEP_MATRIX,
    ids=[f"E{e}-{'per' if p else 'uni'}-{'plain' if n is None else f'n{n}'}{'-kept' if k else ''}"
         for e, p, n, k in NSTEP_MATRIX])
def test_nstep_matrix(benchmark, ratios, n_envs, prioritized, n_step, kept):
    """n-step sample(4096) against plain sample(4096), per (n_envs, uniform / prioritized):
    walked at draw time on the plain replay, or kept by a replay built with that n_step;
    the draw's stream cost (n_envs > 1) is in all of them."""
    rep = _stream_replay(n_envs, prioritized, n_step if kept else None)
    group = (f"replay sample(4096), n_step vs plain, n_envs={n_envs}, "
             f"{'prioritized' if prioritized else 'uniform'}")
    rep.sample(BATCH, n_step=n_step, gamma=0.99)
    benchmark(lambda: rep.sample(BATCH, n_step=n_step, gamma=0.99))
    what = ("StoreReplay.sample(4096)" if n_step is None else
            f"n_step={n_step}" + (f", kept (StoreReplay(n_step={n_step}))" if kept else ""))
    ratios.record(group, what, benchmark, baseline=n_step is None, items=BATCH)


def _seq_replay(rows: int, n_envs: int = 1) -> StoreReplay:
    cols = [ColumnSpec("obs", np.float32, (2,)), ColumnSpec("reward", np.float32, ()),
            ColumnSpec("done", np.bool_, ())]  # a 16-byte record (13 bytes, padded)
    rep = StoreReplay(cols, rows, n_envs=n_envs)
    chunk = 1 << 20
    rng = np.random.default_rng(0)
    block = {"obs": rng.standard_normal((chunk, 2), dtype=np.float32),
             "reward": rng.standard_normal(chunk, dtype=np.float32),
             "done": rng.random(chunk) < 1e-3}
    for s in range(0, rows, chunk):
        n = min(chunk, rows - s)
        rep.add(**{k: v[:n] for k, v in block.items()})
    return rep


@pytest.mark.parametrize("rows", [10**6, SEQ_ROWS], ids=["1e6", f"{SEQ_ROWS:.0e}"])
def test_sequences_256x64(benchmark, ratios, rows):
    rep = _seq_replay(rows)
    assert rep._row_bytes == 16
    rep.sample_sequences(256, 64)
    benchmark(lambda: rep.sample_sequences(256, 64))
    ratios.record(G_SEQ, f"{rows:,} rows", benchmark, baseline=rows == 10**6, items=256,
                  note="target <= 5 ms at 10^8, within 1.5x of 10^6")
    _record_torchrl(ratios, rows)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_pix_stack_cpprb(benchmark, ratios):
    before = _rss()
    rb = cpprb.ReplayBuffer(PIX_CAP, {"obs": {"shape": (*PIX, 4), "dtype": np.uint8},
                                      "act": {"shape": ACT}, "rew": {}, "done": {}},
                            next_of="obs", stack_compress="obs")
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (PIX_CHUNK + 4, *PIX), dtype=np.uint8)
    stack = np.lib.stride_tricks.sliding_window_view(frames, 4, axis=0)[:PIX_CHUNK]
    obs = np.ascontiguousarray(stack)  # (n, 3, 84, 84, 4)
    nxt = np.ascontiguousarray(np.lib.stride_tricks.sliding_window_view(
        frames, 4, axis=0)[1 : PIX_CHUNK + 1])
    for _ in range(-(-PIX_CAP // PIX_CHUNK)):
        rb.add(obs=obs, next_obs=nxt, act=np.zeros((PIX_CHUNK, ACT), np.float32),
               rew=np.zeros(PIX_CHUNK, np.float32), done=np.zeros(PIX_CHUNK, np.float32))
    per_row = (_rss() - before) / PIX_CAP
    rb.sample(PIX_BATCH)
    benchmark(lambda: rb.sample(PIX_BATCH))
    ratios.record(G_PIXSTACK, "cpprb next_of + stack_compress", benchmark, baseline=True,
                  items=PIX_BATCH, note=f"{per_row:,.0f} bytes/row (RSS growth)")


def test_pix_stack_numbatraj(benchmark, ratios):
    before = _rss()
    cols = [ColumnSpec("obs", np.uint8, PIX), ColumnSpec("action", np.float32, (ACT,)),
            ColumnSpec("reward", np.float32, ()), ColumnSpec("done", np.bool_, ())]
    rep = StoreReplay(cols, PIX_CAP, next_of={"next_obs": "obs"}, frame_stack={"obs": 4})
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (PIX_CHUNK + 1, *PIX), dtype=np.uint8)
    for _ in range(-(-PIX_CAP // PIX_CHUNK)):
        rep.add(obs=frames[:-1], next_obs=frames[1:], action=np.zeros((PIX_CHUNK, ACT), np.float32),
                reward=np.zeros(PIX_CHUNK, np.float32), done=np.zeros(PIX_CHUNK, bool))
    per_row = (_rss() - before) / PIX_CAP
    rep.sample(PIX_BATCH)
    benchmark(lambda: rep.sample(PIX_BATCH))
    ratios.record(G_PIXSTACK, "StoreReplay next_of + frame_stack=4", benchmark,
                  items=PIX_BATCH, note=f"{per_row:,.0f} bytes/row (RSS growth)")


def test_pix_stack_sb3(benchmark, ratios):
    """SB3's ReplayBuffer(optimize_memory_usage=True): next_obs stored once (obs[t + 1]), the
    4-stack stored whole (VecFrameStack's (12, 84, 84) observation), one add per step."""
    gym = pytest.importorskip("gymnasium")
    buffers = pytest.importorskip("stable_baselines3.common.buffers")
    before = _rss()
    stacked = (4 * PIX[0], *PIX[1:])
    rb = buffers.ReplayBuffer(
        PIX_CAP, gym.spaces.Box(0, 255, stacked, np.uint8),
        gym.spaces.Box(-1.0, 1.0, (ACT,), np.float32), device="cpu", n_envs=1,
        optimize_memory_usage=True, handle_timeout_termination=False)
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (PIX_CHUNK + 4, *PIX), dtype=np.uint8)
    obs = np.ascontiguousarray(np.lib.stride_tricks.sliding_window_view(
        frames, 4, axis=0)[: PIX_CHUNK + 1].transpose(0, 4, 1, 2, 3).reshape(-1, 1, *stacked))
    act = np.zeros((1, ACT), np.float32)
    zero = np.zeros(1, np.float32)
    for k in range(PIX_CAP):
        j = k % PIX_CHUNK
        rb.add(obs[j], obs[j + 1], act, zero, zero, [{}])
    per_row = (_rss() - before) / PIX_CAP
    rb.sample(PIX_BATCH)
    benchmark(lambda: rb.sample(PIX_BATCH))
    ratios.record(G_PIXSTACK, "SB3 ReplayBuffer(optimize_memory_usage=True)", benchmark,
                  items=PIX_BATCH, note=f"{per_row:,.0f} bytes/row (RSS growth)")


#: written by ``bench/torchrl_slice.py`` (run in its own venv, see its docstring)
TORCHRL_JSON = os.path.join(os.path.dirname(__file__), "results", "torchrl_slice.json")


def _record_torchrl(ratios, rows: int) -> None:
    """TorchRL's SliceSampler on the same rows, from the JSON its own venv's script wrote
    (``bench/torchrl_slice.py``), when it is there and at this size."""
    import json

    if not os.path.exists(TORCHRL_JSON):
        return
    with open(TORCHRL_JSON) as f:
        res = json.load(f)
    if res["rows"] != rows:
        return
    ratios.record(G_SEQ, f"TorchRL SliceSampler {rows:,} rows (torch {res['torch']}, "
                  f"torchrl {res['torchrl']})", res["median_s"], items=256,
                  note=f"bench/torchrl_slice.py, its own process, load {res['load']:.1f}")


# ---------------------------------------------------------------------- issue 14, interleaved
#: Rounds of each interleaved comparison below (each round calls every contender once, in a
#: shuffled order): the cheap calls get more.
ROUNDS_CHEAP, ROUNDS_DEAR = 301, 41
G_IL = " (interleaved rounds)"


def test_issue14_rows_interleaved(ratios):
    """Issue 14's replay rows again, the contenders of each row interleaved round by round
    (``bench.report.interleaved``: medians, shuffled order), in one test.

    The tests above time one contender after another with pytest-benchmark; on a virtual
    machine whose host speed changes for minutes at a time (this project's Intel Xeon VM:
    the same 1,000 one-row adds took 3.6 ms and then 7.5 ms in runs minutes apart) a row's
    ratio there can straddle two such phases.  Here every round meets the same phase."""
    _il_low_dim(ratios)
    _il_prioritized(ratios)
    _il_pixels(ratios)
    _il_nstep_kept(ratios)


def _il_low_dim(ratios) -> None:  # type: ignore[no-untyped-def]
    """add one transition (1,000 calls a round), add 1,000 rows, uniform sample(4096);
    every ring filled once before."""
    from bench.report import interleaved

    rb, rep = _filled_cpprb(False), _filled_replay(False)
    one_cp = {k: v[0] for k, v in _cp_rows(_batch(1)).items()}
    one = {k: v[0] for k, v in _batch(1).items()}

    def cp_add1():
        for _ in range(SINGLE_CALLS):
            rb.add(**one_cp)

    def nt_add1():
        for _ in range(SINGLE_CALLS):
            rep.add(**one)

    got = interleaved({"cpprb": cp_add1, "numbatraj": nt_add1}, None, ROUNDS_DEAR)
    g = G_ADD1 + G_IL
    ratios.record(g, "cpprb ReplayBuffer.add", got["cpprb"], baseline=True, items=SINGLE_CALLS)
    ratios.record(g, "StoreReplay.add", got["numbatraj"], items=SINGLE_CALLS)

    # add 1,000 rows
    rows, rows_cp = _batch(CHUNK), _cp_rows(_batch(CHUNK))
    slice_copy = _slice_copier(_columns(), CAP, rows)
    got = interleaved({"cpprb": lambda: rb.add(**rows_cp), "numpy": slice_copy,
                       "numbatraj": lambda: rep.add(**rows)}, None, ROUNDS_CHEAP)
    g = G_ADD1K + G_IL
    ratios.record(g, "cpprb ReplayBuffer.add", got["cpprb"], baseline=True, items=CHUNK)
    ratios.record(g, "numpy slice copy", got["numpy"], items=CHUNK, nbytes=CHUNK * ROW_BYTES)
    ratios.record(g, "StoreReplay.add", got["numbatraj"], items=CHUNK, nbytes=CHUNK * ROW_BYTES)

    # uniform sample(4096)
    outs = {c.name: np.empty((BATCH, *c.shape), c.dtype) for c in _columns()}
    got = interleaved({"cpprb": lambda: rb.sample(BATCH), "sample": lambda: rep.sample(BATCH),
                       "sample_into": lambda: rep.sample_into(outs, BATCH)}, None, ROUNDS_CHEAP)
    g = G_UNI + G_IL
    ratios.record(g, "cpprb ReplayBuffer.sample", got["cpprb"], baseline=True, items=BATCH)
    ratios.record(g, "StoreReplay.sample", got["sample"], items=BATCH, note=record_note())
    ratios.record(g, "StoreReplay.sample_into", got["sample_into"], items=BATCH)


def _il_prioritized(ratios) -> None:  # type: ignore[no-untyped-def]
    """prioritized sample + update(4096)."""
    from bench.report import interleaved

    rng = np.random.default_rng(3)
    prb, prep = _filled_cpprb(True), _filled_replay(True)

    def cp_per():
        s = prb.sample(BATCH, beta=0.4)
        prb.update_priorities(s["indexes"], rng.random(BATCH) + 0.01)

    def nt_per():
        _, idx = prep.sample(BATCH)
        prep.update_priorities(idx, rng.random(BATCH) + 0.01)

    got = interleaved({"cpprb": cp_per, "numbatraj": nt_per}, None, ROUNDS_DEAR * 3)
    g = G_PER + G_IL
    ratios.record(g, "cpprb PrioritizedReplayBuffer", got["cpprb"], baseline=True, items=BATCH)
    ratios.record(g, "StoreReplay(prioritized=True)", got["numbatraj"], items=BATCH)


def _il_nstep_kept(ratios) -> None:  # type: ignore[no-untyped-def]
    """The kept n-step draw (issue 17: within 1.3x of the plain draw) against the plain
    sample(4096), interleaved: the two single rows above are timed a minute apart (this
    stop's AMD EPYC VM: 1.44x there, 1.10x interleaved in a probe)."""
    from bench.report import interleaved

    plain = _filled_replay(False)
    kept = StoreReplay(_columns(), CAP, seed=0, n_step=3, gamma=0.99)
    kept.add(**_batch(CAP))
    got = interleaved({"plain": lambda: plain.sample(BATCH), "kept": lambda: kept.sample(BATCH)},
                      None, ROUNDS_CHEAP)
    g = G_NSTEP + G_IL
    ratios.record(g, "StoreReplay.sample(4096)", got["plain"], baseline=True, items=BATCH)
    ratios.record(g, "StoreReplay(n_step=3, gamma=0.99).sample(4096), kept targets",
                  got["kept"], items=BATCH)


def _il_pixels(ratios) -> None:  # type: ignore[no-untyped-def]
    """pixel sample(256) with the default threads, pixel add 1,000 rows."""
    from bench.report import interleaved
    from numbatraj import _jit

    pcp, pcp_next = _pix_cpprb(), _pix_next_of_cpprb()
    _pix_fill(lambda b: pcp.add(**_cp_rows(b)))
    _pix_fill(lambda b: pcp_next.add(**_cp_rows(b)))
    prp, prp_next = _pix_replay(), _pix_next_of_replay()
    pouts = {c.name: np.empty((PIX_BATCH, *c.shape), c.dtype) for c in _pix_columns()}
    # the floor in the same rounds: one contiguous copy of the draw's 10.8 MB of pixels into a
    # reused buffer, from a block of a 130 MB source that moves every call (out of cache, as
    # the rows a draw reads are); no gather of those bytes can be faster on the machine
    block = PIX_BATCH * PIX_ROW
    src, dst, at = np.ones(12 * block, np.uint8), np.empty(block, np.uint8), [0]

    def floor_copy() -> None:
        at[0] = (at[0] + 5) % 12
        np.copyto(dst, src[at[0] * block:(at[0] + 1) * block])

    got = interleaved({
        "cpprb": lambda: pcp.sample(PIX_BATCH),
        "cpprb next_of": lambda: pcp_next.sample(PIX_BATCH),
        "stored": lambda: prp.sample(PIX_BATCH),
        "stored into": lambda: prp.sample_into(pouts, PIX_BATCH),
        "next_of": lambda: prp_next.sample(PIX_BATCH),
        "floor": floor_copy,
    }, None, ROUNDS_DEAR * 2)
    g = G_PIX + G_IL
    ratios.record(g, "cpprb ReplayBuffer.sample", got["cpprb"], baseline=True, items=PIX_BATCH)
    ratios.record(g, "cpprb ReplayBuffer(next_of='obs').sample", got["cpprb next_of"],
                  items=PIX_BATCH)
    verdict = _jit.auto_verdicts().get("replay wide gather")
    note = f"threads verdict {'open' if verdict is None else verdict}, {load_line()}"
    ratios.record(g, "StoreReplay.sample", got["stored"], items=PIX_BATCH, note=note)
    ratios.record(g, "StoreReplay.sample_into", got["stored into"], items=PIX_BATCH)
    ratios.record(g, "StoreReplay(next_of).sample", got["next_of"], items=PIX_BATCH)
    ratios.record(g, "floor: one contiguous copy of the same bytes from DRAM", got["floor"],
                  items=PIX_BATCH)

    # pixel add 1,000 rows
    b = _pix_batch(PIX_CHUNK)
    b_cp = _cp_rows(b)
    pix_slice_copy = _slice_copier(_pix_columns(), PIX_CAP, b)
    got = interleaved({"numpy": pix_slice_copy, "cpprb": lambda: pcp.add(**b_cp),
                       "numbatraj": lambda: prp.add(**b)}, None, ROUNDS_DEAR)
    g = G_PIX_ADD + G_IL
    ratios.record(g, "numpy slice copy", got["numpy"], baseline=True, items=PIX_CHUNK,
                  nbytes=PIX_CHUNK * PIX_ROW)
    ratios.record(g, "cpprb ReplayBuffer.add", got["cpprb"], items=PIX_CHUNK,
                  nbytes=PIX_CHUNK * PIX_ROW)
    ratios.record(g, "StoreReplay.add", got["numbatraj"], items=PIX_CHUNK,
                  nbytes=PIX_CHUNK * PIX_ROW)
