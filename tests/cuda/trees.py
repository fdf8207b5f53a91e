"""A device replay's sum-tree against its host twin's.

The leaves are ``(priority + eps) ** alpha``.  On a GPU that ``pow`` is libdevice's (CUDA
documents it within 2 ulp of the exact value), on the host glibc's (within 1 ulp), so on
real hardware a leaf may round a few ulp apart: an H200 gave 1 ulp on 3 of 12 leaves after
one update.  The simulator runs the host's ``pow``, so there the trees are asserted equal
bit for bit; on a device, each leaf within 4 ulp of the host's and every internal sum
within a relative 1e-13 (positive leaves: a sum moves by at most its leaves' relative
error, plus a rounding per level).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from numbatraj._cuda import is_simulator


def assert_trees_match(gpu: Any, host_sampler: Any) -> None:
    """The device replay ``gpu``'s leaves and sums against ``host_sampler``'s tree."""
    leaves, host_leaves = gpu.tree_leaves(), host_sampler.tree.leaves
    sums, host_sums = gpu._sums.copy_to_host()[1:], host_sampler.tree.sums[1:]
    if is_simulator():
        np.testing.assert_array_equal(leaves, host_leaves)
        np.testing.assert_array_equal(sums, host_sums)
    else:
        np.testing.assert_array_max_ulp(leaves, host_leaves, maxulp=4)
        np.testing.assert_allclose(sums, host_sums, rtol=1e-13, atol=0.0)
