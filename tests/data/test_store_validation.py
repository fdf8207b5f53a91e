"""Corrupted stores are refused on open and fully listed by validate_store; foreign files open."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap

import h5py
import hdf5plugin
import numpy as np
import pytest

from numbatraj import IntegrityError, NotAStoreError, TrajectoryStore, validate_store
from numbatraj.data.manifest import decode_manifest, encode_manifest
from tests.data.store_helpers import WALKER, write_store


def _digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture
def store(tmp_path, rng):
    path = tmp_path / "walker.h5"
    write_store(path, WALKER, [10, 20, 15], rng)
    return path


def _corrupt(path, fn) -> str:
    with h5py.File(path, "r+") as f:
        fn(f)
    return _digest(path)


def _expect_refused(path, needles):
    digest = _digest(path)
    with pytest.raises(IntegrityError) as info:
        TrajectoryStore(path)
    for needle in needles:
        assert needle in str(info.value), (needle, str(info.value))
    report = validate_store(path)
    assert not report.ok
    text = "\n".join(report.errors)
    for needle in needles:
        assert needle in text, (needle, text)
    assert _digest(path) == digest, "neither open nor validate may modify the file"
    return report


def test_wrong_offset(store):
    def fn(f):
        f["ep_offset"][1] = 11
    _corrupt(store, fn)
    _expect_refused(store, ["ep_offset[1] = 11, expected 10"])


def test_offsets_not_starting_at_zero(store):
    def fn(f):
        f["ep_offset"][:] = [1, 11, 31]
    _corrupt(store, fn)
    _expect_refused(store, ["ep_offset[0] = 1, expected 0"])


def test_short_column(store):
    def fn(f):
        f["action"].resize(44, axis=0)
    _corrupt(store, fn)
    _expect_refused(store, ["column 'action' has 44 rows, the store has 45"])


def test_manifest_names_missing_column(store):
    def fn(f):
        del f["reward"]
    _corrupt(store, fn)
    _expect_refused(store, ["manifest names column 'reward' but the file has no dataset 'reward'"])


def test_lengths_disagree_with_rows(store):
    def fn(f):
        f["ep_len"][2] = 14
    _corrupt(store, fn)
    _expect_refused(store, ["ep_len sums to 44 rows but the store has 45 rows"])


def test_every_violation_is_listed(store):
    def fn(f):
        f["ep_offset"][2] = 29
        f["action"].resize(40, axis=0)
        del f["done"]
        data = f["reward"][()].astype(np.int32)
        del f["reward"]
        f.create_dataset("reward", data=data, maxshape=(None,), chunks=(16,))
        m = decode_manifest(f["__manifest__"][()])
        m["column.reward.dtype"] = "int32"
        m["column.state.shape"] = "25"
        del f["__manifest__"]
        f.create_dataset("__manifest__", data=encode_manifest(m))

    _corrupt(store, fn)
    report = _expect_refused(
        store,
        [
            "ep_offset[2] = 29, expected 30",
            "column 'action' has 40 rows, the store has 45",
            "manifest names column 'done' but the file has no dataset 'done'",
            "reserved column 'reward' must be a float scalar",
            "column 'state': manifest row shape (25,), dataset rows (26,)",
        ],
    )
    assert len(report.errors) >= 5


def test_unreadable_chunk_is_reported(tmp_path, rng):
    from numbatraj import ColumnSpec

    path = tmp_path / "z.h5"
    cols = [ColumnSpec("img", np.uint8, (3, 16, 16), compression="gzip")]
    write_store(path, cols, [64], rng, chunk_rows={"img": 8})
    with h5py.File(path, "r") as f:
        info = f["img"].id.get_chunk_info(2)
    with open(path, "r+b") as fh:  # overwrite one compressed chunk with garbage
        fh.seek(info.byte_offset)
        fh.write(b"\xff" * min(64, info.size))
    with TrajectoryStore(path) as s:  # metadata is consistent, so open succeeds...
        assert s.n_rows == 64
    report = validate_store(path)  # ...but the full pass finds the bad chunk
    assert not report.ok
    assert any("column 'img' rows 16..23 (chunk 2) cannot be decoded" in e
               for e in report.errors), report.errors


def test_validate_ok_store(store):
    report = validate_store(store)
    assert report.ok and report.errors == [] and report.n_rows == 45 and report.n_episodes == 3


def test_not_a_store(tmp_path):
    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        f["obs"] = np.zeros((10, 3))
    with pytest.raises(NotAStoreError) as info:
        TrajectoryStore(path)
    msg = str(info.value)
    assert "no episode index" in msg and "importer" in msg and "obs" in msg
    report = validate_store(path)
    assert not report.ok and "no episode index" in report.errors[0]
    report = validate_store(tmp_path / "missing.h5")
    assert not report.ok and "no such file" in report.errors[0]


# ------------------------------------------------------------------ foreign files
def _write_pusht_like(path, lengths, rng):
    """A small file laid out like the PushT expert dataset (no numbatraj manifest)."""
    n = int(sum(lengths))
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    # compressible pixels (flat colour tiles): random bytes would make Blosc, an optional
    # filter, store the chunks raw and the plugin test would prove nothing
    tiles = rng.integers(0, 256, (n, 7, 7, 3), dtype=np.uint8)
    pixels = np.ascontiguousarray(np.repeat(np.repeat(tiles, 32, axis=1), 32, axis=2))
    action = rng.standard_normal((n, 2)).astype(np.float32)
    action[offsets + np.asarray(lengths) - 1] = np.nan  # last row of each episode
    cols = {
        "pixels": pixels,
        "action": action,
        "proprio": rng.standard_normal((n, 4)).astype(np.float32),
        "state": rng.standard_normal((n, 7)).astype(np.float32),
        "step_idx": np.concatenate([np.arange(k) for k in lengths]).astype(np.int64),
        "ep_idx": np.repeat(np.arange(len(lengths)), lengths).astype(np.int64),
    }
    with h5py.File(path, "w") as f:
        f.create_dataset("ep_len", data=np.asarray(lengths, np.int32))
        f.create_dataset("ep_offset", data=offsets)
        f.create_dataset(
            "pixels", data=pixels, chunks=(1, 224, 224, 3),
            **hdf5plugin.Blosc(cname="lz4", clevel=5, shuffle=hdf5plugin.Blosc.SHUFFLE),
        )
        for k, v in cols.items():
            if k != "pixels":
                f.create_dataset(k, data=v)
        f.create_dataset("notes", data=np.zeros(3))  # not a column: wrong leading axis
    return cols


def test_opens_pusht_layout(tmp_path, rng):
    path = tmp_path / "pusht_expert_train.h5"
    lengths = [5, 7, 4]
    cols = _write_pusht_like(path, lengths, rng)
    with TrajectoryStore(path) as s:
        st = s.storage("pixels")
        assert st["stored_bytes"] < st["nbytes"] / 10, "pixels really are Blosc-compressed"
        assert s.is_foreign and s.manifest == {}
        assert s.n_rows == 16 and s.n_episodes == 3
        assert s.episode_lengths.dtype == np.int64
        assert set(s.columns) == set(cols)
        assert s.columns["pixels"].shape == (224, 224, 3) and s.columns["pixels"].dtype == np.uint8
        assert s.storage("pixels")["compression"] == "blosc"
        for k, v in cols.items():
            np.testing.assert_array_equal(s.load_column(k), v)  # NaNs compare equal here
        ep = s.episode(1)
        assert np.isnan(ep["action"][-1]).all() and not np.isnan(ep["action"][:-1]).any()
        np.testing.assert_array_equal(ep["step_idx"], np.arange(7))
    report = validate_store(path)
    assert report.ok, report.errors
    assert report.foreign and any("notes" in w for w in report.warnings)


_OPEN_SCRIPT = """
import os, sys
assert "HDF5_PLUGIN_PATH" not in os.environ
assert "hdf5plugin" not in sys.modules
from numbatraj import TrajectoryStore
with TrajectoryStore(sys.argv[1]) as s:
    px = s.load_column("pixels")
