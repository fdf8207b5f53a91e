"""Kept n-step targets (``StoreReplay(n_step=, gamma=)``): the rows keep their window's
return, discount code and ``next_*`` columns at the window's last row, refreshed on every
add.  A draw of those targets must equal, bit for bit, the same draw walked at sample
time by a replay that keeps nothing (same seed, same adds), and the brute-force reference
of tests/reference.py; the kept path must actually run; bad settings are refused."""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj.data import ColumnSpec, TrajectoryStore
from numbatraj.errors import SchemaError
from numbatraj.replay import StoreReplay
from numbatraj.replay import buffer as _buffer
from tests.reference import nstep_ref


def _cols(reward_dtype=np.float32, wide_next: bool = False) -> list[ColumnSpec]:
    cols = [ColumnSpec("obs", np.float32, (5,)), ColumnSpec("action", np.float32, (2,)),
            ColumnSpec("reward", reward_dtype, ()), ColumnSpec("next_obs", np.float32, (5,)),
            ColumnSpec("done", np.bool_, ()), ColumnSpec("truncated", np.bool_, ())]
    if wide_next:  # 3 x 16 x 16 uint8 = 768 bytes: stored apart (WIDE_BYTES), read at last
        cols += [ColumnSpec("img", np.uint8, (3, 16, 16)),
                 ColumnSpec("next_img", np.uint8, (3, 16, 16))]
    return cols


def _rows(rng, shape, cols, p_done=0.15, p_trunc=0.1):
    out = {}
    for c in cols:
        full = shape + c.shape
        if c.name in ("done",):
            out[c.name] = rng.random(full) < p_done
        elif c.name == "truncated":
            out[c.name] = rng.random(full) < p_trunc
        elif c.dtype == np.uint8:
            out[c.name] = rng.integers(0, 256, full, dtype=np.uint8)
        else:
            out[c.name] = rng.standard_normal(full).astype(c.dtype)
    return out


def _count_calls(monkeypatch, name: str, module: str = "_sk") -> list[int]:
    """Counts the calls of the kernel ``name`` of the buffer's kernel module ``module`` the
    replay makes (so a test comparing the kept and walked paths cannot compare the walk
    with itself)."""
    calls = [0]
    mod = getattr(_buffer, module)
    real = getattr(mod, name)

    def counted(*args):
        calls[0] += 1
        return real(*args)

    monkeypatch.setattr(mod, name, counted)
    return calls


@pytest.fixture
def kept_calls(monkeypatch):
    """Counts the kept draws (``_record_kernels.kept_cols_cpu``)."""
    return _count_calls(monkeypatch, "kept_cols_cpu", "_rck")


CASES = [
    # (n_envs, demo_capacity, prioritized, n, gamma, reward dtype, quantize reward, wide next)
    (1, 0, False, 3, 0.99, np.float32, False, False),
    (1, 6, True, 1, 0.5, np.float32, False, False),
    (2, 0, False, 5, 0.9, np.float64, False, False),
    (4, 5, True, 2, 0.0, np.float32, False, False),
    (1, 0, False, 4, 1.0, np.float16, False, False),
    (3, 4, False, 3, 0.97, np.float32, True, False),
    (2, 3, False, 3, 0.99, np.float32, False, True),
    (1, 0, True, 7, 0.8, np.float32, False, True),
]


