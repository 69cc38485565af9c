"""float16 matrix products and convolutions accumulate in float32 (issue 22, item 6), on
``llvm`` and on cuda's paths outside the tensor-core templates (``-arch=sm_75``, no
``mma.sync``), in the emulator.

MatMul, batch MatMul, Gemm, Conv, ConvTranspose and Einsum of float16 sum their products in
float32 and round once, as onnxruntime does: summed in float16, a 1000-term dot product of
values near 1 is off by many units in the last place (a float16 near 1000 has a spacing of
0.5). The reference is numpy in float64 on the float16 inputs: the result must be within one
float16 spacing of it (a correctly rounded result is within half of one).
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from tests.frontend.onnx_models import run_ort, single_node

TARGETS = ["llvm", "cuda -arch=sm_75"]


def _run(model, inputs: dict, target: str, monkeypatch) -> np.ndarray:
    if target.startswith("cuda"):
        pytest.importorskip("cuda")
        monkeypatch.setenv("EMBER_CUDA_EMULATE", "1")
    return ember.compile(model, target=target).run(inputs)[0]


def _data(rng, *shape: int) -> np.ndarray:
    """Random float16 values in [0.5, 1.5): sums grow with the term count, no cancellation."""
    return (rng.random(shape) + 0.5).astype(np.float16)


def _within_one_ulp(got: np.ndarray, want64: np.ndarray) -> None:
    assert got.dtype == np.float16 and got.shape == want64.shape, (got.dtype, got.shape)
    spacing = np.spacing(np.abs(want64.astype(np.float16))).astype(np.float64)
    ulps = np.abs(got.astype(np.float64) - want64) / spacing
    assert ulps.max() <= 1.0, f"{ulps.max():.1f} float16 ulps from the float64 reference"


def _conv64(x: np.ndarray, w: np.ndarray, pads: int, group: int) -> np.ndarray:
    """2-D NCHW grouped convolution (stride 1) in float64, written from ONNX's definition."""
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads, pads), (pads, pads)))
    w = w.astype(np.float64)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    og = o // group
    out = np.zeros((n, o, h - kh + 1, wd - kw + 1))
    for oc in range(o):
        xs = x[:, (oc // og) * cg : (oc // og + 1) * cg]
        for r in range(kh):
            for s in range(kw):
                patch = xs[:, :, r : r + out.shape[2], s : s + out.shape[3]]
                out[:, oc] += np.einsum("nchw,c->nhw", patch, w[oc, :, r, s])
    return out


@pytest.mark.parametrize("target", TARGETS)
def test_item_06_fp16_matmul_gemm(rng, monkeypatch, target):
    a, b = _data(rng, 5, 1203), _data(rng, 1203, 7)
    want = a.astype(np.float64) @ b.astype(np.float64)
    model = single_node("MatMul", {"a": a, "b": b})
    _within_one_ulp(_run(model, {"a": a, "b": b}, target, monkeypatch), want)
    _within_one_ulp(run_ort(model, {"a": a, "b": b})[0], want)  # onnxruntime does the same

    at, c = np.ascontiguousarray(a.T), _data(rng, 7)
    model = single_node("Gemm", {"a": at, "b": b, "c": c}, transA=1, alpha=0.5, beta=2.0)
    got = _run(model, {"a": at, "b": b, "c": c}, target, monkeypatch)
    _within_one_ulp(got, 0.5 * want + 2.0 * c.astype(np.float64))


@pytest.mark.parametrize("target", TARGETS)
def test_item_06_fp16_batch_matmul_einsum(rng, monkeypatch, target):
    a, b = _data(rng, 2, 1, 3, 1101), _data(rng, 3, 1101, 4)
    want = a.astype(np.float64) @ b.astype(np.float64)
    model = single_node("MatMul", {"a": a, "b": b})
    _within_one_ulp(_run(model, {"a": a, "b": b}, target, monkeypatch), want)

    a, b = _data(rng, 2, 3, 1101), _data(rng, 2, 1101, 4)
    model = single_node("Einsum", {"a": a, "b": b}, equation="bik,bkj->bij")
    want = np.einsum("bik,bkj->bij", a.astype(np.float64), b.astype(np.float64))
    _within_one_ulp(_run(model, {"a": a, "b": b}, target, monkeypatch), want)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("group", [1, 2])
def test_item_06_fp16_conv(rng, monkeypatch, target, group):
    x, w, bias = _data(rng, 1, 122 * group, 5, 6), _data(rng, 6, 122, 3, 3), _data(rng, 6)
    model = single_node("Conv", {"x": x, "w": w, "b": bias}, pads=[1, 1, 1, 1], group=group)
    got = _run(model, {"x": x, "w": w, "b": bias}, target, monkeypatch)
    want = _conv64(x, w, 1, group) + bias.astype(np.float64)[None, :, None, None]
    _within_one_ulp(got, want)


@pytest.mark.parametrize("target", TARGETS)
def test_item_06_fp16_conv_transpose(rng, monkeypatch, target):
    # stride 1: ConvTranspose is the convolution of the input padded by k - 1 with the
    # kernel flipped and its channel axes swapped
    x, w = _data(rng, 1, 301, 3, 4), _data(rng, 301, 2, 2, 2)
    model = single_node("ConvTranspose", {"x": x, "w": w})
    got = _run(model, {"x": x, "w": w}, target, monkeypatch)
    flipped = np.ascontiguousarray(w[:, :, ::-1, ::-1].transpose(1, 0, 2, 3))
    _within_one_ulp(got, _conv64(x, flipped, 1, 1))


@pytest.mark.nvrtc
def test_item_06_fp16_float32_accumulators_compile_with_nvrtc(rng, tmp_path):
    """The float32-accumulating float16 kernels of the non-tensor-core paths compile."""
    pytest.importorskip("cuda")
    from onnx import helper

    from tests.frontend.onnx_models import make_model

    a, b = _data(rng, 2, 1, 3, 40), _data(rng, 3, 40, 4)
    x, w = _data(rng, 1, 8, 5, 6), _data(rng, 4, 4, 3, 3)
    nodes = [
        helper.make_node("MatMul", ["a", "b"], ["m"]),
        helper.make_node("Conv", ["x", "w"], ["c"], group=2),
        helper.make_node("ConvTranspose", ["x", "wt"], ["t"]),
    ]
    wt = _data(rng, 8, 2, 2, 2)
    model = make_model(nodes, {"a": a, "b": b, "x": x}, ["m", "c", "t"], {"w": w, "wt": wt})
    ember.compile(model, target="cuda -arch=sm_75").export(tmp_path / "f.ember", archs=["sm_75"])
    assert (tmp_path / "f.ember").stat().st_size > 0
