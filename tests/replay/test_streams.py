"""Streams, n-step returns, next_of, frame stacks and sequences against the plain references
in tests/reference.py (brute force over per-env lists), plus the bad inputs."""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj.data import ColumnSpec, TrajectoryStore
from numbatraj.errors import SamplerError, SchemaError
from numbatraj.replay import StoreReplay
from numbatraj.replay import _stream_kernels as sk
from tests.reference import frame_stack_ref, nstep_ref, window_ref


def _cols(trunc: bool = True) -> list[ColumnSpec]:
    c = [ColumnSpec("obs", np.float32, (2,)), ColumnSpec("reward", np.float32, ()),
         ColumnSpec("done", np.bool_, ())]
    return c + [ColumnSpec("truncated", np.bool_, ())] if trunc else c


class Model:
    """Per-env lists of rows (the newest ring_capacity / n_envs kept), and the demos."""

    def __init__(self, n_envs: int, per_env: int) -> None:
        self.e, self.per_env = n_envs, per_env
        self.envs: list[list[dict]] = [[] for _ in range(n_envs)]
        self.demos: list[dict] = []
        self.by_id: dict[int, tuple[int, int]] = {}
        self.next_id = 0

    def step_rows(self, t_steps: int, rng, p_done=0.2, p_trunc=0.1) -> dict[str, np.ndarray]:
        n = t_steps * self.e
        ids = np.arange(self.next_id, self.next_id + n)
        self.next_id += n
        done = rng.random(n) < p_done
        trunc = (rng.random(n) < p_trunc) & ~done
        reward = rng.integers(-4, 5, n).astype(np.float32)
        obs = np.stack([ids, ids % 5], 1).astype(np.float32)
        # next_obs of a row is the next step's obs (ids advance by n_envs), except where an
        # episode ends: there the final observation is a value of its own
        nxt = np.stack([ids + self.e, (ids + self.e) % 5], 1).astype(np.float32)
        nxt[done | trunc] = np.stack([ids + 0.5, -np.ones(n)], 1)[done | trunc]
        for i in range(n):
            env = self.envs[i % self.e]
            env.append(dict(id=int(ids[i]), reward=float(reward[i]), done=bool(done[i]),
                            truncated=bool(trunc[i]), next=nxt[i].copy()))
            if len(env) > self.per_env:
                env.pop(0)
        self.reindex()
        shape = (t_steps, self.e) if self.e > 1 else (n,)
        return {"obs": obs.reshape(*shape, 2), "reward": reward.reshape(shape),
                "done": done.reshape(shape), "truncated": trunc.reshape(shape),
                "next_obs": nxt.reshape(*shape, 2)}

    def reindex(self) -> None:
        self.by_id = {}
        for k, env in enumerate(self.envs):
            for j, row in enumerate(env):
                self.by_id[row["id"]] = (k, j)
        for j, row in enumerate(self.demos):
            self.by_id[row["id"]] = (-1, j)

    def stream(self, k: int) -> list[dict]:
        return self.demos if k < 0 else self.envs[k]


def _no_next(rows: dict) -> dict:
    return {k: v for k, v in rows.items() if k != "next_obs"}


def _check_transitions(rep, model, out, n_step, gamma, depth):
    ids = out["obs"][:, -1, 0] if depth else out["obs"][:, 0]
    for i, rid in enumerate(ids.astype(int)):
        k, j = model.by_id[rid]
        stream = model.stream(k)
        if n_step:
            ret, disc, last = nstep_ref(stream, j, n_step, gamma)
            assert out["return"][i] == pytest.approx(ret, rel=1e-5, abs=1e-5)
            assert out["discount"][i] == pytest.approx(disc, rel=1e-5, abs=1e-7)
        else:
            last = j
        nxt = out["next_obs"][i, -1] if depth else out["next_obs"][i]
        np.testing.assert_array_equal(nxt, stream[last]["next"])
        if depth:
            want = [stream[q]["id"] for q in frame_stack_ref(stream, j, depth)]
            assert out["obs"][i, :, 0].astype(int).tolist() == want
            nwant = [stream[q]["id"] for q in frame_stack_ref(stream, last, depth)][1:]
            assert out["next_obs"][i, :-1, 0].astype(int).tolist() == nwant


@pytest.mark.parametrize("n_envs, per_env, demo", [(1, 7, 0), (3, 5, 0), (2, 4, 3), (1, 1, 0)])
@pytest.mark.parametrize("depth", [0, 3])
@pytest.mark.parametrize("prioritized", [False, True])
def test_nstep_next_of_and_frame_stacks_match_the_reference(n_envs, per_env, demo, depth,
                                                            prioritized, rng):
    model = Model(n_envs, per_env)
    kw = dict(n_envs=n_envs, next_of={"next_obs": "obs"}, demo_capacity=demo, seed=1,
              prioritized=prioritized)
    if depth:
        kw["frame_stack"] = {"obs": depth}
    rep = StoreReplay(_cols(), n_envs * per_env + demo, **kw)
    if demo:
        dm = Model(1, demo)
        dm.next_id = 10_000
        rep.add_demos(**dm.step_rows(demo, rng))
        model.demos = dm.envs[0]
        model.reindex()
    for t in [1, 2, per_env + 1, 3, 1]:  # wraps, a batch larger than the ring
        rep.add(**model.step_rows(t, rng))
        for n_step in (None, 1, 3, 12):  # 12: longer than every episode and stream
            out, _ = rep.sample(64, n_step=n_step, gamma=0.9)
            _check_transitions(rep, model, out, n_step, 0.9, depth)


