"""Regression tests for review findings on the store (each failed before its fix)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from numbatraj import (
    ColumnSpec,
    IntegrityError,
    SchemaError,
    TrajectoryStore,
    TrajectoryStoreWriter,
    validate_store,
)


@pytest.mark.parametrize("text", ["a\u2028b", "x\x0cy", "p\x85q", "a\x0bb", "a\x1eb"])
def test_every_line_break_is_refused_in_manifest_text(tmp_path, text):
    with pytest.raises(SchemaError, match="line break"):
        TrajectoryStoreWriter(tmp_path / "s.h5", [ColumnSpec("x")], env_id=text)
    with pytest.raises(SchemaError, match="line break"):
        TrajectoryStoreWriter(tmp_path / "s.h5", [ColumnSpec("x")], attrs={"note": text})
    with pytest.raises(SchemaError, match="line break"):
        ColumnSpec("c" + text)
    assert list(tmp_path.iterdir()) == []


def test_manifest_decoding_splits_on_newline_only(tmp_path):
    from numbatraj.data.manifest import decode_manifest, encode_manifest

    raw = encode_manifest({"a": "1", "b": "x\u2028y"})  # a value written by another tool
    assert decode_manifest(raw) == {"a": "1", "b": "x\u2028y"}


def test_overflowing_episode_lengths_are_refused(tmp_path):
    path = tmp_path / "huge.h5"
    with h5py.File(path, "w") as f:
        f["ep_len"] = np.array([2**62] * 4 + [3], np.int64)  # wraps to 3 in int64
        f["x"] = np.zeros((3, 2))
    with pytest.raises(IntegrityError, match="beyond the int64 row index"):
        TrajectoryStore(path)
    report = validate_store(path)
    assert not report.ok and any("beyond the int64" in e for e in report.errors)


def test_length_larger_than_the_store_is_named(tmp_path):
    path = tmp_path / "long.h5"
    with h5py.File(path, "w") as f:
        f["ep_len"] = np.array([5, -2], np.int64)  # sums to 3 = rows, but is nonsense
        f["ep_offset"] = np.array([0, 5], np.int64)
        f["x"] = np.zeros((3, 2))
    with pytest.raises(IntegrityError) as info:
        TrajectoryStore(path)
    assert "ep_len[0] = 5 exceeds the store's 3 rows" in str(info.value)
    assert "ep_len[1] = -2" in str(info.value)


def test_scalar_episode_index_is_a_clear_problem(tmp_path):
    path = tmp_path / "scalar.h5"
    with h5py.File(path, "w") as f:
        f["ep_len"] = np.int64(3)
        f["x"] = np.zeros((3, 2))
    with pytest.raises(IntegrityError, match="must be 1-D"):
        TrajectoryStore(path)
    report = validate_store(path)
    assert any("must be 1-D" in e for e in report.errors), report.errors


def test_destination_appearing_while_writing_keeps_the_finished_store(tmp_path):
    path = tmp_path / "s.h5"
    with pytest.raises(FileExistsError, match="finished file is left at"):
        with TrajectoryStoreWriter(path, [ColumnSpec("x", np.int32)]) as w:
            w.append("x", np.arange(4, dtype=np.int32))
            w.end_episode()
            path.write_bytes(b"someone else's file")
    assert path.read_bytes() == b"someone else's file"  # never clobbered
    with TrajectoryStore(w.tmp_path) as s:  # and nothing was lost
        np.testing.assert_array_equal(s.load_column("x"), np.arange(4))


def test_append_rows_io_error_leaves_columns_in_step(tmp_path, monkeypatch):
    path = tmp_path / "s.h5"
    cols = [ColumnSpec("x", np.int32), ColumnSpec("y", np.int32)]
    with TrajectoryStoreWriter(path, cols) as w:
        real = w._ds["y"].write_direct

        def failing(*args, **kwargs):
            raise OSError("disk full")

        monkeypatch.setattr(w._ds["y"], "write_direct", failing)
        with pytest.raises(OSError, match="disk full"):
            w.append_rows({"x": np.arange(3, dtype=np.int32), "y": np.arange(3, dtype=np.int32)})
        assert w._counts == {"x": 0, "y": 0} and w._ds["x"].shape[0] == 0
        monkeypatch.setattr(w._ds["y"], "write_direct", real)
        w.append_rows({"x": np.arange(2, dtype=np.int32), "y": np.arange(2, dtype=np.int32)})
        w.end_episode()
    with TrajectoryStore(path) as s:
        np.testing.assert_array_equal(s.load_column("x"), [0, 1])


def test_zero_chunk_rows_refused(tmp_path):
    with pytest.raises(SchemaError, match=r"chunk_rows\['x'\] = 0, expected >= 1"):
        TrajectoryStoreWriter(tmp_path / "s.h5", [ColumnSpec("x")], chunk_rows={"x": 0})
    assert list(tmp_path.iterdir()) == []
