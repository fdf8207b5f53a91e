"""DataLoader workers with fork, forkserver and spawn, after the parent ran a parallel gather.

Under GNU OpenMP (Numba's default on Linux) a forked worker dies: "fork() called from a
process already using GNU OpenMP, this is unsafe".  numbatraj/_jit.py picks a fork-safe
threading layer; these tests prove the workers live and see the same frames.
"""

from __future__ import annotations

import pickle
from collections import Counter

import numba
import numpy as np
import pytest

from numbatraj import ResidentColumn
from numbatraj.training import BatchLoader
from tests.training.helpers import force_parallel, make_store

torch = pytest.importorskip("torch", reason="torch is not installed (pip install numbatraj[torch])")
from torch.utils.data import DataLoader  # noqa: E402

from numbatraj.training import TorchDataset, TorchIterableDataset  # noqa: E402


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    # 16x16 images: a worker's batch of 8 moves 12 KiB of frames, so workers run the
    # parallel kernel too (a serial-only child would survive even GNU OpenMP)
    return make_store(tmp_path_factory.mktemp("dl") / "s.h5", (1, 2, 20, 17), image_hw=(16, 16))


def _parent_parallel_gather():
    col = ResidentColumn(np.zeros((4096, 16), np.float32))
    with force_parallel():
        col.gather(np.arange(2048))  # the parallel kernel
    assert numba.threading_layer() in ("tbb", "workqueue")


def _multiset(loader):
    return Counter(int(i) for b in loader for i in b["index"])


KW = dict(deltas={"action": range(4), "observation.images.front": [-1, 0]},
          normalize={"action": "mean_std"})


def test_map_dataset_items(path):
    ds = TorchDataset(path, **KW)
    assert len(ds) == 40
    item = ds[21]
    ref = BatchLoader(path, 1, **KW).gather(np.array([21]))
    assert set(item) == set(ref)
    for k in ref:
        np.testing.assert_array_equal(item[k].numpy(), ref[k][0])
    blob = pickle.dumps(ds)
    assert len(blob) < 2000
    with pytest.raises(IndexError):
        ds[40]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_workers_after_parent_parallel_gather(path, method):
    _parent_parallel_gather()
    ds = TorchDataset(path, **KW)
    ds[0]  # the parent's own loader exists too (it is not pickled)
    want = _multiset(DataLoader(ds, batch_size=8, num_workers=0))
    got = _multiset(DataLoader(ds, batch_size=8, num_workers=2, multiprocessing_context=method,
                               shuffle=True, generator=torch.Generator().manual_seed(0)))
    assert got == want == Counter(range(40))


def test_iterable_dataset_workers_share_one_permutation(path):
    _parent_parallel_gather()
    ds = TorchIterableDataset(path, batch_size=6, seed=4, **KW)
    single = [b["index"].tolist() for b in DataLoader(ds, batch_size=None, num_workers=0)]
    multi = [b["index"].tolist() for b in DataLoader(ds, batch_size=None, num_workers=2,
                                                     multiprocessing_context="fork")]
    flat = sorted(i for b in multi for i in b)
    assert flat == list(range(40))  # every frame once, none twice across workers
    assert sorted(map(tuple, multi)) == sorted(map(tuple, single))
    ds.set_epoch(1)
    other = [b["index"].tolist() for b in DataLoader(ds, batch_size=None)]
    assert other != single
