"""torch handoff: no copy on the host, out tensors checked, pinned memory guarded."""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj import DeviceUnavailableError, NumbatrajError, SchemaError
from numbatraj.training import BatchLoader
from tests.training.helpers import make_store

torch = pytest.importorskip("torch", reason="torch is not installed (pip install numbatraj[torch])")


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("t") / "s.h5", (3, 9))


def test_torch_batches_wrap_gathered_buffers(path):
    loader = BatchLoader(path, 4, deltas={"action": range(4)}, output="torch",
                         normalize={"action": "mean_std"})
    ref = BatchLoader(path, 4, deltas={"action": range(4)}, normalize={"action": "mean_std"})
    for b, r in zip(loader, ref, strict=True):
        assert all(isinstance(v, torch.Tensor) and v.device.type == "cpu" for v in b.values())
        assert b["action"].dtype == torch.float32 and b["action_is_pad"].dtype == torch.bool
        for k in r:
            np.testing.assert_array_equal(b[k].numpy(), r[k])
        # from_numpy: the tensor is the gathered buffer (writes show through its numpy view)
        view = b["qpos"].numpy()
        view[0, 0] = 1234.0
        assert b["qpos"][0, 0].item() == 1234.0


def test_out_tensors_written_in_place(path):
    loader = BatchLoader(path, 2, deltas={"action": [0, 1]}, columns=["qpos"], output="torch")
    out = {"action": torch.zeros((2, 2, 2)), "qpos": torch.zeros((2, 3))}
    b = loader.gather(np.array([0, 5]), out=out)
    assert b["action"] is out["action"] and b["qpos"] is out["qpos"]
    np.testing.assert_array_equal(out["qpos"].numpy(), loader.store.load_column("qpos")[[0, 5]])


@pytest.mark.parametrize(("tensor", "match"), [
    (lambda: torch.zeros((2, 3), dtype=torch.float64), "float64 .* expected float32"),
    (lambda: torch.zeros((2, 4)), r"\(2, 4\), expected float32 \(2, 3\)"),
    (lambda: torch.zeros((2, 3), requires_grad=True), "requires grad"),
    (lambda: torch.zeros((3, 2)).t(), "contiguous"),
    (lambda: torch.zeros((2, 3), device="meta"), "on meta"),
])
def test_bad_out_tensors(path, tensor, match):
    loader = BatchLoader(path, 2, columns=["qpos"], output="torch")
    with pytest.raises(SchemaError, match=match):
        loader.gather(np.array([0, 1]), out={"qpos": tensor()})


def test_dlpack_out(path):
    loader = BatchLoader(path, 2, columns=["qpos"])
    t = torch.zeros((2, 3))
    loader.gather(np.array([1, 2]), out={"qpos": t})  # a tensor given to a numpy loader
    np.testing.assert_array_equal(t.numpy(), loader.store.load_column("qpos")[[1, 2]])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA refusal")
def test_pin_memory_needs_cuda(path):
    # pinned staging cannot run on this CPU build of torch; it is refused clearly
    with pytest.raises(DeviceUnavailableError, match="pin_memory=True needs a CUDA build"):
        BatchLoader(path, 2, output="torch", pin_memory=True)
    with pytest.raises(SchemaError, match="needs output='torch'"):
        BatchLoader(path, 2, pin_memory=True)


def test_jax_output_or_clear_error(path):
    try:
        import jax  # noqa: F401
    except ImportError:
        with pytest.raises(NumbatrajError, match="output='jax' needs JAX"):
            BatchLoader(path, 2, columns=["qpos"], output="jax").gather(np.array([0, 1]))
    else:  # pragma: no cover - jax is not in the test environment
        b = BatchLoader(path, 2, columns=["qpos"], output="jax").gather(np.array([0, 1]))
        assert b["qpos"].shape == (2, 3)