@pytest.mark.parametrize("e, dcap, per, n, g, rdt, quant, wide", CASES)
def test_kept_draws_equal_the_walk_bit_for_bit(kept_calls, e, dcap, per, n, g, rdt, quant,
                                               wide):
    rng = np.random.default_rng(n * 100 + e)
    cols = _cols(rdt, wide)
    kw = dict(n_envs=e, demo_capacity=dcap, prioritized=per, seed=7,
              quantize={"reward": (-3.0, 3.0)} if quant else None)
    ring = e * 11
    walk = StoreReplay(cols, ring + dcap, **kw)
    kept = StoreReplay(cols, ring + dcap, n_step=n, gamma=g, **kw)
    draws = 0
    for step in range(30):
        if dcap and step % 7 == 0 and walk.n_demo + 2 <= dcap:
            d = _rows(rng, (2,), cols)
            walk.add_demos(**d)
            kept.add_demos(**d)
        t = int(rng.integers(1, 9)) if step % 5 else 40  # now and then more than the ring
        if e == 1 and rng.random() < 0.3:
            rows = {k: v[0] for k, v in _rows(rng, (1,), cols).items()}  # the one-row path
        else:
            rows = _rows(rng, (t, e) if e > 1 else (t,), cols)
        walk.add(**rows)
        kept.add(**rows)
        a, ba = walk.sample(48, n_step=n, gamma=g)
        b, bb = kept.sample(48)  # the replay's own n_step / gamma
        np.testing.assert_array_equal(ba.indices, bb.indices)
        assert set(a) == set(b) and {"return", "discount"} <= set(b)
        for c in a:
            np.testing.assert_array_equal(a[c], b[c], err_msg=c)
        draws += 1
        if per:
            td = rng.random(48)
            walk.update_priorities(ba, td)
            kept.update_priorities(bb, td)
    fused = not quant  # a quantised column: the draw walks (still equal)
    assert kept_calls[0] == (draws if fused else 0)


def test_kept_draws_equal_the_reference_with_streams_and_demos():
    """next_obs at t+m-1 of the same stream, return and discount: against nstep_ref over
    per-env lists (the FastTD3 cases: across the write head, truncation, terminal, n longer
    than an episode)."""
    rng = np.random.default_rng(3)
    e, per_env, n, g = 3, 6, 4, 0.9
    cols = [ColumnSpec("obs", np.float32, (2,)), ColumnSpec("reward", np.float32, ()),
            ColumnSpec("next_obs", np.float32, (2,)), ColumnSpec("done", np.bool_, ()),
            ColumnSpec("truncated", np.bool_, ())]
    rep = StoreReplay(cols, e * per_env, n_envs=e, n_step=n, gamma=g, seed=1)
    envs: list[list[dict]] = [[] for _ in range(e)]
    nid = 0
    for _ in range(12):
        t = int(rng.integers(1, 4))
        ids = np.arange(nid, nid + t * e)
        nid += t * e
        done = rng.random(t * e) < 0.2
        trunc = (rng.random(t * e) < 0.15) & ~done
        rew = rng.integers(-4, 5, t * e).astype(np.float32)
        obs = np.stack([ids, ids % 5], 1).astype(np.float32)
        nxt = np.stack([ids + 0.5, -ids], 1).astype(np.float32)
        for i in range(t * e):
            env = envs[i % e]
            env.append(dict(id=int(ids[i]), reward=float(rew[i]), done=bool(done[i]),
                            truncated=bool(trunc[i]), next=nxt[i]))
            del env[:-per_env]
        rep.add(obs=obs.reshape(t, e, 2), reward=rew.reshape(t, e), done=done.reshape(t, e),
                truncated=trunc.reshape(t, e), next_obs=nxt.reshape(t, e, 2))
        out, _ = rep.sample(64)
        where = {r["id"]: (env, j) for env in envs for j, r in enumerate(env)}
        for i in range(64):
            stream, j = where[int(out["obs"][i, 0])]
            ret, disc, last = nstep_ref(stream, j, n, g)
            assert abs(out["return"][i] - ret) <= 1e-5 * max(1.0, abs(ret))
            assert abs(out["discount"][i] - disc) <= 1e-6
            np.testing.assert_array_equal(out["next_obs"][i], stream[last]["next"])


