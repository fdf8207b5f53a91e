"""StoreReplay against TorchRL's and flashbax's replay buffers, in the same run.

TorchRL needs torch 2.14 and flashbax needs jax, neither of which the project venv holds, so
this file runs in the peers' venv (``make bench-peers``: ``build/peers-venv`` with torch
2.14.1, torchrl, flashbax, jax on the CPU, and numbatraj from this checkout) and skips
elsewhere.  Same layout and rows as ``bench/test_replay.py`` (capacity 1,000,000 x
``NUMBATRAJ_BENCH_SCALE``; obs 17 float32, action 6 float32, reward, next_obs 17 float32,
done):

* add one transition, 1,000 calls per round (TorchRL ``ReplayBuffer.add`` of a TensorDict
  row; flashbax's jitted ``add`` of a one-row batch);
* add 1,000 transitions per call (TorchRL ``extend``; flashbax ``add`` of a 1,000-row batch);
* uniform ``sample(4096)`` of every column (TorchRL ``RandomSampler`` on a
  ``LazyTensorStorage``; flashbax ``make_item_buffer``'s jitted ``sample``, results ready).

Each contender runs once untimed first (compile time excluded: Numba, jax.jit).
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.test_replay import (
    BATCH,
    CAP,
    CHUNK,
    SINGLE_CALLS,
    _batch,
    _columns,
    add1_loop,
    record_note,
)
from numbatraj.replay import StoreReplay

G_ADD1 = "peers: replay add 1 transition (rows/s)"
G_ADD1K = "peers: replay add 1,000 transitions (rows/s)"
G_UNI = "peers: replay uniform sample(4096), all columns"
#: the same figures against flashbax as the baseline
FBX = {G_ADD1: "peers: replay add 1 transition, vs flashbax (rows/s)",
       G_ADD1K: "peers: replay add 1,000 transitions, vs flashbax (rows/s)",
       G_UNI: "peers: replay uniform sample(4096), vs flashbax"}


def _record(ratios, group: str, what: str, benchmark, *, peer: str = "", **kw) -> None:  # type: ignore[no-untyped-def]
    """Into ``group`` (TorchRL the baseline) and its flashbax twin (flashbax the baseline);
    ``peer`` names the contender's library, which leaves the other group out."""
    if peer != "flashbax":
        ratios.record(group, what, benchmark, baseline=peer == "torchrl", **kw)
    if peer != "torchrl":
        ratios.record(FBX[group], what, benchmark, baseline=peer == "flashbax", **kw)


def _filled_numbatraj() -> StoreReplay:
    rep = StoreReplay(_columns(), CAP, seed=0)
    rep.add(**_batch(CAP))
    return rep


# ---------------------------------------------------------------------- TorchRL
def _torchrl():  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    tensordict = pytest.importorskip("tensordict")
    data = pytest.importorskip("torchrl.data")
    samplers = pytest.importorskip("torchrl.data.replay_buffers.samplers")
    rb = data.ReplayBuffer(storage=data.LazyTensorStorage(CAP),
                           sampler=samplers.RandomSampler(), batch_size=BATCH)
    return torch, tensordict, rb


def _td(torch, tensordict, rows: dict[str, np.ndarray], batch: list[int]):  # type: ignore[no-untyped-def]
    return tensordict.TensorDict({k: torch.from_numpy(np.ascontiguousarray(v))
                                  for k, v in rows.items()}, batch_size=batch)


def _filled_torchrl():  # type: ignore[no-untyped-def]
    """A TorchRL buffer with every slot written once, as the replays of bench/test_replay.py
    are before their adds are timed (pages touched)."""
    torch, tensordict, rb = _torchrl()
    rb.extend(_td(torch, tensordict, _batch(CAP), [CAP]))
    return torch, tensordict, rb


def test_add1_torchrl(benchmark, ratios):
    torch, tensordict, rb = _filled_torchrl()
    one = _td(torch, tensordict, {k: v[0] for k, v in _batch(1).items()}, [])

    def run():
        for _ in range(SINGLE_CALLS):
            rb.add(one)

    run()
    benchmark(run)
    _record(ratios, G_ADD1, "TorchRL ReplayBuffer.add", benchmark, peer="torchrl",
            items=SINGLE_CALLS, note=f"torchrl {_version('torchrl')}")


def test_add1k_torchrl(benchmark, ratios):
    torch, tensordict, rb = _filled_torchrl()
    rows = _td(torch, tensordict, _batch(CHUNK), [CHUNK])
    rb.extend(rows)
    benchmark(lambda: rb.extend(rows))
    _record(ratios, G_ADD1K, "TorchRL ReplayBuffer.extend", benchmark, peer="torchrl",
            items=CHUNK)


def test_uniform_sample_torchrl(benchmark, ratios):
    torch, tensordict, rb = _torchrl()
    rb.extend(_td(torch, tensordict, _batch(CAP), [CAP]))
    rb.sample()
    benchmark(lambda: rb.sample())
    _record(ratios, G_UNI, "TorchRL ReplayBuffer.sample (RandomSampler)", benchmark,
            peer="torchrl", items=BATCH)


# ---------------------------------------------------------------------- flashbax
def _flashbax(add_batch: int):  # type: ignore[no-untyped-def]
    fbx = pytest.importorskip("flashbax")
    jax = pytest.importorskip("jax")
    buf = fbx.make_item_buffer(max_length=CAP, min_length=1, sample_batch_size=BATCH,
                               add_batches=add_batch > 1)
    example = {k: jax.numpy.asarray(v[0]) for k, v in _batch(1).items()}
    state = buf.init(example)
    return jax, buf, state