def test_fasttd3_cases_write_head_truncation_terminal_long_n():
    # one stream: rows 0..5, truncated at 2, done at 4, row 5 the write head
    rep = StoreReplay(_cols(), 8, next_of={"next_obs": "obs"})
    r = np.arange(6, dtype=np.float32) + 1
    obs = np.stack([np.arange(6), np.zeros(6)], 1).astype(np.float32)
    nxt = obs + 1
    nxt[[2, 4, 5], 0] = [102, 104, 105]  # final observations, and the write head's next
    rep.add(obs=obs, reward=r, done=np.arange(6) == 4, truncated=np.arange(6) == 2,
            next_obs=nxt)
    idx = np.arange(6, dtype=np.int64)
    out = {c: np.empty(6, np.float32) for c in ("return", "discount")}
    last = np.empty(6, np.int64)
    g = 0.5
    for n in (1, 2, 3, 10):
        sk.nstep_cpu(idx, n, g, rep._data["reward"], rep._done_v, rep._trunc_v,
                     *rep._geom(), out["return"], out["discount"], last)
        stream = [dict(reward=float(r[i]), done=i == 4, truncated=i == 2) for i in range(6)]
        for t in range(6):
            ret, disc, lst = nstep_ref(stream, t, n, g)
            assert out["return"][t] == pytest.approx(ret)
            assert out["discount"][t] == pytest.approx(disc)
            assert last[t] == lst
    # n=10: row 0 stops at the truncation (2 steps after), row 3 at the terminal, row 5 at
    # the write head
    assert last.tolist() == [2, 2, 2, 4, 4, 5]
    assert out["discount"].tolist() == [g**3, g**2, g, 0.0, 0.0, g]
    got = rep.rows(idx)["next_obs"][:, 0]  # derived rows and the side table's entries
    assert got.tolist() == [1, 2, 102, 4, 104, 105]
    assert rep._side.n_kept == 3  # type: ignore[union-attr]


def test_neighbour_kernel_against_a_list_model():
    # ring of 3 envs x 4 steps after 6 steps: held steps 2..5, oldest slot at 6
    d, nd, r, e = 2, 2, 12, 3
    rep = StoreReplay(_cols(), d + r, n_envs=e, demo_capacity=d)
    rep.add_demos(obs=np.zeros((2, 2), np.float32), reward=np.zeros(2, np.float32),
                  done=np.zeros(2, bool), truncated=np.zeros(2, bool))
    for s in range(6):
        rep.add(obs=np.stack([np.full(e, s), np.arange(e)], 1).astype(np.float32),
                reward=np.zeros(e, np.float32), done=np.zeros(e, bool),
                truncated=np.zeros(e, bool))
    g = rep._geom()
    store = rep.storage("obs")
    for p in range(d + r):
        step, env = store[p]
        for k in (-3, -1, 1, 2):
            q = sk.neighbour(p, k, *g)
            if p < d:
                want = p + k if 0 <= p + k < nd else -1
                assert q == want
                continue
            if 2 <= step + k <= 5:
                assert store[q].tolist() == [step + k, env]
            else:
                assert q == -1


@pytest.mark.parametrize("n_envs, within", [(1, False), (2, False), (2, True), (3, True)])
def test_sequences_match_the_reference(n_envs, within, rng):
    model = Model(n_envs, 9)
    rep = StoreReplay(_cols(), 9 * n_envs, n_envs=n_envs, next_of={"next_obs": "obs"}, seed=4)
    for t in (5, 7, 2):
        rep.add(**model.step_rows(t, rng, p_done=0.15))
        for t_len in (1, 3, 9):
            if t_len > len(model.envs[0]):
                with pytest.raises(SamplerError, match="longer than every stream"):
                    rep.sample_sequences(40, t_len, within_episode=within)
                continue
            out, batch = rep.sample_sequences(40, t_len, within_episode=within)
            assert out["obs"].shape == (40, t_len, 2) and batch.indices.shape == (40, t_len)
            for i in range(40):
                k, j = model.by_id[int(out["obs"][i, 0, 0])]
                stream = model.stream(k)
                rows, pad = window_ref(stream, j, t_len, within)
                assert out["obs"][i, :, 0].astype(int).tolist() == [stream[q]["id"] for q in rows]
                if within:
                    assert out["obs_is_pad"][i].tolist() == pad
                else:
                    assert j + t_len <= len(stream)  # never across the write head
                for q, first, padded in zip(rows, out["is_first"][i], pad):
                    if padded:
                        assert not first
                    elif q:  # the first held row's flag: test_is_first_of_the_oldest_row
                        prev = stream[q - 1]
                        assert bool(first) == (prev["done"] or prev["truncated"])
                np.testing.assert_array_equal(
                    out["next_obs"][i], np.stack([stream[q]["next"] for q in rows]))


