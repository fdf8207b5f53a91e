"""Lazy access to the CUDA target.

``import numbatraj`` never imports ``numba.cuda``: device code is imported on first use, so
every host feature works on machines with no GPU and no CUDA toolkit.  Under the Numba CUDA
simulator (``NUMBA_ENABLE_CUDASIM=1``, set before numba is imported) device code runs on the
CPU, which is how the device kernels are tested without a GPU.
"""

from __future__ import annotations

import importlib.util
import os
from types import ModuleType
from typing import Any

import numpy as np

from numbatraj.errors import DeviceUnavailableError

__all__ = [
    "cuda_available",
    "get_cuda",
    "is_device_array",
    "is_simulator",
    "numba_cuda_installed",
]


def is_simulator() -> bool:
    """True when Numba's CUDA simulator is enabled for this process."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"


def is_device_array(a: Any) -> bool:
    """True for a GPU array: anything exporting ``__cuda_array_interface__``, or a Numba
    device array (the CUDA simulator's arrays carry only the ``__cuda_ndarray__`` marker).
    Never imports ``numba.cuda``."""
    if a is None or isinstance(a, np.ndarray):
        return False
    return hasattr(a, "__cuda_array_interface__") or bool(getattr(a, "__cuda_ndarray__", False))


def numba_cuda_installed() -> bool:
    """True when the ``numba-cuda`` package (the ``cuda`` extra) is importable."""
    return importlib.util.find_spec("numba_cuda") is not None


_NO_NUMBA_CUDA = (
    "CUDA device code needs the numba-cuda package, which is not installed: "
    "pip install 'numbatraj[cuda]' (on a machine with an NVIDIA driver; the host API needs "
    "neither)"
)


def _import_cuda() -> ModuleType:
    # numba's own, deprecated CUDA target would import without numba-cuda and then fail in
    # obscure ways; only the simulator is used without it.
    if not numba_cuda_installed() and not is_simulator():
        raise ImportError(_NO_NUMBA_CUDA)
    from numba import cuda

    return cuda


def cuda_available() -> bool:
    """True when device code can run here (a usable GPU, or the simulator)."""
    try:
        cuda = _import_cuda()
        return bool(cuda.is_available())
    except Exception:
        return False


def get_cuda() -> ModuleType:
    """``numba.cuda``, or :class:`DeviceUnavailableError` saying why the device cannot be used."""
    if not numba_cuda_installed() and not is_simulator():
        raise DeviceUnavailableError(_NO_NUMBA_CUDA)
    try:
        cuda = _import_cuda()
    except Exception as exc:
        raise DeviceUnavailableError(
            f"the CUDA target could not be imported ({type(exc).__name__}: {exc}); install "
            f"numbatraj[cuda] on a machine with an NVIDIA driver, or set NUMBA_ENABLE_CUDASIM=1 "
            f"before importing numba to use the simulator"
        ) from exc
    try:
        ok = bool(cuda.is_available())
    except Exception as exc:  # pragma: no cover - driver errors vary
        raise DeviceUnavailableError(f"no usable CUDA device: {exc}") from exc
    if not ok:
        raise DeviceUnavailableError(
            "no CUDA device is available on this machine (numba.cuda.is_available() is False); "
            "use the host API, or set NUMBA_ENABLE_CUDASIM=1 before importing numba to run "
            "device code in the simulator"
        )
    return cuda
