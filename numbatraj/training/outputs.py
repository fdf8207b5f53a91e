"""Where a batch lands: ``out`` buffers checked, and the handoff to torch or JAX.

Host batches are gathered straight into their final buffers (numpy arrays, or the memory of
torch tensors, pinned or not), so ``output="torch"`` costs no copy: ``torch.from_numpy``
wraps the gathered buffer.  ``out`` arguments may be numpy arrays, torch CPU tensors, or any
object exporting DLPack; each is checked for dtype, shape, device, layout and writability
before anything is written.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from numbatraj._checks import host_buffer
from numbatraj.errors import DeviceUnavailableError, SchemaError

__all__ = ["OUTPUTS", "as_host_out", "convert", "import_torch"]

OUTPUTS = ("numpy", "torch", "jax")


def import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise DeviceUnavailableError(
            "output='torch' needs PyTorch; install numbatraj[torch]"
        ) from exc
    return torch


def _import_jax() -> Any:
    try:
        import jax.dlpack
    except ImportError as exc:
        raise DeviceUnavailableError(
            "output='jax' needs JAX (pip install jax); it hands batches over by DLPack"
        ) from exc
    return jax


def as_host_out(obj: Any, shape: tuple[int, ...], dtype: np.dtype, what: str) -> np.ndarray:
    """The numpy view a host gather writes through, after checking ``obj``.

    ``obj`` is a numpy array, a torch CPU tensor or a DLPack exporter
    (:func:`numbatraj._checks.host_buffer`).  Raises :class:`SchemaError` naming ``what``
    when its dtype, shape, device, layout or writability is wrong.
    """
    arr = host_buffer(obj, what)
    if arr.dtype != dtype or tuple(arr.shape) != tuple(shape):
        raise SchemaError(f"{what} is {arr.dtype.name} {tuple(arr.shape)}, expected "
                          f"{dtype.name} {tuple(shape)}")
    if not arr.flags.c_contiguous:
        raise SchemaError(f"{what} must be C-contiguous")
    if not arr.flags.writeable:
        raise SchemaError(f"{what} is read-only; pass a writable buffer")
    return arr


def convert(batch: dict[str, Any], output: str, device: str) -> dict[str, Any]:
    """Hand the gathered buffers over as ``output`` (no copy on the host)."""
    if output == "numpy":
        return batch
    if output == "torch":
        torch = import_torch()
        if device == "cuda":
            return {k: torch.as_tensor(v, device="cuda") for k, v in batch.items()}
        return {k: torch.from_numpy(v) for k, v in batch.items()}
    jax = _import_jax()
    if device == "cuda":
        raise DeviceUnavailableError("output='jax' with device='cuda' is not supported yet; "
                                     "use output='torch' or device='cpu'")
    return {k: jax.dlpack.from_dlpack(v) for k, v in batch.items()}
