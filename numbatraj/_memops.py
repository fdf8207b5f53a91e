"""Memory intrinsics the host kernels share: aligned 64-byte line copies (ordinary and
streaming), small fixed-width moves, ``memcpy`` of a byte range, software prefetches, an
array's address and the store fence streaming stores need.

Each is a Numba ``intrinsic`` over an array and byte offsets, usable only inside compiled
code.  They live below every package (like :mod:`numbatraj._jit`): the replay's ring and
gather kernels and the store's chunk digests copy bytes the same way.  The streaming store
and the fence are x86-64 instructions; a kernel that uses them is compiled only where
:data:`STREAM_STORES` is true.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from numbatraj._jit import STREAM_PREFETCH_LOCALITY, X86_64

__all__ = [
    "STREAM_STORES",
    "address",
    "copy_bytes",
    "copy_line",
    "copy_line_nt",
    "move1",
    "move2",
    "move4",
    "move8",
    "move16",
    "move32",
    "move64",
    "prefetch",
    "prefetch_wide",
    "store_fence",
]

_I8P = ir.IntType(8).as_pointer()
_I32 = ir.IntType(32)
_LINE = ir.VectorType(ir.IntType(64), 8)  # one 64-byte cache line


def _byte_pointer(builder, context, aty, ary, off):  # type: ignore[no-untyped-def]
    a = context.make_array(aty)(context, builder, ary)
    return builder.gep(builder.bitcast(a.data, _I8P), [off])


def _prefetch_typer_of(locality: int):  # type: ignore[no-untyped-def]
    """An intrinsic prefetching (for reading) the line holding byte ``off`` of ``arr``'s data,
    with LLVM's ``locality`` hint: 3 is ``prefetcht0`` (every cache level), 1 is
    ``prefetcht2`` (on x86-64: into L2, not L1)."""

    def typer(typingctx, arr, off):  # type: ignore[no-untyped-def]
        sig = types.void(arr, types.intp)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            p = _byte_pointer(builder, context, signature.args[0], args[0], args[1])
            fnty = ir.FunctionType(ir.VoidType(), [_I8P, _I32, _I32, _I32])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
            builder.call(fn, [p, _I32(0), _I32(locality), _I32(1)])
            return context.get_dummy_value()

        return sig, codegen

    return typer


def _copy_bytes_typer(typingctx, dst, doff, src, soff, n):  # type: ignore[no-untyped-def]
    """``n`` bytes from byte ``soff`` of ``src`` to byte ``doff`` of ``dst`` (llvm.memcpy)."""
    sig = types.void(dst, types.intp, src, types.intp, types.intp)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        dp = _byte_pointer(builder, context, signature.args[0], args[0], args[1])
        sp = _byte_pointer(builder, context, signature.args[2], args[2], args[3])
        cgutils.raw_memcpy(builder, dp, sp, args[4], 1)
        return context.get_dummy_value()

    return sig, codegen


def _address_typer(typingctx, arr):  # type: ignore[no-untyped-def]
    """Address of ``arr``'s first byte, as an integer."""
    sig = types.intp(arr)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        a = context.make_array(signature.args[0])(context, builder, args[0])
        return builder.ptrtoint(a.data, context.get_value_type(types.intp))

    return sig, codegen


def _copy_typer_of(vt: ir.Type, dst_align: int, nontemporal: bool = False):  # type: ignore[no-untyped-def]
    """An intrinsic moving one ``vt`` (an integer, or a vector of bytes or of words) from
    byte ``soff`` of ``src`` (any alignment) to byte ``doff`` of ``dst`` (``dst_align``
    aligned there): one load and one store, a streaming store when ``nontemporal`` (the
    line goes to memory without its old contents being read into the caches first)."""

    def typer(typingctx, dst, doff, src, soff):  # type: ignore[no-untyped-def]
        sig = types.void(dst, types.intp, src, types.intp)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            dp = _byte_pointer(builder, context, signature.args[0], args[0], args[1])
            sp = _byte_pointer(builder, context, signature.args[2], args[2], args[3])
            v = builder.load(builder.bitcast(sp, vt.as_pointer()), align=1)
            st = builder.store(v, builder.bitcast(dp, vt.as_pointer()), align=dst_align)
            if nontemporal:
                st.set_metadata("nontemporal", builder.module.add_metadata([_I32(1)]))
            return context.get_dummy_value()

        return sig, codegen

    return typer


def _move_type(k: int) -> ir.Type:
    """The type a ``k``-byte move (1-64) loads and stores."""
    return ir.IntType(8 * k) if k <= 8 else ir.VectorType(ir.IntType(8), k)


def _store_fence_typer(typingctx):  # type: ignore[no-untyped-def]
    """``sfence``: the streaming stores before it are globally visible before any store
    after it (x86-64 only)."""
    sig = types.void()

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        fnty = ir.FunctionType(ir.VoidType(), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse.sfence")
        builder.call(fn, [])
        return context.get_dummy_value()

    return sig, codegen


#: Prefetch the line of a byte for reading into every cache level (``prefetcht0``).
prefetch: Any = intrinsic(_prefetch_typer_of(3))
#: The same with the memory-bound gathers' hint (:data:`STREAM_PREFETCH_LOCALITY`).
prefetch_wide: Any = intrinsic(_prefetch_typer_of(STREAM_PREFETCH_LOCALITY))
#: 64 bytes from any alignment to a 64-byte aligned line: one vector load, one aligned store.
copy_line: Any = intrinsic(_copy_typer_of(_LINE, 64))
copy_bytes: Any = intrinsic(_copy_bytes_typer)
address: Any = intrinsic(_address_typer)
#: ``k`` bytes, both sides any alignment: one integer or vector load and one store.
move1, move2, move4, move8, move16, move32, move64 = (
    intrinsic(_copy_typer_of(_move_type(k), 1)) for k in (1, 2, 4, 8, 16, 32, 64))
#: :data:`copy_line` with a streaming store.
copy_line_nt: Any = intrinsic(_copy_typer_of(_LINE, 64, nontemporal=True))
store_fence: Any = intrinsic(_store_fence_typer)
#: streaming stores (and the fence they need) exist on x86-64; elsewhere plain copies
STREAM_STORES = X86_64