def test_is_first_of_the_oldest_row_follows_the_overwritten_row():
    rep = StoreReplay(_cols(), 4)
    z = np.zeros((1, 2), np.float32)
    for i in range(6):  # rows 0..5, done at 1: the ring holds 2..5, row 2 starts an episode
        rep.add(obs=z + i, reward=np.zeros(1, np.float32), done=np.array([i == 1]),
                truncated=np.zeros(1, bool))
    assert rep.cut_first().tolist() == [True, True]
    out, _ = rep.sample_sequences(8, 4)
    assert out["is_first"][:, 0].all()
    rep.add(obs=z + 6, reward=np.zeros(1, np.float32), done=np.zeros(1, bool),
            truncated=np.zeros(1, bool))  # overwrites row 2: row 3's start is cut
    assert rep.cut_first().tolist() == [True, False]
    out, _ = rep.sample_sequences(8, 4)
    assert not out["is_first"].any()


def test_prioritized_sequences_r2d2_priorities_and_stale_guard(rng):
    rep = StoreReplay(_cols(), 40, n_envs=2, prioritized=True, alpha=1.0, eps=1e-9, seed=2)
    model = Model(2, 20)
    rep.add(**_no_next(model.step_rows(20, rng)))
    out, batch = rep.sample_sequences(16, 5)
    assert batch.weights.shape == (16,) and batch.stamps.shape == (16,)
    td = rng.normal(size=(16, 5))
    with pytest.raises(SamplerError, match=r"td of shape \(16, 5\)"):
        rep.update_priorities(batch, td[:, :4])
    assert rep.update_priorities(batch, td, eta=0.9) == 0
    leaves = rep.sampler.tree.leaves
    starts = batch.indices[:, 0]
    a = np.abs(td)
    want = 0.9 * a.max(1) + 0.1 * a.mean(1)
    last = {int(s): w for s, w in zip(starts, want)}  # a repeated start: the last one wins
    for s, w in last.items():
        assert leaves[s] == pytest.approx(w + 1e-9)
    # windows only start where T steps of the stream are held
    for _ in range(5):
        _, b = rep.sample_sequences(64, 5)
        assert all(model.by_id[int(rep.storage("obs")[s, 0])][1] + 5 <= 20
                   for s in b.indices[:, 0])
    rep.add(**_no_next(model.step_rows(20, rng)))  # every start overwritten: all updates stale
    assert rep.update_priorities(batch, td) == len(set(starts.tolist()))


def test_dump_writes_each_stream_and_from_store_round_trips(tmp_path, rng):
    model = Model(2, 5)
    rep = StoreReplay(_cols(), 10, n_envs=2, next_of={"next_obs": "obs"})
    rep.add(**model.step_rows(8, rng, p_done=0.3))
    n = rep.dump(tmp_path / "d.h5")
    with TrajectoryStore(tmp_path / "d.h5") as st:
        m = st.manifest
        streams = [int(v) for v in m["attr.ep_stream"].split(",")]
        assert len(streams) == n and streams == sorted(streams)
        obs = st.load_column("obs")[:, 0].astype(int)
        lengths = st.episode_lengths
        off = np.concatenate(([0], np.cumsum(lengths)))
        for k in range(2):
            rows = np.concatenate([obs[off[i]:off[i + 1]] for i in range(n) if streams[i] == k])
            assert rows.tolist() == [r["id"] for r in model.envs[k]]
        cut = [int(v) for v in m["attr.ep_cut_start"].split(",") if v]
        for k in range(2):
            first_ep = streams.index(k)
            assert (first_ep in cut) == (not rep.cut_first()[1 + k])
        opened = [int(v) for v in m["attr.ep_open"].split(",") if v]
        for i in opened:
            assert not st.read_range("done", off[i + 1] - 1, off[i + 1])[0]
        nxt = st.load_column("next_obs")
        for i, rid in enumerate(obs):
            k, j = model.by_id[int(rid)]
            np.testing.assert_array_equal(nxt[i], model.envs[k][j]["next"])
    back = StoreReplay.from_store(tmp_path / "d.h5", 10, next_of={"next_obs": "obs"})
    assert back.n_envs == 2
    for k, v in rep.rows().items():
        np.testing.assert_array_equal(back.rows()[k], v)
    assert back.cut_first().tolist() == rep.cut_first().tolist()