print(int(px.astype("int64").sum()))
"""

_PLAIN_SCRIPT = """
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    f["pixels"][0]
"""


def test_blosc_file_decodes_in_fresh_process_without_plugin_path(tmp_path, rng):
    path = tmp_path / "pusht.h5"
    cols = _write_pusht_like(path, [3, 2], rng)
    env = {k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"}
    plain = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_PLAIN_SCRIPT), str(path)],
        env=env, capture_output=True, text=True,
    )
    if plain.returncode == 0:
        pytest.skip("this h5py decodes Blosc without hdf5plugin; the test could not tell")
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_OPEN_SCRIPT), str(path)],
        env=env, capture_output=True, text=True, check=False,
    )
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) == int(cols["pixels"].astype(np.int64).sum())


def test_foreign_file_with_lengths_only_and_bad_index(tmp_path):
    path = tmp_path / "lens.h5"
    with h5py.File(path, "w") as f:
        f["ep_len"] = np.array([2, 3], np.int64)
        f["obs"] = np.arange(10.0).reshape(5, 2)
    with TrajectoryStore(path) as s:
        np.testing.assert_array_equal(s.episode_offsets, [0, 2])
        np.testing.assert_array_equal(s.episode(1)["obs"], np.arange(4.0, 10.0).reshape(3, 2))
    bad = tmp_path / "bad.h5"
    with h5py.File(bad, "w") as f:
        f["ep_len"] = np.array([2, 3], np.int64)
        f["ep_offset"] = np.array([0, 3], np.int64)
        f["obs"] = np.zeros((5, 2))
    with pytest.raises(IntegrityError, match=r"ep_offset\[1\] = 3, expected 2"):
        TrajectoryStore(bad)
    nocols = tmp_path / "nocols.h5"
    with h5py.File(nocols, "w") as f:
        f["ep_len"] = np.array([2, 3], np.int64)
        f["obs"] = np.zeros((4, 2))
    with pytest.raises(IntegrityError, match="no dataset has 5 rows"):
        TrajectoryStore(nocols)
