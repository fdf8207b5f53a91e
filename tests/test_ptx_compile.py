"""Compile every ``@cuda.jit`` kernel of the package to PTX, without a GPU.

The CUDA simulator runs code a real device rejects (allocation inside a kernel, integer
typing that differs, Python objects), so the device tests alone prove little about real
hardware.  This test runs in the ordinary host process (never under the simulator) and asks
NVVM, shipped by ``numba-cuda[cu13]``, for PTX of every kernel at the signatures the package
launches it with.

Registering a kernel: every module under ``numbatraj/`` that uses ``cuda.jit`` (or defines
``PTX_SIGNATURES``) is found from its source text, without importing it, and must expose

    PTX_SIGNATURES = [(kernel, "void(float32[::1], int64)"), ...]

where ``kernel`` is a ``@cuda.jit`` dispatcher or its Python function.  Device functions
(``cuda.jit(device=True)``) are compiled through the kernels that call them.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest

import numbatraj
from numbatraj._cuda import is_simulator

PACKAGE = Path(numbatraj.__file__).parent
CC = (7, 5)  # the oldest compute capability CUDA 13 still targets
_DECLARES = re.compile(r"^PTX_SIGNATURES\b", re.MULTILINE)
_USES_CUDA_JIT = re.compile(r"^\s*@cuda\.jit\b|\bcuda\.jit\(", re.MULTILINE)


def _kernel_modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if _USES_CUDA_JIT.search(text) or _DECLARES.search(text):
            rel = path.relative_to(PACKAGE.parent).with_suffix("")
            names.append(".".join(rel.parts))
    return names


MODULES = _kernel_modules()


class _TargetDevice:
    """Stands in for ``get_current_device()``: device functions called from a kernel are
    compiled for the current device's compute capability, which needs a driver."""

    compute_capability = CC


def _nvvm_or_skip(monkeypatch: pytest.MonkeyPatch) -> Any:
    if is_simulator():
        pytest.skip("NUMBA_ENABLE_CUDASIM=1: the simulator has no PTX compiler; run host tests")
    try:
        from numba import cuda
        from numba.cuda.cudadrv import nvvm

        nvvm.NVVM()
    except Exception as exc:  # noqa: BLE001 - any failure here means no usable NVVM
        pytest.skip(f"NVVM is unavailable ({type(exc).__name__}: {exc}); install numba-cuda[cu13]")
    from numba.cuda import dispatcher

    monkeypatch.setattr(dispatcher, "get_current_device", _TargetDevice)
    return cuda


def _signatures(modname: str) -> list[tuple[Any, str]]:
    mod = importlib.import_module(modname)
    sigs = getattr(mod, "PTX_SIGNATURES", None)
    assert sigs is not None, (
        f"{modname} holds CUDA kernels but no PTX_SIGNATURES list; add "
        f"PTX_SIGNATURES = [(kernel, 'void(...)'), ...] so CI compiles them to PTX"
    )
    assert len(sigs) > 0, f"{modname}.PTX_SIGNATURES is empty"
    return list(sigs)


def test_kernel_modules_are_found():
    assert "numbatraj.data._gather_cuda" in MODULES


@pytest.mark.parametrize("modname", MODULES)
def test_every_kernel_compiles_to_ptx(modname, monkeypatch):
    cuda = _nvvm_or_skip(monkeypatch)
    failures = []
    for kernel, sig in _signatures(modname):
        pyfunc = getattr(kernel, "py_func", kernel)
        name = f"{modname}.{pyfunc.__name__}{sig[sig.index('('):]}"
        try:
            ptx, _ = cuda.compile_ptx(pyfunc, sig, device=False, cc=CC)
        except Exception as exc:  # noqa: BLE001 - collect every failure, report all
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if ".entry" not in ptx:
            failures.append(f"{name}: the PTX holds no kernel entry point")
    assert not failures, "kernels that real CUDA rejects:\n" + "\n".join(failures)


def test_a_kernel_that_allocates_is_rejected(monkeypatch):
    """The check has teeth: code the simulator would run (allocation) fails to compile."""
    cuda = _nvvm_or_skip(monkeypatch)
    import numpy as np

    def allocates(out):  # pragma: no cover - compiled, never run
        tmp = np.zeros(4, np.float32)
        out[0] = tmp[0]

    with pytest.raises(Exception, match=r"(?s)np_zeros|zeros"):  # a typing error, not a driver one
        cuda.compile_ptx(allocates, "void(float32[::1])", device=False, cc=CC)
