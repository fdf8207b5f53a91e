"""LAFAN1 G1 importer: gated against a csv-module reading of the fixture.

Recorded columns are compared exactly; the finite-difference velocities are recomputed here
with per-frame loops (and rotation matrices for the angular velocity) and compared to 1e-9.
"""

from __future__ import annotations

import csv
import math
import os

import numpy as np
import pytest

import numbatraj.data.store_stats as store_stats_mod
from numbatraj import TrajectoryStore, validate_store
from numbatraj.cli import main
from numbatraj.importers._common import SourceFormatError
from numbatraj.importers.lafan import G1_JOINT_NAMES, import_lafan_g1
from tests.importers.format_fixtures import (
    check_store_stats,
    make_lafan_csv,
    peak_traced_bytes,
)

FPS = 30.0


def read_csv_plain(path):
    with open(path) as fh:
        return [[float(x) for x in row] for row in csv.reader(fh)]


def rotmat(q):
    x, y, z, w = q
    n = math.sqrt(x * x + y * y + z * z + w * w)
    x, y, z, w = x / n, y / n, z / n, w / n
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])


def log_so3(R):
    angle = math.acos(max(-1.0, min(1.0, (np.trace(R) - 1) / 2)))
    if angle < 1e-12:
        return np.zeros(3)
    axis = np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]]) / (2 * math.sin(angle))
    return axis * angle


def expected_velocities(rows):
    T = len(rows)
    lin, ang, jv = [], [], []
    for t in range(T):
        a, b = (t - 1, t + 1) if 0 < t < T - 1 else ((0, 1) if t == 0 else (T - 2, T - 1))
        if T == 1:
            lin.append([0.0] * 3), ang.append([0.0] * 3), jv.append([0.0] * 29)
            continue
        span = (b - a) / FPS
        lin.append([(rows[b][k] - rows[a][k]) / span for k in range(3)])
        jv.append([(rows[b][k] - rows[a][k]) / span for k in range(7, 36)])
        R = rotmat(rows[b][3:7]) @ rotmat(rows[a][3:7]).T
        ang.append(list(log_so3(R) / span))
    return np.array(lin), np.array(ang), np.array(jv)


def test_lafan_matches_independent_reading(tmp_path, rng):
    files = {"walk1_subject1": 12, "dance2_subject3": 20, "dance10_subject3": 9, "run1_subject2": 1}
    for name, T in files.items():
        make_lafan_csv(tmp_path / "g1" / f"{name}.csv", rng, T=T)
    out = tmp_path / "g1.h5"
    import_lafan_g1(tmp_path, out)   # finds g1/ below the directory
    check_store_stats(out)
    order = ["dance2_subject3", "dance10_subject3", "run1_subject2", "walk1_subject1"]
    with TrajectoryStore(out) as s:
        assert list(s.episode_lengths) == [files[n] for n in order]
        m = s.manifest
        assert m["attr.clips"] == ",".join(order)
        assert m["attr.joint_names"].split(",") == list(G1_JOINT_NAMES)
        assert m["attr.fps"] == "30" and m["attr.root_quat_order"].startswith("xyzw")
        for e, name in enumerate(order):
            rows = read_csv_plain(tmp_path / "g1" / f"{name}.csv")
            ep = s.episode(e)
            assert np.array_equal(ep["root_pos"], np.array([r[0:3] for r in rows]))
            assert np.array_equal(ep["root_quat"], np.array([r[3:7] for r in rows]))
            assert np.array_equal(ep["joint_pos"], np.array([r[7:] for r in rows]))
            assert np.array_equal(ep["clip_index"], np.full(len(rows), e))
            lin, ang, jv = expected_velocities(rows)
            np.testing.assert_allclose(ep["root_lin_vel"], lin, rtol=1e-9, atol=1e-9)
            np.testing.assert_allclose(ep["joint_vel"], jv, rtol=1e-9, atol=1e-9)
            np.testing.assert_allclose(ep["root_ang_vel"], ang, rtol=1e-9, atol=1e-9)
    assert validate_store(out).ok


