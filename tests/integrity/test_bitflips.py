"""Bit flips in every region of stores of every compression: never a silent wrong read."""

from __future__ import annotations

import os

from tests.integrity.flipsweep import COMPRESSIONS, REGIONS, summary, sweep

#: ``make soak`` raises it (NUMBATRAJ_FLIPS=3000)
N_FLIPS = int(os.environ.get("NUMBATRAJ_FLIPS", "320"))


def test_no_silent_wrong_read_after_a_flipped_byte(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.dirname(__file__))), env.get("PYTHONPATH", "")]
    )
    results = sweep(N_FLIPS, 0, str(tmp_path / "flips.jsonl"), env=env)
    counts = summary(results)
    print("bit flips:", counts)  # the figures quoted in docs/store.md
    assert counts["tried"] >= min(N_FLIPS, 300)
    assert {r["compression"] for r in results} == {c or "none" for c in COMPRESSIONS}
    assert {r["region"] for r in results} == set(REGIONS)
    bad = [r for r in results if r["result"].split(":")[0] in ("silent", "wrong_error", "crash")]
    assert not bad, bad[:10]
