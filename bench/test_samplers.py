"""Index policies against their baselines, measured in the same run (issue 4).

- prioritized ``sample(4096)`` + ``update_priorities(4096)`` on a capacity of 2**20, against
  cpprb's ``PrioritizedReplayBuffer`` (and flashbax's prioritised buffer when installed);
- uniform ``sample(4096)`` against ``Generator.integers``;
- ``expand_window`` for 256 windows of 64 rows, in rows/s, against NumPy broadcasting plus
  ``searchsorted`` for the ``is_first`` flags.

``NUMBATRAJ_BENCH_SCALE`` scales the capacity and the population (default 1.0 = the issue's
sizes).  Compile time is excluded: every callable runs once before it is timed.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.conftest import bench_scale
from numbatraj.samplers import (
    PrioritizedSampler,
    SequenceWindowSampler,
    UniformDeviceSampler,
    UniformSampler,
)

CAPACITY = max(1 << 12, int((1 << 20) * bench_scale()))
BATCH = 4096
PER_GROUP = f"prioritized sample({BATCH}) + update_priorities({BATCH}), capacity {CAPACITY}"
UNI_GROUP = f"uniform sample({BATCH}) over {CAPACITY} rows"
WIN_GROUP = "expand_window 256 x 64"


@pytest.fixture(scope="module")
def td_errors():
    return np.random.default_rng(0).random((64, BATCH)) * 2.0


def test_prioritized_numbatraj(benchmark, ratios, td_errors):
    s = PrioritizedSampler(CAPACITY, alpha=0.6, beta=0.4, seed=0)
    s.note_added(np.arange(CAPACITY))
    s.update_priorities(np.arange(CAPACITY), np.random.default_rng(1).random(CAPACITY))
    it = iter(range(1 << 62))

    def step():
        b = s.sample(BATCH)
        return s.update_priorities(b, td_errors[next(it) % 64])

    step()
    benchmark(step)
    ratios.record(PER_GROUP, "numbatraj PrioritizedSampler", benchmark, items=BATCH)


def test_prioritized_cpprb(benchmark, ratios, td_errors):
    cpprb = pytest.importorskip("cpprb")
    rb = cpprb.PrioritizedReplayBuffer(CAPACITY, {"obs": {"shape": 1}}, alpha=0.6)
    rb.add(obs=np.zeros((CAPACITY, 1), dtype=np.float32))
    rb.update_priorities(np.arange(CAPACITY), np.random.default_rng(1).random(CAPACITY) + 1e-6)
    it = iter(range(1 << 62))

    def step():
        x = rb.sample(BATCH, beta=0.4)
        rb.update_priorities(x["indexes"], td_errors[next(it) % 64] + 1e-6)

    step()
    benchmark(step)
    ratios.record(PER_GROUP, "cpprb PrioritizedReplayBuffer", benchmark, items=BATCH, baseline=True)


def test_prioritized_flashbax(benchmark, ratios, td_errors):
    fbx = pytest.importorskip("flashbax")
    jax = pytest.importorskip("jax")
    buf = fbx.make_prioritised_flat_buffer(
        max_length=CAPACITY, min_length=1, sample_batch_size=BATCH, add_sequences=True
    )
    state = buf.init({"obs": jax.numpy.zeros((1,), dtype=jax.numpy.float32)})
    # one sequence of CAPACITY transitions fills the buffer
    state = buf.add(state, {"obs": jax.numpy.zeros((CAPACITY, 1), dtype=jax.numpy.float32)})
    sample, update = jax.jit(buf.sample), jax.jit(buf.set_priorities)
    key = jax.random.PRNGKey(0)
    prios = jax.numpy.asarray(td_errors[0] + 1e-6)

    def step():
        nonlocal state
        b = sample(state, key)
        state = update(state, b.indices, prios)
        jax.block_until_ready(state)

    step()
    benchmark(step)
    ratios.record(PER_GROUP, "flashbax prioritised buffer", benchmark, items=BATCH)


def test_uniform_generator_integers(benchmark, ratios):
    g = np.random.default_rng(0)
    benchmark(g.integers, 0, CAPACITY, BATCH)
    ratios.record(UNI_GROUP, "Generator.integers", benchmark, items=BATCH, baseline=True)


def test_uniform_numbatraj(benchmark, ratios):
    s = UniformSampler(CAPACITY, seed=0)
    s.sample(BATCH)
    benchmark(s.sample, BATCH)
    ratios.record(UNI_GROUP, "UniformSampler.sample", benchmark, items=BATCH)


def test_uniform_philox_host_twin(benchmark, ratios):
    s = UniformDeviceSampler(CAPACITY, BATCH, seed=0, device=False)
    s.sample()
    benchmark(s.sample)
    ratios.record(UNI_GROUP, "UniformDeviceSampler host twin (Philox)", benchmark, items=BATCH)


@pytest.fixture(scope="module")
def episodes():
    rng = np.random.default_rng(3)
    n_rows = max(100_000, int(1_000_000 * bench_scale()))
    lengths = rng.integers(50, 1000, size=n_rows // 500)
    return lengths


def test_expand_window_numpy(benchmark, ratios, episodes):
    offsets = np.concatenate([[0], np.cumsum(episodes)[:-1]])
    starts = np.random.default_rng(4).integers(0, int(episodes.sum()) - 64 + 1, 256)
    steps = np.arange(64)

    def expand():
        idx = starts[:, None] + steps
        pos = np.searchsorted(offsets, idx)
        first = (pos < offsets.shape[0]) & (offsets[np.minimum(pos, offsets.shape[0] - 1)] == idx)
        return idx, first

    expand()
    benchmark(expand)
    ratios.record(WIN_GROUP, "NumPy broadcast + searchsorted", benchmark, items=256 * 64, baseline=True)


def test_expand_window_numbatraj(benchmark, ratios, episodes):
    s = SequenceWindowSampler(episodes, 64, seed=0)
    starts = s.draw_starts(256)
    s.expand_window(starts)
    benchmark(s.expand_window, starts)
    ratios.record(WIN_GROUP, "SequenceWindowSampler.expand_window", benchmark, items=256 * 64)
