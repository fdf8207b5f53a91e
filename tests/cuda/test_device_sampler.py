"""UniformDeviceSampler on the device (simulator in CI) equals its host twin.

Launches stay below a thousand threads: the simulator runs each as a Python thread.
"""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj._cuda import cuda_available
from numbatraj.samplers import UniformDeviceSampler
from tests.reference import philox_rows_ref

pytestmark = pytest.mark.skipif(
    not cuda_available(), reason="no CUDA device and NUMBA_ENABLE_CUDASIM is not 1"
)


def test_device_equals_host_twin_over_consecutive_calls():
    # 300 lanes: two blocks of 256 threads, so the last-block counter advance is exercised
    dev = UniformDeviceSampler(1000, 300, seed=12345)
    host = UniformDeviceSampler(1000, 300, seed=12345, device=False)
    draws = []
    for d in range(3):
        b = dev.sample()
        assert b.on_device and b.shape == (300,)
        got = b.indices.copy_to_host()
        np.testing.assert_array_equal(got, host.sample().indices)
        np.testing.assert_array_equal(got, philox_rows_ref(12345, 1000, 300, d))
        draws.append(got)
    assert not np.array_equal(draws[0], draws[1])  # the device counter advanced
    assert not np.array_equal(draws[1], draws[2])
    state = dev.state_array.copy_to_host()
    assert state.tolist() == [3, 0, 1000]  # draw counter, blocks-done reset, n_rows


def test_sample_takes_no_arguments_and_reuses_buffers():
    dev = UniformDeviceSampler(50, 64, seed=1)
    a = dev.sample()
    b = dev.sample()
    assert a is b  # the same preallocated batch: nothing allocated per call
    dev.set_n_rows(7)
    got = dev.sample().indices.copy_to_host()
    np.testing.assert_array_equal(got, philox_rows_ref(1, 7, 64, 2))


def test_device_state_dict_round_trip():
    dev = UniformDeviceSampler(500, 40, seed=9)
    dev.sample()
    state = dev.state_dict()
    assert state["draw"] == 1
    nxt = dev.sample().indices.copy_to_host()
    host = UniformDeviceSampler(500, 40, seed=0, device=False)
    host.load_state_dict(state)
    np.testing.assert_array_equal(host.sample().indices, nxt)
    again = UniformDeviceSampler(3, 40, seed=0)
    again.load_state_dict(state)
    np.testing.assert_array_equal(again.sample().indices.copy_to_host(), nxt)


def test_launch_arguments_never_change_between_calls():
    """What makes the launch capturable in a CUDA graph: every call launches the same kernel
    with the very same argument objects, yet the indices change (the counter is on the
    device)."""
    dev = UniformDeviceSampler(100, 32, seed=5)
    launch = dev._launch
    calls = []

    def recording(*args):
        calls.append(args)
        return launch(*args)

    dev._launch = recording
    outs = [dev.sample().indices.copy_to_host() for _ in range(3)]
    assert len(calls) == 3
    for args in calls[1:]:
        assert len(args) == len(calls[0])
        assert all(a is b for a, b in zip(args, calls[0]))
    assert not np.array_equal(outs[0], outs[1]) and not np.array_equal(outs[1], outs[2])