def _jax_rows(jax, n: int):  # type: ignore[no-untyped-def]
    rows = _batch(n)
    return {k: jax.numpy.asarray(v if n > 1 else v[0]) for k, v in rows.items()}


def test_add1_flashbax(benchmark, ratios):
    jax, buf, state = _flashbax(1)
    add = jax.jit(buf.add, donate_argnums=0)
    one = _jax_rows(jax, 1)
    box = [add(state, one)]

    def run():
        s = box[0]
        for _ in range(SINGLE_CALLS):
            s = add(s, one)
        jax.block_until_ready(s)
        box[0] = s

    run()
    benchmark(run)
    _record(ratios, G_ADD1, "flashbax item buffer add (jit)", benchmark, peer="flashbax",
            items=SINGLE_CALLS,
            note=f"flashbax {_version('flashbax')}, jax {_version('jax')} (CPU)")


def test_add1k_flashbax(benchmark, ratios):
    jax, buf, state = _flashbax(CHUNK)
    add = jax.jit(buf.add, donate_argnums=0)
    rows = _jax_rows(jax, CHUNK)
    box = [add(state, rows)]

    def run():
        box[0] = jax.block_until_ready(add(box[0], rows))

    run()
    benchmark(run)
    _record(ratios, G_ADD1K, "flashbax item buffer add (jit)", benchmark, peer="flashbax",
            items=CHUNK)


def test_uniform_sample_flashbax(benchmark, ratios):
    jax, buf, state = _flashbax(CAP)
    state = jax.jit(buf.add, donate_argnums=0)(state, _jax_rows(jax, CAP))
    sample = jax.jit(buf.sample)
    keys = iter(jax.random.split(jax.random.PRNGKey(0), 100_000))

    def run():
        return jax.block_until_ready(sample(state, next(keys)))

    run()
    benchmark(run)
    _record(ratios, G_UNI, "flashbax item buffer sample (jit)", benchmark, peer="flashbax",
            items=BATCH)


# ---------------------------------------------------------------------- numbatraj
def _a_peer() -> None:
    """Skip unless a peer is here: this file's figures are only worth their cost beside one."""
    for mod in ("torchrl", "flashbax"):
        try:
            __import__(mod)
            return
        except ImportError:
            continue
    pytest.skip("neither torchrl nor flashbax is installed: run make bench-peers")


def test_add1_numbatraj(benchmark, ratios):
    _a_peer()
    benchmark(add1_loop())
    _record(ratios, G_ADD1, "StoreReplay.add", benchmark, items=SINGLE_CALLS)


def test_add1k_numbatraj(benchmark, ratios):
    _a_peer()
    rep = _filled_numbatraj()
    rows = _batch(CHUNK)
    rep.add(**rows)
    benchmark(lambda: rep.add(**rows))
    _record(ratios, G_ADD1K, "StoreReplay.add", benchmark, items=CHUNK)


def test_uniform_sample_numbatraj(benchmark, ratios):
    _a_peer()
    rep = _filled_numbatraj()
    rep.sample(BATCH)
    benchmark(lambda: rep.sample(BATCH))
    _record(ratios, G_UNI, "StoreReplay.sample", benchmark, items=BATCH, note=record_note())


def _version(mod: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(mod)
    except importlib.metadata.PackageNotFoundError:
        return "?"


# ---------------------------------------------------------------------- interleaved
G_IL = " (interleaved rounds)"


def test_torchrl_rows_interleaved(ratios):
    """The TorchRL rows again, each contender of a row interleaved round by round
    (``bench.report.interleaved``: medians, shuffled order).  The tests above time TorchRL
    and numbatraj a minute apart; on a virtual machine whose host speed changes for minutes
    at a time, the ratio of such a pair moved from 4.6x to 6.4x between runs of one day
    (sample(4096), stop 42)."""
    pytest.importorskip("torchrl")
    from bench.report import interleaved

    torch, tensordict, rb = _filled_torchrl()
    rep = _filled_numbatraj()
    one_td = _td(torch, tensordict, {k: v[0] for k, v in _batch(1).items()}, [])
    one = {k: v[0] for k, v in _batch(1).items()}

    def tr_add1():
        for _ in range(SINGLE_CALLS):
            rb.add(one_td)

    def nt_add1():
        for _ in range(SINGLE_CALLS):
            rep.add(**one)

    got = interleaved({"torchrl": tr_add1, "numbatraj": nt_add1}, None, 11)
    ratios.record(G_ADD1 + G_IL, "TorchRL ReplayBuffer.add", got["torchrl"], baseline=True,
                  items=SINGLE_CALLS)
    ratios.record(G_ADD1 + G_IL, "StoreReplay.add", got["numbatraj"], items=SINGLE_CALLS)

    rows_td, rows = _td(torch, tensordict, _batch(CHUNK), [CHUNK]), _batch(CHUNK)
    got = interleaved({"torchrl": lambda: rb.extend(rows_td),
                       "numbatraj": lambda: rep.add(**rows)}, None, 301)
    ratios.record(G_ADD1K + G_IL, "TorchRL ReplayBuffer.extend", got["torchrl"], baseline=True,
                  items=CHUNK)
    ratios.record(G_ADD1K + G_IL, "StoreReplay.add", got["numbatraj"], items=CHUNK)

    got = interleaved({"torchrl": lambda: rb.sample(), "numbatraj": lambda: rep.sample(BATCH)},
                      None, 301)
    ratios.record(G_UNI + G_IL, "TorchRL ReplayBuffer.sample (RandomSampler)", got["torchrl"],
                  baseline=True, items=BATCH)
    ratios.record(G_UNI + G_IL, "StoreReplay.sample", got["numbatraj"], items=BATCH,
                  note=record_note())
