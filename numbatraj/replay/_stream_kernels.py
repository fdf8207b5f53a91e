"""Stream kernels of the replay: time neighbours, n-step returns, frame stacks, windows.

With ``n_envs = E`` every ``add`` writes whole steps (``E`` rows, env 0 first), the ring
capacity ``R`` is a multiple of ``E`` and the oldest held slot is always env 0's: so logical
ring row ``j`` (0 = oldest held) is step ``j // E`` of env ``j % E``, and the next row of
the same stream is logical row ``j + E``, held while ``j + E < size``.  The per-row
stream/step index is this arithmetic on the ring state (``start``, ``size``), maintained by
every add for free; a neighbour past the write head or before the oldest held row is -1.
The demonstration prefix ``[0, n_demo)`` is one more stream, ``p + 1`` inside it.

Episode boundaries come from the stored ``done`` / ``truncated`` columns (``done``,
``trunc``: bool ``(capacity,)`` views, a zero-stride False view when a column is absent).
Kernels take arrays and scalars only, assume valid input, never allocate and never raise.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import literal_unroll, types
from numba.core import cgutils
from numba.extending import intrinsic

from numbatraj._jit import STREAM_PREFETCH_LOCALITY, device_twin, njit_kernel
from numbatraj._memops import address as _address
from numbatraj.replay._lanes import BETA, CURSOR, DRAW, N_DEMO, SIZE, per_lane, window_start
from numbatraj.replay._quantize_kernels import dequantize
from numbatraj.replay._ring_kernels import physical_row
from numbatraj.samplers.kernels import philox_index, philox_uniform

__all__ = [
    "neighbour",
    "nstep_cpu",
    "nstep_gather_cpu",
    "nstep_keep_cpu",
    "nstep_kept_targets_cpu",
    "nstep_row_py",
    "next_rows_cpu",
    "stack_rows_cpu",
    "window_rows_cpu",
    "window_row_py",
    "sequence_start_py",
    "sequence_starts_cpu",
    "logical_to_physical_cpu",
    "stack_row_py",
    "stack_rows_twin_cpu",
    "per_sequence_start_py",
    "per_sequence_starts_cpu",
    "window_priority_py",
    "window_priorities_cpu",
]


def neighbour_py(p, k, ring_base, n_demo, ring_cap, n_envs, start, size):  # type: ignore[no-untyped-def]
    """Physical row ``k`` steps after (``k < 0``: before) physical row ``p`` in the same
    stream, or -1 when that step is not held (write head, overwritten, outside the demos)."""
    if p < ring_base:
        q = p + k
        if q < 0 or q >= n_demo:
            return -1
        return q
    j = p - ring_base - start
    if j < 0:
        j += ring_cap
    j += k * n_envs
    if j < 0 or j >= size:
        return -1
    s = start + j
    if s >= ring_cap:
        s -= ring_cap
    return ring_base + s


neighbour = njit_kernel(neighbour_py)


def mul_rn_py(a, b):  # type: ignore[no-untyped-def]
    """``a * b`` rounded on its own.  The host never fuses a multiply into the add that
    follows it (no fast-math flags); NVVM does by default, so the device twin of this
    function is libdevice's ``dmul_rn``, which it never contracts (``_stream_cuda``)."""
    return a * b


mul_rn = njit_kernel(mul_rn_py)


@njit_kernel
def logical_to_physical_cpu(idx, n_first, ring_base, ring_cap, start, out):  # type: ignore[no-untyped-def]
    """``out[i]``: demo row ``idx[i]`` while ``idx[i] < n_first``, else ring logical row
    ``idx[i] - n_first`` counted from slot ``start``."""
    for i in range(idx.shape[0]):
        j = idx[i]
        if j < n_first:
            out[i] = j
        else:
            s = start + (j - n_first)
            if s >= ring_cap:
                s -= ring_cap
            out[i] = ring_base + s


def nstep_row_py(i, q, n, gamma, reward, done, trunc, ring_base, n_demo, ring_cap, n_envs,  # type: ignore[no-untyped-def]
                 start, size, ret, disc, last):
    """n-step target of physical row ``q`` into lane ``i``: ``ret[i]``, ``disc[i]``,
    ``last[i]``.

    The window is ``q, q+1, ..., q+m-1`` of the same stream, ``m <= n``, stopping after a
    ``done`` or ``truncated`` row and at the newest held row of the stream.
    ``ret[i] = sum_k gamma**k reward[q+k]`` (a float64 sum, stored in ``ret``'s dtype),
    ``disc[i]`` ``gamma**m`` or 0 when the window ended on ``done``, ``last[i]`` the row
    ``q+m-1``.  One body for the host (:func:`nstep_cpu`) and the device (``_ring_cuda``):
    each term is rounded before it is added (:func:`mul_rn_py`), as on the host.
    """
    g = 1.0
    acc = 0.0
    d = -1.0
    for _ in range(n):
        acc += mul_rn(g, np.float64(reward[q]))  # float64 in the simulator too; no fma
        last[i] = q
        if done[q]:
            d = 0.0
            break
        g *= gamma
        if trunc[q]:
            break
        nq = neighbour(q, 1, ring_base, n_demo, ring_cap, n_envs, start, size)
        if nq < 0:
            break
        q = nq
    ret[i] = acc
    disc[i] = g if d < 0 else 0.0




