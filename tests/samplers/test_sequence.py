"""SequenceWindowSampler: spanning default, in-episode windows, is_first flags."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numbatraj import ColumnSpec, TrajectoryStore, TrajectoryStoreWriter
from numbatraj.errors import EpisodeError, RowIndexError, SamplerError
from numbatraj.samplers import SequenceWindowSampler
from tests.reference import expand_window_ref, in_episode_starts_ref

LENGTHS = np.array([5, 3, 8, 4])


def test_spanning_is_the_default():
    """Pinned: windows span episode boundaries unless asked otherwise (DreamerV3 relies on
    it and resets at the seam from is_first)."""
    default = inspect.signature(SequenceWindowSampler).parameters["within_episode"].default
    assert default is False
    s = SequenceWindowSampler(LENGTHS, 4, seed=0)
    assert s.within_episode is False and s.n_starts == 20 - 4 + 1
    starts = s.draw_starts(4000)
    assert set(starts.tolist()) == set(range(17))  # every start, spanning ones included
    crossing = s.expand_window(starts).is_first[:, 1:].any(axis=1)
    assert crossing.any()


def test_golden_first_draws():
    s = SequenceWindowSampler(LENGTHS, 3, seed=42)
    assert s.draw_starts(8).tolist() == [13, 7, 15, 12, 1, 17, 13, 14]
    assert s.draw_starts_in_episodes(8).tolist() == [1, 9, 8, 17, 11, 13, 9, 2]


def test_expand_window_matches_reference(rng):
    lengths = np.array([1, 4, 1, 1, 7, 2, 9])
    n = int(lengths.sum())
    for window in (1, 2, 5, n):
        s = SequenceWindowSampler(lengths, window, seed=0)
        starts = np.arange(n - window + 1)
        b = s.expand_window(starts)
        idx, first = expand_window_ref(lengths, starts, window)
        assert b.shape == (starts.shape[0], window)
        np.testing.assert_array_equal(b.indices, idx)
        np.testing.assert_array_equal(b.is_first, first)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(1, 12), min_size=1, max_size=15),
    st.integers(1, 10),
    st.integers(0, 2**32),
)
def test_in_episode_windows_never_cross(lengths, window, seed):
    lengths = np.array(lengths)
    valid = in_episode_starts_ref(lengths, window)
    if not valid:
        with pytest.raises(EpisodeError, match=f"no episode holds a window of {window} rows"):
            SequenceWindowSampler(lengths, window, seed=seed).draw_starts_in_episodes(3)
        return
    s = SequenceWindowSampler(lengths, window, seed=seed, within_episode=True)
    starts = s.draw_starts(64)
    assert set(starts.tolist()) <= set(valid)
    b = s.expand_window(starts)
    # inside one episode: only the first row of a window may start an episode
    assert not b.is_first[:, 1:].any()
    idx, first = expand_window_ref(lengths, starts, window)
    np.testing.assert_array_equal(b.indices, idx)
    np.testing.assert_array_equal(b.is_first, first)


def test_in_episode_starts_are_uniform_over_valid_starts():
    lengths = np.array([2, 6, 3, 10])  # window 3: episode 0 excluded
    s = SequenceWindowSampler(lengths, 3, seed=7)
    valid = in_episode_starts_ref(lengths, 3)
    counts = {v: 0 for v in valid}
    for x in s.draw_starts_in_episodes(len(valid) * 2000).tolist():
        counts[x] += 1
    obs = np.array(list(counts.values()))
    chi2 = float(((obs - 2000) ** 2 / 2000).sum())
    assert chi2 < 34.53  # chi-square, 13 dof, p = 0.001


def test_sample_and_store_input(tmp_path):
    path = tmp_path / "s.h5"
    with TrajectoryStoreWriter(path, [ColumnSpec("x", np.float32)]) as w:
        for n in LENGTHS:
            w.append("x", np.zeros(n, np.float32))
            w.end_episode()
    with TrajectoryStore(path) as store:
        s = SequenceWindowSampler(store, 4, seed=3)
    b = s.sample(16)
    assert b.shape == (16, 4) and b.is_first.dtype == np.bool_
    np.testing.assert_array_equal(b.is_first, expand_window_ref(LENGTHS, b.indices[:, 0], 4)[1])


def test_state_dict_resumes_exactly():
    s = SequenceWindowSampler(LENGTHS, 2, seed=1)
    s.draw_starts(5)
    state = s.state_dict()
    a = s.draw_starts(30)
    t = SequenceWindowSampler(LENGTHS, 2, seed=99)
    t.load_state_dict(state)
    assert t.draw_starts(30).tolist() == a.tolist()
    with pytest.raises(SamplerError, match="state has window 2, this sampler has 3"):
        SequenceWindowSampler(LENGTHS, 3, seed=0).load_state_dict(state)


def test_bad_inputs():
    s = SequenceWindowSampler(LENGTHS, 4, seed=0)
    with pytest.raises(RowIndexError, match=r"starts\[1\] = 17: a window of 4 rows must start in \[0, 16\]"):
        s.expand_window([0, 17])
    with pytest.raises(RowIndexError, match=r"starts\[0\] = -1"):
        s.expand_window([-1])
    with pytest.raises(SamplerError, match="starts must be 1-D integers"):
        s.expand_window([[0, 1]])
    with pytest.raises(SamplerError, match="window 21 is longer than the 20 rows"):
        SequenceWindowSampler(LENGTHS, 21, seed=0).draw_starts(2)
    with pytest.raises(EpisodeError, match="the longest of the 4 episodes has 8 rows"):
        SequenceWindowSampler(LENGTHS, 9, seed=0, within_episode=True)
    with pytest.raises(EpisodeError, match=r"ep_len\[1\] = 0"):
        SequenceWindowSampler(np.array([3, 0, 2]), 2, seed=0)
    with pytest.raises(EpisodeError, match="episode index is empty"):
        SequenceWindowSampler(np.array([], dtype=np.int64), 2, seed=0)
    with pytest.raises(EpisodeError, match="1-D integer episode lengths"):
        SequenceWindowSampler(np.array([2.0, 3.0]), 2, seed=0)
    with pytest.raises(SamplerError, match="window must be >= 1, got 0"):
        SequenceWindowSampler(LENGTHS, 0, seed=0)
    with pytest.raises(SamplerError, match="batch_size must be >= 1"):
        s.draw_starts_in_episodes(0)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 1000])
def test_level_by_level_search_is_searchsorted(n, rng):
    """The batched binary search of the window kernels against ``np.searchsorted``: every
    key, duplicates in the array (episodes with no valid start), keys at the ends."""
    from numbatraj.samplers import _window_kernels as K

    arr = np.concatenate([[0], np.sort(rng.integers(0, 3 * n, n - 1))]).astype(np.int64)
    arr[n // 2 :: 3] = arr[n // 2]  # runs of equal values
    arr = np.maximum.accumulate(arr)
    keys = np.concatenate([arr, arr + 1, rng.integers(0, int(arr[-1]) + 5, 200)]).astype(np.int64)
    out = np.full((keys.shape[0], 2), -7, dtype=np.int64)
    K._last_le_cpu(arr, n, keys, out, 1)
    np.testing.assert_array_equal(out[:, 1], np.searchsorted(arr, keys, side="right") - 1)
    assert (out[:, 0] == -7).all(), "another column was written"
