"""Device kernels that claim bit-for-bit equality with the host must not let NVVM fuse a
multiply and an add into one ``fma`` (rounded once; the host rounds twice).  NVVM contracts
by default even without fastmath, and the CUDA simulator cannot show it, so this reads the
PTX.  Skipped where NVVM is unavailable or under the simulator (tests/test_ptx_compile.py)."""

from __future__ import annotations

import re

import pytest

from tests.test_ptx_compile import CC, _nvvm_or_skip


def _ptx(monkeypatch, kernel_name: str, sig_part: str) -> str:
    cuda = _nvvm_or_skip(monkeypatch)
    from numbatraj.replay import _stream_cuda as stc

    for kernel, sig in stc.PTX_SIGNATURES:
        if kernel.py_func.__name__ == kernel_name and sig_part in sig:
            return str(cuda.compile_ptx(kernel.py_func, sig, device=False, cc=CC)[0])
    raise AssertionError(f"no {kernel_name} signature with {sig_part!r}")


def test_window_priorities_round_like_numpy(monkeypatch):
    ptx = _ptx(monkeypatch, "_window_priorities_cuda", "void(float32")
    assert re.search(r"\bdiv\.rn\.f64", ptx)  # the mean: an IEEE division
    assert not re.search(r"\bfma\.", ptx), "eta * max + (1 - eta) * mean fused into an fma"


@pytest.mark.parametrize("sig_part", ["float32[:]", "float64[:]"])
def test_nstep_returns_round_like_the_host(monkeypatch, sig_part):
    ptx = _ptx(monkeypatch, "_nstep_cuda", sig_part)
    assert re.search(r"\bmul\.rn\.f64", ptx)  # each term rounded on its own (dmul_rn)
    assert not re.search(r"\bfma\.", ptx), "acc += g * reward fused into an fma"