def test_other_targets_walk_and_a_plain_draw_stays_available(kept_calls):
    rng = np.random.default_rng(5)
    cols = _cols()
    walk = StoreReplay(cols, 64, seed=2)
    kept = StoreReplay(cols, 64, seed=2, n_step=3, gamma=0.9)
    rows = _rows(rng, (50,), cols)
    walk.add(**rows)
    kept.add(**rows)
    for kw in (dict(n_step=2, gamma=0.9), dict(n_step=3, gamma=0.5), dict(n_step=1)):
        a, _ = walk.sample(32, **{"gamma": 0.9, **kw})
        b, _ = kept.sample(32, **kw)  # gamma defaults to the replay's
        for c in a:
            np.testing.assert_array_equal(a[c], b[c], err_msg=f"{kw} {c}")
    assert kept_calls[0] == 0
    a, _ = walk.sample(32, n_step=3, gamma=0.9)
    b, _ = kept.sample(32, gamma=0.9)  # n_step defaults to the replay's: the kept draw
    for c in a:
        np.testing.assert_array_equal(a[c], b[c], err_msg=c)
    assert kept_calls[0] == 1
    # sample_into: the same outputs as sample
    outs = {k: np.empty_like(v) for k, v in b.items()}
    kept.sample_into(outs, 32)
    assert kept_calls[0] == 2
    assert kept.n_step == (3, 0.9) and walk.n_step is None


def test_the_record_holds_the_copies_and_plain_rows_are_unchanged():
    """rows() and storage() show only the declared columns; the kept fields add one copy of
    each narrow next_* column and 5 bytes per row."""
    cols = _cols()
    walk = StoreReplay(cols, 32)
    kept = StoreReplay(cols, 32, n_step=3)
    rows = _rows(np.random.default_rng(0), (20,), cols)
    walk.add(**rows)
    kept.add(**rows)
    ra, rb = walk.rows(), kept.rows()
    assert set(ra) == set(rb)
    for c in ra:
        np.testing.assert_array_equal(ra[c], rb[c])
    # the walk's record has padding the 5 bytes may use; at most 15 bytes more of it
    assert walk._row_bytes + 20 <= kept._row_bytes <= walk._row_bytes + 20 + 5 + 15


def test_checkpoints_and_from_store_keep_the_targets(tmp_path, kept_calls):
    rng = np.random.default_rng(9)
    cols = _cols()
    rep = StoreReplay(cols, 40, n_envs=2, demo_capacity=6, n_step=3, gamma=0.95, seed=4)
    rep.add_demos(**_rows(rng, (5,), cols))
    rep.add(**_rows(rng, (30, 2), cols))  # wraps
    rep.save(tmp_path / "k.ckpt")
    back = StoreReplay.load(tmp_path / "k.ckpt")
    assert back.n_step == (3, 0.95)
    a, _ = rep.sample(64)
    b, _ = back.sample(64)
    for c in a:
        np.testing.assert_array_equal(a[c], b[c], err_msg=c)
    twin = StoreReplay(cols, 40, n_envs=2, demo_capacity=6, n_step=3, gamma=0.95, seed=4)
    twin.load_state_dict(rep.state_dict())
    c_, _ = twin.sample(64)
    d_, _ = back.sample(64)
    for c in c_:
        np.testing.assert_array_equal(c_[c], d_[c], err_msg=c)
    other = StoreReplay(cols, 40, n_envs=2, demo_capacity=6, seed=4)  # keeps nothing
    with pytest.raises(SchemaError, match="another replay configuration"):
        other.load_state_dict(rep.state_dict())
    # a dump and from_store: the kept targets of the rebuilt replay equal its walk
    rep2 = StoreReplay(cols, 40, n_step=3, gamma=0.95, seed=4)
    rep2.add(**_rows(rng, (37,), cols))
    rep2.dump(tmp_path / "s.h5")
    again = StoreReplay.from_store(tmp_path / "s.h5", 40, n_step=3, gamma=0.95, seed=4)
    plain = StoreReplay.from_store(tmp_path / "s.h5", 40, seed=4)
    with TrajectoryStore(tmp_path / "s.h5") as st:  # the dump holds the declared columns
        assert not any(c.startswith("_kept") for c in st.columns)
    a, _ = again.sample(64)
    b, _ = plain.sample(64, n_step=3, gamma=0.95)
    for c in a:
        np.testing.assert_array_equal(a[c], b[c], err_msg=c)
    assert kept_calls[0] >= 3


