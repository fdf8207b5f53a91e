"""The .demo format: round trips, atomic finalisation, truncated and foreign files refused."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from numbatraj.errors import IntegrityError, SchemaError
from numbatraj.io.atomic import is_temp_name
from numbatraj.replay import DemoFile, DemoWriter, StoreReplay
from numbatraj.replay.demo_file import DEMO_MAGIC
from tests.replay.helpers import row_ids, rows, sac_columns


def _write(path, n=9):
    with DemoWriter(path, sac_columns()) as w:
        w.append(**{k: v[0] for k, v in rows(0, 1).items()})  # one row, flag defaults False
        w.append(**rows(1, n - 1), intervention=np.arange(1, n) % 2 == 0)
        assert not os.path.exists(path)  # nothing under the final name before close
    return rows(0, n)


def test_round_trip_and_memory_map(tmp_path):
    path = tmp_path / "teleop.demo"
    expected = _write(path)
    f = DemoFile(path)
    assert len(f) == 9 and list(f.columns) == [*expected, "intervention"]
    for k, v in expected.items():
        np.testing.assert_array_equal(f.column(k), v)
    assert f.intervention.tolist() == [False] + [(i % 2 == 0) for i in range(1, 9)]
    assert isinstance(f.column("obs").base, np.memmap) or isinstance(f.column("obs"), np.memmap)
    with open(path, "rb") as fh:
        head = fh.read(64)
    magic, version, jlen, n, rec, _crc = struct.unpack("<8sIIQQI28x", head)
    assert magic == DEMO_MAGIC and version == 2 and n == 9 and rec == 3 * 4 + 2 * 4 + 4 + 3 * 4 + 1 + 1
    assert os.path.getsize(path) % 1 == 0 and (os.path.getsize(path) - 9 * rec) % 64 == 0


def test_loads_as_pinned_demo_prefix(tmp_path):
    path = tmp_path / "d.demo"
    _write(path, n=5)
    rep = StoreReplay(sac_columns(), 12, demo_capacity=6)
    assert rep.load_demos(path) == 5
    rep.add(**rows(100, 30))
    assert row_ids(rep.rows(np.arange(5))).tolist() == [0, 1, 2, 3, 4]
    small = StoreReplay(sac_columns(), 12, demo_capacity=4)
    with pytest.raises(SchemaError, match="do not fit"):
        small.load_demos(path)
    other = StoreReplay(sac_columns(obs=4), 12, demo_capacity=6)
    with pytest.raises(SchemaError, match="'obs' rows have shape"):
        other.load_demos(path)


def test_truncated_extended_foreign_and_corrupt_files_refused(tmp_path):
    path = tmp_path / "d.demo"
    _write(path)
    data = path.read_bytes()
    cases = {
        "truncated": (data[:-5], "truncated: .* bytes, expected"),
        "header-only": (data[:40], "not a .demo file"),
        "extended": (data + b"\0" * 7, "longer than its header says"),
        "foreign": (b"PK\x03\x04" + data[4:], "not a .demo file"),
        "version": (data[:8] + struct.pack("<I", 99) + data[12:], "version 99"),
        "json": (data[:64] + b"[" + data[65:], "header fails its CRC-32"),
        # the case: <f4 edited to <i4 reinterpreted the values silently
        "dtype-edit": (data.replace(b'"<f4"', b'"<i4"', 1), "header fails its CRC-32"),
        "crc": (data[:-1] + bytes([data[-1] ^ 1]), "CRC-32"),
    }
    for name, (blob, match) in cases.items():
        bad = tmp_path / f"{name}.demo"
        bad.write_bytes(blob)
        with pytest.raises(IntegrityError, match=match):
            DemoFile(bad)
    assert b'"<f4"' in data
    empty = tmp_path / "empty.demo"
    empty.write_bytes(b"")
    with pytest.raises(IntegrityError, match="not a .demo file"):
        DemoFile(empty)


def test_writer_checks_and_abort(tmp_path):
    path = tmp_path / "w.demo"
    with pytest.raises(RuntimeError, match="boom"):
        with DemoWriter(path, sac_columns()) as w:
            w.append(**rows(0, 3))
            raise RuntimeError("boom")
    assert not path.exists() and not any(is_temp_name(p) for p in os.listdir(tmp_path))
    w = DemoWriter(path, sac_columns())
    with pytest.raises(SchemaError, match="'obs' is float32, got float64"):
        w.append(**{**rows(0, 2), "obs": np.zeros((2, 3))})
    with pytest.raises(SchemaError, match="'intervention' has 3 rows"):
        w.append(**rows(0, 2), intervention=np.zeros(3, bool))
    w.close()
    assert DemoFile(path).n_rows == 0
    with pytest.raises(FileExistsError):
        DemoWriter(path, sac_columns())
    from numbatraj.data import ColumnSpec

    with pytest.raises(SchemaError, match="must be bool"):
        DemoWriter(tmp_path / "x.demo", [ColumnSpec("intervention", np.uint8, ())])


def test_demo_writer_exit_aborts_when_close_fails(tmp_path, monkeypatch):
    path = tmp_path / "x.demo"

    def broken_fsync(fd):
        raise OSError(5, "fsync failed")

    with pytest.raises(OSError, match="fsync failed"):
        with DemoWriter(path, sac_columns()) as w:
            w.append(**rows(0, 3))
            monkeypatch.setattr(os, "fsync", broken_fsync)
    assert not path.exists() and not any(is_temp_name(p) for p in os.listdir(tmp_path))


@pytest.mark.parametrize("links", [True, False])
def test_demo_writer_does_not_clobber_a_file_that_appeared(tmp_path, monkeypatch, links):
    if not links:  # a file system without hard links: check, then rename

        def no_link(src, dst):
            raise OSError(1, "links not supported")

        monkeypatch.setattr(os, "link", no_link)
    path = tmp_path / "x.demo"
    with pytest.raises(FileExistsError) as info:
        with DemoWriter(path, sac_columns()) as w:
            w.append(**rows(0, 3))
            path.write_bytes(b"someone else's")
    tmp = w.tmp_path
    assert is_temp_name(tmp) and os.path.dirname(tmp) == str(tmp_path)
    assert repr(str(path)) in str(info.value) and repr(tmp) in str(info.value)
    assert path.read_bytes() == b"someone else's"
    assert DemoFile(tmp).n_rows == 3  # the finished file is kept, not deleted
    with DemoWriter(tmp_path / "y.demo", sac_columns()) as w:  # the normal case still works
        w.append(**rows(0, 2))
    assert DemoFile(tmp_path / "y.demo").n_rows == 2
    assert [p for p in os.listdir(tmp_path) if is_temp_name(p)] == [os.path.basename(tmp)]
