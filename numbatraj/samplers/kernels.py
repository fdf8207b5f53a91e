"""The samplers' kernel bodies that other packages reuse (the device replay draws with the
same Philox stream and descends the same sum-tree): public names over the private kernel
modules, so nothing outside ``samplers/`` imports an underscore module.

Every function here **assumes valid input**: arrays of the documented dtype and shape,
indices in range, no NaN.  None of them checks, raises or allocates; the checking wrappers
are :class:`~numbatraj.samplers.UniformSampler`, :class:`~numbatraj.samplers.SumTree` and
:class:`~numbatraj.samplers.PrioritizedSampler`.

- Bodies (``*_py``): plain Python functions, the one source of truth, compiled here for the
  host (the names without ``_py``) and by a caller as CUDA device functions (through
  ``numbatraj._jit.device_twin(body, name=device_compile)``, the names it calls rebound).
- Host kernels (``*_cpu``): :func:`sumtree_find_cpu` and :func:`sample_ranges_cpu`.
- Device compiles (``*_dev``): ``philox4x32_dev``, ``mulhi64_dev``, ``philox_index_dev``,
  ``philox_uniform_dev``, loaded on first access (importing this module does not import
  ``numba.cuda``).

Philox words are ``uint64`` holding 32 bits; a sum-tree is ``sums``/``mins`` float64
``(2P,)``, root 1, leaf ``i`` at node ``P + i``.
"""

from __future__ import annotations

from typing import Any

from numbatraj.samplers._philox import (
    mulhi64,
    mulhi64_py,
    philox4x32,
    philox4x32_10_py,
    philox_index,
    philox_index_py,
    philox_uniform,
    philox_uniform_py,
)
from numbatraj.samplers._sumtree_kernels import (
    _sample_ranges_cpu as sample_ranges_cpu,
)
from numbatraj.samplers._sumtree_kernels import (
    _sumtree_find_cpu as sumtree_find_cpu,
)
from numbatraj.samplers._sumtree_kernels import (
    descend,
    descend_py,
    prefix_mass,
    prefix_mass_py,
    range_min,
    range_min_py,
)

#: the device compiles (``*_dev``) are module attributes too, loaded on first access
__all__ = [
    "descend",
    "descend_py",
    "mulhi64",
    "mulhi64_py",
    "philox4x32",
    "philox4x32_10_py",
    "philox_index",
    "philox_index_py",
    "philox_uniform",
    "philox_uniform_py",
    "prefix_mass",
    "prefix_mass_py",
    "range_min",
    "range_min_py",
    "sample_ranges_cpu",
    "sumtree_find_cpu",
]

_DEVICE = ("philox4x32_dev", "mulhi64_dev", "philox_index_dev", "philox_uniform_dev")


def __getattr__(name: str) -> Any:
    """The device compiles, imported on first use (this imports ``numba.cuda``)."""
    if name in _DEVICE:
        from numbatraj.samplers import _uniform_cuda

        return getattr(_uniform_cuda, name)
    raise AttributeError(f"module 'numbatraj.samplers.kernels' has no attribute {name!r}")