def test_checkpoint_keeps_streams_side_table_and_reads_version_1(tmp_path, rng):
    import h5py

    model = Model(3, 4)
    kw = dict(n_envs=3, next_of={"next_obs": "obs"}, frame_stack={"obs": 2}, seed=9)
    rep = StoreReplay(_cols(), 12, **kw)
    rep.add(**model.step_rows(6, rng))
    rep.save(tmp_path / "s.ckpt")
    back = StoreReplay.load(tmp_path / "s.ckpt")
    assert back.n_envs == 3 and back.frame_stack == {"obs": 2}
    a, _ = rep.sample(32, n_step=2)
    b, _ = back.sample(32, n_step=2)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    sd = rep.state_dict()
    again = StoreReplay(_cols(), 12, **kw)
    again.load_state_dict(sd)
    np.testing.assert_array_equal(again.rows()["next_obs"], rep.rows()["next_obs"])
    # a version-1 file (no stream keys) still loads
    plain = StoreReplay(_cols(), 6)
    plain.add(obs=np.ones((4, 2), np.float32), reward=np.ones(4, np.float32),
              done=np.zeros(4, bool), truncated=np.zeros(4, bool))
    plain.save(tmp_path / "v1.ckpt")
    import json
    with h5py.File(tmp_path / "v1.ckpt", "r+") as f:
        f.attrs["numbatraj_replay"] = 1
        cfg = json.loads(f.attrs["config"])
        for key in ("n_envs", "next_of", "frame_stack"):
            cfg.pop(key)
        f.attrs["config"] = json.dumps(cfg)
        st = json.loads(f.attrs["state"])
        st.pop("cut_first")
        f.attrs["state"] = json.dumps(st)
        del f.attrs["digests"]  # version-1 files carried no config/state digests
    old = StoreReplay.load(tmp_path / "v1.ckpt")
    assert old.size == 4 and old.n_envs == 1


def test_bad_inputs_raise_and_write_nothing(rng):
    with pytest.raises(SchemaError, match="n_envs=3 must divide the ring capacity"):
        StoreReplay(_cols(), 10, n_envs=3)
    with pytest.raises(SchemaError, match="'next_obs' is also a declared column"):
        StoreReplay(_cols() + [ColumnSpec("next_obs", np.float32, (2,))], 4,
                    next_of={"next_obs": "obs"})
    with pytest.raises(SchemaError, match="'pixels' is not a declared column"):
        StoreReplay(_cols(), 4, next_of={"next_pixels": "pixels"})
    with pytest.raises(SchemaError, match="frame_stack needs episode boundaries"):
        StoreReplay([ColumnSpec("obs", np.float32, (2,))], 4, frame_stack={"obs": 4})
    rep = StoreReplay(_cols(), 8, n_envs=2, next_of={"next_obs": "obs"})
    rows = Model(2, 4).step_rows(1, rng)
    one = {k: v[0] for k, v in rows.items()}  # (E, ...) given as (3, ...)
    bad = {k: np.concatenate([v, v[:1]]) for k, v in one.items()}
    with pytest.raises(SchemaError, match=r"n_envs=2, column 'obs'.*\(3, 2\)"):
        rep.add(**bad)
    with pytest.raises(SchemaError, match="missing 'next_obs'"):
        rep.add(**{k: v for k, v in one.items() if k != "next_obs"})
    assert rep.size == 0 and rep._side is None or rep._side.n_kept == 0
    rep.add(**one)
    with pytest.raises(SamplerError, match="T=3 is longer than every stream"):
        rep.sample_sequences(4, 3)
    with pytest.raises(SamplerError, match="update_priorities needs a prioritized"):
        rep.update_priorities(rep.sample_sequences(2, 1)[1], np.zeros((2, 1)))
    no_reward = StoreReplay([ColumnSpec("obs", np.float32, ())], 4)
    no_reward.add(obs=1.0)
    with pytest.raises(SchemaError, match="n_step needs a 'reward' column"):
        no_reward.sample(1, n_step=2)
    outs = {"obs": np.empty((4, 2), np.float32), "reward": np.empty(4, np.float32),
            "done": np.empty(4, bool), "truncated": np.empty(4, bool)}
    with pytest.raises(SchemaError, match="outputs has columns"):
        rep.sample_into(outs, 4, n_step=2)  # return, discount and next_obs missing


@pytest.mark.parametrize("prioritized", [False, True])
def test_streams_with_ere_and_a_demo_split(prioritized, rng):
    # ERE's window and the demo split draw through the same paths; the n-step targets of
    # what they draw still equal the reference of each row's own stream
    model = Model(2, 10)
    rep = StoreReplay(_cols(), 24, n_envs=2, demo_capacity=4, demo_fraction=0.25,
                      next_of={"next_obs": "obs"}, prioritized=prioritized, seed=5)
    dm = Model(1, 4)
    dm.next_id = 10_000
    rep.add_demos(**dm.step_rows(4, rng))
    model.demos = dm.envs[0]
    rep.configure_ere(True, eta=0.9, c_min=4)
    for _ in range(3):
        rep.add(**model.step_rows(7, rng))
        model.reindex()
        out, _ = rep.sample(32, k=1, K=2, n_step=4, gamma=0.8)
        assert (out["obs"][:, 0] >= 10_000).sum() == 8  # floor(0.25 * 32 + 0.5) demos
        _check_transitions(rep, model, out, 4, 0.8, 0)


def _stored_cols(rdt=np.float32, wide: bool = False) -> list[ColumnSpec]:
    """``_cols()`` with a stored ``next_obs`` (no next_of: the fused n-step pass), the
    reward in ``rdt``; ``wide`` adds a 600-byte column and its stored ``next_`` column
    (kept apart from the records)."""
    c = [ColumnSpec("obs", np.float32, (2,)), ColumnSpec("reward", rdt, ()),
         ColumnSpec("next_obs", np.float32, (2,)), ColumnSpec("done", np.bool_, ()),
         ColumnSpec("truncated", np.bool_, ())]
    if wide:
        c += [ColumnSpec("pix", np.uint8, (600,)), ColumnSpec("next_pix", np.uint8, (600,))]
    return c


