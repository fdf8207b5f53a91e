"""ShardedReplay on a local Ray (loopback, 2 CPUs): the acceptance tests of issue 20.

One Ray session for the module, two writer actors reused by every test.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from numbatraj.data.column import ColumnSpec  # noqa: E402
from numbatraj.errors import RateLimitTimeoutError, SchemaError  # noqa: E402
from numbatraj.ray import RateLimiter, ReplayShard, ShardedReplay  # noqa: E402
from numbatraj.samplers import PrioritizedSampler  # noqa: E402
from tests.ray.ray_helpers import Writer, check_rows  # noqa: E402
from tests.ray.ray_helpers import batch as rows_of  # noqa: E402

ROOT = str(Path(__file__).resolve().parents[2])

COLS = [ColumnSpec("obs", np.float32, (4,)), ColumnSpec("id", np.int64, ())]
ROWS = 20_000
BATCH = 1000


@pytest.fixture(scope="module")
def ray_session():
    # workers import this worktree's numbatraj and tests/ (not an installed copy)
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": ROOT}})
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def writers(ray_session):
    actor = ray.remote(num_cpus=1)(Writer)
    ws = [actor.remote() for _ in range(2)]
    ray.get([w.__ray_ready__.remote() for w in ws])
    return ws


def test_two_writers_every_sampled_row_was_added(writers):
    replay = ShardedReplay(2, COLS, capacity=ROWS, seed=3)
    runs = [w.run.remote(replay, k, ROWS, BATCH, 0.0) for k, w in enumerate(writers)]
    seen = 0
    while ray.wait(runs, num_returns=2, timeout=0)[1]:  # sample while the writers write
        if replay.size:
            data, batch = replay.sample(256)
            check_rows(data)
            seen += 1
    ray.get(runs)
    assert replay.size == 2 * ROWS
    stats = replay.stats()
    assert [s["size"] for s in stats] == [ROWS, ROWS]
    assert [s["inserted"] for s in stats] == [ROWS, ROWS]
    assert sum(s["sampled"] for s in stats) == 256 * seen
    data, batch = replay.sample(4096)
    check_rows(data)
    shard = batch.indices // replay.capacity
    # writer k wrote shard k, so the id says which shard a row came from
    np.testing.assert_array_equal(data["id"] // 10**6, shard)
    added = {k: set(range(k * 10**6, k * 10**6 + ROWS)) for k in range(2)}
    assert all(int(i) in added[int(i) // 10**6] for i in data["id"])
    assert 0.45 < np.mean(shard) < 0.55  # equal sizes: equal shares
    # sample_async: a ref the learner gets later, same kind of batch
    d2, b2 = ray.get(replay.sample_async(64))
    check_rows(d2)
    assert b2.batch_size == 64 and b2.weights is None
    replay.shutdown()


def test_prioritized_weights_equal_a_single_buffer_reference(ray_session):
    cap, beta, alpha = 500, 0.5, 0.6
    replay = ShardedReplay(2, COLS, capacity=cap, prioritized=True, seed=5, alpha=alpha,
                           beta=beta)
    for k in range(2):
        replay.add(writer=k, **rows_of(k, 0, cap))
    rng = np.random.default_rng(0)
    ref = PrioritizedSampler(2 * cap, alpha=alpha, beta=beta, seed=1)
    ref.note_added(np.arange(2 * cap))
    # the same priority for every global row, on both sides; shard 1 gets larger ones
    for k in range(2):
        rows = np.arange(cap)
        p = rng.gamma(2.0, 1.0 + 2 * k, size=cap)
        ray.get(replay.shards[k].update_priorities.remote(rows, None, p))
        ref.update_priorities(k * cap + rows, p)
    probs = ref.probabilities()
    n = 2 * cap
    w_ref = (n * probs) ** -beta
    w_ref /= w_ref.max()
    counts = np.zeros(n)
    for _ in range(20):
        data, batch = replay.sample(1000)
        np.testing.assert_allclose(batch.weights, w_ref[batch.indices], rtol=2e-6)
        np.add.at(counts, batch.indices, 1)
    # the reference sampler's own weights for the same rows agree as well
    rb = ref.sample(4000)
    common = {int(i): float(w) for i, w in zip(rb.indices, rb.weights)}
    for i, w in zip(batch.indices, batch.weights):
        if int(i) in common:
            assert w == pytest.approx(common[int(i)], rel=2e-6)
    # shard shares follow total priority
    p1 = probs[cap:].sum()
    share = counts[cap:].sum() / counts.sum()
    assert abs(share - p1) < 4 * np.sqrt(p1 * (1 - p1) / counts.sum())
    # stale guard: rows overwritten after sampling are skipped
    _, batch = replay.sample(100)
    on0 = int(np.sum(batch.indices < cap))
    replay.add(writer=0, **rows_of(0, cap, cap))  # overwrites all of shard 0
    assert replay.update_priorities(batch, np.ones(100)) == on0
    replay.shutdown()


def _learn_until_done(replay, runs, batch, sleep_s):
    steps = 0
    while ray.wait(runs, num_returns=len(runs), timeout=0)[1]:
        try:
            replay.sample(batch, timeout=0.5)
            steps += 1
        except RateLimitTimeoutError:
            continue
        if sleep_s:
            time.sleep(sleep_s)
    return steps


def _check_band(replay, lim):
    lo, hi = lim.band
    for s in replay.stats():
        assert lo <= s["diff_min"] <= s["diff_max"] <= hi, s
        assert lo <= lim.samples_per_insert * s["inserted"] - s["sampled"] <= hi, s


def test_rate_limiter_with_a_writer_slowed_2x(writers):
    lim = RateLimiter.ratio(samples_per_insert=1.0, min_size_to_sample=1000,
                            error_buffer=1000)
    replay = ShardedReplay(2, COLS, capacity=ROWS, seed=7, rate_limiter=lim)
    runs = [w.run.remote(replay, k, ROWS, BATCH, 0.02 * (k + 1)) for k, w in enumerate(writers)]
    steps = _learn_until_done(replay, runs, 250, 0.0)
    secs = ray.get(runs)
    # writer 1 sleeps twice as long per batch (0.04 s against 0.02 s); the two writers'
    # elapsed times are not compared, since the limiter can hold writer 0 back to the
    # learner's pace (CI on 2 cores: 0.82 s against 0.96 s once), and the band is the point
    assert secs[1] >= (ROWS // BATCH) * 0.04
    _check_band(replay, lim)
    st = replay.stats()
    assert [s["inserted"] for s in st] == [ROWS, ROWS]
    assert sum(s["sampled"] for s in st) >= 250 * steps
    # the learner was held back: it drew no more than the limiters admit in total
    assert 250 * steps <= sum(lim.samples_per_insert * s["inserted"] - lim.band[0] for s in st)
    # observed samples per insert is within the error buffer of the target, per shard
    for s in st:
        assert abs(s["sampled"] / s["inserted"] - 1.0) <= (1000 + 1000) / s["inserted"]
    replay.shutdown()


def test_rate_limiter_with_a_slowed_learner(writers):
    lim = RateLimiter.ratio(samples_per_insert=1.0, min_size_to_sample=1000,
                            error_buffer=1000)
    replay = ShardedReplay(2, COLS, capacity=ROWS, seed=8, rate_limiter=lim)
    rows = 6000
    runs = [w.run.remote(replay, k, rows, BATCH, 0.0, 30.0) for k, w in enumerate(writers)]
    _learn_until_done(replay, runs, 500, 0.01)
    ray.get(runs)
    _check_band(replay, lim)
    st = replay.stats()
    assert sum(s["insert_wait_s"] for s in st) > 0.1  # the writers were held back
    # with the learner gone, inserts run ahead of samples: within a few batches an add waits
    # and times out (how many fit first depends on where the learner stopped)
    with pytest.raises(RateLimitTimeoutError, match="waited"):
        for i in range(8):
            replay.add(writer=0, timeout=0.2, **rows_of(0, 10**5 + 500 * i, 500))
    replay.shutdown()


def test_shard_saved_and_reloaded_samples_identically(ray_session, tmp_path):
    actor = ray.remote(ReplayShard).options(num_cpus=0, max_concurrency=4)
    a = actor.remote(COLS, 3000, prioritized=True, seed=11)
    for start in range(0, 4000, 1000):  # wraps
        ray.get(a.add.remote(rows_of(0, start, 1000)))
    _, idx, stamps, *_ = ray.get(a.sample.remote(128))
    ray.get(a.update_priorities.remote(idx, stamps, np.linspace(0.1, 5, 128)))
    path = str(tmp_path / "shard.h5")
    ray.get(a.save.remote(path))
    b = actor.remote(checkpoint=path)
    for _ in range(3):
        sa, sb = ray.get([a.sample.remote(64), b.sample.remote(64)])
        for k in sa[0]:
            np.testing.assert_array_equal(sa[0][k], sb[0][k])
        for x, y in zip(sa[1:], sb[1:]):
            np.testing.assert_array_equal(x, y)
    # the whole client: save, load, same draws from the same client stream
    replay = ShardedReplay(2, COLS, capacity=1000, prioritized=True, seed=2)
    for k in range(2):
        replay.add(writer=k, **rows_of(k, 0, 700))
    replay.save(tmp_path / "sharded")
    again = ShardedReplay.load(tmp_path / "sharded")
    assert again.size == 1400
    (d1, b1), (d2, b2) = replay.sample(256), again.sample(256)
    np.testing.assert_array_equal(b1.indices, b2.indices)
    np.testing.assert_array_equal(d1["obs"], d2["obs"])
    np.testing.assert_array_equal(b1.weights, b2.weights)
    for r in (replay, again):
        r.shutdown()
    ray.kill(a)
    ray.kill(b)


def test_errors_name_the_culprit(ray_session):
    with pytest.raises(SchemaError, match="n_shards"):
        ShardedReplay(0, COLS, 10)
    replay = ShardedReplay(1, COLS, capacity=10)
    with pytest.raises(SchemaError, match="'obs'"):
        replay.add(obs=np.zeros((2, 4), np.float64), id=np.zeros(2, np.int64))
    with pytest.raises(ValueError, match="every shard is empty"):
        replay.sample(4)
    replay.shutdown()