def test_a_corrupted_kept_field_is_seen():
    """The comparison above can fail: a planted wrong code or copy changes the draw."""
    rng = np.random.default_rng(1)
    cols = _cols()
    walk = StoreReplay(cols, 32, seed=3)
    kept = StoreReplay(cols, 32, seed=3, n_step=3, gamma=0.9)
    rows = _rows(rng, (32,), cols, p_done=0.0, p_trunc=0.0)
    walk.add(**rows)
    kept.add(**rows)
    _, code, _ = kept._kept_views
    code[:] = 2  # every window two steps long: returns, discounts and last rows change
    a, _ = walk.sample(64, n_step=3, gamma=0.9)
    b, _ = kept.sample(64)
    assert not np.array_equal(a["discount"], b["discount"])


@pytest.mark.parametrize("kw, match", [
    (dict(n_step=0), "n_step"),
    (dict(n_step=-2), "n_step"),
    (dict(n_step=2.5), "n_step"),
    (dict(n_step=128), "127"),
    (dict(n_step=3, gamma=-0.5), "gamma"),
    (dict(n_step=3, gamma=float("nan")), "gamma"),
])
def test_bad_settings_are_refused(kw, match):
    with pytest.raises((SchemaError, TypeError, ValueError), match=match):
        StoreReplay(_cols(), 16, **kw)


def test_bad_schemas_are_refused():
    no_reward = [ColumnSpec("obs", np.float32, (2,)), ColumnSpec("done", np.bool_, ())]
    with pytest.raises(SchemaError, match="reward"):
        StoreReplay(no_reward, 16, n_step=3)
    clash = _cols() + [ColumnSpec("discount", np.float32, ())]
    with pytest.raises(SchemaError, match="discount"):
        StoreReplay(clash, 16, n_step=3)
    taken = _cols() + [ColumnSpec("_kept_return", np.float32, ())]
    with pytest.raises(SchemaError, match="_kept_return"):
        StoreReplay(taken, 16, n_step=3)
    StoreReplay(taken, 16)  # the name is free when nothing is kept


@pytest.mark.parametrize("e, depth", [(1, 1), (2, 3), (3, 2)])
def test_next_of_and_frame_stack_draws_read_the_kept_targets(monkeypatch, e, depth):
    """With next_of and frame stacks the draw gathers its columns after the targets: those
    come off the records (nstep_kept_targets_cpu) and equal the walk's."""
    calls = _count_calls(monkeypatch, "nstep_kept_targets_cpu")
    rng = np.random.default_rng(e * 10 + depth)
    cols = [c for c in _cols() if c.name != "next_obs"]
    kw = dict(n_envs=e, demo_capacity=4, seed=5, next_of={"next_obs": "obs"},
              frame_stack={"obs": depth})
    walk = StoreReplay(cols, 9 * e + 4, **kw)
    kept = StoreReplay(cols, 9 * e + 4, n_step=3, gamma=0.9, **kw)
    full = _cols()
    d = _rows(rng, (3,), full)
    walk.add_demos(**d)
    kept.add_demos(**d)
    for _ in range(12):
        t = int(rng.integers(1, 6))
        rows = _rows(rng, (t, e) if e > 1 else (t,), full)  # next_obs= on every add
        walk.add(**rows)
        kept.add(**rows)
        a, _ = walk.sample(32, n_step=3, gamma=0.9)
        b, _ = kept.sample(32)
        for c in a:
            np.testing.assert_array_equal(a[c], b[c], err_msg=c)
    assert calls[0] == 12
