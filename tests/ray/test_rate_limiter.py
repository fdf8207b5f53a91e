"""RateLimiter semantics in-process (no Ray): the band, the waits, the timeouts."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from numbatraj.data.column import ColumnSpec
from numbatraj.errors import RateLimitTimeoutError, SamplerError
from numbatraj.ray.rate_limiter import RateLimiter, RateLimiterState
from numbatraj.ray.shard import ReplayShard

COLS = [ColumnSpec("x", np.int64, ())]


def _rows(n, start=0):
    return {"x": np.arange(start, start + n, dtype=np.int64)}


def test_settings_are_checked():
    with pytest.raises(SamplerError, match="min_size_to_sample"):
        RateLimiter(min_size_to_sample=-1)
    with pytest.raises(SamplerError, match="samples_per_insert"):
        RateLimiter(samples_per_insert=0.0)
    with pytest.raises(SamplerError, match="error_buffer"):
        RateLimiter(samples_per_insert=1.0, error_buffer=0.5)
    assert not RateLimiter.off().enabled
    assert RateLimiter.ratio(2.0, 10, 5.0).band == (15.0, 25.0)


def test_conditions_follow_the_band():
    st = RateLimiterState(RateLimiter.ratio(1.0, 10, 4.0))  # band [6, 14]
    with st.lock:
        assert st.can_insert(10)  # filling: free
        st.inserted_rows(10, 10)
        assert st.can_insert(4) and not st.can_insert(5)  # 14 <= 14 < 15
        assert st.can_sample(4) and not st.can_sample(5)  # 10 - 4 = 6 >= 6 > 5
        st.sampled_rows(4)
        assert st.diff == 6.0 and not st.can_sample(1)
        assert (st.diff_min, st.diff_max) == (6.0, 10.0)


def test_min_size_only_never_holds_inserts():
    st = RateLimiterState(RateLimiter.min_size(5))
    with st.lock:
        st.inserted_rows(4, 4)
        assert st.can_insert(10**9) and not st.can_sample(1)
        st.inserted_rows(1, 5)
        assert st.can_sample(10**9)


def test_a_batch_that_can_never_pass_is_refused():
    shard = ReplayShard(COLS, 100, rate_limiter=RateLimiter.ratio(1.0, 10, 4.0))
    shard.add(_rows(8))
    with pytest.raises(SamplerError, match="overshoots min_size_to_sample"):
        shard.add(_rows(7))  # 15 > max diff 14 before any sample may run
    shard.add(_rows(2))
    shard.sample(4)  # diff 6 = min
    with pytest.raises(SamplerError, match="exceeds the band"):
        shard.add(_rows(9))  # 15 > 14 even from the bottom of the band
    with pytest.raises(SamplerError, match="can never pass"):
        shard.sample(9)  # wider than the band


def test_waits_are_released_by_the_other_side_and_time_out():
    shard = ReplayShard(COLS, 1000, rate_limiter=RateLimiter.ratio(1.0, 10, 5.0))
    shard.add(_rows(10))
    shard.add(_rows(5, 10))  # diff 15 = max
    with pytest.raises(RateLimitTimeoutError, match="insert of 5 rows waited"):
        shard.add(_rows(5, 15), timeout=0.05)
    done = []
    t = threading.Thread(target=lambda: done.append(shard.add(_rows(5, 15), timeout=5)))
    t.start()
    time.sleep(0.1)
    assert not done  # held back
    shard.sample(5)  # diff 10: the insert fits
    t.join(5)
    assert done and done[0][0] == 20
    st = shard.stats()
    assert st["insert_wait_s"] > 0.05 and st["diff_max"] <= 15 and st["diff_min"] >= 5
    shard.sample(5)
    shard.sample(5)  # diff 5 = min
    with pytest.raises(RateLimitTimeoutError, match="sample of 1 rows"):
        shard.sample(1, timeout=0.05)
