"""Ring kernels against the row-by-row references in tests/reference.py."""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj.replay import _ring_kernels as rk
from tests.reference import gather_rows_ref, ring_put_ref, time_order_ref

CASES = [
    # capacity, demo, cursor, n
    (1, 0, 0, 1),  # capacity 1
    (1, 0, 0, 5),  # batch larger than a capacity-1 ring
    (8, 0, 0, 0),  # empty batch
    (8, 0, 3, 5),  # exact wrap: ends at slot 0
    (8, 0, 6, 5),  # wraps
    (8, 0, 5, 20),  # several wraps inside one batch
    (8, 3, 4, 3),  # demo prefix, wrap
    (8, 3, 0, 11),  # demo prefix, batch > ring
    (16, 2, 13, 14),  # exactly the ring capacity
]


@pytest.mark.parametrize("cap, demo, cursor, n", CASES)
@pytest.mark.parametrize("dtype, e", [(np.float32, 3), (np.bool_, 1), (np.uint8, 5), (np.float64, 2)])
def test_ring_put_matches_reference(cap, demo, cursor, n, dtype, e, rng):
    ring = cap - demo
    cursor %= ring
    dst = np.zeros((cap, e), dtype=dtype)
    raw = rng.integers(0, 256, n * e * np.dtype(dtype).itemsize, dtype=np.uint8)
    src = (raw & 1).astype(np.bool_) if dtype is np.bool_ else raw.view(dtype)
    src = src.reshape(n, e)
    expected = dst.copy()
    ring_put_ref(expected, src, demo, ring, cursor)
    if n:
        rk.ring_put_cpu(dst, src.reshape(-1), demo, ring, cursor)
    np.testing.assert_array_equal(dst.view(np.uint8), expected.view(np.uint8))  # bits, NaNs too
    assert not dst[:demo].any(), "the demo prefix was written"


@pytest.mark.parametrize("cap, demo, cursor, n", CASES)
def test_ring_slots_are_the_rows_written(cap, demo, cursor, n):
    ring = cap - demo
    cursor %= ring
    out = np.empty(min(n, ring), dtype=np.int64)
    rk.ring_slots_cpu(demo, ring, cursor, n, out)
    expected = [demo + (cursor + i) % ring for i in range(max(0, n - ring), n)]
    assert out.tolist() == expected


@pytest.mark.parametrize("n_demo, demo, ring, size, cursor", [
    (0, 0, 1, 0, 0), (0, 0, 1, 1, 0), (2, 3, 5, 3, 3), (3, 3, 5, 5, 2), (0, 0, 7, 7, 0), (1, 4, 6, 6, 5),
])
def test_time_order_and_physical_rows(n_demo, demo, ring, size, cursor):
    out = np.empty(n_demo + size, dtype=np.int64)
    rk.time_order_cpu(n_demo, demo, ring, size, cursor, out)
    expected = time_order_ref(n_demo, demo, ring, size, cursor)
    assert out.tolist() == expected
    # logical rows mapped from the oldest slot give the same order
    logical = np.arange(n_demo + size, dtype=np.int64)
    rk.ring_physical_cpu(logical, n_demo, demo, ring, (cursor - size) % ring, logical)
    assert logical.tolist() == expected


@pytest.mark.parametrize("e, dtype", [(17, np.uint32), (1, np.uint8), (4, np.uint64), (3, np.uint16)])
@pytest.mark.parametrize("b", [0, 1, 7, 3000])
def test_gathers_match_fancy_indexing(e, dtype, b, rng):
    src = rng.integers(0, 2**8, (50, e)).astype(dtype)
    idx = rng.integers(0, 50, b).astype(np.int64)
    idx[: min(b, 3)] = [49, 0, 49][: min(b, 3)]
    out = np.empty((b, e), dtype=dtype)
    rk.gather_rows_cpu(src, idx, out)
    np.testing.assert_array_equal(out, src[idx])


def test_word_dtype():
    assert [rk.word_dtype(b).itemsize for b in (68, 24, 4, 1, 6, 8, 3)] == [4, 8, 4, 1, 2, 8, 1]