def test_lafan_angular_velocity_of_a_constant_spin(tmp_path):
    """A known answer: yaw at 1.5 rad/s gives (0, 0, 1.5) on every frame."""
    T, rate = 10, 1.5
    yaw = rate * np.arange(T) / FPS
    rows = np.zeros((T, 36))
    rows[:, 5], rows[:, 6] = np.sin(yaw / 2), np.cos(yaw / 2)
    np.savetxt(tmp_path / "spin.csv", rows, delimiter=",", fmt="%.17g")
    import_lafan_g1([tmp_path / "spin.csv"], tmp_path / "o.h5")
    with TrajectoryStore(tmp_path / "o.h5") as s:
        np.testing.assert_allclose(s.load_column("root_ang_vel"), [[0, 0, rate]] * T, atol=1e-12)


def test_lafan_cli(tmp_path, rng):
    a = make_lafan_csv(tmp_path / "a.csv", rng, T=5)
    out = tmp_path / "c.h5"
    assert main(["import", "lafan", str(tmp_path / "a.csv"), "--out", str(out)]) == 0
    with TrajectoryStore(out) as s:
        assert np.array_equal(s.load_column("joint_pos"), np.round(a[:, 7:], 6))


@pytest.mark.parametrize("case,needle", [
    ("h1", "Unitree H1 (7 + 19 columns)"),
    ("h1_2", "Unitree H1_2 (7 + 27 columns)"),
    ("narrow", "rows have 35 values, expected 36"),
    ("truncated", "line 4 has 20 values, expected 36"),
    ("text", "line 2, column 9 holds 'abc', not a number"),
    ("nan", "line 3, column 0 is nan"),
    ("empty", "no rows"),
])
def test_lafan_bad_input(tmp_path, rng, case, needle):
    good = tmp_path / "good1_subject1.csv"
    make_lafan_csv(good, rng, T=6)
    bad = tmp_path / "bad1_subject1.csv"
    if case in ("h1", "h1_2", "narrow"):
        make_lafan_csv(bad, rng, T=4, n_joints={"h1": 19, "h1_2": 27, "narrow": 28}[case])
    else:
        make_lafan_csv(bad, rng, T=6)
        lines = bad.read_text().splitlines()
        if case == "truncated":
            lines[3] = ",".join(lines[3].split(",")[:20])
        elif case == "text":
            parts = lines[1].split(",")
            parts[9] = "abc"
            lines[1] = ",".join(parts)
        elif case == "nan":
            lines[2] = "nan" + lines[2][lines[2].index(","):]
        else:
            lines = []
        bad.write_text("\n".join(lines) + ("\n" if lines else ""))
    out = tmp_path / "o.h5"
    with pytest.raises(SourceFormatError) as ei:
        import_lafan_g1(tmp_path, out)
    assert needle in str(ei.value) and "bad1_subject1.csv" in str(ei.value)
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_lafan_streams_one_clip_at_a_time(tmp_path, rng, monkeypatch):
    for i in range(8):
        make_lafan_csv(tmp_path / f"walk{i}_subject1.csv", rng, T=600)
    per_clip = 600 * 36 * 8
    monkeypatch.setattr(store_stats_mod, "_STATS_BYTES", 1 << 16)  # stats read back in slabs
    peak = peak_traced_bytes(lambda: import_lafan_g1(tmp_path, tmp_path / "m.h5"))
    assert peak < 5 * per_clip  # the source holds 8 clips' worth


def test_lafan_missing_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        import_lafan_g1([tmp_path / "nope.csv"], tmp_path / "o.h5")


def test_example_script_runs(monkeypatch, capsys):
    import runpy
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "examples" / "import_lafan.py"
    monkeypatch.setattr(sys, "argv", [str(script)])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert ": ok (" in out and "columns:" in out


def test_lafan_cut_inside_the_last_number_is_refused_but_a_missing_newline_is_not(tmp_path, rng):
    from numbatraj.importers.lafan import read_g1_csv

    p = tmp_path / "walk1_subject1.csv"
    make_lafan_csv(p, rng, T=5)
    raw = p.read_bytes()
    p.write_bytes(raw[:-1])  # only the final newline gone: nothing lost
    np.testing.assert_array_equal(read_g1_csv(p), np.loadtxt(tmp_path / "walk1_subject1.csv",
                                                             delimiter=",", ndmin=2))
    p.write_bytes(raw[:-3])  # two digits of the last number gone
    with pytest.raises(SourceFormatError, match="looks truncated"):
        read_g1_csv(p)
