"""uint8 quantisation: kernels against the reference, the error bound, memory, the buffer path."""

from __future__ import annotations

import numpy as np
import pytest

from numbatraj.data import ColumnSpec
from numbatraj.errors import SchemaError
from numbatraj.replay import StoreReplay
from numbatraj.replay import _quantize_kernels as qk
from numbatraj.replay.columns import Quantization
from tests.reference import dequantize_ref, quantize_ref

RANGES = [(-1.0, 1.0), (0.0, 255.0), (-10.0, 3.5), (1e-3, 2e-3)]


def _values(low, high, rng):
    inside = rng.uniform(low, high, 2000)
    edges = np.array([low, high, np.nextafter(low, high), np.nextafter(high, low),
                      (low + high) / 2, low - 1, high + 1, -np.inf, np.inf, np.nan])
    steps = low + (np.arange(256) + 0.5) * (high - low) / 255  # exact half-way points
    return np.concatenate([inside, edges, steps])


@pytest.mark.parametrize("low, high", RANGES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_quantize_and_dequantize_match_reference(low, high, dtype, rng):
    x = _values(low, high, rng).astype(dtype)
    q = Quantization(low, high)
    codes = np.empty(x.shape, np.uint8)
    qk.quantize_cpu(x, low, high, q.scale, codes)
    ref = quantize_ref(x, low, high)
    # half-way points may round either way by one code (the float product differs by an ulp)
    assert np.abs(codes.astype(int) - ref.astype(int)).max() <= 1
    assert (codes == ref).mean() > 0.99
    back = np.empty(x.shape, np.float32)
    qk.dequantize_cpu(codes, low, q.step, back)
    np.testing.assert_array_equal(back, dequantize_ref(codes, low, high))
    all_codes = np.arange(256, dtype=np.uint8)
    round_trip = np.empty(256, np.uint8)
    deq = np.empty(256, np.float32)
    qk.dequantize_cpu(all_codes, low, q.step, deq)
    qk.quantize_cpu(deq, low, high, q.scale, round_trip)
    np.testing.assert_array_equal(round_trip, all_codes)  # every code survives a round trip


@pytest.mark.parametrize("low, high", RANGES)
def test_round_trip_error_within_documented_bound(low, high, rng):
    x = rng.uniform(low, high, 20000).astype(np.float32)
    q = Quantization(low, high)
    codes = np.empty(x.shape, np.uint8)
    qk.quantize_cpu(x, low, high, q.scale, codes)
    back = np.empty(x.shape, np.float32)
    qk.dequantize_cpu(codes, low, q.step, back)
    err = np.abs(back.astype(np.float64) - x)
    ulp = 4 * np.spacing(np.float32(max(abs(low), abs(high))))
    assert err.max() <= q.error_bound + ulp
    assert err.max() > 0.5 * q.error_bound  # the bound is tight, not vacuous


def test_out_of_range_and_nan_are_clipped():
    x = np.array([-5.0, 5.0, np.nan, -np.inf, np.inf], np.float32)
    codes = np.empty(5, np.uint8)
    qk.quantize_cpu(x, -1.0, 1.0, 127.5, codes)
    assert codes.tolist() == [0, 255, 0, 0, 255]


def test_quantised_column_memory_is_a_quarter_and_samples_float32(rng):
    cols = [ColumnSpec("pixels", np.float32, (4, 8)), ColumnSpec("action", np.float32, (2,))]
    plain = StoreReplay(cols, 64)
    quant = StoreReplay(cols, 64, quantize={"pixels": (0.0, 1.0)})
    assert quant.storage("pixels").dtype == np.uint8
    assert quant.storage("pixels").nbytes * 4 == plain.storage("pixels").nbytes
    px = rng.uniform(0, 1, (40, 4, 8)).astype(np.float32)
    act = rng.normal(size=(40, 2)).astype(np.float32)
    quant.add(pixels=px, action=act)
    batch, idx = quant.sample(100)
    assert batch["pixels"].dtype == np.float32 and batch["pixels"].shape == (100, 4, 8)
    np.testing.assert_allclose(batch["pixels"], px[idx.indices], atol=Quantization(0, 1).error_bound + 1e-7)
    np.testing.assert_array_equal(batch["action"], act[idx.indices])
    np.testing.assert_array_equal(quant.storage("pixels")[:40], quantize_ref(px, 0.0, 1.0))


@pytest.mark.parametrize("bad, match", [
    ({"action": (0, 1), "nope": (0, 1)}, "not declared"),
    ({"step": (0, 1)}, "needs a float column"),
    ({"action": (1, 1)}, "low < high"),
    ({"action": (0, np.inf)}, "finite"),
    ({"action": "ab"}, r"\(low, high\)"),
])
def test_bad_quantisation_declarations(bad, match):
    cols = [ColumnSpec("action", np.float32, (2,)), ColumnSpec("step", np.int32, ())]
    with pytest.raises(SchemaError, match=match):
        StoreReplay(cols, 8, quantize=bad)