@njit_kernel
def nstep_cpu(idx, n, gamma, reward, done, trunc, ring_base, n_demo, ring_cap, n_envs,  # type: ignore[no-untyped-def]
              start, size, ret, disc, last):
    """n-step targets of the rows ``idx`` (physical).

    For row ``t`` the window is ``t, t+1, ..., t+m-1`` of the same stream, ``m <= n``,
    stopping after a ``done`` or ``truncated`` row and at the newest held row of the
    stream.  ``ret[i] = sum_k gamma**k reward[t+k]`` (float64 sum, stored float32),
    ``disc[i] = gamma**m`` or 0 when the window ended on ``done``, ``last[i] = t+m-1``.

    The host twin of the device kernel: the tests hold the device (``_stream_cuda``) and
    :func:`nstep_gather_cpu` (what ``StoreReplay`` draws through) to it, bit for bit.
    Lanes go in blocks of 64: a short loop first loads each lane's first and last possible
    row, so the block's misses are in flight together; returns their checksum (unused).
    The walk is :func:`nstep_row_py`'s body (the device's), written out: calling that body
    here, inlined or not, measured 4-8x slower (130-270 us against 35 us for 4096 lanes
    over an 8-byte table of reward / done / truncated, one run, load 0.5).
    """
    b = idx.shape[0]
    cap = reward.shape[0]
    chk = 0.0
    for s in range(0, b, 64):
        e = min(b, s + 64)
        for i in range(s, e):  # touch each lane's first and last possible row
            q = idx[i]
            chk += reward[q]
            q2 = q + (n - 1) * n_envs
            if q2 < cap:
                chk += reward[q2]
        for i in range(s, e):
            q = idx[i]
            g = 1.0
            acc = 0.0
            d = -1.0
            for _ in range(n):
                acc += g * np.float64(reward[q])  # float64 in the simulator too
                last[i] = q
                if done[q]:
                    d = 0.0
                    break
                g *= gamma
                if trunc[q]:
                    break
                nq = neighbour(q, 1, ring_base, n_demo, ring_cap, n_envs, start, size)
                if nq < 0:
                    break
                q = nq
            ret[i] = acc
            disc[i] = g if d < 0 else 0.0
    return chk


_I8P = ir.IntType(8).as_pointer()
_I32 = ir.IntType(32)


