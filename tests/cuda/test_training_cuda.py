"""device='cuda' window batches equal the host ones bit for bit (simulator in CI).

Small on purpose: the simulator runs every device thread as a Python thread.  What runs
here: the device window kernel, the raw, normalising and [0, 1] image gathers, from the
resident device mirror; out device arrays checked.  Not run here: torch CUDA tensors
(output='torch', device='cuda') and pinned staging, which need a GPU and a CUDA torch.
"""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj import SchemaError
from numbatraj._cuda import cuda_available
from numbatraj.training import BatchLoader
from tests.training.helpers import make_store

pytestmark = pytest.mark.skipif(
    not cuda_available(), reason="no CUDA device and NUMBA_ENABLE_CUDASIM is not 1"
)

KW = dict(deltas={"action": [-2, 0, 3], "observation.images.wrist": [-1, 0]},
          columns=["qpos", "task_index"], normalize={"action": "mean_std", "qpos": "min_max"})


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("cu") / "s.h5", (1, 2, 6), image_hw=(2, 3))


@pytest.mark.parametrize("images", ["uint8", "float"])
def test_device_batch_equals_host(path, images):
    host = BatchLoader(path, 4, images=images, **KW)
    dev = BatchLoader(path, 4, images=images, device="cuda", **KW)
    cur = np.array([0, 1, 2, 8])
    h = host.gather(cur)
    d = dev.gather(cur)
    assert set(h) == set(d)
    for k in h:
        got = d[k].copy_to_host()
        assert got.dtype == h[k].dtype, k
        np.testing.assert_array_equal(got, h[k], err_msg=k)


def test_device_out_checked(path):
    from numba import cuda

    dev = BatchLoader(path, 2, device="cuda", **KW)
    with pytest.raises(SchemaError, match=r"out\['qpos'\] must be a CUDA array"):
        dev.gather(np.array([0, 1]), out={"qpos": np.zeros((2, 3), np.float32)})
    with pytest.raises(SchemaError, match=r"out\['qpos'\] is float64"):
        dev.gather(np.array([0, 1]), out={"qpos": cuda.device_array((2, 3), np.float64)})
    out = cuda.device_array((2, 3), np.float32)
    b = dev.gather(np.array([0, 1]), out={"qpos": out})
    np.testing.assert_array_equal(b["qpos"].copy_to_host(), out.copy_to_host())