def _with_pix(rows: dict) -> dict:
    """The rows plus ``pix`` / ``next_pix`` derived from the row id (obs[..., 0]) and the
    stored next_obs, so a sampled row's wide columns can be checked against its own."""
    ids = rows["obs"][..., 0].astype(np.int64)
    nxt = rows["next_obs"][..., 0].astype(np.int64)
    ramp = np.arange(600, dtype=np.int64)
    return {**rows, "pix": ((ids[..., None] + ramp) % 251).astype(np.uint8),
            "next_pix": ((nxt[..., None] * 3 + ramp) % 253).astype(np.uint8)}


@pytest.mark.parametrize("n_envs, per_env, demo", [(1, 7, 0), (3, 5, 0), (2, 4, 3), (1, 1, 2)])
@pytest.mark.parametrize("rdt", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("prioritized", [False, True])
def test_nstep_with_stored_next_columns_matches_the_reference(n_envs, per_env, demo, rdt,
                                                              prioritized, rng):
    """The fused pass (stored next_obs): every column at t, next_obs at t+m-1 of the same
    stream, return and discount against the brute-force reference, over one-row adds,
    wraps, a batch larger than the ring and demos."""
    model = Model(n_envs, per_env)
    rep = StoreReplay(_stored_cols(rdt), n_envs * per_env + demo, n_envs=n_envs,
                      demo_capacity=demo, seed=3, prioritized=prioritized)
    if demo:
        dm = Model(1, demo)
        dm.next_id = 10_000
        rep.add_demos(**{**dm.step_rows(demo, rng), "reward": np.zeros(demo, rdt)})
        for r in dm.envs[0]:
            r["reward"] = 0.0
        model.demos = dm.envs[0]
        model.reindex()
    for t in [1, 2, per_env + 1, 3, 1, 1]:
        rows = model.step_rows(t, rng)
        rows["reward"] = rows["reward"].astype(rdt)
        if n_envs == 1 and t == 1:
            rows = {k: v[0] for k, v in rows.items()}  # one row: the add fast path
        rep.add(**rows)
        for n_step in (1, 3, 12):  # 12: longer than every episode and stream
            out, _ = rep.sample(64, n_step=n_step, gamma=0.9)
            assert out["reward"].dtype == rdt
            _check_transitions(rep, model, out, n_step, 0.9, 0)
            for i, rid in enumerate(out["obs"][:, 0].astype(int)):
                k, j = model.by_id[rid]
                row = model.stream(k)[j]
                assert out["reward"][i] == row["reward"]
                assert out["done"][i] == row["done"]
                assert out["truncated"][i] == row["truncated"]


@pytest.mark.parametrize("n_envs, demo, wide, quant", [(1, 0, False, False), (3, 2, False, True),
                                                       (2, 3, True, False), (1, 2, True, True)])
def test_nstep_gather_kernel_equals_the_device_body_and_the_record_gather(n_envs, demo, wide,
                                                                         quant, rng):
    """``nstep_gather_cpu`` (one host pass) against ``nstep_cpu`` (the device body's host
    compile) bit for bit, at every held row, wrapped rings included; its record words equal
    the records at t and at t+m-1; the drawn columns equal ``rows()`` at those rows."""
    per_env = 6
    cols = _stored_cols(np.float32, wide)
    kw = {"quantize": {"reward": (-4.0, 4.0), "obs": (-1.0, 20000.0)}} if quant else {}
    rep = StoreReplay(cols, n_envs * per_env + demo, n_envs=n_envs, demo_capacity=demo, **kw)
    model = Model(n_envs, per_env)
    if demo:
        dm = Model(1, demo)
        dm.next_id = 10_000
        rep.add_demos(**_with_pix(dm.step_rows(demo, rng)) if wide else dm.step_rows(demo, rng))
    for t in (4, 5, 3):  # wraps twice; the oldest slot is not slot 0
        rows = model.step_rows(t, rng)
        rep.add(**_with_pix(rows) if wide else rows)
        held = rep.time_order()
        idx = np.concatenate([held, held[::-1], rng.choice(held, 40)]).astype(np.int64)
        b = idx.shape[0]
        plan = rep._nstep_plan()
        reward = rep._nstep_reward()
        if quant:  # the walk sums what a draw returns: the dequantised reward
            reward = rep.rows(np.arange(rep.capacity))["reward"].astype(np.float32)
        for n in (1, 2, 3, 7):
            for g in (0.5, 0.99):
                want = [np.empty(b, np.float32), np.empty(b, np.float32), np.empty(b, np.int64)]
                sk.nstep_cpu(idx, n, g, reward, rep._done_v, rep._trunc_v, *rep._geom(), *want)
                recs_t = np.zeros((b, rep._rec.shape[1]), np.uint64)
                recs_l = np.zeros_like(recs_t)
                got = [np.empty(b, np.float32), np.empty(b, np.float32), np.empty(b, np.int64)]
                sk.nstep_gather_cpu(idx, n, g, rep._nstep_reward(), plan.rq, plan.rlow,
                                    plan.rstep, rep._done_v, rep._trunc_v, *rep._geom(),
                                    rep._rec, recs_t, *plan.words_l, recs_l, *got)
                for x, y in zip(got, want):
                    np.testing.assert_array_equal(x, y)
                np.testing.assert_array_equal(recs_t, rep._rec[idx])
                lo, hi = plan.words_l
                assert hi > lo
                np.testing.assert_array_equal(recs_l[:, lo:hi], rep._rec[want[2], lo:hi])
                out = rep._new_outputs_ext(b, (n, g))
                rep._gather_ext(idx, out, b, (n, g))
                at_t, at_last = rep.rows(idx), rep.rows(want[2])
                np.testing.assert_array_equal(out["return"], want[0])
                np.testing.assert_array_equal(out["discount"], want[1])
                for name in rep.columns:
                    src = at_last if name in ("next_obs", "next_pix") else at_t
                    np.testing.assert_array_equal(out[name], src[name], err_msg=name)


#: record layouts for the fused kernel: the grouped one of the benchmark (spans apart),
#: packed ones whose next_* span lies inside or before the span read at t, and none
_FIELD_LAYOUTS = {
    "grouped": [ColumnSpec("obs", np.float32, (3,)), ColumnSpec("action", np.float32, (2,)),
                ColumnSpec("reward", np.float32, ()), ColumnSpec("done", np.bool_, ()),
                ColumnSpec("truncated", np.bool_, ()), ColumnSpec("next_obs", np.float32, (3,))],
    "inside": [ColumnSpec("obs", np.float64, (1,)), ColumnSpec("reward", np.float32, ()),
               ColumnSpec("done", np.bool_, ()), ColumnSpec("next_obs", np.float64, (1,)),
               ColumnSpec("a", np.uint8, (3,))],
    "f64-before": [ColumnSpec("obs", np.uint8, (1,)), ColumnSpec("reward", np.float64, ()),
                   ColumnSpec("done", np.bool_, ()), ColumnSpec("truncated", np.bool_, ()),
                   ColumnSpec("next_obs", np.float64, (1,))],
    "sandwich": [ColumnSpec("obs", np.float64, (1,)), ColumnSpec("next_obs", np.float64, (1,)),
                 ColumnSpec("act", np.float32, (1,)), ColumnSpec("next_act", np.float32, (1,)),
                 ColumnSpec("reward", np.float32, ()), ColumnSpec("done", np.bool_, ()),
                 ColumnSpec("k", np.uint8, (2,))],
    "byte-flags": [ColumnSpec("obs", np.float32, (2,)), ColumnSpec("reward", np.float32, ()),
                   ColumnSpec("done", np.uint8, ()), ColumnSpec("truncated", np.int8, ()),
                   ColumnSpec("next_obs", np.float32, (2,))],
    "no-done": [ColumnSpec("obs", np.float32, (2,)), ColumnSpec("reward", np.float64, ()),
                ColumnSpec("truncated", np.bool_, ()), ColumnSpec("next_obs", np.float32, (2,))],
    "no-next": [ColumnSpec("obs", np.float32, (5,)), ColumnSpec("action", np.float32, (2,)),
                ColumnSpec("reward", np.float32, ()), ColumnSpec("done", np.bool_, ())],
}


@pytest.mark.parametrize("layout", list(_FIELD_LAYOUTS))
@pytest.mark.parametrize("n_envs, demo", [(1, 0), (3, 2), (2, 5)])
def test_nstep_field_kernel_equals_the_device_body(layout, n_envs, demo, rng):
    """``_record_kernels.walk_cols_cpu`` (the walk reading record fields by address, the
    columns read at t and the next_* ones at the last row straight into their outputs, also
    where a column read at t lies inside the next_* span) against ``nstep_cpu`` bit for bit at every held
    row of wrapped rings, n from 1 to past the prefetch cap (20 > 16 steps); every column
    equals ``rows()`` at t, or at t+m-1 for the next_* columns."""
    cols = _FIELD_LAYOUTS[layout]
    per_env = 7
    rep = StoreReplay(cols, n_envs * per_env + demo, n_envs=n_envs, demo_capacity=demo)
    names = [c.name for c in cols]

    def rows(lead):
        out = {}
        for c in cols:
            shape = (*lead, *c.shape)
            if c.dtype == np.bool_:
                out[c.name] = rng.random(shape) < 0.2
            elif c.name in ("done", "truncated"):  # byte flags: any non-zero value is set
                out[c.name] = ((rng.random(shape) < 0.2) * rng.choice([1, 2, -1], shape)
                               ).astype(c.dtype)
            elif c.dtype == np.uint8:
                out[c.name] = rng.integers(0, 256, shape).astype(np.uint8)
            else:
                out[c.name] = rng.standard_normal(shape).astype(c.dtype)
        return out

    plan = rep._nstep_plan()
    assert plan.fields is not None and (plan.fields[2] == -1) == (layout == "no-done")
    t_hi, l_lo, _ = plan.bytes_tl
    assert (l_lo >= t_hi) == (layout in ("grouped", "no-done", "byte-flags"))
    t_hi, l_lo, l_hi = plan.bytes_tl
    inside = any(o < l_hi and l_lo < o + nb for o, nb, at in plan.tab.tolist() if not at)
    assert inside == (layout == "sandwich")  # act lies between next_obs and next_act
    assert plan.walk is not None and (plan.walk[3] is None) == (layout == "no-next")
    if demo:
        rep.add_demos(**rows((demo,)))
    for t in (4, 5, 3, 9):  # wraps; the oldest slot is not slot 0
        rep.add(**rows((t, n_envs) if n_envs > 1 else (t,)))
        held = rep.time_order()
        idx = np.concatenate([held, held[::-1], rng.choice(held, 50)]).astype(np.int64)
        b = idx.shape[0]
        stored = rep.rows(np.arange(rep.capacity))
        for n in (1, 2, 3, 7, 20):
            for g in (0.5, 0.99):
                want = [np.empty(b, np.float32), np.empty(b, np.float32),
                        np.empty(b, np.int64)]
                sk.nstep_cpu(idx, n, g, rep._nstep_reward(), rep._done_v, rep._trunc_v,
                             *rep._geom(), *want)
                out = rep._new_outputs_ext(b, (n, g))
                for v in out.values():
                    v[...] = 0
                rep._nstep_gather(idx, out, b, (n, g), plan)
                np.testing.assert_array_equal(out["return"], want[0])
                np.testing.assert_array_equal(out["discount"], want[1])
                for name in names:
                    at = want[2] if name.startswith("next_") else idx
                    np.testing.assert_array_equal(out[name], stored[name][at],
                                                  err_msg=f"{name} n={n}")


def test_nstep_sums_the_dequantised_reward(rng):
    """A quantised reward: the return sums the values a draw returns (codes step 1 here, so
    every reward is exact), not the stored codes."""
    model = Model(2, 8)
    rep = StoreReplay(_stored_cols(), 16, n_envs=2, quantize={"reward": (-4.0, 251.0)})
    rep.add(**model.step_rows(11, rng))
    for n_step in (1, 3):
        out, _ = rep.sample(64, n_step=n_step, gamma=0.5)
        _check_transitions(rep, model, out, n_step, 0.5, 0)
        if n_step == 1:
            np.testing.assert_array_equal(out["return"], out["reward"])


def test_nstep_large_draw_equals_the_fused_pass(rng):
    """A draw above the record-scratch size takes the column-by-column path; its rows equal
    the fused pass's."""
    model = Model(2, 20)
    rep = StoreReplay(_stored_cols(), 40, n_envs=2)
    rep.add(**model.step_rows(27, rng))
    held = rep.time_order()
    idx = rng.choice(held, 70_000).astype(np.int64)
    big = rep._new_outputs_ext(idx.shape[0], (3, 0.9))
    rep._gather_ext(idx, big, idx.shape[0], (3, 0.9))
    small = rep._new_outputs_ext(4096, (3, 0.9))
    rep._gather_ext(idx[:4096], small, 4096, (3, 0.9))
    for k in small:
        np.testing.assert_array_equal(big[k][:4096], small[k], err_msg=k)


@pytest.mark.parametrize("rdt", [np.float16, np.float32, np.float64, np.longdouble])
def test_nstep_draws_follow_every_write_and_load(rdt, rng, tmp_path):
    """The reward the n-step walk reads (the record view, or the float64 copy of a float16 /
    longdouble reward, built at the first n-step draw) equals the stored rewards after
    one-row adds, batches that wrap, demos and a load; the resumed replay draws exactly
    what the saved one would."""
    cols = [ColumnSpec("obs", np.float32, (2,)), ColumnSpec("reward", rdt, ()),
            ColumnSpec("done", np.bool_, ()), ColumnSpec("truncated", np.bool_, ()),
            ColumnSpec("next_obs", np.float32, (2,))]
    rep = StoreReplay(cols, 37, demo_capacity=5)

    def rows(n):
        return {"obs": rng.standard_normal((n, 2), dtype=np.float32),
                "reward": (rng.standard_normal(n) * 100).astype(rdt),
                "done": rng.random(n) < 0.2, "truncated": rng.random(n) < 0.1,
                "next_obs": rng.standard_normal((n, 2), dtype=np.float32)}

    rep.add(**rows(7))
    rep.sample(4, n_step=2, gamma=0.9)
    for _ in range(40):
        rep.add(**{k: v[0] for k, v in rows(1).items()})
    rep.add(**rows(50))  # more than the ring: the newest win
    rep.add(**rows(13))  # wraps
    rep.add_demos(**rows(3))

    def check(r):
        stored = r.rows()
        rew, done, trunc = r._nstep_arrays()
        assert rew.dtype == (rdt if rdt in (np.float32, np.float64) else np.float64)
        order = r.time_order()
        np.testing.assert_array_equal(rew[order], stored["reward"].astype(rew.dtype))
        np.testing.assert_array_equal(done[order], stored["done"])
        np.testing.assert_array_equal(trunc[order], stored["truncated"])

    check(rep)
    rep.sample(4, n_step=2, gamma=0.9)
    path = tmp_path / "r.h5"
    rep.save(path)
    back = StoreReplay.load(path)
    assert back._rshadow is None
    a = rep.sample(64, n_step=3, gamma=0.9)[0]
    b = back.sample(64, n_step=3, gamma=0.9)[0]
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    check(back)


@pytest.mark.parametrize("prioritized", [False, True])
def test_nstep_sample_into_equals_sample(prioritized, rng):
    """sample_into with n_step fills caller arrays with what sample returns (same seed, same
    rows), draw after draw (the per-size scratch is reused)."""
    model = Model(3, 6)
    rows = model.step_rows(8, rng)
    a = StoreReplay(_stored_cols(), 18, n_envs=3, seed=9, prioritized=prioritized)
    b = StoreReplay(_stored_cols(), 18, n_envs=3, seed=9, prioritized=prioritized)
    a.add(**rows)
    b.add(**rows)
    outs = {n: np.empty((32, *s.shape), s.dtype) for n, s in b.columns.items()}
    outs["return"] = np.empty(32, np.float32)
    outs["discount"] = np.empty(32, np.float32)
    for n_step in (3, 1, 3):
        want, wb = a.sample(32, n_step=n_step, gamma=0.7)
        got = b.sample_into(outs, 32, n_step=n_step, gamma=0.7)
        np.testing.assert_array_equal(got.indices, wb.indices)
        for k in want:
            np.testing.assert_array_equal(outs[k], want[k], err_msg=k)
        _check_transitions(b, model, outs, n_step, 0.7, 0)


@pytest.mark.parametrize("next_of", [False, True])
def test_nstep_far_beyond_every_stream_stops_at_the_write_head(next_of, rng):
    """n_step = 2**40 (far beyond every episode and stream): each window stops at its
    episode end or the write head, as the reference does, in the time of a short draw."""
    model = Model(2, 9)
    kw = {"next_of": {"next_obs": "obs"}} if next_of else {}
    rep = StoreReplay(_cols() if next_of else _stored_cols(), 18, n_envs=2, **kw)
    rep.add(**model.step_rows(12, rng, p_done=0.05, p_trunc=0.0))
    out, _ = rep.sample(256, n_step=2**40, gamma=0.9)
    _check_transitions(rep, model, out, 2**40, 0.9, 0)


@pytest.mark.parametrize("n_envs", [1, 3])
def test_nstep_draw_writes_columns_of_every_size_straight_into_the_outputs(n_envs, rng):
    """The fused n-step draw copies each record column into its output with 64/16/8/4-byte
    moves (the last overlapping) or a byte loop: columns of 1 to 130 bytes, at t and at
    t + m - 1, equal rows() at those rows (and the targets nstep_cpu's)."""
    sizes = [1, 2, 3, 5, 7, 9, 15, 17, 33, 65, 130]
    cols = [ColumnSpec(f"c{k}", np.uint8, (k,)) for k in sizes]
    cols += [ColumnSpec("reward", np.float32, ()), ColumnSpec("done", np.bool_, ()),
             ColumnSpec("next_c9", np.uint8, (9,)), ColumnSpec("next_c65", np.uint8, (65,)),
             ColumnSpec("h", np.float16, (3,))]
    cap = 12 * n_envs
    rep = StoreReplay(cols, cap, n_envs=n_envs, seed=4)
    assert rep._nstep_plan().tab is not None
    steps = 17
    rows = {c.name: rng.integers(0, 256, (steps, n_envs, *c.shape)).astype(c.dtype)
            for c in cols if c.dtype == np.uint8}
    rows["reward"] = rng.standard_normal((steps, n_envs)).astype(np.float32)
    rows["done"] = rng.random((steps, n_envs)) < 0.2
    rows["h"] = rng.standard_normal((steps, n_envs, 3)).astype(np.float16)
    if n_envs == 1:  # one env: (T, *shape)
        rows = {k: v[:, 0] for k, v in rows.items()}
    rep.add(**rows)  # wraps
    held = rep.time_order()
    idx = np.concatenate([held, rng.choice(held, 50)]).astype(np.int64)
    for n in (1, 3, 5):
        out = rep._new_outputs_ext(idx.shape[0], (n, 0.9))
        rep._gather_ext(idx, out, idx.shape[0], (n, 0.9))
        want = [np.empty(idx.shape[0], np.float32), np.empty(idx.shape[0], np.float32),
                np.empty(idx.shape[0], np.int64)]
        sk.nstep_cpu(idx, n, 0.9, rep._nstep_reward(), rep._done_v, rep._trunc_v,
                     *rep._geom(), *want)
        np.testing.assert_array_equal(out["return"], want[0])
        np.testing.assert_array_equal(out["discount"], want[1])
        at_t, at_last = rep.rows(idx), rep.rows(want[2])
        for c in cols:
            ref = at_last if c.name.startswith("next_") else at_t
            np.testing.assert_array_equal(out[c.name], ref[c.name], err_msg=c.name)
