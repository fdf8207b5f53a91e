"""StoreReplayGpu(n_step=, gamma=): the draws' defaults, as StoreReplay's (the device walks
at draw time).  Under the CUDA simulator in its own pytest process (tests/conftest.py
marks it ``cuda``)."""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj._cuda import cuda_available
from numbatraj.data import ColumnSpec
from numbatraj.errors import SamplerError, SchemaError
from numbatraj.replay import StoreReplay

pytestmark = pytest.mark.skipif(
    not cuda_available(), reason="no CUDA device and NUMBA_ENABLE_CUDASIM is not 1"
)

COLS = [ColumnSpec("obs", np.float32, (2,)), ColumnSpec("reward", np.float32, ()),
        ColumnSpec("next_obs", np.float32, (2,)), ColumnSpec("done", np.bool_, ()),
        ColumnSpec("truncated", np.bool_, ())]


def _rows(rng, t, e):
    sh = (t, e) if e > 1 else (t,)
    return {"obs": rng.standard_normal((*sh, 2), dtype=np.float32),
            "reward": rng.standard_normal(sh, dtype=np.float32),
            "next_obs": rng.standard_normal((*sh, 2), dtype=np.float32),
            "done": rng.random(sh) < 0.2, "truncated": rng.random(sh) < 0.1}


@pytest.mark.parametrize("e, per", [(1, False), (2, True)])
def test_defaults_draw_the_replays_n_step_and_equal_the_host(tmp_path, e, per):
    from numbatraj.replay import StoreReplayGpu

    rng = np.random.default_rng(e)
    kw = dict(n_envs=e, prioritized=per, seed=3)
    dev = StoreReplayGpu(COLS, 8 * e, n_step=3, gamma=0.9, **kw)
    twin = StoreReplayGpu(COLS, 8 * e, **kw)
    host = StoreReplay(COLS, 8 * e, n_step=3, gamma=0.9, **kw)
    assert dev.n_step == host.n_step == (3, 0.9) and twin.n_step is None
    for _ in range(3):
        r = _rows(rng, 3, e)
        for rep in (dev, twin, host):
            rep.add(**r)
    a, _ = dev.sample(8)  # the replay's n_step / gamma
    b, _ = twin.sample(8, n_step=3, gamma=0.9)
    for c in b:
        np.testing.assert_array_equal(a[c].copy_to_host(), b[c].copy_to_host(), err_msg=c)
    assert {"return", "discount"} <= set(a)
    dev.save(tmp_path / "d.ckpt")
    back = StoreReplayGpu.load(tmp_path / "d.ckpt")
    assert back.n_step == (3, 0.9)
    host.save(tmp_path / "h.ckpt")  # each kind loads its own file
    assert StoreReplay.load(tmp_path / "h.ckpt").n_step == (3, 0.9)


def test_bad_settings_are_refused():
    from numbatraj.replay import StoreReplayGpu

    with pytest.raises(SchemaError, match="127"):
        StoreReplayGpu(COLS, 8, n_step=128)
    with pytest.raises(SamplerError, match="gamma"):
        StoreReplayGpu(COLS, 8, n_step=3, gamma=-1.0)
    with pytest.raises(SamplerError, match="quantised"):
        StoreReplayGpu(COLS, 8, n_step=3, quantize={"reward": (-1.0, 1.0)})
    no_reward = [c for c in COLS if c.name != "reward"]
    with pytest.raises(SchemaError, match="reward"):
        StoreReplayGpu(no_reward, 8, n_step=3)
