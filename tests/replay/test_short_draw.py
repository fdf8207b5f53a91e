"""StoreReplay's short sample() / sample_into() path against the general one (ReplayFront's),
on twin replays: the same rows, the same outputs, the same stream afterwards, whichever
path each configuration takes."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest

from numbatraj.data import ColumnSpec
from numbatraj.errors import SamplerError
from numbatraj.replay import StoreReplay
from numbatraj.replay._front import ReplayFront
from tests.replay.helpers import rows, sac_columns


def _pixels() -> list[ColumnSpec]:
    return [*sac_columns(), ColumnSpec("image", np.uint8, (3, 24, 24))]


def _pixel_rows(start: int, n: int) -> dict[str, np.ndarray]:
    out = rows(start, n)
    out["image"] = (np.arange(start, start + n)[:, None, None, None] % 251
                    + np.zeros((1, 3, 24, 24))).astype(np.uint8)
    return out


CONFIGS = {
    "plain": (sac_columns, rows, {}),
    "quantized obs": (sac_columns, rows, {"quantize": {"obs": (-1.0, 400.0)}}),
    "wide column": (_pixels, _pixel_rows, {}),
    "demos, one population": (sac_columns, rows, {"demo_capacity": 6}),
    "demos with a fraction": (sac_columns, rows, {"demo_capacity": 6, "demo_fraction": 0.3}),
    "prioritized": (sac_columns, rows, {"prioritized": True}),
    "n_step kept": (sac_columns, rows, {"n_step": 3}),
}


def _twins(config: str) -> tuple[StoreReplay, StoreReplay, object]:
    cols, make, kw = CONFIGS[config]
    a, b = (StoreReplay(cols(), 40, seed=5, **kw) for _ in range(2))
    for rep in (a, b):
        if kw.get("demo_capacity"):
            rep.add_demos(**make(1000, 4))
        rep.add(**make(0, 57))  # wrapped
    return a, b, make


def _same(x: dict[str, np.ndarray], y: dict[str, np.ndarray]) -> None:
    assert x.keys() == y.keys()
    for k in x:
        assert x[k].dtype == y[k].dtype and x[k].shape == y[k].shape, k
        np.testing.assert_array_equal(x[k], y[k], err_msg=k)


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("b", [1, 5, 64, 1500])
def test_short_path_equals_the_general_one(config, b):
    short, general, make = _twins(config)
    for step in range(3):
        got, gi = short.sample(b)
        want, wi = ReplayFront.sample(general, b)
        _same(got, want)
        np.testing.assert_array_equal(gi.indices, wi.indices)
        assert gi.indices.dtype == np.int64 and gi.indices.shape == (b,)
        into_s = {k: np.full_like(v, 7) for k, v in got.items()}
        into_g = {k: np.full_like(v, 7) for k, v in got.items()}
        bs = short.sample_into(into_s, b)
        bg = ReplayFront.sample_into(general, into_g, b)
        _same(into_s, into_g)
        np.testing.assert_array_equal(bs.indices, bg.indices)
        for rep in (short, general):  # the ring moves between draws
            rep.add(**make(100 + step * 7, 7))
    if config == "plain":  # the outputs of a sample() are its own: a later draw leaves them
        kept = {k: v.copy() for k, v in got.items()}
        short.sample(b)
        _same(got, kept)


def test_short_path_is_taken_only_where_it_applies():
    rep = StoreReplay(sac_columns(), 40, demo_capacity=6, seed=1)
    rep.add_demos(**rows(1000, 4))
    with mock.patch.object(ReplayFront, "sample", autospec=True,
                           side_effect=AssertionError("general path")) as general:
        with pytest.raises(AssertionError, match="general path"):
            rep.sample(8)  # no online rows yet: every row from the demos
        rep.add(**rows(0, 10))
        rep.sample(8)  # short
        for call in (lambda: rep.sample(np.int64(8)), lambda: rep.sample(8, n_step=2),
                     lambda: rep.sample(0)):
            with pytest.raises(AssertionError, match="general path"):
                call()
        rep.configure_ere(True, eta=0.9, c_min=2)
        with pytest.raises(AssertionError, match="general path"):
            rep.sample(8, k=1, K=4)
        assert general.call_count == 5
    with pytest.raises(SamplerError, match="batch_size"):
        rep.sample(0)  # the general path's checks answer bad input
    empty = StoreReplay(sac_columns(), 8)
    with pytest.raises(SamplerError, match="empty"):
        empty.sample(4)
    with pytest.raises(SamplerError, match="empty"):
        empty.sample_into({k: np.empty((4, *v.shape[1:]), v.dtype)
                           for k, v in rows(0, 4).items()}, 4)


def _state(rep: StoreReplay) -> tuple:
    return (rep.cursor, rep.size, rep.n_added, rep._cut_first.tolist(), rep._rec.tobytes(),
            *(rep._data[k].tobytes() for k in rep._wide))


@pytest.mark.parametrize("config", ["plain", "wide column", "demos, one population"])
def test_staged_short_add_equals_the_general_add(config):
    """Batches that take the short staged add and batches that cannot (wrapping, below
    and above the staged sizes) on one replay, the general path on its twin: the same ring
    bytes, cursor, size, count and episode cut at every step, the same draws after."""
    cols, make, kw = CONFIGS[config]
    short, general = (StoreReplay(cols(), 3000, seed=2, **kw) for _ in range(2))
    general._lean_add = False
    taken = []
    real = StoreReplay._add_staged

    def spy(self, arrays, n):  # type: ignore[no-untyped-def]
        got = real(self, arrays, n)
        taken.append(got)
        return got

    start = 0
    with mock.patch.object(StoreReplay, "_add_staged", spy):
        for n in [200, 1000, 10, 1500, 700, 1000, 999, 6000, 1200]:
            batch = make(start, n)
            batch["done"] = (np.arange(start, start + n) % 11) == 10
            assert short.add(**batch) == general.add(**batch) == n
            start += n
            assert _state(short) == _state(general), n
    assert True in taken and False in taken  # both kinds of batch were seen
    for _ in range(3):
        got, gi = short.sample(500)
        want, wi = general.sample(500)
        _same(got, want)
        np.testing.assert_array_equal(gi.indices, wi.indices)


def test_staged_short_add_is_off_where_the_layers_matter():
    assert StoreReplay(sac_columns(), 3000)._lean_add
    for kw in ({"prioritized": True}, {"n_step": 3}, {"quantize": {"obs": (-1.0, 1.0)}}):
        assert not StoreReplay(sac_columns(), 3000, **kw)._lean_add, kw
