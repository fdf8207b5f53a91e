"""The generic transport under the LeRobot importer: Parquet, video cursor, resize, disk
space."""

from __future__ import annotations

import ast
import os
from collections import namedtuple
from fractions import Fraction

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from numbatraj.errors import DiskSpaceError, IntegrityError, SchemaError
from numbatraj.io import diskspace
from numbatraj.io.parquet import column_to_numpy, parquet_num_rows, read_parquet, table_to_numpy
from numbatraj.io.video import FrameCursor, probe_video, resize_rgb

# ----------------------------------------------------------------- parquet


def test_list_columns_become_2d(tmp_path):
    flat = pa.array(np.arange(12, dtype=np.float32))
    fixed = pa.FixedSizeListArray.from_arrays(flat, 3)
    var = pa.ListArray.from_arrays(pa.array([0, 3, 6, 9, 12], pa.int32()), flat)
    for arr in (fixed, var, pa.chunked_array([var.slice(0, 2), var.slice(2)])):
        out = column_to_numpy(arr, dtype=np.float32)
        np.testing.assert_array_equal(out, np.arange(12, dtype=np.float32).reshape(4, 3))
    np.testing.assert_array_equal(column_to_numpy(pa.array([3, 1, 2]), dtype=np.int32), [3, 1, 2])


def test_ragged_null_and_text_columns_refused():
    ragged = pa.ListArray.from_arrays(pa.array([0, 2, 5], pa.int32()), pa.array([1.0] * 5))
    with pytest.raises(SchemaError, match="different lengths"):
        column_to_numpy(ragged, where="'action' in x")
    with pytest.raises(SchemaError, match="1 null"):
        column_to_numpy(pa.array([1.0, None]))
    with pytest.raises(SchemaError, match="expected numbers"):
        column_to_numpy(pa.array(["a", "b"]), dtype=np.float32)


def test_read_parquet_errors_name_the_file(tmp_path):
    path = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({"a": [1, 2, 3], "b": [1.0, 2.0, 3.0]}), path)
    assert parquet_num_rows(path) == 3
    cols = table_to_numpy(read_parquet(path, ["a"]), {"a": np.int64})
    np.testing.assert_array_equal(cols["a"], [1, 2, 3])
    with pytest.raises(SchemaError, match=r"no column\(s\) \['c'\].*\['a', 'b'\]"):
        read_parquet(path, ["c"])
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        read_parquet(str(tmp_path / "nope.parquet"))
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 this is not parquet")
    for fn in (parquet_num_rows, read_parquet):
        with pytest.raises(IntegrityError, match="bad.parquet.*not a readable Parquet"):
            fn(str(bad))


# ----------------------------------------------------------------- video


def _video(path, values, pts=None, codec="libx264", size=(16, 12), fps=10):
    with av.open(str(path), "w") as c:
        s = c.add_stream(codec, rate=fps)
        s.width, s.height, s.pix_fmt = size[0], size[1], "yuv420p"
        s.time_base = Fraction(1, fps)
        for k, v in zip(pts if pts is not None else range(len(values)), values):
            f = av.VideoFrame.from_ndarray(np.full((size[1], size[0], 3), v, np.uint8), "rgb24")
            f.pts, f.time_base = k, Fraction(1, fps)
            for p in s.encode(f):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return str(path)


def _grey(frame):
    return int(round(frame.to_ndarray(format="rgb24").mean()))


@pytest.mark.parametrize("codec", ["libx264", "libsvtav1"])
def test_cursor_reads_forward_by_frame_number(tmp_path, codec):
    os.environ.setdefault("SVT_LOG", "1")
    values = [10 * k for k in range(12)]
    # SVT-AV1 in av 15.x wheels dies of SIGFPE (16.x, 17.x: hangs) on a frame 24 pixels wide
    # or narrower when it runs more than one thread; 25 and wider encode (measured, any height)
    size = (32, 24) if codec == "libsvtav1" else (16, 12)
    path = _video(tmp_path / "v.mp4", values, codec=codec, size=size)
    info = probe_video(path)
    assert (info.width, info.height, info.n_frames, info.rate) == (*size, 12, 10.0)
    with FrameCursor(path, 10) as cur:
        assert abs(_grey(cur.frame(2)) - 20) <= 3
        assert abs(_grey(cur.frame(2)) - 20) <= 3  # same frame again is fine
        assert abs(_grey(cur.frame(7)) - 70) <= 3
        assert cur.position == 7
        with pytest.raises(ValueError, match="behind the cursor"):
            cur.frame(3)
        with pytest.raises(IntegrityError, match="ends before frame 12"):
            cur.frame(12)


def test_cursor_reports_a_gap(tmp_path):
    path = _video(tmp_path / "g.mp4", [0, 40, 80, 160], pts=[0, 1, 2, 4])
    with FrameCursor(path, 10) as cur:
        cur.frame(2)
        with pytest.raises(IntegrityError, match="has no frame 3.*next frame is 4"):
            cur.frame(3)


def test_cursor_open_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.mp4"):
        FrameCursor(tmp_path / "missing.mp4", 30)
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"\x00" * 100)
    with pytest.raises(IntegrityError, match="junk.mp4"):
        probe_video(junk)
    with pytest.raises(ValueError, match="rate"):
        FrameCursor(_video(tmp_path / "v.mp4", [0]), 0)


def test_resize_matches_pillow_bilinear_and_skips_same_size():
    rng = np.random.default_rng(3)
    img = rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)
    assert resize_rgb(img, 24, 32) is img
    got = resize_rgb(img, 30, 40)
    ref = np.asarray(Image.fromarray(img).resize((40, 30), Image.BILINEAR))
    np.testing.assert_array_equal(got, ref)
    assert got.shape == (30, 40, 3) and got.dtype == np.uint8
    # not nearest-neighbour: a downscale mixes neighbours
    assert not np.array_equal(resize_rgb(img, 12, 16), img[::2, ::2])


# ----------------------------------------------------------------- disk space


def test_require_free_space(tmp_path, monkeypatch):
    Usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr(diskspace.shutil, "disk_usage", lambda p: Usage(100, 0, 1_000_000))
    target = tmp_path / "not" / "yet" / "there.h5"
    assert diskspace.require_free_space(target, 900_000) == 1_000_000
    with pytest.raises(DiskSpaceError, match=r"there\.h5.*976\.6 KiB free") as info:
        diskspace.require_free_space(target, 990_000, what=f"the store {str(target)!r}")
    assert isinstance(info.value, OSError)
    assert diskspace.free_bytes(target) == 1_000_000
    assert diskspace.format_bytes(3 << 30) == "3.0 GiB" and diskspace.format_bytes(12) == "12 B"


# ----------------------------------------------------------------- layering


def test_io_modules_know_nothing_of_the_store():
    root = os.path.join(os.path.dirname(__file__), "..", "..", "numbatraj", "io")
    for name in ("parquet.py", "video.py", "diskspace.py"):
        tree = ast.parse(open(os.path.join(root, name)).read())
        mods = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        mods += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        assert not [
            m for m in mods
            if m and m.startswith(("numbatraj.data", "numbatraj.importers", "numbatraj.lerobot"))
        ], name
