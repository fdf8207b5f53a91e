"""Every writer/reader error names its culprit, and the file on disk is unchanged or absent."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import h5py
import numpy as np
import pytest

from numbatraj import (
    ColumnSpec,
    EpisodeError,
    IntegrityError,
    NumbatrajError,
    RowIndexError,
    SchemaError,
    TrajectoryStore,
    TrajectoryStoreWriter,
    validate_store,
)
from tests.data.store_helpers import WALKER, write_store


def _digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _tmp_files(d) -> list[str]:
    return sorted(p for p in os.listdir(d) if p.endswith(".tmp"))


# ------------------------------------------------------------------ declarations
@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"name": "a/b"}, "'a/b' contains '/'"),
        ({"name": "ep_len"}, "'ep_len' clashes"),
        ({"name": "ep_offset"}, "'ep_offset' clashes"),
        ({"name": "__manifest__"}, "'__manifest__' clashes"),
        ({"name": "__secret"}, "'__secret' clashes"),
        ({"name": ""}, "non-empty"),
        ({"name": "x", "dtype": "U4"}, "dtype <U4 is not supported"),
        ({"name": "x", "dtype": object}, "dtype object is not supported"),
        ({"name": "x", "shape": (3, 0)}, "non-positive extent"),
        ({"name": "x", "compression": "snappy"}, "compression 'snappy' is not one of"),
        ({"name": "reward", "dtype": np.int32}, "'reward' must be a float scalar"),
        ({"name": "reward", "dtype": np.float32, "shape": (2,)}, "'reward' must be a float scalar"),
        ({"name": "done", "dtype": np.float32}, "'done' must be a bool-like scalar"),
        ({"name": "truncated", "dtype": np.bool_, "shape": (1,)}, "'truncated' must be a bool-like"),
        ({"name": "action", "dtype": np.bool_}, "'action' must be numeric"),
    ],
)
def test_bad_column_declarations(kwargs, needle):
    with pytest.raises(SchemaError, match=None) as info:
        ColumnSpec(**kwargs)
    assert needle in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, NumbatrajError)


def test_reserved_columns_accept_their_usual_types():
    ColumnSpec("reward", np.float64)
    ColumnSpec("done", np.uint8)
    ColumnSpec("truncated", np.int8)
    ColumnSpec("action", np.int64)  # discrete actions


def test_duplicate_and_empty_column_sets(tmp_path):
    with pytest.raises(SchemaError, match="'x' is declared twice"):
        TrajectoryStoreWriter(tmp_path / "d.h5", [ColumnSpec("x"), ColumnSpec("x")])
    with pytest.raises(SchemaError, match="at least one column"):
        TrajectoryStoreWriter(tmp_path / "d.h5", [])
    assert os.listdir(tmp_path) == []


def test_bad_attrs_refused(tmp_path):
    with pytest.raises(SchemaError, match="attrs\\['note'\\] value 'a\\\\nb' contains a line break"):
        TrajectoryStoreWriter(tmp_path / "a.h5", WALKER, attrs={"note": "a\nb"})
    with pytest.raises(SchemaError, match="without '='"):
        TrajectoryStoreWriter(tmp_path / "a.h5", WALKER, attrs={"a=b": 1})
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------ appends
def test_dtype_mismatch_names_column_and_dtypes_and_writes_nothing(tmp_path, rng):
    path = tmp_path / "s.h5"
    good = rng.standard_normal((10, 26)).astype(np.float32)
    with TrajectoryStoreWriter(path, WALKER[:1]) as w:
        w.append("state", good)
        with pytest.raises(SchemaError) as info:
            w.append("state", np.zeros((5, 26), np.float64))
        msg = str(info.value)
        assert "'state'" in msg and "float32" in msg and "float64" in msg
        w.end_episode()
    with TrajectoryStore(path) as s:
        assert s.n_rows == 10
        np.testing.assert_array_equal(s.load_column("state"), good)


def test_byte_order_mismatch_is_named(tmp_path):
    with TrajectoryStoreWriter(tmp_path / "s.h5", [ColumnSpec("x", np.float32)]) as w:
        with pytest.raises(SchemaError, match="'x' is <f4, append got >f4"):
            w.append("x", np.zeros(3, ">f4"))
        w.abort()


def test_shape_mismatch_and_unknown_column(tmp_path, rng):
    with TrajectoryStoreWriter(tmp_path / "s.h5", WALKER) as w:
        with pytest.raises(SchemaError, match=r"'state' rows have shape \(26,\).*\(5, 25\).*\(n, 26\)"):
            w.append("state", np.zeros((5, 25), np.float32))
        with pytest.raises(SchemaError, match=r"'state'.*shape \(26,\)"):
            w.append("state", np.zeros(26, np.float32))  # a single row without its leading axis
        with pytest.raises(SchemaError, match=r"'reward' rows have shape \(\).*\(n,\)"):
            w.append("reward", np.zeros((5, 1), np.float32))
        with pytest.raises(SchemaError, match="'qpos' is not declared; declared columns: state, action"):
            w.append("qpos", np.zeros((5, 26), np.float32))
        with pytest.raises(SchemaError, match="'reward' is float32, append got float64"):
            w.append_rows({"state": np.zeros((2, 26), np.float32), "reward": np.zeros(2)})
        assert w._counts["state"] == 0, "append_rows checks every column before writing any"
        w.abort()
    assert os.listdir(tmp_path) == []


def test_columns_out_of_step(tmp_path, rng):
    path = tmp_path / "s.h5"
    w = TrajectoryStoreWriter(path, WALKER)
    w.append("state", np.zeros((10, 26), np.float32))
    w.append("action", np.zeros((9, 6), np.float32))
    with pytest.raises(EpisodeError) as info:
        w.end_episode()
    msg = str(info.value)
    assert "not in step" in msg and "state=10" in msg and "action=9" in msg and "reward=0" in msg
    with pytest.raises(EpisodeError, match="state=10, action=9"):
        w.close()
    assert not path.exists()
    w.abort()
    assert os.listdir(tmp_path) == []


def test_zero_length_episode_refused(tmp_path):
    w = TrajectoryStoreWriter(tmp_path / "s.h5", [ColumnSpec("x", np.int32)])
    with pytest.raises(EpisodeError, match="zero-length episode"):
        w.end_episode()
    w.append("x", np.arange(3, dtype=np.int32))
    w.end_episode()
    with pytest.raises(EpisodeError, match="zero-length episode.*row 3"):
        w.end_episode()
    w.abort()


def test_close_with_rows_after_last_episode_raises_and_stays_open(tmp_path):
    path = tmp_path / "s.h5"
    w = TrajectoryStoreWriter(path, [ColumnSpec("x", np.int32)])
    w.append("x", np.arange(3, dtype=np.int32))
    w.end_episode()
    w.append("x", np.arange(2, dtype=np.int32))
    with pytest.raises(EpisodeError, match=r"2 row\(s\) after the last end_episode\(\) \(rows 3..4\)"):
        w.close()
    assert not path.exists() and not w.closed
    w.end_episode()  # the caller decides; nothing was guessed
    w.close()
    with TrajectoryStore(path) as s:
        np.testing.assert_array_equal(s.episode_lengths, [3, 2])


def test_context_manager_with_trailing_rows_leaves_nothing(tmp_path):
    path = tmp_path / "s.h5"
    with pytest.raises(EpisodeError):
        with TrajectoryStoreWriter(path, [ColumnSpec("x", np.int32)]) as w:
            w.append("x", np.arange(3, dtype=np.int32))
    assert os.listdir(tmp_path) == []


def test_append_after_close(tmp_path):
    w = TrajectoryStoreWriter(tmp_path / "s.h5", [ColumnSpec("x", np.int32)])
    w.close()
    with pytest.raises(NumbatrajError, match="closed"):
        w.append("x", np.arange(3, dtype=np.int32))


# ------------------------------------------------------------------ atomicity
def test_existing_file_refused_without_overwrite(tmp_path, rng):
    path = tmp_path / "s.h5"
    write_store(path, WALKER, [5], rng)
    before = _digest(path)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        TrajectoryStoreWriter(path, WALKER)
    assert _digest(path) == before and _tmp_files(tmp_path) == []


def test_exception_inside_with_leaves_no_file(tmp_path, rng):
    path = tmp_path / "s.h5"
    with pytest.raises(RuntimeError, match="boom"):
        with TrajectoryStoreWriter(path, WALKER[:1]) as w:
            w.append("state", np.zeros((10, 26), np.float32))
            w.end_episode()
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_overwrite_replaces_only_on_successful_close(tmp_path, rng):
    path = tmp_path / "s.h5"
    write_store(path, WALKER, [5], rng)
    before = _digest(path)
    with pytest.raises(RuntimeError):
        with TrajectoryStoreWriter(path, WALKER[:1], overwrite=True) as w:
            w.append("state", np.zeros((10, 26), np.float32))
            w.end_episode()
            assert _digest(path) == before  # untouched while writing
            raise RuntimeError("crash")
    assert _digest(path) == before and _tmp_files(tmp_path) == []
    with TrajectoryStoreWriter(path, WALKER[:1], overwrite=True) as w:
        w.append("state", np.ones((4, 26), np.float32))
        w.end_episode()
    with TrajectoryStore(path) as s:
        assert s.n_rows == 4 and list(s.columns) == ["state"]


def test_killed_process_leaves_no_file(tmp_path):
    path = tmp_path / "killed.h5"
    script = textwrap.dedent(
        f"""
        import numpy as np, sys
        from numbatraj import ColumnSpec, TrajectoryStoreWriter
        w = TrajectoryStoreWriter({str(path)!r}, [ColumnSpec("x", np.float32, (64,))])
        block = np.zeros((1024, 64), np.float32)
        n = 0
        while True:
            w.append("x", block)
            n += 1
            if n == 3:
                print("writing", flush=True)
            if n % 8 == 0:
                w.end_episode()
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "writing"
        time.sleep(0.2)
        assert any(p.startswith("killed.h5.") and p.endswith(".tmp")
                   for p in os.listdir(tmp_path)), "the writer works on a temporary name"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert not path.exists(), "a killed writer must not leave a file that looks finished"


