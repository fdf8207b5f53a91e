"""Bit flips in a replay checkpoint and a ``.demo`` file: a load either raises a numbatraj
error or returns exactly what was saved; never a silent wrong value (the issue counted 13
of 69 checkpoint mutations loading wrong before the digests)."""

from __future__ import annotations

import os

import pytest

from tests.integrity.ckptsweep import KINDS, REGIONS, summary, sweep

#: A quarter of the store sweep's count per file kind: 80 in the suite, 800 under
#: ``make soak`` (NUMBATRAJ_FLIPS=3200).
N_FLIPS = max(1, int(os.environ.get("NUMBATRAJ_FLIPS", "320")) // 4)


@pytest.mark.parametrize("kind", KINDS)
def test_no_silent_wrong_load_after_a_flipped_byte(tmp_path, kind):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.dirname(__file__))), env.get("PYTHONPATH", "")]
    )
    results = sweep(kind, N_FLIPS, 0, str(tmp_path / "flips.jsonl"), env=env)
    counts = summary(results)
    print(f"{kind} bit flips:", counts)  # the figures quoted in docs/store.md
    assert counts["tried"] == N_FLIPS
    if N_FLIPS >= 60:
        assert {r["region"] for r in results} == set(REGIONS[kind])
        assert counts["caught"] >= N_FLIPS // 2  # the sweep does reach the data it guards
    bad = [r for r in results if r["result"].split(":")[0] in ("silent", "wrong_error", "crash")]
    assert not bad, bad[:10]
