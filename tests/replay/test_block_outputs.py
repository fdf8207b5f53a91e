"""block_outputs: one allocation per draw, 64-byte aligned disjoint arrays; blocks of
32 MiB and more are recycled only once nothing refers to any array carved from them."""

from __future__ import annotations

import gc

import numpy as np

from numbatraj.replay._front import _RECYCLE_MIN, block_outputs

BIG = {"obs": (np.uint8, (256, 4, 3, 84, 84)), "next_obs": (np.uint8, (256, 4, 3, 84, 84)),
       "reward": (np.float32, (256,))}


def _owners(out):
    return {id(a.base if a.base is not None else a) for a in out.values()}


def test_arrays_are_aligned_disjoint_and_writable():
    out = block_outputs(BIG)
    assert sum(a.nbytes for a in out.values()) >= _RECYCLE_MIN
    for a in out.values():
        assert a.ctypes.data % 64 == 0 and a.flags.c_contiguous and a.flags.writeable
    names = list(out)
    for i, x in enumerate(names):
        for y in names[i + 1:]:
            assert not np.shares_memory(out[x], out[y])


def test_a_block_still_referenced_is_never_reused():
    first = block_outputs(BIG)
    first["reward"][:] = 3.5
    kept = first["reward"]  # one small array of the block keeps all of it alive
    del first
    gc.collect()
    for _ in range(4):  # more draws than spares per size
        other = block_outputs(BIG)
        for a in other.values():
            assert not np.shares_memory(a, kept)
        other["reward"][:] = -1.0
    assert (kept == 3.5).all()


def test_a_released_block_is_reused_and_its_arrays_start_over():
    a = block_outputs(BIG)
    owner = _owners(a)
    del a
    gc.collect()
    b = block_outputs(BIG)
    assert _owners(b) == owner  # the same block again: no new mmap, no page faults
    c = block_outputs(BIG)  # b alive: a different block
    assert not (_owners(c) & owner)


def test_small_outputs_are_plain_allocations():
    out = block_outputs({"x": (np.float32, (4, 3))})
    assert out["x"].shape == (4, 3) and out["x"].base is None
