"""The store's read paths: raw chunk reads (pread) against HDF5's own reads and the data."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

from numbatraj import ColumnSpec, RowIndexError, SchemaError, TrajectoryStore
from numbatraj.io.hdf5 import raw_row_chunks
from tests.data.store_helpers import write_store

COLS = [
    ColumnSpec("state", np.float32, (26,)),
    ColumnSpec("reward", np.float32),
    ColumnSpec("done", np.bool_),
    ColumnSpec("pix", np.uint8, (3, 5, 7)),
    ColumnSpec("odd", np.int16, (3,)),
    ColumnSpec("zpix", np.uint8, (3, 5, 7), compression="gzip"),
]
CHUNKS = {"state": 7, "reward": 16, "done": 5, "pix": 3, "odd": 1, "zpix": 4}


@pytest.fixture
def store(tmp_path, rng):
    path = tmp_path / "r.h5"
    expected = write_store(path, COLS, [50, 1, 77, 13], rng, append_rows=9, chunk_rows=CHUNKS)
    with TrajectoryStore(path) as s:
        yield s, expected


def test_which_columns_take_the_raw_path(store):
    s, _ = store
    for c in COLS:
        _, raw = s._reader(c.name)
        assert (raw is not None) == (c.compression is None), c.name
        if raw is not None:
            assert raw.chunk_rows == CHUNKS[c.name] and raw.n_rows == s.n_rows


def test_read_range_matches_the_data_on_every_boundary(store):
    s, expected = store
    n = s.n_rows
    for c in COLS:
        cr = CHUNKS[c.name]
        cuts = sorted({0, 1, cr - 1, cr, cr + 1, 2 * cr, n // 2, n - cr, n - 1, n} & set(range(n + 1)))
        for a in cuts:
            for b in cuts:
                if a <= b:
                    got = s.read_range(c.name, a, b)
                    assert got.shape == (b - a, *c.shape)
                    assert got.tobytes() == expected[c.name][a:b].tobytes(), (c.name, a, b)


def test_out_buffers_and_load_column(store):
    s, expected = store
    for c in COLS:
        out = np.full((10, *c.shape), 3, c.dtype)
        assert s.read_range(c.name, 5, 15, out=out) is out
        assert np.array_equal(out, expected[c.name][5:15])
        full = np.empty((s.n_rows, *c.shape), c.dtype)
        assert s.load_column(c.name, out=full) is full
        assert np.array_equal(full, expected[c.name])
        assert np.array_equal(s.load_column(c.name), expected[c.name])
    ep = s.episode(2)
    assert np.array_equal(ep["state"], expected["state"][51:128])


def test_read_errors(store):
    s, _ = store
    with pytest.raises(RowIndexError, match=r"outside the store's rows \[0, 141\]"):
        s.read_range("state", 5, 142)
    with pytest.raises(RowIndexError):
        s.read_range("state", -1, 3)
    with pytest.raises(SchemaError, match=r"out is float64 \(3, 26\), expected float32 \(3, 26\)"):
        s.read_range("state", 0, 3, out=np.empty((3, 26), np.float64))
    with pytest.raises(SchemaError, match="C-contiguous, writeable"):
        s.read_range("state", 0, 3, out=np.empty((26, 3), np.float32).T)
    ro = np.empty((141, 26), np.float32)
    ro.flags.writeable = False
    with pytest.raises(SchemaError, match="writeable"):
        s.load_column("state", out=ro)
    with pytest.raises(SchemaError, match=r"expected float32 \(141, 26\)"):
        s.load_column("state", out=np.empty((140, 26), np.float32))
    with pytest.raises(SchemaError, match="no column 'nope'"):
        s.read_range("nope", 0, 1)


def test_closed_store_refuses_reads(store):
    s, _ = store
    s.read_range("state", 0, 3)
    s.close()
    with pytest.raises(ValueError, match="closed"):
        s.read_range("state", 0, 3)


def test_raw_map_refuses_what_it_cannot_read(tmp_path):
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("contig", data=np.zeros((10, 2), np.float32))
        f.create_dataset("colchunk", data=np.zeros((10, 4), np.float32), chunks=(5, 2))
        f.create_dataset("big", data=np.zeros((10, 2), ">f4"), chunks=(5, 2))
        f.create_dataset("sparse", shape=(10, 2), dtype=np.float32, chunks=(5, 2))
        f.create_dataset("fletcher", data=np.zeros((10, 2), np.float32), chunks=(5, 2),
                         fletcher32=True)
        f.create_dataset("ok", data=np.ones((10, 2), np.float32), chunks=(4, 2))
    with h5py.File(path, "r") as f:
        f32 = np.dtype(np.float32)
        assert raw_row_chunks(f["contig"], f32) is None
        assert raw_row_chunks(f["colchunk"], f32) is None
        assert raw_row_chunks(f["big"], f32) is None
        assert raw_row_chunks(f["sparse"], f32) is None  # chunks never written
        assert raw_row_chunks(f["fletcher"], f32) is None
        raw = raw_row_chunks(f["ok"], f32)
        assert raw is not None and raw.offsets.shape == (3,)
        out = np.zeros((10, 2), np.float32)
        raw.read_into(f.id.get_vfd_handle(), 0, 10, out)
        assert np.all(out == 1)


def test_a_store_truncated_in_place_after_open_raises_integrity_error(tmp_path, rng):
    """The raw path copies from a mapping of the file: a file cut short under an open store
    is an IntegrityError naming the column and rows (never a SIGBUS), and the rows the file
    still holds read as before."""
    from numbatraj import IntegrityError

    path = tmp_path / "t.h5"
    expected = write_store(path, COLS[:1], [400], rng, append_rows=64, chunk_rows={"state": 16})
    with TrajectoryStore(path) as s:
        np.testing.assert_array_equal(s.load_column("state"), expected["state"])
        ds, raw = s._reader("state")
        assert raw is not None
        cut = int(raw.offsets.max())  # the chunk stored last loses its bytes
        last = int(np.argmax(raw.offsets))
        os.truncate(path, cut + 8)
        with pytest.raises(IntegrityError, match="'state' rows .* truncated"):
            s.load_column("state")
        lo = 16 * last
        with pytest.raises(IntegrityError, match="truncated"):
            s.read_range("state", lo, lo + 1)
        first = int(np.argmin(raw.offsets))
        np.testing.assert_array_equal(s.read_range("state", 16 * first, 16 * first + 16),
                                      expected["state"][16 * first : 16 * first + 16])


def test_reads_through_the_streaming_copy(store, monkeypatch, tmp_path, rng):
    """With the streaming kernel's floor at one byte every checked raw read goes through it
    (x86-64; elsewhere the ordinary kernel): every boundary, out buffers at odd alignments,
    whole columns; and a flipped data byte still fails the read with IntegrityError."""
    import numbatraj.data._digest_kernels as DK
    from numbatraj import IntegrityError

    monkeypatch.setattr(DK, "STREAM_MIN_BYTES", 1)
    monkeypatch.setattr(DK, "STREAM_READS", DK.STREAM_STORES)  # on whatever the CPU's vendor
    s, expected = store
    n = s.n_rows
    for c in COLS:
        cr = CHUNKS[c.name]
        cuts = sorted({0, 1, cr - 1, cr, cr + 1, 2 * cr, n // 2, n - 1, n} & set(range(n + 1)))
        for a in cuts:
            for b in cuts:
                if a <= b:
                    assert s.read_range(c.name, a, b).tobytes() == \
                        expected[c.name][a:b].tobytes(), (c.name, a, b)
        row = int(np.prod(c.shape, dtype=np.int64)) * c.dtype.itemsize
        room = np.empty(n * row + 128, np.uint8)
        for shift in (0, c.dtype.itemsize, 64 - c.dtype.itemsize):  # alignments of `out`
            lead = (-room.ctypes.data) % 64 + shift
            out = room[lead : lead + n * row].view(c.dtype).reshape(n, *c.shape)
            assert s.load_column(c.name, out=out) is out
            assert out.tobytes() == expected[c.name].tobytes(), (c.name, shift)
    # a flipped byte in the middle of state's stored chunks
    path = tmp_path / "flipped.h5"
    path.write_bytes(open(s.path, "rb").read())
    with h5py.File(path, "r") as f:
        off = f["state"].id.get_chunk_info(2).byte_offset
    with open(path, "r+b") as fh:
        fh.seek(off + 5)
        b = fh.read(1)
        fh.seek(off + 5)
        fh.write(bytes([b[0] ^ 0x10]))
    with TrajectoryStore(path) as bad, pytest.raises(IntegrityError, match="'state' rows 14"):
        bad.load_column("state")
