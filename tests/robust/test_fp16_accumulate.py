"""float16 reductions accumulate in float32 (issue 22, item 6), on ``llvm`` and on ``cuda``
in the emulator.

Softmax, pooling averages, reductions and normalizations of float16 sum their terms in
float32 and round once, as onnxruntime does: summed in float16, a 1000-wide softmax row adds
up to 1.005-1.02. The reference is the same formula in float64 on the float16 inputs,
rounded to float16 at the end; onnxruntime is checked alongside.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from tests.frontend.onnx_models import run_ort, single_node

TARGETS = ["llvm", "cuda"]
# one float16 rounding of the result (2**-11 relative), and float16's subnormal spacing
RTOL, ATOL = 1e-3, 2e-7


def _run(model, inputs: dict, target: str, monkeypatch) -> np.ndarray:
    if target == "cuda":
        pytest.importorskip("cuda")
        monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    return ember.compile(model, target=target).run(inputs)[0]


def _softmax64(x: np.ndarray, axis: int) -> np.ndarray:
    w = x.astype(np.float64)
    e = np.exp(w - w.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _close(got: np.ndarray, want64: np.ndarray) -> None:
    assert got.dtype == np.float16 and got.shape == want64.shape
    np.testing.assert_allclose(got.astype(np.float64), want64, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_item_06_fp16_softmax_row_sums(rng, monkeypatch, target, op):
    x = (rng.standard_normal((3, 1000)) * 2).astype(np.float16)
    model = single_node(op, {"x": x}, axis=-1)
    got = _run(model, {"x": x}, target, monkeypatch)
    want = _softmax64(x, -1)
    if op == "LogSoftmax":
        _close(got, np.log(want))
        return
    sums = got.astype(np.float64).sum(axis=-1)
    assert np.abs(sums - 1).max() < 1e-3, sums
    _close(got, want)
    ort_sums = run_ort(model, {"x": x})[0].astype(np.float64).sum(axis=-1)
    np.testing.assert_allclose(sums, ort_sums, atol=1e-3)


@pytest.mark.parametrize("target", TARGETS)
def test_item_06_fp16_softmax_inner_axis(rng, monkeypatch, target):
    x = (rng.standard_normal((2, 513, 3)) * 3).astype(np.float16)
    model = single_node("Softmax", {"x": x}, axis=1)
    got = _run(model, {"x": x}, target, monkeypatch)
    assert np.abs(got.astype(np.float64).sum(axis=1) - 1).max() < 1e-3
    _close(got, _softmax64(x, 1))


@pytest.mark.parametrize("target", TARGETS)
def test_item_06_fp16_average_pools(rng, monkeypatch, target):
    x = (rng.random((1, 2, 45, 47)) + 8).astype(np.float16)  # large sums: ulp 2**-8 near 256
    model = single_node("AveragePool", {"x": x}, kernel_shape=[31, 33], strides=[7, 7])
    got = _run(model, {"x": x}, target, monkeypatch)
    w = x.astype(np.float64)
    want = np.stack(
        [
            np.stack([w[:, :, i : i + 31, j : j + 33].mean(axis=(2, 3)) for j in range(0, 15, 7)])
            for i in range(0, 15, 7)
        ]
    ).transpose(2, 3, 0, 1)
    _close(got, want)
    model = single_node("GlobalAveragePool", {"x": x})
    _close(_run(model, {"x": x}, target, monkeypatch), w.mean(axis=(2, 3), keepdims=True))


@pytest.mark.parametrize("target", TARGETS)
def test_item_06_fp16_lp_pool(rng, monkeypatch, target):
    x = (rng.random((1, 2, 40, 40)) + 4).astype(np.float16)
    model = single_node("LpPool", {"x": x}, kernel_shape=[40, 40], p=2)
    got = _run(model, {"x": x}, target, monkeypatch)
    want = np.sqrt((x.astype(np.float64) ** 2).sum(axis=(2, 3), keepdims=True))
    _close(got, want)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceL2"])
def test_item_06_fp16_reductions(rng, monkeypatch, target, op):
    x = (rng.random((3, 1999)) + 1).astype(np.float16)
    model = single_node(op, {"x": x}, {"axes": np.array([1], np.int64)}, opset=18)
    got = _run(model, {"x": x}, target, monkeypatch)
    w = x.astype(np.float64)
    want = {
        "ReduceSum": w.sum(axis=1, keepdims=True),
        "ReduceMean": w.mean(axis=1, keepdims=True),
        "ReduceL2": np.sqrt((w * w).sum(axis=1, keepdims=True)),
    }[op]
    _close(got, want)


@pytest.mark.parametrize("target", TARGETS)
def test_item_06_fp16_layer_norm(rng, monkeypatch, target):
    x = (rng.standard_normal((3, 1000)) + 5).astype(np.float16)
    scale = (rng.random(1000) + 0.5).astype(np.float16)
    bias = rng.standard_normal(1000).astype(np.float16)
    model = single_node(
        "LayerNormalization", {"x": x}, {"s": scale, "b": bias}, axis=-1, epsilon=1e-5
    )
    got = _run(model, {"x": x}, target, monkeypatch)
    w = x.astype(np.float64)
    norm = (w - w.mean(axis=1, keepdims=True)) / np.sqrt(w.var(axis=1, keepdims=True) + 1e-5)
    want = norm * scale.astype(np.float64) + bias.astype(np.float64)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3, atol=4e-3)
