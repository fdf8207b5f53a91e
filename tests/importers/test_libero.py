"""LIBERO importer: gated against a plain-h5py reading of the fixture, exact on every column."""

from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pytest

from numbatraj import TrajectoryStore, validate_store
from numbatraj.cli import main
from numbatraj.importers._common import SourceFormatError
from numbatraj.importers.libero import import_libero, language_from_filename
from tests.importers.format_fixtures import (
    LIBERO_TASKS,
    check_store_stats,
    make_libero_suite,
    peak_traced_bytes,
)


def expected_libero(suite_dir, *, images=True, cap=None, flip="none"):
    """Independent reading: files in name order, demos by int(suffix), rows built one by one."""
    files = sorted(p for p in os.listdir(suite_dir) if p.endswith(".hdf5"))
    cols = {k: [] for k in ("state", "joint_states", "gripper_states", "qpos", "action",
                            "reward", "done", "task_index", "images")}
    # the other per-step datasets every demo holds become columns of their own
    extra = {"robot_states": "robot_states", "obs/ee_states": "obs.ee_states",
             "obs/ee_pos": "obs.ee_pos", "obs/ee_ori": "obs.ee_ori"}
    cols.update({c: [] for c in extra.values()})
    lengths, widths, langs = [], [], []
    for f in files:
        with h5py.File(os.path.join(suite_dir, f), "r") as h:
            widths.append(h["data/demo_0/states"].shape[1])
    width = max(widths)
    for ti, f in enumerate(files):
        with h5py.File(os.path.join(suite_dir, f), "r") as h:
            langs.append(json.loads(h["data"].attrs["problem_info"])["language_instruction"])
            names = sorted(h["data"], key=lambda k: int(k.split("_")[1]))[:cap]
            for name in names:
                d = h["data"][name]
                js, gs = d["obs/joint_states"][:], d["obs/gripper_states"][:]
                st = d["states"][:]
                lengths.append(len(js))
                for t in range(len(js)):
                    prev = t - 1 if t else 0
                    delta = [js[t, j] - js[prev, j] for j in range(7)] + [
                        gs[t, j] - gs[prev, j] for j in range(2)]
                    onehot = [1.0 if k == ti else 0.0 for k in range(len(files))]
                    cols["qpos"].append(list(js[t]) + list(gs[t]) + delta + onehot)
                    cols["state"].append(list(st[t]) + [float("nan")] * (width - st.shape[1]))
                    if images:
                        cams = [d["obs/agentview_rgb"][t], d["obs/eye_in_hand_rgb"][t]]
                        if flip in ("vertical", "both"):
                            cams = [np.flip(c, 0) for c in cams]
                        if flip == "both":
                            cams = [np.flip(c, 1) for c in cams]
                        cols["images"].append(np.stack([np.moveaxis(c, -1, 0) for c in cams]))
                cols["joint_states"] += list(js)
                cols["gripper_states"] += list(gs)
                cols["action"] += list(d["actions"][:])
                cols["reward"] += [float(x) for x in d["rewards"][:]]
                cols["done"] += [int(x) for x in d["dones"][:]]
                cols["task_index"] += [ti] * len(js)
                for key, col in extra.items():
                    cols[col] += list(d[key][:])
    if not images:
        del cols["images"]
    return {k: np.array(v) for k, v in cols.items()}, lengths, langs


def assert_store_matches(path, expected, lengths):
    with TrajectoryStore(path) as s:
        assert list(s.episode_lengths) == lengths
        assert set(s.columns) == set(expected)
        for name, want in expected.items():
            got = s.load_column(name)
            assert got.shape == want.shape, name
            assert np.array_equal(got, want.astype(got.dtype), equal_nan=True), name
    assert validate_store(path).ok


@pytest.mark.parametrize("flip", ["none", "vertical", "both"])
def test_libero_matches_independent_reading(tmp_path, rng, flip):
    suite = make_libero_suite(tmp_path, rng, tasks=list(LIBERO_TASKS), state_dims=(79, 79, 45))
    out = tmp_path / "goal.h5"
    import_libero(suite, out, flip_images=False if flip == "none" else flip)
    check_store_stats(out)
    expected, lengths, langs = expected_libero(suite, flip=flip)
    assert_store_matches(out, expected, lengths)
    with TrajectoryStore(out) as s:
        m = s.manifest
        assert s.spec("qpos").shape == (18 + 3,)
        assert s.spec("images").shape == (2, 3, 8, 8)
    assert m["attr.image_flip"] == flip
    assert m["attr.image_origin"] == ("opengl" if flip == "none" else "top-left")
    assert m["attr.task.0.demos"] == "demo_0,demo_1,demo_2,demo_10"
    files = sorted(os.listdir(suite))
    for i, f in enumerate(files):
        assert m[f"attr.task.{i}.language"] == langs[i]
        assert m[f"attr.task.{i}.file"] == f
    # two of the three languages differ from the file-name wording, as in libero_goal
    assert m["attr.task.1.language"] == "open the middle layer of the drawer"
    assert m["attr.task.1.language_from_filename"] == "open the middle drawer of the cabinet"
    assert m["attr.task.0.language_from_filename"] == "put the butter at the back in the basket"
    assert m["attr.task.0.state_dim"] == "45" and m["attr.task.2.state_dim"] == "79"
    assert m["attr.source_format"] == "libero" and m["attr.importer_version"].startswith("1")