def _prefetch_typer(typingctx, arr, i):  # type: ignore[no-untyped-def]
    """``prefetch(arr, i)``: a hint to bring the line holding ``arr[i]`` (1-D, any stride,
    zero-stride views too) into every cache level; not bounds-checked (a prefetch never
    faults).  The same ``llvm.prefetch`` hint as the row gathers of ``data/`` and the
    sum-tree descent of ``samplers/``, here over strided record views."""
    sig = types.void(arr, types.intp)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        off = builder.mul(args[1], builder.extract_value(ary.strides, 0))
        ptr = builder.gep(builder.bitcast(ary.data, _I8P), [off])
        fnty = ir.FunctionType(ir.VoidType(), [_I8P, _I32, _I32, _I32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(fn, [ptr, _I32(0), _I32(3), _I32(1)])
        return context.get_dummy_value()

    return sig, codegen


_V8 = ir.VectorType(ir.IntType(64), 8)  # 64 bytes


def _copy64_typer(typingctx, dst, do, src, so):  # type: ignore[no-untyped-def]
    """64 bytes from byte ``so`` of ``src``'s data to byte ``do`` of ``dst``'s (C-contiguous
    arrays, any alignment): one vector load and one vector store."""
    sig = types.void(dst, types.intp, src, types.intp)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        def at(aty, ary, off):  # type: ignore[no-untyped-def]
            a = context.make_array(aty)(context, builder, ary)
            p = builder.gep(builder.bitcast(a.data, _I8P), [off])
            return builder.bitcast(p, _V8.as_pointer())

        v = builder.load(at(signature.args[2], args[2], args[3]), align=1)
        builder.store(v, at(signature.args[0], args[0], args[1]), align=1)
        return context.get_dummy_value()

    return sig, codegen


def _move_n_typer(nbytes):  # type: ignore[no-untyped-def]
    """A typer of ``nbytes`` (1, 4, 8, 16 or 64) bytes from the address ``saddr`` to the
    address ``daddr`` (integers, from :func:`_address`), any alignment: one load, one store.
    Addresses, not arrays: an array handed to a helper in a per-lane loop costs a reference
    count taken and dropped each time."""
    if nbytes >= 16:
        ty = ir.VectorType(ir.IntType(64), nbytes // 8)
    else:
        ty = ir.IntType(8 * nbytes)

    def typer(typingctx, daddr, saddr):  # type: ignore[no-untyped-def]
        sig = types.void(types.intp, types.intp)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            v = builder.load(builder.inttoptr(args[1], ty.as_pointer()), align=1)
            builder.store(v, builder.inttoptr(args[0], ty.as_pointer()), align=1)
            return context.get_dummy_value()

        return sig, codegen

    return typer


def _prefetch_at_typer(typingctx, addr):  # type: ignore[no-untyped-def]
    """Prefetch (for reading) the line holding the address ``addr``, with the hint
    :data:`numbatraj._jit.STREAM_PREFETCH_LOCALITY` (3: every cache level; 1: L2 on
    x86-64)."""
    sig = types.void(types.intp)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        fnty = ir.FunctionType(ir.VoidType(), [_I8P, _I32, _I32, _I32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(fn, [builder.inttoptr(args[0], _I8P), _I32(0),
                          _I32(STREAM_PREFETCH_LOCALITY), _I32(1)])
        return context.get_dummy_value()

    return sig, codegen


_prefetch: Any = intrinsic(_prefetch_typer)
_copy64: Any = intrinsic(_copy64_typer)
_move64: Any = intrinsic(_move_n_typer(64))
_move16: Any = intrinsic(_move_n_typer(16))
_move8: Any = intrinsic(_move_n_typer(8))
_move4: Any = intrinsic(_move_n_typer(4))
_move1: Any = intrinsic(_move_n_typer(1))
_prefetch_at: Any = intrinsic(_prefetch_at_typer)

#: Helpers of the per-lane loops, inlined at the Numba level: as plain calls each passes its
#: arrays with a reference count taken and dropped (the fused n-step pass, 4096 lanes,
#: n=3, eight envs, the records in L2: 72 -> 58 us inlined, the same kernel otherwise; with
#: the vector copies and no division as well, 150 -> 105 us at 10^6 rows, load 8).  A
#: helper taking many arrays is slower inlined too (twice, for the walk as a helper): the
#: walked draw (``_record_kernels.walk_cols_cpu``) reads its fields by address.
_inline = numba.njit(cache=True, nogil=True, inline="always")

#: Lanes whose lines :func:`nstep_gather_cpu` prefetches ahead of the lane it computes.
#: Measured (4096 lanes, 168-byte records at 10^6 rows; n=3 one env / n=5 eight envs; one
#: run, load 4.7): 8 ahead 157 / 177 us, 12: 146 / 175, 16: 148 / 175, 24: 148 / 180,
#: 32: 159 / 180; with the inlined helpers (n=3, eight envs, load 7): 16: 75, 32: 79,
#: 48: 81 us with the records in L2, 132 / 135 / 135 at 10^6 rows.  With the record grouped
#: for the walk and the block scratch of the fused walked draw of stops before 47 (n=3 / n=5,
#: one env, load 2.7): 8: 153 / 187 us, 12: 134 / 186, 16: 128 / 185, 24: 132 / 189.
NSTEP_AHEAD = 16
#: Lanes per thread below which the record draws stay serial: a parallel one needs two of
#: these per thread (``StoreReplay._on_policy``).  Once the size of the lane blocks the draws
#: gathered through before stop 47 (4096 lanes, n=3, load 1.5: 32, 64 and 128 lanes 117-119 us).
NSTEP_BLOCK = 32
#: Steps of a lane's window prefetched at most (an ``n`` far beyond any episode must not
#: cost ``n`` prefetches per lane; the walk itself stops at the stream's newest row).
_NSTEP_PREFETCH_MAX = 16


@_inline
def _prefetch_words(flat, o, lo, hi):  # type: ignore[no-untyped-def]
    """Prefetch every line of words ``[lo, hi)`` of the record at word ``o`` of ``flat``:
    one word 64 bytes apart from ``lo``, and the last."""
    if hi > lo:
        for w in range(lo, hi, 8):
            _prefetch(flat, o + w)
        _prefetch(flat, o + hi - 1)


@_inline
def _copy_words(dst, do, src, so, nw):  # type: ignore[no-untyped-def]
    """Words ``[so, so + nw)`` of the flat ``src`` to ``[do, do + nw)`` of the flat ``dst``
    (apart): 64-byte vector moves, the last one overlapping the one before it (the same
    words twice), or a word loop below 8 words."""
    if nw >= 8:
        k = 0
        while k + 8 < nw:
            _copy64(dst, (do + k) * 8, src, (so + k) * 8)
            k += 8
        _copy64(dst, (do + nw - 8) * 8, src, (so + nw - 8) * 8)
    else:
        for k in range(nw):
            dst[do + k] = src[so + k]


@_inline
def _move_bytes(daddr, saddr, nb):  # type: ignore[no-untyped-def]
    """``nb`` bytes from the address ``saddr`` to ``daddr`` (apart): moves of 64, 16, 8 or
    4 bytes, the last one overlapping the one before it (the same bytes twice), or single
    bytes below 4."""
    if nb >= 64:
        k = 0
        while k + 64 < nb:
            _move64(daddr + k, saddr + k)
            k += 64
        _move64(daddr + nb - 64, saddr + nb - 64)
    elif nb >= 16:
        k = 0
        while k + 16 < nb:
            _move16(daddr + k, saddr + k)
            k += 16
        _move16(daddr + nb - 16, saddr + nb - 16)
    elif nb >= 8:
        _move8(daddr, saddr)
        _move8(daddr + nb - 8, saddr + nb - 8)
    elif nb >= 4:
        _move4(daddr, saddr)
        _move4(daddr + nb - 4, saddr + nb - 4)
    else:
        for k in range(nb):
            _move1(daddr + k, saddr + k)


@_inline
def _prefetch_span(addr, nb):  # type: ignore[no-untyped-def]
    """Prefetch every line of the ``nb`` bytes at the address ``addr``."""
    if nb > 0:
        for k in range(0, nb, 64):
            _prefetch_at(addr + k)
        _prefetch_at(addr + nb - 1)


@_inline
def _window(q, n, ring_base, n_demo, ring_cap, n_envs, start, size):  # type: ignore[no-untyped-def]
    """The n-step window of physical row ``q``: ``(m, step, wrap, end)``, its rows held
    (``m <= n``: up to the stream's newest), the step to the next row of its stream, what a
    step past ``end`` subtracts.  A demo row's stream is the demos (step 1, no wrap); a
    ring row's steps ``n_envs`` rows and wraps at the ring's end."""
    if q < ring_base:  # a demo row: the demos are one stream, p + 1 inside them
        ahead = n_demo - 1 - q
        return (n if ahead >= n else ahead + 1), 1, 0, n_demo
    j = q - ring_base - start
    if j < 0:
        j += ring_cap
    if j + (n - 1) * n_envs < size:  # the whole window is held: no division
        m = n
    else:
        ahead = (size - 1 - j) // n_envs
        m = n if ahead >= n else ahead + 1
    return m, n_envs, ring_cap, ring_base + ring_cap


@njit_kernel
def nstep_gather_cpu(idx, n, gamma, reward, rq, rlow, rstep, done, trunc, ring_base,  # type: ignore[no-untyped-def]
                     n_demo, ring_cap, n_envs, start, size, rec, out_t, l0, l1, out_l, ret,
                     disc, last):
    """n-step targets of the rows ``idx`` (physical) and their records, in one pass.

    The targets are :func:`nstep_cpu`'s (``ret``, ``disc``, ``last``; the tests hold the
    two equal), read straight from the stored columns: ``reward`` (its record view; the
    uint8 codes when ``rq``, summed as ``deq(code) = float32(rlow + code * rstep)``, the
    value a draw returns), ``done``, ``trunc`` (record views, or zero-stride False views).
    Words ``[0, W_t)`` of record ``idx[i]`` of ``rec`` (uint64 ``(capacity, W)``) are copied
    to ``out_t[i]`` (``(B, W_t)``, ``W_t <= W``; ``(0, 0)``: no copy) and words ``[l0, l1)``
    of record ``last[i]`` to the same words of ``out_l[i]`` (``(B, W)``), so the record
    views of a gather read the columns off both.

    Per lane, the lines it will read are prefetched :data:`NSTEP_AHEAD` lanes ahead: words
    ``[0, W_t)`` of record ``t``, the ``reward`` / ``done`` (/ ``truncated`` when stored) of
    ``t + k E`` for ``0 < k < n`` (``0 <= k`` without ``out_t``; at most 16 steps; ``E``: 1
    in the demos) and words ``[l0, l1)`` of the last of those records, the last row unless
    the window stops early.
    The walk takes ``m = n`` when the whole window is held (else counts the steps held ahead
    of ``t``, ``(size - 1 - j) // E`` for ring logical row ``j``), then steps by ``E``,
    wrapping at the ring's end; it does the same float operations in the same order as
    :func:`nstep_row_py`.  Copies are 64-byte vector moves of fixed bounds: run lists (only
    the words a draw needs) measured 55 us slower at 4096 lanes than whole spans.
    """
    b = idx.shape[0]
    cap = reward.shape[0]
    w_rec = rec.shape[1]
    wt = out_t.shape[1]
    flat = rec.reshape(rec.shape[0] * w_rec)
    ft = out_t.reshape(out_t.shape[0] * wt)
    fl = out_l.reshape(out_l.shape[0] * out_l.shape[1])
    wl = out_l.shape[1]
    nl = l1 - l0
    kn = n if n < _NSTEP_PREFETCH_MAX else _NSTEP_PREFETCH_MAX
    stored_trunc = trunc.strides[0] != 0  # a zero-stride False view: nothing to fetch
    k0 = 1 if wt > 0 else 0  # the walk's words of record t are among its first W_t
    for i in range(-NSTEP_AHEAD, b):
        a = i + NSTEP_AHEAD
        if a < b:
            q = idx[a]
            st = 1 if q < ring_base else n_envs
            _prefetch_words(flat, q * w_rec, 0, wt)
            for k in range(k0, kn):
                q2 = q + k * st
                if q2 < cap:
                    _prefetch(reward, q2)
                    _prefetch(done, q2)
                    if stored_trunc:
                        _prefetch(trunc, q2)
            q2 = q + (kn - 1) * st
            if q2 < cap:
                _prefetch_words(flat, q2 * w_rec, l0, l1)
        if i < 0:
            continue
        q = idx[i]
        m, step, wrap, end = _window(q, n, ring_base, n_demo, ring_cap, n_envs, start, size)
        g = 1.0
        acc = 0.0
        d = -1.0
        lq = q
        for _ in range(m):
            if rq:
                acc += g * np.float64(dequantize(reward[q], rlow, rstep))
            else:
                acc += g * np.float64(reward[q])
            lq = q
            if done[q]:
                d = 0.0
                break
            g *= gamma
            if trunc[q]:
                break
            q += step
            if q >= end:
                q -= wrap
        last[i] = lq
        ret[i] = acc
        disc[i] = g if d < 0 else 0.0
        _copy_words(ft, i * wt, flat, idx[i] * w_rec, wt)
        if nl > 0:
            _copy_words(fl, i * wl + l0, flat, lq * w_rec + l0, nl)


def _load_typer_of(nbty, irty):  # type: ignore[no-untyped-def]
    """A typer loading one ``nbty`` value from the integer address ``addr`` (any
    alignment): the walk's reads of a record field by address, no array argument."""
    def typer(typingctx, addr):  # type: ignore[no-untyped-def]
        sig = nbty(types.intp)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            return builder.load(builder.inttoptr(args[0], irty.as_pointer()), align=1)

        return sig, codegen

    return typer


_load_f32: Any = intrinsic(_load_typer_of(types.float32, ir.FloatType()))
_load_f64: Any = intrinsic(_load_typer_of(types.float64, ir.DoubleType()))
_load_u8: Any = intrinsic(_load_typer_of(types.uint8, ir.IntType(8)))


#: Terminal bit of a kept n-step code (:func:`nstep_keep_cpu`): the low bits hold ``m``.
KEPT_TERMINAL = 128
#: Lanes the kept draw (``_record_kernels.kept_cols_cpu``) prefetches ahead of the lane it
#: copies (measured on a first version that read two spans a lane: 16 / 32 / 48 lanes,
#: 114 / 101 / 106 us).
KEPT_AHEAD = 32
#: The largest ``n_step`` a replay keeps targets for (``m`` in the code's low 7 bits).
KEPT_MAX_N = 127


@njit_kernel
def nstep_keep_cpu(d_lo, d_hi, r_lo, r_hi, n, gamma, reward, rq, rlow, rstep, done, trunc,  # type: ignore[no-untyped-def]
                   ring_base, n_demo, ring_cap, n_envs, start, size, ret, code, rec, ktab):
    """Kept n-step targets of the demo rows ``[d_lo, d_hi)`` and the ring logical rows
    ``[r_lo, r_hi)`` (0 = oldest held): per physical row ``q``, ``ret[q]`` (a float32 view
    of the records), ``code[q]`` (a uint8 view: ``m | KEPT_TERMINAL`` when the window ended
    on ``done``, else ``m``) and, per ``ktab`` row ``(source, destination, bytes)``, the
    source bytes of record ``last`` copied to the destination bytes of record ``q``
    (``rec``: uint64 ``(capacity, W)``; the ``next_*`` columns at the window's last row).

    The walk is :func:`nstep_gather_cpu`'s, the same float operations in the same order,
    so a draw that reads the kept targets (``_record_kernels.kept_cols_cpu``) returns what a walk
    at draw time would (the tests hold the two equal bit for bit).  A row's targets change
    only when its stream gets a new row within ``n - 1`` steps of it (its window grows past
    the old write head): the replay refreshes those rows after every add.  Returns 0.
    """
    ring_end = ring_base + ring_cap
    rb = rec.shape[1] * rec.itemsize
    base = _address(rec)
    for part in range(2):
        lo = d_lo if part == 0 else r_lo
        hi = d_hi if part == 0 else r_hi
        for i in range(lo, hi):
            if part == 0:  # a demo row: the demos are one stream, p + 1 inside them
                q = i
                ahead = n_demo - 1 - q
                m = n if ahead >= n else ahead + 1
                step = 1
                wrap = 0
                end = n_demo
            else:
                s = start + i
                if s >= ring_cap:
                    s -= ring_cap
                q = ring_base + s
                ahead = (size - 1 - i) // n_envs
                m = n if ahead >= n else ahead + 1
                step = n_envs
                wrap = ring_cap
                end = ring_end
            t = q
            lq = q
            g = 1.0
            acc = 0.0
            d = -1.0
            c = 0
            for _ in range(m):
                if rq:
                    acc += g * np.float64(dequantize(reward[q], rlow, rstep))
                else:
                    acc += g * np.float64(reward[q])
                c += 1
                lq = q
                if done[q]:
                    d = 0.0
                    break
                g *= gamma
                if trunc[q]:
                    break
                q += step
                if q >= end:
                    q -= wrap
            ret[t] = acc
            code[t] = c | KEPT_TERMINAL if d == 0.0 else c
            for k in range(ktab.shape[0]):
                _move_bytes(base + t * rb + ktab[k, 1], base + lq * rb + ktab[k, 0],
                            ktab[k, 2])
    return 0


@_inline
def _kept_lane(i, q, x, coff, roff, powers, ring_base, ring_end, ring_cap, n_envs, ret,  # type: ignore[no-untyped-def]
               disc, last):
    """Lane ``i``'s kept targets off record ``q`` at address ``x``: ``ret[i]``,
    ``disc[i]`` (``powers[m]`` or 0 after a terminal), ``last[i] = q + (m - 1) E``
    (``E``: 1 in the demos) wrapped at the ring's end ``ring_end``."""
    cb = np.int64(_load_u8(x + coff))
    m = cb & (KEPT_TERMINAL - 1)
    lq = q + (m - 1) * (1 if q < ring_base else n_envs)
    if lq >= ring_end:
        lq -= ring_cap
    last[i] = lq
    ret[i] = _load_f32(x + roff)
    disc[i] = 0.0 if cb & KEPT_TERMINAL else powers[m]


@njit_kernel
def nstep_kept_targets_cpu(idx, coff, roff, powers, ring_base, ring_cap, n_envs, rec, ret,  # type: ignore[no-untyped-def]
                           disc, last):
    """The kept n-step targets of the rows ``idx`` alone (``ret``, ``disc``, ``last`` as
    ``_record_kernels.kept_cols_cpu`` reads them), for the draws that gather their columns after
    the targets (``next_of``, frame stacks, quantised record columns): no walk.  Each
    lane's record line is prefetched :data:`KEPT_AHEAD` lanes ahead.  Returns 0."""
    b = idx.shape[0]
    rb = rec.shape[1] * rec.itemsize
    base = _address(rec)
    ring_end = ring_base + ring_cap
    for i in range(-KEPT_AHEAD, b):
        a = i + KEPT_AHEAD
        if a < b:
            _prefetch_at(base + idx[a] * rb + coff)
            _prefetch_at(base + idx[a] * rb + roff)
        if i < 0:
            continue
        x = base + idx[i] * rb
        _kept_lane(i, idx[i], x, coff, roff, powers, ring_base, ring_end, ring_cap, n_envs,
                   ret, disc, last)
    return 0


@numba.njit(cache=True, nogil=True)  # not inlined: literal_unroll needs its own function
def _out_addresses(outs, addrs):  # type: ignore[no-untyped-def]
    """``addrs[c]``: the address of ``outs[c]``'s first byte (a tuple of arrays of any
    dtypes and shapes)."""
    c = 0
    for o in literal_unroll(outs):
        addrs[c] = _address(o)
        c += 1


@njit_kernel
def next_rows_cpu(rows, ring_base, n_demo, ring_cap, n_envs, start, size, out):  # type: ignore[no-untyped-def]
    """``out[i]``: the next row of ``rows[i]``'s stream, or ``rows[i]`` itself where there
    is none (its value then comes from the side table)."""
    for i in range(rows.shape[0]):
        q = neighbour(rows[i], 1, ring_base, n_demo, ring_cap, n_envs, start, size)
        out[i] = rows[i] if q < 0 else q


@njit_kernel
def stack_rows_cpu(rows, depth, done, trunc, ring_base, n_demo, ring_cap, n_envs, start,  # type: ignore[no-untyped-def]
                   size, out):
    """Frame-stack rows: ``out[i, depth - 1] = rows[i]``, then each earlier entry the previous
    row of the same stream while it is held and does not end an episode; before the
    episode's first held row its frame repeats (gymnasium ``FrameStackObservation``
    padding).  ``out`` int64 ``(B, depth)``, oldest first."""
    for i in range(rows.shape[0]):
        q = rows[i]
        out[i, depth - 1] = q
        for k in range(depth - 2, -1, -1):
            p = neighbour(q, -1, ring_base, n_demo, ring_cap, n_envs, start, size)
            if p >= 0 and not (done[p] or trunc[p]):
                q = p
            out[i, k] = q


def window_row_py(i, q, t_len, within, done, trunc, ring_base, n_demo, ring_cap, n_envs,  # type: ignore[no-untyped-def]
                  start, size, cut_first, rows, is_first, is_pad):
    """Window ``i`` of ``t_len`` consecutive steps of one stream from physical row ``q``
    into ``rows[i]``, ``is_first[i]``, ``is_pad[i]`` (see :func:`window_rows_cpu`).  One
    body for the host and the device (``_stream_cuda``)."""
    pad = False
    for k in range(t_len):
        rows[i, k] = q
        is_pad[i, k] = pad
        if pad:
            is_first[i, k] = False
            continue
        p = neighbour(q, -1, ring_base, n_demo, ring_cap, n_envs, start, size)
        if p >= 0:
            is_first[i, k] = done[p] or trunc[p]
        elif q < ring_base:
            is_first[i, k] = cut_first[0]
        else:
            j = q - ring_base - start
            if j < 0:
                j += ring_cap
            is_first[i, k] = cut_first[1 + j % n_envs]
        nq = neighbour(q, 1, ring_base, n_demo, ring_cap, n_envs, start, size)
        if within and (done[q] or trunc[q] or nq < 0):
            pad = True
        elif nq >= 0:
            q = nq


window_row = njit_kernel(window_row_py)


def sequence_start_py(i, draw, k0, k1, t_len, within, n_demo, size, n_envs, ring_base,  # type: ignore[no-untyped-def]
                      ring_cap, start):
    """Physical start row of uniform window ``i`` of draw ``draw`` (Philox lane ``i``).

    Spanning windows start where ``t_len`` steps of the stream are held (demo rows
    ``[0, n_demo - t_len + 1)``, the ring's logical rows ``[0, size - (t_len - 1) n_envs)``);
    ``within`` windows at any held row.  The device's uniform starts (the host replay draws
    from its sampler's stream over the same ranges).
    """
    if within:
        cd = n_demo
        c = size
    else:
        cd = n_demo - t_len + 1
        if cd < 0:
            cd = 0
        c = size - (t_len - 1) * n_envs
        if c < 0:
            c = 0
    j = np.int64(philox_index(draw, np.uint64(i), k0, k1, np.uint64(cd + c)))
    return physical_row(j, cd, ring_base, ring_cap, start)


sequence_start = njit_kernel(sequence_start_py)


@njit_kernel
def sequence_starts_cpu(draw, k0, k1, t_len, within, n_demo, size, n_envs, ring_base,  # type: ignore[no-untyped-def]
                        ring_cap, start, out):
    """Host twin of ``_stream_cuda._sequence_starts_cuda``: every lane's start row."""
    for i in range(out.shape[0]):
        out[i] = sequence_start(i, draw, k0, k1, t_len, within, n_demo, size, n_envs,
                                ring_base, ring_cap, start)


#: Windows whose flag lines :func:`window_rows_cpu` prefetches ahead of the window it
#: walks.  Measured (256 windows of 64 steps of a 16-byte record, fresh random starts, one
#: process, interleaved): at 10^8 rows the walk 161.8 us without, 92.7 / 82.3 / 83.7 /
#: 83.8 us 2 / 4 / 8 / 16 windows ahead; at 10^6 rows 66.7-67.4 us in every case.
WINDOW_AHEAD = 4


@njit_kernel
def window_rows_cpu(starts, t_len, within, done, trunc, ring_base, n_demo, ring_cap,  # type: ignore[no-untyped-def]
                    n_envs, start, size, cut_first, rows, is_first, is_pad):
    """Rows of windows of ``t_len`` consecutive steps of one stream from ``starts``.

    ``rows`` int64 ``(B, T)``; ``is_first`` bool ``(B, T)``: the row begins an episode (the
    previous row of its stream ended one, or the stream has no earlier row and
    ``cut_first`` says the first held row is a true start: index 0 the demo stream, 1 + e
    env ``e``); ``is_pad`` bool ``(B, T)``: with ``within`` the window stops after an
    episode's last row or at the write head and the remaining entries repeat that row.

    The walk is the first to touch the windows' records (the gather after it finds them in
    the caches), so the flag lines of window ``i + WINDOW_AHEAD`` are prefetched before
    window ``i`` is walked: several windows' misses in flight instead of one.  Rows past
    the ring's ends are prefetched as they lie (a prefetch never faults).
    """
    b = starts.shape[0]
    ds = done.strides[0]  # 0: a zero-stride False view (no done column): nothing to fetch
    step = n_envs * ds  # bytes between consecutive steps of a stream
    every = 1 if step >= 64 or step == 0 else 64 // step  # steps per prefetched line
    for i in range(-WINDOW_AHEAD, b):
        a = i + WINDOW_AHEAD
        if ds > 0 and a < b:  # the flag lines of window a (and of the row before it)
            q = starts[a]
            for k in range(-1, t_len, every):
                _prefetch(done, q + k * n_envs)
            _prefetch(done, q + (t_len - 1) * n_envs)
        if i < 0:
            continue
        window_row(i, starts[i], t_len, within, done, trunc, ring_base, n_demo, ring_cap,
                   n_envs, start, size, cut_first, rows, is_first, is_pad)


# --------------------------------------------------------------------------- device bodies
# Per-lane bodies of what the host replay does with whole-batch kernels or numpy
# (frame stacks, prioritized window starts, R2D2 window priorities), compiled for the
# device in ``_stream_cuda`` and for the host here (the host twins the tests run).


def stack_row_py(i, q, depth, shift, done, trunc, ring_base, n_demo, ring_cap, n_envs,  # type: ignore[no-untyped-def]
                 start, size, out):
    """Frame-stack rows of lane ``i`` (physical row ``q``) into ``out[i]`` (``(depth,)``,
    oldest first): :func:`stack_rows_cpu`'s rows when ``shift`` is False; when True the
    matching next stack: that stack moved one step on (its oldest entry dropped) and, last,
    the next row of the stream, or ``q`` itself where there is none (the next_of side table
    then supplies that frame)."""
    if shift:
        nq = neighbour(q, 1, ring_base, n_demo, ring_cap, n_envs, start, size)
        out[i, depth - 1] = q if nq < 0 else nq
        top = depth - 2
    else:
        top = depth - 1
    if top >= 0:
        out[i, top] = q
        for k in range(top - 1, -1, -1):
            p = neighbour(q, -1, ring_base, n_demo, ring_cap, n_envs, start, size)
            if p >= 0 and not (done[p] or trunc[p]):
                q = p
            out[i, k] = q


stack_row = njit_kernel(stack_row_py)


@njit_kernel
def stack_rows_twin_cpu(rows, depth, shift, done, trunc, ring_base, n_demo, ring_cap,  # type: ignore[no-untyped-def]
                        n_envs, start, size, out):
    """Host twin of ``_stream_cuda._stack_rows_cuda``: :func:`stack_row_py` per lane."""
    for i in range(rows.shape[0]):
        stack_row(i, rows[i], depth, shift, done, trunc, ring_base, n_demo, ring_cap, n_envs,
                  start, size, out)


def per_sequence_start_py(i, b, u, sums, mins, p, beta, t_len, within, n_demo, size,  # type: ignore[no-untyped-def]
                          n_envs, ring_base, ring_cap, cursor):
    """(start row, IS weight) of prioritized window ``i`` of ``b`` for uniform ``u``.

    ``within``: any held row, the whole tree (``StoreReplay``: ``sample_into``); spanning:
    the ``size - (t_len - 1) n_envs`` oldest ring rows, where ``t_len`` steps of the stream
    are held (``StoreReplay``: ``sample_ranges_into`` over those slots; demos excluded).
    The caller has checked that the spanning range is not empty.
    """
    if within:
        return per_lane(i, b, -1, u, sums, mins, p, beta, n_demo, ring_base, ring_cap, cursor,
                        size)
    c = size - (t_len - 1) * n_envs
    end = window_start(cursor, size, ring_cap) + c  # one past the range, as a cursor
    if end >= ring_cap:
        end -= ring_cap
    return per_lane(i, b, 0, u, sums, mins, p, beta, n_demo, ring_base, ring_cap, end, c)


per_sequence_start = njit_kernel(per_sequence_start_py)


@njit_kernel
def per_sequence_starts_cpu(istate, fstate, sums, mins, p, gen, k0, k1, t_len, within,  # type: ignore[no-untyped-def]
                            ring_base, ring_cap, n_envs, out, weights, stamps):
    """Host twin of ``_stream_cuda._per_sequence_starts_cuda``: every window's start row,
    weight and stamp of draw ``istate[DRAW]``; advances the draw."""
    b = out.shape[0]
    d = np.uint64(istate[DRAW])
    for i in range(b):
        u = philox_uniform(d, np.uint64(i), k0, k1)
        leaf, w = per_sequence_start(i, b, u, sums, mins, p, fstate[BETA], t_len, within,
                                     istate[N_DEMO], istate[SIZE], n_envs, ring_base, ring_cap,
                                     istate[CURSOR])
        out[i] = leaf
        weights[i] = w
        stamps[i] = gen[leaf]
    istate[DRAW] += 1


_PW_BLOCK = 128  # numpy's PW_BLOCKSIZE
_NEG_INF = -np.inf


def _pw_block_py(a, i, lo, n):  # type: ignore[no-untyped-def]
    """numpy's pairwise-sum leaf over ``|a[i, lo:lo + n]|`` as float64 (``n <= 128``):
    eight accumulators, combined as a tree, then the rest in order."""
    if n < 8:
        res = 0.0
        for k in range(n):
            res += abs(np.float64(a[i, lo + k]))
        return res
    r0 = abs(np.float64(a[i, lo]))
    r1 = abs(np.float64(a[i, lo + 1]))
    r2 = abs(np.float64(a[i, lo + 2]))
    r3 = abs(np.float64(a[i, lo + 3]))
    r4 = abs(np.float64(a[i, lo + 4]))
    r5 = abs(np.float64(a[i, lo + 5]))
    r6 = abs(np.float64(a[i, lo + 6]))
    r7 = abs(np.float64(a[i, lo + 7]))
    k = 8
    while k < n - n % 8:
        r0 += abs(np.float64(a[i, lo + k]))
        r1 += abs(np.float64(a[i, lo + k + 1]))
        r2 += abs(np.float64(a[i, lo + k + 2]))
        r3 += abs(np.float64(a[i, lo + k + 3]))
        r4 += abs(np.float64(a[i, lo + k + 4]))
        r5 += abs(np.float64(a[i, lo + k + 5]))
        r6 += abs(np.float64(a[i, lo + k + 6]))
        r7 += abs(np.float64(a[i, lo + k + 7]))
        k += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while k < n:
        res += abs(np.float64(a[i, lo + k]))
        k += 1
    return res


def _pw_flat_py(a, i, lo, n):  # type: ignore[no-untyped-def]
    """Below the deepest split level (``n`` beyond ~10^5 steps): blocks in order."""
    res = 0.0
    k = 0
    while k < n:
        m = n - k
        if m > _PW_BLOCK:
            m = _PW_BLOCK
        res += pw_block(a, i, lo + k, m)
        k += m
    return res


def _pw_split_py(a, i, lo, n):  # type: ignore[no-untyped-def]
    """One level of numpy's pairwise split: halves rounded down to a multiple of 8."""
    if n <= _PW_BLOCK:
        return pw_block(a, i, lo, n)
    n2 = n // 2
    n2 -= n2 % 8
    return pw_inner(a, i, lo, n2) + pw_inner(a, i, lo + n2, n - n2)


pw_block = njit_kernel(_pw_block_py)
#: the split levels as host kernels, each calling the one below (no recursion, which a
#: CUDA device function cannot do); ``_stream_cuda`` compiles the same chain for the device
_PW_LEVELS = 10


def _pw_level(k, inner):  # type: ignore[no-untyped-def]
    """Split level ``k`` over ``inner`` (a copy of the body with its own name: the kernel
    cache keys on the name, and every level runs other code under the same one)."""
    f = device_twin(_pw_split_py, pw_block=pw_block, pw_inner=inner)
    f.__qualname__ = f.__name__ = f"_pw_split_{k}_py"
    return f


#: the bottom of the chain (what ``_pw_split_py`` calls as it stands: one split level)
pw_inner = njit_kernel(device_twin(_pw_flat_py, pw_block=pw_block))
pw_sum = pw_inner
for _k in range(_PW_LEVELS):
    pw_sum = njit_kernel(_pw_level(_k, pw_sum))


def window_priority_py(td, i, eta):  # type: ignore[no-untyped-def]
    """R2D2 priority of window ``i``: ``eta * max|td[i]| + (1 - eta) * mean|td[i]|`` in
    float64, the sum in numpy's pairwise order (``np.abs(td).mean(axis=1)``), so it equals
    ``StoreReplay.update_priorities`` bit for bit for windows up to ~10^5 steps."""
    t = td.shape[1]
    mx = 0.0
    for k in range(t):
        v = abs(np.float64(td[i, k]))
        if v > mx:
            mx = v
    m = pw_sum(td, i, 0, t) / t
    if m != m:
        return m  # a NaN in td (the host refuses it): passed on
    # max(x, -inf) is x here; on the device it keeps NVVM (which contracts by default, also
    # without fastmath) from fusing a product and the sum into one fma, rounded once where
    # numpy rounds twice
    return max(eta * mx, _NEG_INF) + max((1.0 - eta) * m, _NEG_INF)


window_priority = njit_kernel(window_priority_py)


@njit_kernel
def window_priorities_cpu(td, eta, out):  # type: ignore[no-untyped-def]
    """Host twin of ``_stream_cuda._window_priorities_cuda``."""
    for i in range(td.shape[0]):
        out[i] = window_priority(td, i, eta)
