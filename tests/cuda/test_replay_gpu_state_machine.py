"""The streams state machine (tests/replay/test_streams_state_machine.py: StoreReplay against
one deque per env and a list of demos) driving StoreReplayGpu under the CUDA simulator: the
same rules (streams, wraps, demos, next_of, frame stacks, n-step targets, spanning and
within-episode sequences, save / load in the middle) and the same model checks, with the
device's outputs copied back.  Every other multi-row add sends device arrays.

Runs in its own pytest process with NUMBA_ENABLE_CUDASIM=1 (tests/conftest.py marks it
``cuda``); few examples, since the simulator runs one Python thread per lane.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, rule

import tests.replay.test_streams_state_machine as base
from numbatraj._cuda import cuda_available

pytestmark = pytest.mark.skipif(
    not cuda_available(), reason="no CUDA device and NUMBA_ENABLE_CUDASIM is not 1"
)


class _HostView:
    """A StoreReplayGpu seen through host arrays: what the machine's checks read."""

    def __init__(self, rep: Any) -> None:
        self.rep = rep
        self._adds = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rep, name)

    def add(self, **rows: Any) -> int:
        from numba import cuda

        self._adds += 1
        if self._adds % 2 and all(np.ndim(v) > 1 for k, v in rows.items() if k == "reward"):
            rows = {k: cuda.to_device(np.ascontiguousarray(v)) for k, v in rows.items()}
        return int(self.rep.add(**rows))

    def sample(self, *args: Any, **kw: Any) -> tuple[dict[str, np.ndarray], Any]:
        out, batch = self.rep.sample(*args, **kw)
        return {k: v.copy_to_host() for k, v in out.items()}, batch

    def sample_sequences(self, *args: Any, **kw: Any) -> tuple[dict[str, np.ndarray], Any]:
        out, batch = self.rep.sample_sequences(*args, **kw)
        return {k: v.copy_to_host() for k, v in out.items()}, batch

    def rows(self) -> dict[str, np.ndarray]:
        return self.rep.to_host().rows()


class DeviceStreamMachine(base.StreamMachine):
    @initialize(n_envs=st.integers(1, 3), per_env=st.integers(1, 5), demo=st.integers(0, 3),
                depth=st.integers(1, 3), seed=st.integers(0, 2**16))
    def setup(self, n_envs, per_env, demo, depth, seed):
        from numbatraj.replay import StoreReplayGpu

        super().setup(n_envs, per_env, demo, depth, seed)
        self.rep = _HostView(StoreReplayGpu(base.COLS, n_envs * per_env + demo, **self.kw))

    @rule()
    def save_and_load(self):
        from numbatraj.replay import StoreReplayGpu

        path = self.tmp / "s.ckpt"
        self.rep.save(path)
        back = _HostView(StoreReplayGpu.load(path))
        if self.rep.n_rows:  # the resumed replay draws exactly what the saved one would
            a, b = self.rep.sample(8, n_step=2), back.sample(8, n_step=2)
            for k in a[0]:
                np.testing.assert_array_equal(a[0][k], b[0][k])
        self.rep = back

    @invariant()
    def device_side_table_mirrors_the_host(self):
        rep = getattr(self, "rep", None)
        side = None if rep is None else rep._side
        if side is None:
            return
        slot = side.d_slot.copy_to_host()[:, 0]
        np.testing.assert_array_equal(slot, side.slot)
        kept = slot[slot >= 0]
        dev = side.d_pool["next_obs"].copy_to_host()
        np.testing.assert_array_equal(dev[kept], side.pool["next_obs"][kept].reshape(-1, 2))


DeviceStreamMachine.TestCase.settings = settings(
    max_examples=15, stateful_step_count=15, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestDeviceStreamMachine = DeviceStreamMachine.TestCase