def test_language_from_filename():
    assert language_from_filename("LIVING_ROOM_SCENE2_put_both_the_cream_cheese_box") == (
        "put both the cream cheese box")
    assert language_from_filename("KITCHEN_SCENE10_close_the_top_drawer") == "close the top drawer"
    assert language_from_filename("pick_up_the_ketchup") == "pick up the ketchup"


def test_libero_lowdim_cap_and_default_name(tmp_path, rng, monkeypatch):
    suite = make_libero_suite(tmp_path / "src", rng)
    monkeypatch.chdir(tmp_path)
    path = import_libero(suite, images=False, demos_per_task=2)
    assert path == "libero_goal.lowdim.h5"
    expected, lengths, _ = expected_libero(suite, images=False, cap=2)
    assert lengths == [6, 8, 6, 8]
    assert_store_matches(tmp_path / path, expected, lengths)


def test_libero_full_size_images(tmp_path, rng):
    suite = make_libero_suite(tmp_path, rng, tasks=list(LIBERO_TASKS)[:1], demos=("demo_0",),
                              lengths=(3,), hw=(128, 128))
    out = tmp_path / "o.h5"
    import_libero(suite, out)
    expected, lengths, _ = expected_libero(suite)
    assert_store_matches(out, expected, lengths)


def test_libero_cli(tmp_path, rng):
    suite = make_libero_suite(tmp_path, rng)
    out = tmp_path / "cli.h5"
    assert main(["import", "libero", str(suite), "--out", str(out), "--no-images",
                 "--demos", "1"]) == 0
    expected, lengths, _ = expected_libero(suite, images=False, cap=1)
    assert_store_matches(out, expected, lengths)


def _break(suite, fn):
    path = max(suite.glob("*.hdf5"))
    with h5py.File(path, "a") as f:
        fn(f)
    return path.name


@pytest.mark.parametrize("case,needle", [
    ("missing", "missing dataset 'obs/joint_states'"),
    ("length", "has 5 rows but actions has 7"),
    ("nodata", "no 'data' group"),
    ("num_samples", "num_samples = 99"),
    ("shape", "expected (7,)"),
])
def test_libero_bad_input_names_culprit_and_leaves_nothing(tmp_path, rng, case, needle):
    suite = make_libero_suite(tmp_path, rng)

    def breaker(f):
        g = f["data/demo_2"]
        if case == "missing":
            del g["obs/joint_states"]
        elif case == "length":
            del g["obs/gripper_states"]
            g["obs/gripper_states"] = np.zeros((5, 2))
        elif case == "nodata":
            f.move("data", "other")
        elif case == "num_samples":
            g.attrs["num_samples"] = 99
        else:
            del g["actions"]
            g["actions"] = np.zeros((7, 6))

    fname = _break(suite, breaker)
    out = tmp_path / "bad.h5"
    with pytest.raises(SourceFormatError) as ei:
        import_libero(suite, out)
    assert needle in str(ei.value) and fname in str(ei.value)
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_libero_failure_mid_write_leaves_nothing(tmp_path, rng, monkeypatch):
    """A failure after some episodes were written removes the temporary file too."""
    import numbatraj.importers.libero as mod

    suite = make_libero_suite(tmp_path, rng)
    real, calls = mod._demo_rows, []

    def flaky(*args):
        calls.append(1)
        if len(calls) == 3:
            raise OSError("simulated read error in demo 3")
        return real(*args)

    monkeypatch.setattr(mod, "_demo_rows", flaky)
    out = tmp_path / "bad.h5"
    with pytest.raises(OSError, match="simulated"):
        import_libero(suite, out)
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_libero_streams_one_demo_at_a_time(tmp_path, rng):
    demos = tuple(f"demo_{i}" for i in range(8))
    suite = make_libero_suite(tmp_path, rng, tasks=list(LIBERO_TASKS)[:1], demos=demos,
                              lengths=(40,) * 8, hw=(64, 64))
    per_demo = 40 * 2 * 64 * 64 * 3
    out = tmp_path / "m.h5"
    peak = peak_traced_bytes(lambda: import_libero(suite, out, image_compression=None))
    assert peak < 5 * per_demo  # the source holds 8 demos' worth (3.4x measured)


def test_example_script_runs(monkeypatch, capsys):
    import runpy
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "examples" / "import_libero.py"
    monkeypatch.setattr(sys, "argv", [str(script)])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert ": ok (" in out and "columns:" in out


def test_libero_progress_bar(tmp_path, rng, capsys):
    suite = make_libero_suite(tmp_path, rng)
    import_libero(suite, tmp_path / "p.h5", show_progress=True)
    err = capsys.readouterr().err
    assert "libero libero_goal" in err and "/8 [" in err
    import_libero(suite, tmp_path / "q.h5", show_progress=False)
    assert capsys.readouterr().err == ""


def test_libero_bytes_attributes_and_string_num_samples(tmp_path, rng):
    """Attributes written as fixed-length bytes, num_samples as a string (seen in the wild)."""
    suite = make_libero_suite(tmp_path, rng, tasks=list(LIBERO_TASKS)[:1])
    path = next(suite.glob("*.hdf5"))
    with h5py.File(path, "a") as f:
        info = f["data"].attrs["problem_info"]
        f["data"].attrs["problem_info"] = np.bytes_(info.encode())
        f["data/demo_1"].attrs["num_samples"] = "8"
    out = tmp_path / "b.h5"
    import_libero(suite, out)
    expected, lengths, langs = expected_libero(suite)
    assert_store_matches(out, expected, lengths)
    with TrajectoryStore(out) as s:
        assert s.manifest["attr.task.0.language"] == "open the middle layer of the drawer"
