"""robomimic importer: gated against an h5py reading of the fixture, exact on every column."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

from numbatraj import TrajectoryStore, validate_store
from numbatraj.cli import main
from numbatraj.importers._common import SourceFormatError
from numbatraj.importers.robomimic import import_robomimic
from tests.importers.format_fixtures import check_store_stats, make_robomimic, peak_traced_bytes


def expected_robomimic(path, filter_key=None, images=True):
    """Demos ordered by int(name[5:]) as robomimic's SequenceDataset does."""
    with h5py.File(path, "r") as f:
        names = list(f["data"].keys())
        if filter_key:
            names = [b.decode() for b in f[f"mask/{filter_key}"][:]]
        names.sort(key=lambda s: int(s[5:]))
        cols, lengths = {}, []
        for name in names:
            d = f["data"][name]
            lengths.append(d["actions"].shape[0])
            pairs = [("action", d["actions"]), ("state", d["states"]), ("reward", d["rewards"]),
                     ("done", d["dones"])]
            for grp in ("obs", "next_obs"):
                if grp in d:
                    for k in d[grp]:
                        if images or "image" not in k:
                            pairs.append((f"{grp}.{k}", d[grp][k]))
            for c, ds in pairs:
                cols.setdefault(c, []).append(ds[:])
    out = {c: np.concatenate(v) for c, v in cols.items()}
    out["done"] = out["done"].astype(np.uint8)
    return out, lengths, names


def check(out, expected, lengths):
    with TrajectoryStore(out) as s:
        assert list(s.episode_lengths) == lengths
        assert set(s.columns) == set(expected)
        for c, want in expected.items():
            got = s.load_column(c)
            assert got.dtype == want.dtype and np.array_equal(got, want), c
        m = s.manifest
    assert validate_store(out).ok
    return m


@pytest.mark.parametrize("filter_key", [None, "train", "valid"])
def test_robomimic_matches_independent_reading(tmp_path, rng, filter_key):
    src = tmp_path / "low_dim_v15.hdf5"
    make_robomimic(src, rng)
    out = tmp_path / "o.h5"
    import_robomimic(src, out, filter_key=filter_key)
    check_store_stats(out)
    expected, lengths, names = expected_robomimic(src, filter_key)
    m = check(out, expected, lengths)
    assert m["attr.demos"] == ",".join(names)
    assert m["env_id"] == "Lift" and m["attr.filter_keys_available"] == "train,valid"
    if filter_key is None:
        assert names == ["demo_1", "demo_2", "demo_10"]
    with TrajectoryStore(out) as s:
        assert s.spec("obs.agentview_image").shape == (8, 8, 3)
        assert s.storage("obs.agentview_image")["compression"] != "none"


def test_robomimic_no_images_no_next_obs_cli(tmp_path, rng, monkeypatch):
    src = tmp_path / "image_v15.hdf5"
    make_robomimic(src, rng, next_obs=False)
    monkeypatch.chdir(tmp_path)
    assert main(["import", "robomimic", str(src), "--no-images", "--filter-key", "train"]) == 0
    expected, lengths, _ = expected_robomimic(src, "train", images=False)
    m = check(tmp_path / "image_v15.train.h5", expected, lengths)
    # the image key left out by --no-images, and the demos' model_file (MuJoCo XML)
    assert m["attr.skipped"] == "@model_file,obs/agentview_image"


@pytest.mark.parametrize("case,needle", [
    ("filter", "no filter key 'test'; mask/ holds: train, valid"),
    ("mask_demo", "mask/train lists ['demo_7'] which data/ lacks"),
    ("length", "data/demo_10/obs/robot0_eef_pos has shape (3, 3), expected (4, 3)"),
    ("missing", "data/demo_2: missing dataset 'rewards'"),
    ("dones", "data/demo_2/dones holds 2"),
    ("nodata", "no 'data' group"),
])
def test_robomimic_bad_input(tmp_path, rng, case, needle):
    src = tmp_path / "bad.hdf5"
    make_robomimic(src, rng)
    with h5py.File(src, "a") as f:
        if case == "mask_demo":
            del f["mask/train"]
            f["mask/train"] = np.array([b"demo_1", b"demo_7"], dtype="S")
        elif case == "length":
            del f["data/demo_10/obs/robot0_eef_pos"]
            f["data/demo_10/obs/robot0_eef_pos"] = np.zeros((3, 3))
        elif case == "missing":
            del f["data/demo_2/rewards"]
        elif case == "dones":
            f["data/demo_2/dones"][0] = 2
        elif case == "nodata":
            f.move("data", "x")
    out = tmp_path / "o.h5"
    with pytest.raises(SourceFormatError) as ei:
        import_robomimic(src, out, filter_key="test" if case == "filter" else
                         ("train" if case == "mask_demo" else None))
    assert needle in str(ei.value) and "bad.hdf5" in str(ei.value)
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_robomimic_streams_one_demo_at_a_time(tmp_path, rng):
    demos = [f"demo_{i}" for i in range(8)]
    src = tmp_path / "big.hdf5"
    make_robomimic(src, rng, demos=demos, lengths=[100] * 8, hw=(32, 32))
    per_demo = 100 * (2 * (32 * 32 * 3 + 7 * 8) + 7 * 8 + 32 * 8 + 16)
    peak = peak_traced_bytes(lambda: import_robomimic(src, tmp_path / "o.h5",
                                                      image_compression=None))
    assert peak < 4 * per_demo   # the source holds 8 demos


def test_example_script_runs(monkeypatch, capsys):
    import runpy
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "examples" / "import_robomimic.py"
    monkeypatch.setattr(sys, "argv", [str(script)])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert ": ok (" in out and "columns:" in out
