"""The record gather compiled for its record layout.

A :class:`~numbatraj.replay.StoreReplay` keeps the narrow columns of a row together in
one record (``buffer._record_layout``).  A draw copies, for every lane, each column's
bytes of its record to that lane's row of the column's output.  Here the layout reaches
the compiler as a type: the records are viewed as a structured array whose fields are
the columns (``uint8`` sub-arrays at their byte offsets, see :func:`record_dtype`), so
Numba compiles these kernels once per layout (and caches them on disk, as every kernel
of the package).  Each lane's copies are then a fixed list of loads and stores of
constant sizes at constant offsets (:func:`pieces`), straight from the record into the
outputs: no table of columns read per lane, no size branches, no lane block in between.
The kept n-step draw (:func:`kept_cols_cpu`) is the same pass with each lane's kept targets
read off its record as well, and the walked one (:func:`walk_cols_cpu`) walks each window
first and takes the ``next_*`` columns from its last record.

Measured against the table-driven kernel it replaced (``_stream_kernels``'s, each lane's
record copied into an L1 block and the block written out column by column every 32
lanes): the bench's 168-byte records of five columns, a ring of 2^20 rows, fresh random
lanes each call, one process, interleaved rounds, AMD EPYC VM: 4096 lanes 75.7 against
113.4 us, 256 lanes 6.0 against 8.4 us, 8 lanes 1.52 against 1.65 us.  With the records
in L2 (a ring of 4096 rows), 4096 lanes took 22.8-23.1 against 59.9-62.6 us (two runs):
the copies' own cost.
A new layout costs a compile in the first process that draws from it: 0.16-0.27 s for the
serial kernel (0.5-0.6 s for the first layout of a process, which compiles the shared
helpers too), and about 0.5 s more for the threaded one if a draw takes it; later
processes load both from Numba's cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from numbatraj._jit import njit_kernel
from numbatraj._memops import address as _address
from numbatraj.replay._stream_kernels import (
    _NSTEP_PREFETCH_MAX,
    KEPT_AHEAD,
    NSTEP_AHEAD,
    _kept_lane,
    _load_f32,
    _load_f64,
    _load_u8,
    _out_addresses,
    _prefetch_span,
    _window,
)

__all__ = [
    "RECORD_AHEAD",
    "gather_cols_at_cpu",
    "gather_cols_cpu",
    "gather_cols_par_cpu",
    "kept_cols_cpu",
    "kept_cols_par_cpu",
    "pieces",
    "record_dtype",
    "walk_cols_cpu",
]

#: Lanes whose record lines a gather prefetches ahead of the lane it copies.  Flat from
#: 24 to 64 on the AMD EPYC VM (stop 46), and from 32 to 192 with the caches just
#: flushed by a 64 MiB write (stop 47): the misses that follow a flush are not latency
#: the distance hides.
RECORD_AHEAD = 48

_I64 = ir.IntType(64)


def pieces(nbytes: int) -> list[tuple[int, int]]:
    """``(offset, size)`` moves that copy bytes ``[0, nbytes)`` exactly, each of 1, 2, 4,
    8, 16, 32 or 64 bytes: whole 64-byte moves, then the rest in one move, or two where
    the second ends at ``nbytes`` and overlaps the first (the same bytes twice), or in one
    64-byte move ending at ``nbytes`` when more than 32 bytes remain after whole ones.
    No move reads or writes outside ``[0, nbytes)``."""
    got = []
    k = 0
    while nbytes - k >= 64:
        got.append((k, 64))
        k += 64
    rest = nbytes - k
    if rest == 0:
        return got
    if k and rest > 32:
        got.append((nbytes - 64, 64))
        return got
    a = 1 << (rest.bit_length() - 1)  # the widest move that fits
    got.append((k, a))
    if rest > a:
        b = 1 << (rest - a - 1).bit_length()  # the narrowest move that covers the rest
        got.append((nbytes - b, b))
    return got


def record_dtype(fields: Sequence[tuple[int, int]], row_bytes: int) -> np.dtype:
    """The structured dtype whose fields ``c0, c1, ...`` are ``uint8`` sub-arrays of
    ``nbytes`` at byte ``offset`` for each ``(offset, nbytes)`` of ``fields``, in that
    order, which must be by rising offset (Numba's record type orders its fields so; the
    kernels write output ``k`` from field ``k``), each field inside ``row_bytes``."""
    offs = [int(o) for o, _ in fields]
    if offs != sorted(offs):
        raise ValueError(f"record_dtype: fields must come by rising offset, got {offs}")
    for o, n in fields:
        if o < 0 or n <= 0 or o + n > row_bytes:
            raise ValueError(f"record_dtype: field ({o}, {n}) outside a {row_bytes}-byte row")
    return np.dtype({"names": [f"c{k}" for k in range(len(offs))],
                     "formats": [(np.uint8, (int(n),)) for _, n in fields],
                     "offsets": offs, "itemsize": int(row_bytes)})


def _fields_of(recty: Any) -> list[tuple[int, int]]:
    """``(offset, bytes)`` of each field of the Numba record type ``recty``, in order."""
    got = []
    for name in recty.fields:
        fty = recty.typeof(name)
        got.append((recty.offset(name), fty.nitems * (fty.dtype.bitwidth // 8)))
    return got


def _move_type(size: int) -> ir.Type:
    return ir.VectorType(_I64, size // 8) if size >= 16 else ir.IntType(8 * size)


def _row_bytes_typer(typingctx, recs):  # type: ignore[no-untyped-def]
    """The record size of the structured array ``recs``, a constant of its type."""
    if not isinstance(recs, types.Array) or not isinstance(recs.dtype, types.Record):
        return None
    size = recs.dtype.size

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return context.get_constant(types.intp, size)

    return types.intp(recs), codegen


def _destinations_typer(typingctx, recs, at):  # type: ignore[no-untyped-def]
    """A tuple of the outputs' addresses, one per field of ``recs``'s record type, loaded
    once from the int64 array at the address ``at`` (kept in registers by the lane loop,
    where a load per lane could not be hoisted past the lanes' stores)."""
    if not isinstance(recs, types.Array) or not isinstance(recs.dtype, types.Record):
        return None
    n = len(recs.dtype.fields)
    tup = types.UniTuple(types.intp, n)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        base = builder.inttoptr(args[1], _I64.as_pointer())
        vals = [builder.load(builder.gep(base, [_I64(c)])) for c in range(n)]
        return context.make_tuple(builder, tup, vals)

    return tup(recs, at), codegen


def _lane_out_typer(typingctx, recs, src, dsts, lane):  # type: ignore[no-untyped-def]
    """Each field of the record at the address ``src`` to row ``lane`` of its output
    (``dsts[k] + lane * bytes``): the moves of :func:`pieces`, constant sizes and
    offsets, any alignment."""
    if not isinstance(recs, types.Array) or not isinstance(recs.dtype, types.Record):
        return None
    fields = _fields_of(recs.dtype)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        _, s, d_all, i = args
        for k, (off, nb) in enumerate(fields):
            d = builder.add(builder.extract_value(d_all, k), builder.mul(i, _I64(nb)))
            for po, size in pieces(nb):
                ty = _move_type(size).as_pointer()
                v = builder.load(builder.inttoptr(builder.add(s, _I64(off + po)), ty), align=1)
                builder.store(v, builder.inttoptr(builder.add(d, _I64(po)), ty), align=1)
        return context.get_dummy_value()

    return types.void(recs, src, dsts, lane), codegen


_row_bytes: Any = intrinsic(_row_bytes_typer)
_destinations: Any = intrinsic(_destinations_typer)
_lane_out: Any = intrinsic(_lane_out_typer)


@numba.njit(cache=True, nogil=True, inline="always")
def _run(recs, idx, lo, hi, at):  # type: ignore[no-untyped-def]
    """Lanes ``[lo, hi)``: record ``idx[i]`` of ``recs`` to row ``i`` of each output (the
    addresses at ``at``), each lane's record lines prefetched :data:`RECORD_AHEAD` lanes
    ahead."""
    rb = _row_bytes(recs)
    base = _address(recs)
    dsts = _destinations(recs, at)
    for i in range(lo - RECORD_AHEAD, hi):
        a = i + RECORD_AHEAD
        if lo <= a < hi:
            _prefetch_span(base + idx[a] * rb, rb)
        if i < lo:
            continue
        _lane_out(recs, base + idx[i] * rb, dsts, i)


@njit_kernel
def gather_cols_cpu(recs, idx, outs, addrs):  # type: ignore[no-untyped-def]
    """Field ``k`` of record ``idx[i]`` of ``recs`` (a structured array of
    :func:`record_dtype`) to row ``i`` of ``outs[k]`` (C-contiguous, rows of the field's
    bytes, any dtype and shape); ``addrs`` (int64, one per field) is scratch for the
    outputs' addresses, kept for :func:`gather_cols_at_cpu`.  Returns 0."""
    _out_addresses(outs, addrs)
    _run(recs, idx, 0, idx.shape[0], _address(addrs))
    return 0


@njit_kernel
def gather_cols_at_cpu(recs, idx, addrs):  # type: ignore[no-untyped-def]
    """:func:`gather_cols_cpu` into the outputs whose addresses ``addrs`` holds already
    (the outputs of the call before, passed again): no tuple of outputs to dispatch.
    Returns 0."""
    _run(recs, idx, 0, idx.shape[0], _address(addrs))
    return 0


@numba.njit(cache=True, nogil=True, parallel=True)
def gather_cols_par_cpu(recs, idx, outs, addrs, n_parts):  # type: ignore[no-untyped-def]
    """:func:`gather_cols_cpu` split into ``n_parts`` contiguous runs of lanes, one per
    thread of a parallel region, each with its own prefetches: the draw is bound by the
    record misses one core keeps in flight, and a second core doubles them.  Returns 0."""
    _out_addresses(outs, addrs)
    b = idx.shape[0]
    at = _address(addrs)
    for p0 in numba.prange(n_parts):
        p = np.int64(p0)
        _run(recs, idx, b * p // n_parts, b * (p + 1) // n_parts, at)
    return 0


@numba.njit(cache=True, nogil=True, inline="always")
def _kept_run(recs, idx, lo, hi, t_hi, coff, roff, powers, ring_base, ring_cap, n_envs, at,  # type: ignore[no-untyped-def]
              ret, disc, last):
    """Lanes ``[lo, hi)`` of :func:`kept_cols_cpu`: each lane's kept targets off its record
    (``_stream_kernels._kept_lane``) and its fields into the outputs, record bytes
    ``[0, t_hi)`` prefetched ``_stream_kernels.KEPT_AHEAD`` lanes ahead."""
    rb = _row_bytes(recs)
    base = _address(recs)
    dsts = _destinations(recs, at)
    ring_end = ring_base + ring_cap
    for i in range(lo - KEPT_AHEAD, hi):
        a = i + KEPT_AHEAD
        if lo <= a < hi:
            _prefetch_span(base + idx[a] * rb, t_hi)
        if i < lo:
            continue
        q = idx[i]
        x = base + q * rb
        _kept_lane(i, q, x, coff, roff, powers, ring_base, ring_end, ring_cap, n_envs, ret,
                   disc, last)
        _lane_out(recs, x, dsts, i)


@njit_kernel
def kept_cols_cpu(recs, idx, t_hi, coff, roff, powers, ring_base, ring_cap, n_envs, outs,  # type: ignore[no-untyped-def]
                  addrs, ret, disc, last):
    """The draw of a replay that keeps its n-step targets, compiled for its layout: per
    lane ``i``, record ``idx[i]``'s fields to row ``i`` of ``outs`` (as
    :func:`gather_cols_cpu`; the ``next_*`` outputs' fields are their kept copies) and its
    targets (``_stream_kernels._kept_lane``: ``ret[i]`` from the float32 at byte ``roff``,
    ``disc[i]`` from the code at byte ``coff`` and ``powers``, ``last[i]`` the window's
    last row).  ``t_hi``: the record bytes the draw reads, prefetched.  Returns 0."""
    _out_addresses(outs, addrs)
    _kept_run(recs, idx, 0, idx.shape[0], t_hi, coff, roff, powers, ring_base, ring_cap,
              n_envs, _address(addrs), ret, disc, last)
    return 0


@numba.njit(cache=True, nogil=True, parallel=True)
def kept_cols_par_cpu(recs, idx, t_hi, coff, roff, powers, ring_base, ring_cap, n_envs, outs,  # type: ignore[no-untyped-def]
                      addrs, ret, disc, last, n_parts):
    """:func:`kept_cols_cpu` split into ``n_parts`` contiguous runs of lanes, one per
    thread of a parallel region (one record span per lane, as the plain draw's).
    Returns 0."""
    _out_addresses(outs, addrs)
    b = idx.shape[0]
    at = _address(addrs)
    for p0 in numba.prange(n_parts):
        p = np.int64(p0)
        _kept_run(recs, idx, b * p // n_parts, b * (p + 1) // n_parts, t_hi, coff, roff,
                  powers, ring_base, ring_cap, n_envs, at, ret, disc, last)
    return 0


@njit_kernel
def walk_cols_cpu(recs_t, recs_l, has_l, idx, n, gamma, roff, r64, doff, toff, ring_base,  # type: ignore[no-untyped-def]
                  n_demo, ring_cap, n_envs, start, size, t_hi, l_lo, l_hi, outs_t, addrs_t,
                  outs_l, addrs_l, ret, disc, last):
    """An n-step draw that walks each window at draw time, compiled for its layout:
    ``_stream_kernels.nstep_gather_cpu``'s walk (the same float operations in the same
    order; the tests hold it to ``nstep_cpu`` bit for bit), reading the walk's record
    fields by address, then the fields of ``recs_t`` (the columns read at row ``t``) from
    record ``idx[i]`` into ``outs_t`` and, when ``has_l``, those of ``recs_l`` (the
    ``next_*`` columns, both views of the same records) from the window's last record
    ``last[i]`` into ``outs_l``.  Without ``has_l``, ``recs_l`` / ``outs_l`` / ``addrs_l``
    are stand-ins (``recs_t``'s), never written.

    ``reward`` is the record field at byte ``roff`` (float64 when ``r64``, else float32),
    ``done`` / ``truncated`` the one-byte fields at ``doff`` / ``toff`` (-1: not stored,
    never set).  Per lane, ``_stream_kernels.NSTEP_AHEAD`` lanes ahead, the lines it will
    read are prefetched: bytes ``[0, t_hi)`` of record ``t``, the walk's fields of the rows
    ``t + k E`` for ``0 < k < n`` (at most 16 steps; ``E``: 1 in the demos), and of the
    last of them together with bytes ``[l_lo, l_hi)``, one span.  Returns 0."""
    _out_addresses(outs_t, addrs_t)
    _out_addresses(outs_l, addrs_l)
    d_t = _destinations(recs_t, _address(addrs_t))
    d_l = _destinations(recs_l, _address(addrs_l))
    b = idx.shape[0]
    rb = _row_bytes(recs_t)
    base = _address(recs_t)
    l_n = l_hi - l_lo
    kn = n if n < _NSTEP_PREFETCH_MAX else _NSTEP_PREFETCH_MAX
    has_d = doff >= 0
    has_t = toff >= 0
    # the walk's bytes of a record (reward, done, truncated), and with the next_* columns
    w_lo = roff
    w_hi = roff + (8 if r64 else 4)
    if has_d:
        w_lo = min(w_lo, doff)
        w_hi = max(w_hi, doff + 1)
    if has_t:
        w_lo = min(w_lo, toff)
        w_hi = max(w_hi, toff + 1)
    f_lo = min(w_lo, l_lo) if l_n > 0 else w_lo
    f_hi = max(w_hi, l_hi) if l_n > 0 else w_hi
    for i in range(-NSTEP_AHEAD, b):
        a = i + NSTEP_AHEAD
        if a < b:
            q = idx[a]
            r = base + q * rb
            sb = rb if q < ring_base else n_envs * rb
            _prefetch_span(r, t_hi)
            for k in range(1, kn - 1):
                _prefetch_span(r + k * sb + w_lo, w_hi - w_lo)
            if kn > 1:  # past the ring's end: a prefetch never faults
                _prefetch_span(r + (kn - 1) * sb + f_lo, f_hi - f_lo)
            else:
                _prefetch_span(r + l_lo, l_n)
        if i < 0:
            continue
        q = idx[i]
        m, step, wrap, end = _window(q, n, ring_base, n_demo, ring_cap, n_envs, start, size)
        g = 1.0
        acc = 0.0
        dz = False
        lq = q
        for _ in range(m):
            x = base + q * rb
            if r64:
                acc += g * _load_f64(x + roff)
            else:
                acc += g * np.float64(_load_f32(x + roff))
            lq = q
            if has_d and _load_u8(x + doff) != 0:
                dz = True
                break
            g *= gamma
            if has_t and _load_u8(x + toff) != 0:
                break
            q += step
            if q >= end:
                q -= wrap
        last[i] = lq
        ret[i] = acc
        disc[i] = 0.0 if dz else g
        _lane_out(recs_t, base + idx[i] * rb, d_t, i)
        if has_l:
            _lane_out(recs_l, base + lq * rb, d_l, i)
    return 0
