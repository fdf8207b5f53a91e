"""A Hypothesis state machine checks StoreReplay against a deque model: adds of random sizes
(single rows, batches, batches larger than the ring), demo rows, samples, saves and loads.

A second replay with the same seed runs the same operations but is never saved; after every
load the saved one must keep sampling exactly what the uninterrupted twin samples."""

from __future__ import annotations

import shutil
import tempfile
from collections import deque
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from numbatraj.replay import StoreReplay
from tests.replay.helpers import row_ids, rows, sac_columns


class ReplayMachine(RuleBasedStateMachine):
    @initialize(
        capacity=st.integers(1, 9),
        demo=st.integers(0, 3),
        prioritized=st.booleans(),
        seed=st.integers(0, 2**32),
    )
    def setup(self, capacity, demo, prioritized, seed):
        demo = min(demo, capacity - 1)
        self.tmp = Path(tempfile.mkdtemp())
        kw = dict(prioritized=prioritized, seed=seed, demo_capacity=demo)
        self.rep = StoreReplay(sac_columns(), capacity, **kw)
        self.twin = StoreReplay(sac_columns(), capacity, **kw)
        self.model: deque[int] = deque(maxlen=capacity - demo)
        self.demos: list[int] = []
        self.next_id = 0
        self.saves = 0

    def teardown(self):
        shutil.rmtree(getattr(self, "tmp", ""), ignore_errors=True)

    @rule(n=st.integers(0, 25), single=st.booleans())
    def add(self, n, single):
        batch = rows(self.next_id, max(n, 1) if single else n)
        if single:
            batch = {k: v[0] for k, v in batch.items()}
            n = 1
        assert self.rep.add(**batch) == n
        self.twin.add(**batch)
        self.model.extend(range(self.next_id, self.next_id + n))
        self.next_id += n

    @rule(n=st.integers(1, 3))
    def add_demos(self, n):
        if len(self.demos) + n > self.rep.demo_capacity:
            return
        batch = rows(10_000 + len(self.demos), n)
        self.rep.add_demos(**batch)
        self.twin.add_demos(**batch)
        self.demos.extend(range(10_000 + len(self.demos), 10_000 + len(self.demos) + n))

    @precondition(lambda self: len(self.model) + len(self.demos) > 0)
    @rule(b=st.integers(1, 40), feedback=st.booleans())
    def sample(self, b, feedback):
        batch, idx = self.rep.sample(b)
        tbatch, tidx = self.twin.sample(b)
        np.testing.assert_array_equal(idx.indices, tidx.indices)
        ids = row_ids(batch).astype(int)
        assert set(ids) <= set(self.model) | set(self.demos)
        np.testing.assert_array_equal(batch["next_obs"][:, 0], batch["obs"][:, 0] + 1)
        if self.rep.prioritized and feedback:
            pr = (ids % 5).astype(np.float64)
            assert self.rep.update_priorities(idx, pr) == self.twin.update_priorities(tidx, pr) == 0

    @rule()
    def save_and_load(self):
        path = self.tmp / f"r{self.saves}.ckpt"
        self.saves += 1
        self.rep.save(path)
        self.rep = StoreReplay.load(path)

    @invariant()
    def matches_model(self):
        if not hasattr(self, "rep"):
            return
        held = row_ids(self.rep.rows()).astype(int).tolist()
        assert held == self.demos + list(self.model)
        assert self.rep.size == len(self.model) and self.rep.n_demo == len(self.demos)


ReplayMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestReplayMachine = ReplayMachine.TestCase