# ------------------------------------------------------------------ reader bounds
def test_reader_bounds_and_unknown_names(tmp_path, rng):
    path = tmp_path / "s.h5"
    write_store(path, WALKER, [10, 20], rng)
    with TrajectoryStore(path) as s:
        with pytest.raises(RowIndexError, match=r"read_range\('state', 25, 31\).*\[0, 30\]"):
            s.read_range("state", 25, 31)
        with pytest.raises(RowIndexError):
            s.read_range("state", -1, 3)
        with pytest.raises(RowIndexError):
            s.read_range("state", 5, 4)
        with pytest.raises(IndexError, match="episode 2 is out of range; the store has 2"):
            s.episode(2)
        with pytest.raises(SchemaError, match="no column 'qpos'; columns: state, action, reward, done"):
            s.load_column("qpos")
        with pytest.raises(SchemaError, match=r"out is float64 \(5, 26\), expected float32 \(5, 26\)"):
            s.read_range("state", 0, 5, out=np.zeros((5, 26)))
        with pytest.raises(SchemaError, match="C-contiguous"):
            s.read_range("state", 0, 5, out=np.zeros((26, 5), np.float32).T)
    with pytest.raises(FileNotFoundError, match="no such file"):
        TrajectoryStore(tmp_path / "missing.h5")
    (tmp_path / "junk.h5").write_bytes(b"not hdf5 at all")
    with pytest.raises(OSError, match="not a readable HDF5 file"):
        TrajectoryStore(tmp_path / "junk.h5")


