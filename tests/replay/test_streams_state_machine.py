"""A Hypothesis state machine checks StoreReplay's streams against a plain Python model: one
deque per env (maxlen = ring rows per env) and a list of demos.  Operations: adds of one or
several steps of every env (episodes ending at random, batches larger than the ring), demo
rows, transition draws with and without n-step targets (return, discount, next_obs at
t+m-1, frame stacks), sequence draws (spanning and within_episode), save / load in the
middle.  A twin replay that keeps its n-step targets (``n_step=`` at construction, next_obs
stored) takes the same adds; its draws are checked against the same model.  Every sampled
value is checked against the model."""

from __future__ import annotations

import shutil
import tempfile
from collections import deque
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from numbatraj.data import ColumnSpec
from numbatraj.replay import StoreReplay
from tests.reference import frame_stack_ref, nstep_ref, window_ref

COLS = [ColumnSpec("obs", np.float32, (2,)), ColumnSpec("reward", np.float32, ()),
        ColumnSpec("done", np.bool_, ()), ColumnSpec("truncated", np.bool_, ())]
KEPT_COLS = [*COLS, ColumnSpec("next_obs", np.float32, (2,))]


class StreamMachine(RuleBasedStateMachine):
    @initialize(n_envs=st.integers(1, 3), per_env=st.integers(1, 5), demo=st.integers(0, 3),
                depth=st.integers(1, 3), seed=st.integers(0, 2**16),
                kept_n=st.sampled_from([1, 2, 3, 5]), kept_g=st.sampled_from([0.5, 1.0]))
    def setup(self, n_envs, per_env, demo, depth, seed, kept_n=3, kept_g=0.5):
        self.tmp = Path(tempfile.mkdtemp())
        self.e, self.per_env, self.depth = n_envs, per_env, depth
        self.kw = dict(n_envs=n_envs, demo_capacity=demo, seed=seed,
                       next_of={"next_obs": "obs"}, frame_stack={"obs": depth})
        self.rep = StoreReplay(COLS, n_envs * per_env + demo, **self.kw)
        self.kept_ng = (kept_n, kept_g)
        self.kept = StoreReplay(KEPT_COLS, n_envs * per_env + demo, n_envs=n_envs,
                                demo_capacity=demo, seed=seed, n_step=kept_n, gamma=kept_g)
        self.envs: list[deque] = [deque(maxlen=per_env) for _ in range(n_envs)]
        self.demos: list[dict] = []
        self.next_id = 0
        self.rng = np.random.default_rng(seed)

    def teardown(self):
        shutil.rmtree(getattr(self, "tmp", ""), ignore_errors=True)

    def _rows(self, n: int, ids: np.ndarray, step: int, ends: list[int], truncs: list[int]):
        done = np.isin(np.arange(n), ends)
        trunc = np.isin(np.arange(n), truncs) & ~done
        reward = (ids % 7 - 3).astype(np.float32)
        obs = np.stack([ids, ids % 3], 1).astype(np.float32)
        nxt = np.stack([ids + step, (ids + step) % 3], 1).astype(np.float32)
        fin = done | trunc
        nxt[fin] = np.stack([ids + 0.5, -np.ones(n)], 1)[fin]
        rows = [dict(id=int(ids[i]), reward=float(reward[i]), done=bool(done[i]),
                     truncated=bool(trunc[i]), next=nxt[i].copy()) for i in range(n)]
        arrays = {"obs": obs, "reward": reward, "done": done, "truncated": trunc,
                  "next_obs": nxt}
        return arrays, rows

    @rule(t=st.integers(1, 7), ends=st.lists(st.integers(0, 20), max_size=3),
          truncs=st.lists(st.integers(0, 20), max_size=2))
    def add_steps(self, t, ends, truncs):
        n = t * self.e
        ids = np.arange(self.next_id, self.next_id + n)
        self.next_id += n
        arrays, rows = self._rows(n, ids, self.e, ends, truncs)
        if self.e > 1 or t > 1:
            arrays = {k: v.reshape(t, self.e, *v.shape[1:]) if self.e > 1 else v
                      for k, v in arrays.items()}
        else:
            arrays = {k: v[0] for k, v in arrays.items()}  # one row: the general path
        assert self.rep.add(**arrays) == n
        assert self.kept.add(**arrays) == n
        for i, row in enumerate(rows):
            self.envs[i % self.e].append(row)

    @rule(n=st.integers(1, 3), ends=st.lists(st.integers(0, 3), max_size=2))
    def add_demos(self, n, ends):
        if len(self.demos) + n > self.rep.demo_capacity:
            return
        ids = 100_000 + len(self.demos) + np.arange(n)
        arrays, rows = self._rows(n, ids, 1, ends, [])
        self.rep.add_demos(**arrays)
        self.kept.add_demos(**arrays)
        self.demos.extend(rows)

    def _where(self) -> dict[int, tuple[list, int]]:
        out = {}
        for env in self.envs:
            lst = list(env)
            for j, row in enumerate(lst):
                out[row["id"]] = (lst, j)
        for j, row in enumerate(self.demos):
            out[row["id"]] = (self.demos, j)
        return out

    @rule(n_step=st.sampled_from([None, 1, 2, 5]), gamma=st.sampled_from([0.5, 1.0]))
    def sample_transitions(self, n_step, gamma):
        if self.rep.n_rows == 0:
            return
        out, _ = self.rep.sample(16, n_step=n_step, gamma=gamma)
        where = self._where()
        d = self.depth
        for i in range(16):
            stream, j = where[int(out["obs"][i, -1, 0])]
            want = [stream[q]["id"] for q in frame_stack_ref(stream, j, d)]
            assert out["obs"][i, :, 0].astype(int).tolist() == want
            last = j
            if n_step:
                ret, disc, last = nstep_ref(stream, j, n_step, gamma)
                assert abs(out["return"][i] - ret) <= 1e-5 * max(1, abs(ret))
                assert abs(out["discount"][i] - disc) <= 1e-6
            np.testing.assert_array_equal(out["next_obs"][i, -1], stream[last]["next"])
            nwant = [stream[q]["id"] for q in frame_stack_ref(stream, last, d)][1:]
            assert out["next_obs"][i, :-1, 0].astype(int).tolist() == nwant

    @rule()
    def sample_kept(self):
        if self.kept.n_rows == 0:
            return
        out, _ = self.kept.sample(16)  # the kept targets, no walk
        where = self._where()
        n, g = self.kept_ng
        for i in range(16):
            stream, j = where[int(out["obs"][i, 0])]
            ret, disc, last = nstep_ref(stream, j, n, g)
            assert abs(out["return"][i] - ret) <= 1e-5 * max(1, abs(ret))
            assert abs(out["discount"][i] - disc) <= 1e-6
            np.testing.assert_array_equal(out["next_obs"][i], stream[last]["next"])

    @rule(t_len=st.integers(1, 4), within=st.booleans())
    def sample_sequences(self, t_len, within):
        longest = max([len(self.demos)] + [len(e) for e in self.envs])
        if self.rep.n_rows == 0 or t_len > longest:
            return
        out, batch = self.rep.sample_sequences(8, t_len, within_episode=within)
        where = self._where()
        for i in range(8):
            stream, j = where[int(out["obs"][i, 0, 0])]
            rows, pad = window_ref(stream, j, t_len, within)
            assert out["obs"][i, :, 0].astype(int).tolist() == [stream[q]["id"] for q in rows]
            if within:
                assert out["obs_is_pad"][i].tolist() == pad
            for q, first, padded in zip(rows, out["is_first"][i], pad):
                if not padded and q:
                    prev = stream[q - 1]
                    assert bool(first) == (prev["done"] or prev["truncated"])
            np.testing.assert_array_equal(out["next_obs"][i],
                                          np.stack([stream[q]["next"] for q in rows]))

    @rule()
    def save_and_load(self):
        path = self.tmp / "s.ckpt"
        self.rep.save(path)
        back = StoreReplay.load(path)
        if self.rep.n_rows:  # the resumed replay draws exactly what the saved one would
            a, b = self.rep.sample(8, n_step=2), back.sample(8, n_step=2)
            for k in a[0]:
                np.testing.assert_array_equal(a[0][k], b[0][k])
        self.rep = back
        self.kept.save(path)
        kback = StoreReplay.load(path)
        if self.kept.n_rows:
            a, b = self.kept.sample(8), kback.sample(8)
            for k in a[0]:
                np.testing.assert_array_equal(a[0][k], b[0][k])
        self.kept = kback

    @invariant()
    def rows_equal_the_model(self):
        if not hasattr(self, "rep"):
            return
        rows = self.rep.rows()
        want = [r["id"] for r in self.demos]
        steps = len(self.envs[0])
        want += [self.envs[e][t]["id"] for t in range(steps) for e in range(self.e)]
        assert rows["obs"][:, 0].astype(int).tolist() == want
        model = {r["id"]: r["next"] for r in self.demos}
        for env in self.envs:
            model.update({r["id"]: r["next"] for r in env})
        for rid, nxt in zip(rows["obs"][:, 0].astype(int), rows["next_obs"]):
            np.testing.assert_array_equal(nxt, model[rid])  # sampled equals what was added
        side = self.rep._side
        if side is not None:  # the side table holds only what cannot be derived
            assert side.n_kept <= sum(1 for r in self.demos if r["done"] or r["truncated"]) + \
                sum(1 for env in self.envs for r in env if r["done"] or r["truncated"]) + \
                self.e + 1


StreamMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=20, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStreamMachine = StreamMachine.TestCase
