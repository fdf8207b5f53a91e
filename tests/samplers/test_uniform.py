"""UniformSampler and the host twin of UniformDeviceSampler."""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj.errors import DeviceUnavailableError, NumbatrajError, SamplerError
from numbatraj.samplers import UniformDeviceSampler, UniformSampler
from tests.reference import bounded_ref, philox_rows_ref


# --------------------------------------------------------------------------- UniformSampler
def test_golden_first_draws():
    s = UniformSampler(1000, seed=42)
    assert s.sample(8).indices.tolist() == [773, 438, 858, 697, 94, 975, 761, 786]
    assert s.sample(8).indices.tolist() == [128, 450, 370, 926, 643, 822, 443, 227]


def test_rows_come_from_the_seeded_raw_stream():
    """Each row is floor(w * n / 2**64) of one PCG64 raw word: the reference recomputes it."""
    s = UniformSampler(12345, seed=3)
    got = s.sample(200).indices
    raw = np.random.Generator(np.random.PCG64(3)).bit_generator.random_raw(200)
    assert got.tolist() == [bounded_ref(int(w), 12345) for w in raw]
    assert got.dtype == np.int64 and got.shape == (200,)


def test_growing_population_and_range():
    s = UniformSampler(0, seed=1)
    with pytest.raises(SamplerError, match="population is empty"):
        s.sample(4)
    for n in (1, 2, 17, 1000):
        idx = s.sample(500, n_rows=n).indices
        assert idx.min() >= 0 and idx.max() < n
        assert s.n_rows == n
    assert set(s.sample(2000, n_rows=5).indices.tolist()) == {0, 1, 2, 3, 4}
    s.n_rows = 3
    assert s.sample(100).indices.max() < 3


def test_roughly_uniform(rng):
    s = UniformSampler(10, seed=11)
    counts = np.bincount(s.sample(100_000).indices, minlength=10)
    chi2 = float(((counts - 10_000) ** 2 / 10_000).sum())
    assert chi2 < 27.88  # chi-square, 9 dof, p = 0.001


def test_state_dict_resumes_exactly_and_global_state_untouched():
    np.random.seed(5)
    before = np.random.get_state()[1].copy()
    s = UniformSampler(100, seed=9)
    s.sample(10)
    state = s.state_dict()
    a = s.sample(50).indices
    t = UniformSampler(7, seed=0)
    t.load_state_dict(state)
    assert t.n_rows == 100 and t.seed == 9
    assert t.sample(50).indices.tolist() == a.tolist()
    assert (np.random.get_state()[1] == before).all()


@pytest.mark.parametrize(
    "args,kwargs,match",
    [
        ((10, -1), {}, r"seed must be in \[0, 2\*\*64\), got -1"),
        ((10, 1.5), {}, "seed must be a non-negative integer, got 1.5"),
        ((10, True), {}, "seed must be a non-negative integer"),
        ((-3, 0), {}, "n_rows must be >= 0, got -3"),
        ((2.0, 0), {}, "n_rows must be an integer"),
    ],
)
def test_bad_constructor_args(args, kwargs, match):
    with pytest.raises(SamplerError, match=match):
        UniformSampler(*args, **kwargs)


def test_bad_sample_args():
    s = UniformSampler(10, seed=0)
    with pytest.raises(SamplerError, match="batch_size must be >= 1, got 0"):
        s.sample(0)
    with pytest.raises(ValueError, match="batch_size must be an integer"):
        s.sample(np.float64(3))
    with pytest.raises(SamplerError, match="state is for 'PrioritizedSampler'"):
        s.load_state_dict({"kind": "PrioritizedSampler"})
    bad = s.state_dict()
    bad["generator"] = {"bit_generator": "MT19937"}
    with pytest.raises(SamplerError, match="generator state is for 'MT19937', expected 'PCG64'"):
        s.load_state_dict(bad)


# --------------------------------------------------------------------------- device sampler, host twin
def test_device_sampler_host_twin_golden():
    s = UniformDeviceSampler(1000, 8, 42, device=False)
    assert s.sample().indices.tolist() == [468, 126, 520, 445, 742, 409, 655, 895]
    assert s.sample().indices.tolist() == [327, 991, 883, 115, 80, 775, 495, 375]
    assert s.draw == 2


def test_host_twin_matches_reference_and_advances():
    s = UniformDeviceSampler(777, 33, seed=2**63 + 11, device=False)
    seen = []
    for d in range(4):
        got = s.sample().indices.copy()
        assert got.tolist() == philox_rows_ref(2**63 + 11, 777, 33, d).tolist()
        seen.append(tuple(got))
    assert len(set(seen)) == 4


def test_host_twin_reuses_its_buffer_and_resizes():
    s = UniformDeviceSampler(10, 64, seed=1, device=False)
    a = s.sample()
    b = s.sample()
    assert a.indices is b.indices  # no allocation per call: one preallocated buffer
    s.set_n_rows(3)
    assert s.n_rows == 3 and s.sample().indices.max() < 3
    assert s.sample().indices.tolist() == philox_rows_ref(1, 3, 64, 3).tolist()