# ------------------------------------------------------------------ manifest text, episode index, destination races
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


def test_io_error_kills_the_writer_and_publishes_nothing(tmp_path, monkeypatch):
    from numbatraj.errors import WriteFailedError

    path = tmp_path / "s.h5"
    path.write_bytes(b"previous")
    cols = [ColumnSpec("x", np.int32), ColumnSpec("y", np.int32)]
    w = TrajectoryStoreWriter(path, cols, overwrite=True)

    def failing(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(w._ds["y"], "write_direct", failing)
    with pytest.raises(WriteFailedError, match="column 'y'.*No space left") as info:
        w.append_rows({"x": np.arange(3, dtype=np.int32), "y": np.arange(3, dtype=np.int32)})
    assert info.value.errno == 28 and isinstance(info.value, OSError)
    with pytest.raises(WriteFailedError, match="failed earlier"):
        w.append("x", np.arange(2, dtype=np.int32))
    with pytest.raises(WriteFailedError):
        w.close()
    assert path.read_bytes() == b"previous"  # the previous file is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.h5"]  # temporary and lock gone


def test_zero_chunk_rows_refused(tmp_path):
    with pytest.raises(SchemaError, match=r"chunk_rows\['x'\] = 0, expected >= 1"):
        TrajectoryStoreWriter(tmp_path / "s.h5", [ColumnSpec("x")], chunk_rows={"x": 0})
    assert list(tmp_path.iterdir()) == []
