"""A uniform StoreReplay's drawn physical rows against a plain-Python model: the sampler's
PCG64 words from a twin generator, ``floor(w * n / 2**64)`` logical rows, and the ring's
mapping written out here (demo prefix, oldest ring slot, wrap), with and without the demo
split and the ERE window."""

from __future__ import annotations

import math

import numpy as np
import pytest

from numbatraj.replay import StoreReplay
from tests.reference import ere_window_ref
from tests.replay.helpers import rows, sac_columns


def _twin(rep: StoreReplay) -> np.random.PCG64:
    g = np.random.PCG64()
    g.state = rep.sampler.state_dict()["generator"]
    return g


def _bounded(words: np.ndarray, n: int) -> list[int]:
    return [(int(w) * n) >> 64 for w in words]


def _expected(rep: StoreReplay, g: np.random.PCG64, b: int, fraction: float | None,
              c: int | None) -> list[int]:
    """Physical rows of one draw of ``b``: the model of ``StoreReplay._draw``."""
    d, r, nd = rep.demo_capacity, rep.ring_capacity, rep.n_demo
    size, cursor = rep.size, rep.cursor

    def ring(j: int, window: int) -> int:  # logical row j of the newest `window` ring rows
        return d + (cursor - window + j) % r

    if fraction is None and c is None:  # one population: the demo rows, then the ring's
        return [j if j < nd else ring(j - nd, size) for j in _bounded(g.random_raw(b), nd + size)]
    m = math.floor(fraction * b + 0.5) if fraction is not None and nd else 0
    window = size if c is None else c
    demo = _bounded(g.random_raw(m), nd) if m else []
    return demo + [ring(j, window) for j in _bounded(g.random_raw(b - m), window)]


@pytest.mark.parametrize("cap, demo, n_demo, adds", [
    (64, 0, 0, [10]),  # not full
    (64, 0, 0, [50, 50]),  # wrapped: the oldest slot is mid-ring
    (64, 8, 5, [30]),
    (64, 8, 8, [100, 7]),
    (5, 3, 1, [12]),
])
@pytest.mark.parametrize("fraction", [None, 0.25])
@pytest.mark.parametrize("b", [1, 7, 9, 300])
def test_uniform_draws_are_the_modelled_physical_rows(cap, demo, n_demo, adds, fraction, b):
    rep = StoreReplay(sac_columns(), cap, demo_capacity=demo, demo_fraction=fraction, seed=11)
    if n_demo:
        rep.add_demos(**rows(1000, n_demo))
    start = 0
    for n in adds:
        rep.add(**rows(start, n))
        start += n
    for _ in range(3):
        g = _twin(rep)
        got = rep.sample_indices(b).indices.tolist()
        assert got == _expected(rep, g, b, fraction, None)
        into = {k: np.empty_like(v) for k, v in rep.sample(b)[0].items()}
        g = _twin(rep)
        assert rep.sample_into(into, b).indices.tolist() == _expected(rep, g, b, fraction, None)
        rep.add(**rows(start, 3))
        start += 3


@pytest.mark.parametrize("k, big_k", [(0, 10), (5, 10), (10, 10)])
def test_ere_draws_are_the_modelled_window_rows(k, big_k):
    rep = StoreReplay(sac_columns(), 64, demo_capacity=4, seed=3)
    rep.add_demos(**rows(1000, 4))
    rep.add(**rows(0, 150))
    rep.configure_ere(True, eta=0.9, c_min=5)
    c = ere_window_ref(rep.size, k, big_k, 0.9, 5)
    g = _twin(rep)
    got = rep.sample_indices(257, k=k, K=big_k).indices.tolist()
    assert got == _expected(rep, g, 257, None, c)
