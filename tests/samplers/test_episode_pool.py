"""EpisodePoolSampler: exact epochs, determinism, resume after a kill."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from numbatraj import ColumnSpec, TrajectoryStore, TrajectoryStoreWriter
from numbatraj.errors import SamplerError
from numbatraj.samplers.episode_pool import EpisodePoolSampler

ROOT = Path(__file__).resolve().parents[2]
COLS = [ColumnSpec("row", np.int64, ()), ColumnSpec("obs", np.float32, (3,))]


def _write(path, lengths):
    with TrajectoryStoreWriter(path, COLS) as w:
        start = 0
        for n in lengths:
            rows = np.arange(start, start + n, dtype=np.int64)
            w.append_rows({"row": rows, "obs": (rows[:, None] * [1, -1, 2]).astype(np.float32)})
            w.end_episode()
            start += n
    return path


@pytest.fixture
def store(tmp_path, rng):
    lengths = rng.integers(1, 300, size=40).tolist()
    with TrajectoryStore(_write(tmp_path / "s.h5", lengths)) as s:
        yield s


def _run(sampler, n=None):
    out = []
    batches = sampler.epoch_batches() if n is None else (sampler.next_batch() for _ in range(n))
    for data, rows in batches:
        np.testing.assert_array_equal(data["row"], rows)
        np.testing.assert_array_equal(data["obs"], (rows[:, None] * [1, -1, 2]).astype(np.float32))
        out.append(rows)
    return out


def test_every_row_exactly_once_per_epoch(store):
    s = EpisodePoolSampler(store, batch_size=100, window_rows=64, pool_windows=4, seed=1)
    for epoch in range(2):
        assert s.epoch == epoch or s.rows_left == 0
        got = np.concatenate(_run(s))
        np.testing.assert_array_equal(np.sort(got), np.arange(store.n_rows))
        assert not np.array_equal(got, np.arange(store.n_rows))  # shuffled
    first = np.concatenate(_run(EpisodePoolSampler(store, batch_size=100, window_rows=64,
                                                   pool_windows=4, seed=1)))
    assert not np.array_equal(first, got)  # epochs differ from each other


def test_batches_mix_episodes_and_the_pool_bounds_residency(store):
    s = EpisodePoolSampler(store, batch_size=64, window_rows=32, pool_windows=8, seed=2)
    data, rows = s.next_batch()
    ep = np.searchsorted(store.episode_offsets, rows, side="right") - 1
    assert len(np.unique(ep)) >= 4
    assert len(s.state_dict()["resident"]) <= 8


def test_same_seed_same_batches_other_seed_others(store):
    a = _run(EpisodePoolSampler(store, batch_size=50, window_rows=100, seed=3))
    b = _run(EpisodePoolSampler(store, batch_size=50, window_rows=100, seed=3))
    c = _run(EpisodePoolSampler(store, batch_size=50, window_rows=100, seed=4))
    assert all(np.array_equal(x, y) for x, y in zip(a, b)) and len(a) == len(b)
    assert not np.array_equal(a[0], c[0])


def test_resume_from_state_dict_mid_epoch(store, tmp_path):
    kw = dict(batch_size=37, window_rows=50, pool_windows=3, seed=5)
    ref = EpisodePoolSampler(store, **kw)
    _run(ref, 1)  # into epoch 0
    head = _run(ref, 9)
    state = pickle.loads(pickle.dumps(ref.state_dict()))
    rest = _run(ref)
    again = EpisodePoolSampler(store, **kw)
    again.load_state_dict(state)
    got = _run(again)
    assert len(got) == len(rest) and all(np.array_equal(x, y) for x, y in zip(got, rest))
    assert np.concatenate(head + rest).size + 37 == store.n_rows
    with pytest.raises(SamplerError, match="batch_size: state 37, sampler 36"):
        EpisodePoolSampler(store, **{**kw, "batch_size": 36}).load_state_dict(state)


def test_kill_and_resume_reproduces_the_rest_of_the_epoch(store, tmp_path):
    """A process saving its state after every batch is SIGKILLed; a new one resumes."""
    kw = dict(batch_size=64, window_rows=40, pool_windows=4, seed=9)
    ckpt = tmp_path / "state.pkl"
    code = textwrap.dedent(f"""
        import os, pickle, signal
        from numbatraj import TrajectoryStore
        from numbatraj.io.atomic import write_bytes
        from numbatraj.samplers.episode_pool import EpisodePoolSampler
        s = EpisodePoolSampler(TrajectoryStore({str(store.path)!r}), **{kw!r})
        for k, (data, rows) in enumerate(s.epoch_batches()):
            write_bytes({str(ckpt)!r}, pickle.dumps(s.state_dict()))
            if k == 6:
                os.kill(os.getpid(), signal.SIGKILL)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    ref = EpisodePoolSampler(store, **kw)
    _run(ref, 7)
    rest = _run(ref)
    resumed = EpisodePoolSampler(store, **kw)
    resumed.load_state_dict(pickle.loads(ckpt.read_bytes()))
    got = _run(resumed)
    assert len(got) == len(rest) and all(np.array_equal(x, y) for x, y in zip(got, rest))


def test_arguments_are_checked(store):
    with pytest.raises(SamplerError, match="batch_size"):
        EpisodePoolSampler(store, batch_size=0)
    with pytest.raises(SamplerError, match="pool_windows"):
        EpisodePoolSampler(store, batch_size=4, pool_windows=0)
    with pytest.raises(SamplerError, match="columns is empty"):
        EpisodePoolSampler(store, batch_size=4, columns=[])
    with pytest.raises(SamplerError, match="expected 'EpisodePoolSampler'"):
        EpisodePoolSampler(store, batch_size=4).load_state_dict({"kind": "x"})
