"""D4RL importer: gated against a row-by-row h5py reading of the fixture, exact on every column."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

import numbatraj.data.store_stats as store_stats_mod
import numbatraj.importers.d4rl as d4rl_mod
from numbatraj import TrajectoryStore, validate_store
from numbatraj.cli import main
from numbatraj.importers._common import SourceFormatError
from numbatraj.importers.d4rl import import_d4rl
from tests.importers.format_fixtures import check_store_stats, make_d4rl, peak_traced_bytes


def expected_d4rl(path, drop_tail=False):
    """Walk the rows one at a time, closing an episode after a terminal or timeout row."""
    with h5py.File(path, "r") as f:
        n = len(f["observations"])
        term = [bool(x) for x in f["terminals"][:]]
        tout = [bool(x) for x in f["timeouts"][:]] if "timeouts" in f else [False] * n
        src = {"obs": "observations", "action": "actions", "reward": "rewards",
               "done": "terminals", "next_obs": "next_observations", "truncated": "timeouts",
               "info.qpos": "infos/qpos", "info.qvel": "infos/qvel",
               "info.action_log_probs": "infos/action_log_probs"}
        src = {c: k for c, k in src.items() if k in f}
        data = {c: f[k][:] for c, k in src.items()}
    data["reward"] = data["reward"].reshape(n)
    lengths, cur, keep = [], 0, []
    for i in range(n):
        cur += 1
        keep.append(i)
        if term[i] or tout[i]:
            lengths.append(cur)
            cur = 0
    if cur:
        if drop_tail:
            keep = keep[:-cur]
        else:
            lengths.append(cur)
    return {c: v[keep] for c, v in data.items()}, lengths


def check(out, expected, lengths):
    with TrajectoryStore(out) as s:
        assert list(s.episode_lengths) == lengths
        assert set(s.columns) == set(expected)
        for c, want in expected.items():
            got = s.load_column(c)
            assert got.dtype == (np.bool_ if c in ("done", "truncated") else want.dtype), c
            assert np.array_equal(got, want), c
    assert validate_store(out).ok


@pytest.mark.parametrize("variant", ["v2", "reward_2d", "no_timeouts", "float64_replay",
                                     "no_next_obs"])
@pytest.mark.parametrize("drop_tail", [False, True])
def test_d4rl_matches_independent_reading(tmp_path, rng, variant, drop_tail):
    src = tmp_path / "hopper_medium-v2.hdf5"
    make_d4rl(src, rng, reward_2d=variant == "reward_2d",
              timeouts_at=None if variant == "no_timeouts" else (7,),
              dtype=np.float64 if variant == "float64_replay" else np.float32,
              next_obs=variant != "no_next_obs")
    out = tmp_path / "o.h5"
    import_d4rl(src, out, drop_tail=drop_tail)
    check_store_stats(out)
    expected, lengths = expected_d4rl(src, drop_tail)
    if variant == "no_timeouts":
        assert lengths == ([4] if drop_tail else [4, 6])
    else:
        assert lengths == ([4, 4] if drop_tail else [4, 4, 2])
    check(out, expected, lengths)
    with TrajectoryStore(out) as s:
        m = s.manifest
    assert m["attr.source.metadata.algorithm"] == "SAC"
    assert m["attr.source.metadata.iteration"] == "1000"
    assert m["attr.tail_rows"] == ("6" if variant == "no_timeouts" else "2")
    assert m["attr.source_format"] == "d4rl" and m["env_id"] == "hopper_medium-v2"


def test_d4rl_ends_exactly_on_a_boundary_and_cli(tmp_path, rng, monkeypatch):
    src = tmp_path / "walker.hdf5"
    make_d4rl(src, rng, n=9, ends=(0, 4, 8), timeouts_at=(2,))
    monkeypatch.chdir(tmp_path)
    assert main(["import", "d4rl", str(src)]) == 0
    expected, lengths = expected_d4rl(src)
    assert lengths == [1, 2, 2, 4]
    check(tmp_path / "walker.h5", expected, lengths)


def test_d4rl_streams_in_bounded_blocks(tmp_path, rng, monkeypatch):
    src = tmp_path / "big.hdf5"
    ends = tuple(range(1999, 16000, 2000))
    make_d4rl(src, rng, n=16000, ends=ends, timeouts_at=None, obs_dim=64, next_obs=True)
    monkeypatch.setattr(d4rl_mod, "_BLOCK_BYTES", 1)  # one episode per read
    monkeypatch.setattr(store_stats_mod, "_STATS_BYTES", 1 << 20)  # stats read back in slabs
    per_episode = 2000 * (64 * 4 * 2 + 3 * 4 + 4 + 1 + 6 * 4 * 2 + 4)
    peak = peak_traced_bytes(lambda: import_d4rl(src, tmp_path / "o.h5"))
    assert peak < 4 * per_episode  # the source holds 8 episodes
    expected, lengths = expected_d4rl(src)
    check(tmp_path / "o.h5", expected, lengths)


@pytest.mark.parametrize("case,needle", [
    ("missing", "missing dataset 'terminals'"),
    ("short", "'actions' has shape (9, 3) but 'observations' has 10 rows"),
    ("info_short", "'infos/qpos' has shape (8, 6)"),
    ("string", "'rewards' has dtype"),
])
def test_d4rl_bad_input(tmp_path, rng, case, needle):
    src = tmp_path / "bad.hdf5"
    make_d4rl(src, rng)
    with h5py.File(src, "a") as f:
        if case == "missing":
            del f["terminals"]
        elif case == "short":
            a = f["actions"][:9]
            del f["actions"]
            f["actions"] = a
        elif case == "info_short":
            del f["infos/qpos"]
            f["infos/qpos"] = np.zeros((8, 6), np.float32)
        else:
            del f["rewards"]
            f["rewards"] = np.array([b"x"] * 10)
    out = tmp_path / "o.h5"
    with pytest.raises(SourceFormatError) as ei:
        import_d4rl(src, out)
    assert needle in str(ei.value) and "bad.hdf5" in str(ei.value)
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_d4rl_not_hdf5(tmp_path):
    p = tmp_path / "x.hdf5"
    p.write_text("not hdf5")
    with pytest.raises(OSError, match="x.hdf5"):
        import_d4rl(p, tmp_path / "o.h5")
    assert not (tmp_path / "o.h5").exists()


def test_example_script_runs(monkeypatch, capsys):
    import runpy
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "examples" / "import_d4rl.py"
    monkeypatch.setattr(sys, "argv", [str(script)])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert ": ok (" in out and "columns:" in out