def test_host_twin_state_dict():
    s = UniformDeviceSampler(500, 16, seed=4, device=False)
    s.sample()
    state = s.state_dict()
    assert state["draw"] == 1
    nxt = s.sample().indices.copy()
    t = UniformDeviceSampler(9, 16, seed=0, device=False)
    t.load_state_dict(state)
    assert t.sample().indices.tolist() == nxt.tolist()
    with pytest.raises(SamplerError, match="state has batch_size 16, this sampler has 8"):
        UniformDeviceSampler(9, 8, seed=0, device=False).load_state_dict(state)


@pytest.mark.parametrize(
    "args,match",
    [
        ((0, 4, 1), "n_rows must be >= 1, got 0"),
        ((10, 0, 1), "batch_size must be >= 1, got 0"),
        ((10, 4, 2**64), r"seed must be in \[0, 2\*\*64\)"),
    ],
)
def test_device_sampler_bad_args(args, match):
    with pytest.raises(SamplerError, match=match):
        UniformDeviceSampler(*args, device=False)
    s = UniformDeviceSampler(10, 4, 1, device=False)
    with pytest.raises(SamplerError, match="n_rows must be >= 1, got 0"):
        s.set_n_rows(0)


def test_device_without_gpu_says_why(cudasim):
    if cudasim:
        pytest.skip("the simulator provides a device")
    from numbatraj._cuda import cuda_available

    if cuda_available():
        pytest.skip("a GPU is present")
    with pytest.raises(DeviceUnavailableError) as info:
        UniformDeviceSampler(10, 4, 1)
    assert isinstance(info.value, NumbatrajError)


def test_sample_into_continues_the_same_stream_without_allocating():
    import tracemalloc

    a, b = UniformSampler(1000, seed=42), UniformSampler(1000, seed=42)
    out = np.empty(8, dtype=np.int64)
    assert a.sample_into(out) is out
    assert out.tolist() == [773, 438, 858, 697, 94, 975, 761, 786]  # the golden draws
    assert a.sample(8).indices.tolist() == [128, 450, 370, 926, 643, 822, 443, 227]
    b.sample(16)
    big = np.empty(4096, dtype=np.int64)
    for n in (7, 1000, 7):  # n_rows changes as sample(n_rows=) does
        a.sample_into(big, n_rows=n)
        np.testing.assert_array_equal(big, b.sample(4096, n_rows=n).indices)
    a.load_state_dict(b.state_dict())  # state restored through numpy: the kernel follows
    a.sample_into(big)
    np.testing.assert_array_equal(big, b.sample(4096).indices)
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        for _ in range(5):
            a.sample_into(big)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak - base < 4096 * 8 // 4  # no B-entry array, not even the raw words
    with pytest.raises(SamplerError, match="int64"):
        a.sample_into(np.empty(4, dtype=np.int32))
    with pytest.raises(SamplerError, match="batch_size must be >= 1"):
        a.sample_into(np.empty(0, dtype=np.int64))


@pytest.mark.parametrize("seed", [0, 1, 2**64 - 1])
def test_raw_words_equal_random_raw(seed):
    from numbatraj.samplers._pcg64 import RawWords

    g, twin = np.random.Generator(np.random.PCG64(seed)), np.random.Generator(np.random.PCG64(seed))
    words = RawWords(g)
    assert words._state is not None  # numpy's PCG64: the in-place kernel, not the fallback
    out = np.empty(1001, dtype=np.uint64)
    for _ in range(3):
        words.fill(out)
        np.testing.assert_array_equal(out, twin.bit_generator.random_raw(1001))
    assert g.random() == twin.random()  # the generator itself advanced exactly as much
    other = np.random.Generator(np.random.Philox(seed))  # not PCG64: random_raw is copied
    fallback = RawWords(other)
    assert fallback._state is None
    fallback.fill(out)
    np.testing.assert_array_equal(out, np.random.Philox(seed).random_raw(1001))


def test_range_draws_share_the_stream_and_the_mapping():
    a, b = UniformSampler(100, seed=3), UniformSampler(100, seed=3)
    out = np.empty(16, np.int64)
    a.sample_range_into(out, 40, 10)
    raw = np.random.Generator(np.random.PCG64(3)).bit_generator.random_raw(16)
    np.testing.assert_array_equal(out, 40 + ((raw.astype(object) * 10) >> 64).astype(np.int64))
    b.sample_into(np.empty(16, np.int64))  # the same stream, one draw along
    np.testing.assert_array_equal(a.sample(5).indices, b.sample(5).indices)
    assert a.n_rows == 100  # a range draw does not change the population
    with pytest.raises(SamplerError, match=r"range \[95, 105\) is outside the population"):
        a.sample_range_into(out, 95, 10)
    assert UniformSampler(5).seed == 0  # seeds default to 0 everywhere