@pytest.mark.parametrize("b", [0, 1, 63, 64, 65, 200])  # around the 64-row touch block
@pytest.mark.parametrize("wdt, w", [(np.uint32, 17), (np.uint64, 3), (np.uint8, 1), (np.uint16, 0)])
def test_gather_rows_matches_reference(b, wdt, w, rng):
    src = rng.integers(0, np.iinfo(wdt).max, size=(50, w), dtype=wdt, endpoint=True)
    idx = rng.integers(0, 50, size=b).astype(np.int64)
    idx[: b // 3] = np.sort(idx[: b // 3])  # sorted runs and duplicates, as stratified draws
    out = np.full((b, w), 7, dtype=wdt)
    rk.gather_rows_cpu(src, idx, out)
    np.testing.assert_array_equal(out, gather_rows_ref(src, idx))


@pytest.mark.parametrize("b", [0, 1, rk.GATHER_AHEAD - 1, rk.GATHER_AHEAD, rk.GATHER_AHEAD + 1,
                               3 * rk.GATHER_AHEAD + 5])  # around the prefetch distance
@pytest.mark.parametrize("lo, hi", [(0, 21), (3, 20), (20, 21), (5, 5)])
def test_gather_rows_of_record_views(b, lo, hi, rng):
    """A column of the records (a strided view, rows 168 bytes apart) and the whole records,
    with the last rows of the source drawn: the prefetch reaches past the copy."""
    records = rng.integers(0, 2**63, size=(90, 21), dtype=np.uint64)
    src = records[:, lo:hi]
    idx = rng.integers(0, 90, size=b).astype(np.int64)
    idx[-min(b, 2):] = 89
    out = np.full((b, hi - lo), 7, dtype=np.uint64)
    rk.gather_rows_cpu(src, idx, out)
    np.testing.assert_array_equal(out, gather_rows_ref(src, idx))


def test_copy_rows_out_of_records(rng):
    records = rng.integers(0, 2**32, size=(70, 6), dtype=np.uint32)
    col = records[:, 1:4]  # strided rows
    out = np.zeros((70, 3), np.uint32)
    rk.copy_rows_cpu(col, out)
    np.testing.assert_array_equal(out, col)


@pytest.mark.parametrize("b", [0, 1, 2, 65, 300])
@pytest.mark.parametrize("wdt, w", [(np.uint64, 96), (np.uint8, 601), (np.uint32, 1)])
def test_gather_wide_rows_matches_reference(b, wdt, w, rng):
    # a column stored apart: each row one long copy, the next row's first line loaded ahead
    src = rng.integers(0, np.iinfo(wdt).max, size=(40, w), dtype=wdt, endpoint=True)
    idx = rng.integers(0, 40, size=b).astype(np.int64)
    idx[: min(b, 3)] = [39, 0, 39][: min(b, 3)]
    out = np.full((b, w), 7, dtype=wdt)
    rk.gather_wide_rows_cpu(src, idx, out)
    np.testing.assert_array_equal(out, gather_rows_ref(src, idx))


@pytest.mark.parametrize("shift", [0, 1, 37, 63])
@pytest.mark.parametrize("w", [1, 63, 64, 65, 700, 21168])
def test_gather_wide_rows_any_output_alignment(shift, w, rng):
    # the 64-byte lines are stored aligned: the bytes before the first aligned line of each
    # output row and after its last one go apart, wherever the output starts
    src = rng.integers(0, 256, size=(9, w), dtype=np.uint8)
    idx = np.array([8, 0, 3, 3, 8, 1, 5], dtype=np.int64)
    raw = np.zeros(idx.shape[0] * w + 128, np.uint8)
    base = (-raw.ctypes.data) % 64 + shift
    out = raw[base : base + idx.shape[0] * w].reshape(idx.shape[0], w)
    rk.gather_wide_rows_cpu(src, idx, out)
    np.testing.assert_array_equal(out, gather_rows_ref(src, idx))
    assert not raw[:base].any() and not raw[base + out.size :].any()  # nothing outside


@pytest.mark.parametrize("b", [0, 1, 2, 65])
@pytest.mark.parametrize("wdt, w", [(np.uint64, 96), (np.uint8, 601), (np.uint16, 3)])
def test_gather_wide_pair_matches_reference(b, wdt, w, rng):
    # next_of: each lane's row and the next one, as two gathers of one column
    src = rng.integers(0, np.iinfo(wdt).max, size=(40, w), dtype=wdt, endpoint=True)
    a = rng.integers(0, 40, size=b).astype(np.int64)
    nxt = np.minimum(a + 1, 39)
    nxt[::3] = rng.integers(0, 40, size=nxt[::3].shape[0])  # some lanes not adjacent
    out_a = np.full((b, w), 7, dtype=wdt)
    out_b = np.full((b, w), 9, dtype=wdt)
    rk.gather_wide_pair_cpu(src, a, out_a, src, nxt, out_b)
    np.testing.assert_array_equal(out_a, gather_rows_ref(src, a))
    np.testing.assert_array_equal(out_b, gather_rows_ref(src, nxt))


def test_gather_wide_pair_of_two_columns(rng):
    # two columns stored apart (obs and next_obs), gathered lane by lane in one pass
    a = rng.integers(0, 2**63, size=(30, 50), dtype=np.uint64)
    b = rng.integers(0, 2**63, size=(30, 50), dtype=np.uint64)
    idx = rng.integers(0, 30, size=77).astype(np.int64)
    out_a = np.zeros((77, 50), np.uint64)
    out_b = np.zeros((77, 50), np.uint64)
    rk.gather_wide_pair_cpu(a, idx, out_a, b, idx, out_b)
    np.testing.assert_array_equal(out_a, gather_rows_ref(a, idx))
    np.testing.assert_array_equal(out_b, gather_rows_ref(b, idx))


def _records_ref(cols, offs, row_bytes, n):
    """The ``n`` records a staged add writes: each column's row bytes at its offset,
    padding zero (plain NumPy slicing, row by row)."""
    out = np.zeros((n, row_bytes), dtype=np.uint8)
    for c, off in zip(cols, offs):
        w = c.shape[1]
        for r in range(n):
            out[r, off : off + w] = c[r]
    return out


@pytest.mark.parametrize("stream", [False, True])
def test_stage_put_takes_columns_of_any_dtype_and_layout(stream, rng):
    """The columns as a caller hands them (float32 rows, a bool and an int16 column, a
    scalar float64 one, and a strided view and a Fortran-order array, which the kernel
    copies first): the records hold each row's C-order bytes, as with byte views."""
    n = 301
    big = rng.standard_normal((n, 40), dtype=np.float32)
    cols = [rng.standard_normal((n, 17), dtype=np.float32),
            rng.random(n) < 0.3,
            rng.integers(-300, 300, (n, 3)).astype(np.int16),
            rng.standard_normal(n),
            big[:, 5:11],  # strided rows
            np.asfortranarray(rng.integers(0, 255, (n, 2, 5)).astype(np.uint8))]
    as_bytes = [np.ascontiguousarray(c).reshape(n, -1).view(np.uint8) for c in cols]
    for got, want in zip(rk._byte_views(tuple(cols)), as_bytes, strict=True):  # the Python body
        np.testing.assert_array_equal(got, want.reshape(-1))
    widths = [b.shape[1] for b in as_bytes]
    offs, o = [], 0
    for w in widths:
        offs.append(o)
        o += w + 1
    row_bytes = (o + 7) // 8 * 8
    ring = np.full((n + 2) * row_bytes, 0xA5, dtype=np.uint8)
    scratch = np.zeros(n * row_bytes, dtype=np.uint8)
    rk.stage_put_cpu(ring, row_bytes, row_bytes, tuple(cols), np.array(offs, dtype=np.int64),
                     np.array(widths, dtype=np.int64), n, scratch, stream)
    np.testing.assert_array_equal(ring[row_bytes : (n + 1) * row_bytes].reshape(n, row_bytes),
                                  _records_ref(as_bytes, offs, row_bytes, n))
    assert (ring[:row_bytes] == 0xA5).all() and (ring[(n + 1) * row_bytes :] == 0xA5).all()


# widths of every move size and the overlaps between them (1 .. 130 bytes)
_WIDTHS = [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 63, 64, 65, 68, 127, 128, 130]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("shift", [0, 1, 8, 40, 63])  # the ring's byte offset, any alignment
@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 97])
def test_stage_put_matches_reference(stream, shift, n, rng):
    widths = list(_WIDTHS)  # every width, each column at its own alignment
    offs, o = [], 0
    for k, w in enumerate(widths):
        offs.append(o)
        o += w + k % 3  # gaps: padding that must stay zero
    row_bytes = (o + 7) // 8 * 8
    cols = [rng.integers(0, 256, (n, w), dtype=np.uint8) for w in widths]
    total = shift + (n + 2) * row_bytes
    ring = np.full(total, 0xA5, dtype=np.uint8)  # sentinels around the written span
    scratch = np.zeros(n * row_bytes, dtype=np.uint8)
    d = shift + row_bytes
    rk.stage_put_cpu(ring, d, row_bytes, tuple(c.ravel() for c in cols),
                     np.array(offs, dtype=np.int64), np.array(widths, dtype=np.int64), n,
                     scratch, stream)
    expected = _records_ref(cols, offs, row_bytes, n)
    np.testing.assert_array_equal(ring[d : d + n * row_bytes].reshape(n, row_bytes), expected)
    assert (ring[:d] == 0xA5).all() and (ring[d + n * row_bytes :] == 0xA5).all(), \
        "bytes outside the records were written"
    # the scratch is reused: a second, smaller batch leaves the padding zero
    m = max(1, n // 2)
    cols2 = [rng.integers(0, 256, (m, w), dtype=np.uint8) for w in widths]
    rk.stage_put_cpu(ring, d, row_bytes, tuple(c.ravel() for c in cols2),
                     np.array(offs, dtype=np.int64), np.array(widths, dtype=np.int64), m,
                     scratch, stream)
    np.testing.assert_array_equal(ring[d : d + m * row_bytes].reshape(m, row_bytes),
                                  _records_ref(cols2, offs, row_bytes, m))


def test_record_pieces_copy_each_byte_once_inside_the_field():
    """``_record_kernels.pieces``: moves of 1-64 bytes (powers of two) that together cover
    ``[0, n)`` and never reach outside it, at most one more move than whole 64-byte ones."""
    from numbatraj.replay._record_kernels import pieces

    for n in range(1, 700):
        cover = np.zeros(n, dtype=bool)
        moves = pieces(n)
        for off, size in moves:
            assert size in (1, 2, 4, 8, 16, 32, 64), (n, moves)
            assert 0 <= off and off + size <= n, (n, moves)
            cover[off : off + size] = True
        assert cover.all(), (n, moves)
        assert len(moves) <= -(-n // 64) + 1, (n, moves)
    assert pieces(68) == [(0, 64), (64, 4)] and pieces(24) == [(0, 16), (16, 8)]
    assert pieces(168) == [(0, 64), (64, 64), (104, 64)] and pieces(1) == [(0, 1)]


def test_record_dtype_refuses_fields_out_of_order_or_outside_the_row():
    from numbatraj.replay._record_kernels import record_dtype

    dt = record_dtype([(0, 24), (24, 68), (96, 1)], 104)
    assert dt.itemsize == 104 and [dt.fields[n][1] for n in dt.names] == [0, 24, 96]
    with pytest.raises(ValueError, match="rising offset"):
        record_dtype([(24, 68), (0, 24)], 104)
    with pytest.raises(ValueError, match="outside a 104-byte row"):
        record_dtype([(0, 24), (100, 8)], 104)
    with pytest.raises(ValueError, match="outside"):
        record_dtype([(0, 0)], 8)


# widths of every move size and the overlaps between them, and wider than 128 bytes
_GATHER_WIDTHS = [*_WIDTHS, 192, 200, 300, 511]


@pytest.mark.parametrize("variant", ["serial", "at", "parallel"])
@pytest.mark.parametrize("shift", [0, 8, 40])  # the records' byte offset: 8-byte aligned
@pytest.mark.parametrize("b", [1, 31, 32, 33, 100, 4096])
def test_gather_record_cols_matches_fancy_indexing(variant, shift, b, rng):
    """The record gather compiled for its layout against NumPy fancy indexing of the
    records' bytes, for fields of every width at every alignment: each output row equal,
    and the guard bytes around each output unchanged (no move reaches past a row)."""
    from numbatraj.replay import _record_kernels as rck

    widths = list(_GATHER_WIDTHS)
    offs, o = [], 0
    for k, w in enumerate(widths):
        offs.append(o)
        o += w + k % 3  # gaps between the fields: bytes no output may get
    row_bytes = (o + 7) // 8 * 8
    cap = 3000
    raw = np.zeros(shift + cap * row_bytes, dtype=np.uint8)
    raw[:] = rng.integers(0, 256, raw.size, dtype=np.uint8)
    recs = raw[shift:].view(rck.record_dtype(list(zip(offs, widths)), row_bytes))
    rows = raw[shift:].reshape(cap, row_bytes)
    idx = rng.integers(0, cap, b)
    idx[: min(b, 3)] = [cap - 1, 0, cap - 1][: min(b, 3)]  # the ends, and a repeat
    guard = 64
    bufs = [np.full(2 * guard + b * w, 0xA5, dtype=np.uint8) for w in widths]
    outs = tuple(buf[guard : guard + b * w].reshape(b, w) for buf, w in zip(bufs, widths))
    addrs = np.zeros(len(widths), dtype=np.int64)
    if variant == "serial":
        rck.gather_cols_cpu(recs, idx, outs, addrs)
    elif variant == "parallel":
        rck.gather_cols_par_cpu(recs, idx, outs, addrs, 3)
    else:  # the addresses of a call before, then the kernel that only reads them
        rck.gather_cols_cpu(recs, idx[:1], outs, addrs)
        rck.gather_cols_at_cpu(recs, idx, addrs)
    for off, w, out, buf in zip(offs, widths, outs, bufs):
        np.testing.assert_array_equal(out, rows[idx, off : off + w], err_msg=f"width {w}")
        assert (buf[:guard] == 0xA5).all() and (buf[guard + b * w :] == 0xA5).all(), \
            f"width {w}: bytes outside the output written"


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("b", [1, 33, 1000])
def test_kept_record_cols_match_numpy(parallel, b, rng):
    """The kept n-step draw compiled for its layout against NumPy: each field of each
    lane's record into its output (guard bytes around the outputs unchanged), the return
    read from its float32 field, the discount ``powers[m]`` or 0 after a terminal code, and
    the window's last row ``q + (m - 1) E`` wrapped at the ring's end (``E`` 1 in the
    demos)."""
    from numbatraj.replay import _record_kernels as rck
    from numbatraj.replay._stream_kernels import KEPT_TERMINAL

    widths = [24, 68, 1, 4, 68, 3]
    offs = [8, 32, 100, 104, 112, 180]  # bytes 0-4: the code (0) and the return (4)
    coff, roff, row_bytes = 0, 4, 184
    cap, ring_base, n_envs = 600, 40, 3
    ring_cap = cap - ring_base
    raw = rng.integers(0, 256, cap * row_bytes, dtype=np.uint8)
    rows = raw.reshape(cap, row_bytes)
    m = rng.integers(1, 6, cap)
    term = rng.random(cap) < 0.3
    rows[:, coff] = m | np.where(term, KEPT_TERMINAL, 0)
    rows[:, roff : roff + 4] = rng.standard_normal(cap).astype(np.float32).view(np.uint8).reshape(cap, 4)
    recs = raw.view(rck.record_dtype(list(zip(offs, widths)), row_bytes))
    powers = 0.9 ** np.arange(8, dtype=np.float64)
    idx = rng.integers(0, cap, b)
    idx[: min(b, 3)] = [cap - 1, 0, ring_base][: min(b, 3)]
    guard = 64
    bufs = [np.full(2 * guard + b * w, 0xA5, dtype=np.uint8) for w in widths]
    outs = tuple(buf[guard : guard + b * w].reshape(b, w) for buf, w in zip(bufs, widths))
    ret, disc, last = np.empty(b, np.float32), np.empty(b), np.empty(b, np.int64)
    args = (recs, idx, row_bytes, coff, roff, powers, ring_base, ring_cap, n_envs, outs,
            np.zeros(len(widths), dtype=np.int64), ret, disc, last)
    if parallel:
        rck.kept_cols_par_cpu(*args, 2)
    else:
        rck.kept_cols_cpu(*args)
    for off, w, out, buf in zip(offs, widths, outs, bufs):
        np.testing.assert_array_equal(out, rows[idx, off : off + w], err_msg=f"width {w}")
        assert (buf[:guard] == 0xA5).all() and (buf[guard + b * w :] == 0xA5).all()
    mi = m[idx]
    np.testing.assert_array_equal(ret, rows[idx, roff : roff + 4].copy().view(np.float32).ravel())
    np.testing.assert_array_equal(disc, np.where(term[idx], 0.0, powers[mi]))
    want = idx + (mi - 1) * np.where(idx < ring_base, 1, n_envs)
    want = np.where(want >= cap, want - ring_cap, want)
    np.testing.assert_array_equal(last, want)
