"""Every importer, fed a truncated file, a file that is not of its format, a source missing a
required key and one with a wrong-shaped dataset, raises only numbatraj errors (with their
builtin bases), each naming the file or the key, and leaves nothing at ``out``."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

from numbatraj.errors import NumbatrajError
from numbatraj.importers.d4rl import import_d4rl
from numbatraj.importers.diffusion_policy import import_diffusion_policy
from numbatraj.importers.lafan import import_lafan_g1
from numbatraj.importers.libero import import_libero
from numbatraj.importers.minari import import_minari
from numbatraj.importers.robomimic import import_robomimic
from tests.importers.format_fixtures import (
    make_d4rl,
    make_dp_zarr_raw,
    make_lafan_csv,
    make_libero_suite,
    make_minari,
    make_robomimic,
    zip_dir,
)

CASES = ("truncated", "not_format", "missing_key", "wrong_shape", "group_not_dataset")


def _replace(f, key, value):
    del f[key]
    f[key] = value


def _cut(path, keep=None):
    raw = open(path, "rb").read()
    open(path, "wb").write(raw[: len(raw) // 2 if keep is None else keep(len(raw))])


def _garbage(path):
    open(path, "wb").write(b"this is not a dataset file\n" * 40)


def d4rl(tmp, rng, case):
    src = tmp / "hopper.hdf5"
    make_d4rl(src, rng)
    with h5py.File(src, "a") as f:
        if case == "missing_key":
            del f["rewards"]
        elif case == "wrong_shape":
            _replace(f, "terminals", np.zeros((10, 3), bool))
        elif case == "group_not_dataset":
            del f["actions"]
            f["actions/x"] = np.zeros((10, 3))
    return (lambda out: import_d4rl(src, out)), src, {"missing_key": "rewards",
                                                      "wrong_shape": "terminals",
                                                      "group_not_dataset": "actions"}


def robomimic(tmp, rng, case):
    src = tmp / "lift.hdf5"
    make_robomimic(src, rng)
    with h5py.File(src, "a") as f:
        if case == "missing_key":
            del f["data/demo_2/obs/robot0_eef_pos"]
        elif case == "wrong_shape":
            _replace(f, "data/demo_10/actions", np.zeros((4, 6)))
        elif case == "group_not_dataset":
            del f["data/demo_1/actions"]
            f["data/demo_1/actions/x"] = np.zeros((5, 7))
    return (lambda out: import_robomimic(src, out)), src, {
        "missing_key": "obs/robot0_eef_pos", "wrong_shape": "actions",
        "group_not_dataset": "actions"}


def minari(tmp, rng, case):
    d = make_minari(tmp, rng, kind="box")
    src = d / "data" / "main_data.hdf5"
    with h5py.File(src, "a") as f:
        if case == "missing_key":
            del f["episode_1/rewards"]
        elif case == "wrong_shape":
            _replace(f, "episode_1/actions", np.zeros((3, 5), np.float32))
        elif case == "group_not_dataset":
            del f["episode_0/rewards"]
            f["episode_0/rewards/x"] = np.zeros(4)
    return (lambda out: import_minari(d, out)), src, {
        "missing_key": "rewards", "wrong_shape": "actions", "group_not_dataset": "rewards"}


def libero(tmp, rng, case):
    suite = make_libero_suite(tmp, rng)
    src = suite / sorted(os.listdir(suite))[1]
    with h5py.File(src, "a") as f:
        if case == "missing_key":
            del f["data/demo_1/obs/joint_states"]
        elif case == "wrong_shape":
            _replace(f, "data/demo_2/actions", np.zeros((7, 6)))
        elif case == "group_not_dataset":
            del f["data/demo_0/rewards"]
            f["data/demo_0/rewards/x"] = np.zeros(6)
    return (lambda out: import_libero(suite, out)), src, {
        "missing_key": "obs/joint_states", "wrong_shape": "actions",
        "group_not_dataset": "rewards"}


def diffusion_policy(tmp, rng, case):
    raw = tmp / "pusht.zarr"
    make_dp_zarr_raw(raw, rng)
    if case == "missing_key":
        import shutil

        shutil.rmtree(raw / "meta" / "episode_ends")
    elif case == "wrong_shape":
        a = np.array([[3, 7]], np.int64)
        (raw / "meta/episode_ends/.zarray").write_text(
            '{"zarr_format": 2, "shape": [1, 2], "chunks": [1, 2], "dtype": "<i8", '
            '"compressor": null, "fill_value": 0, "order": "C", "filters": null}')
        for p in (raw / "meta/episode_ends").glob("0*"):
            p.unlink()
        (raw / "meta/episode_ends/0.0").write_bytes(a.tobytes())
    elif case == "group_not_dataset":
        import shutil

        shutil.rmtree(raw / "data" / "state")
        (raw / "data" / "state").mkdir()
        (raw / "data" / "state" / ".zgroup").write_text('{"zarr_format": 2}')
    src = tmp / "pusht.zarr.zip"
    zip_dir(raw, src)
    return (lambda out: import_diffusion_policy(src, out)), src, {
        "missing_key": "episode_ends", "wrong_shape": "episode_ends",
        "group_not_dataset": "state"}


def lafan(tmp, rng, case):
    d = tmp / "g1"
    d.mkdir()
    make_lafan_csv(d / "walk1_subject1.csv", rng)
    src = d / "dance1_subject2.csv"
    make_lafan_csv(src, rng)
    if case == "wrong_shape":
        make_lafan_csv(src, rng, n_joints=25)
    elif case in ("missing_key", "group_not_dataset"):  # a CSV has no keys: an empty clip
        src.write_text("")
    return (lambda out: import_lafan_g1(d, out)), src, {
        "missing_key": src.name, "wrong_shape": src.name, "group_not_dataset": src.name}


IMPORTERS = {"d4rl": d4rl, "robomimic": robomimic, "minari": minari, "libero": libero,
             "diffusion_policy": diffusion_policy, "lafan": lafan}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("importer", sorted(IMPORTERS))
def test_only_numbatraj_errors_naming_the_culprit(tmp_path, rng, importer, case):
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    run, src, keys = IMPORTERS[importer](src_dir, rng, case)
    if case == "truncated":
        # a CSV cut inside its last number still parses (as another number): cut there
        _cut(src, keep=(lambda n: n - 3) if importer == "lafan" else None)
    elif case == "not_format":
        _garbage(src)
    out = tmp_path / "out.h5"
    with pytest.raises(Exception) as ei:  # noqa: B017, PT011 - the type is what is checked
        run(out)
    exc = ei.value
    assert isinstance(exc, NumbatrajError), f"{type(exc).__name__} leaked: {exc}"
    assert isinstance(exc, (ValueError, OSError)), type(exc).__mro__  # a builtin base
    msg = str(exc)
    needle = keys.get(case, src.name)
    assert needle in msg, (needle, msg)
    if case in ("truncated", "not_format"):
        assert src.name in msg, msg
    assert not out.exists()
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
