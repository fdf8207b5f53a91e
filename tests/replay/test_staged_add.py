"""Batch adds that assemble the row records in a scratch before one contiguous copy into the
ring (``StoreReplay._put``), with or without streaming stores: every held row equals the plain reference (the last
``capacity`` rows added, in time order), through wraps, demos and one-row adds."""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj.data import ColumnSpec
from numbatraj.replay import StoreReplay, buffer
from numbatraj.replay.buffer import _STAGE_BYTES

COLS = [ColumnSpec("obs", np.float32, (17,)), ColumnSpec("action", np.float32, (6,)),
        ColumnSpec("reward", np.float32, ()), ColumnSpec("done", np.bool_, ()),
        ColumnSpec("tag", np.int16, (3,))]


def _rows(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    return {"obs": rng.standard_normal((n, 17), dtype=np.float32),
            "action": rng.standard_normal((n, 6), dtype=np.float32),
            "reward": rng.standard_normal(n, dtype=np.float32),
            "done": rng.random(n) < 0.1,
            "tag": rng.integers(-300, 300, (n, 3)).astype(np.int16)}


@pytest.mark.parametrize("stream", [False, True], ids=["cached", "streamed"])
@pytest.mark.parametrize("demo", [0, 700])
def test_staged_batch_adds_match_the_reference(demo, stream, monkeypatch):
    # streamed: the ring takes the streaming stores of a ring beyond the caches
    monkeypatch.setattr(buffer, "_STREAM_RING_BYTES", 0 if stream else 1 << 62)
    rng = np.random.default_rng(7)
    cap = 2500 + demo
    rep = StoreReplay(COLS, cap, demo_capacity=demo)
    assert rep._stream_adds is stream
    rb = rep._row_bytes
    sizes = [1000, 1500, 700, 1, 2400, 3000, 9, 1200]
    assert any(_STAGE_BYTES[0] <= n * rb <= _STAGE_BYTES[1] for n in sizes)  # staged
    assert any(n * rb < _STAGE_BYTES[0] for n in sizes)  # and not
    demos = _rows(rng, demo)
    if demo:
        rep.add_demos(**demos)
    held = {k: np.zeros((0, *v.shape[1:]), v.dtype) for k, v in _rows(rng, 0).items()}
    for n in sizes:
        b = _rows(rng, n)
        if n == 1:
            rep.add(**{k: v[0] for k, v in b.items()})
        elif n == 1200:  # strided and Fortran-order columns (the kernel copies them)
            wide = np.zeros((n, 20), np.float32)
            wide[:, 2:19] = b["obs"]
            rep.add(**{**b, "obs": wide[:, 2:19], "tag": np.asfortranarray(b["tag"])})
        else:
            rep.add(**b)
        held = {k: np.concatenate([held[k], b[k]])[-2500:] for k in held}
        got = rep.rows()
        for k in held:
            want = np.concatenate([demos[k], held[k]]) if demo else held[k]
            np.testing.assert_array_equal(got[k], want, err_msg=f"{k} after {n}")
