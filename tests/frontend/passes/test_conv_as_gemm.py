"""``conv_as_gemm``: a conv of one or two input channels over a long window becomes im2col, a
product with the weights as ``[taps, O]``, the bias, and a transpose back (Before/Expected);
other convs are left alone; compiled, such convs (1-D and 2-D; strides, pads, dilations,
bias; odd sizes) and the mel-spectrogram front end match onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

import ember
from ember.frontend.passes import conv_as_gemm, run_graph_passes
from ember.frontend.passes.conv_as_gemm import MAX_CHANNELS, MAX_WINDOWS_BYTES, MIN_TAPS
from tests.frontend.onnx_models import make_model, run_ort
from tests.nightly import examples


def _model(rng, x_shape, w_shape, bias=True, **attrs):  # noqa: ANN001, ANN003, ANN202
    weights = {"W": rng.standard_normal(w_shape).astype("float32")}
    inputs = ["x", "W"]
    if bias:
        weights["B"] = rng.standard_normal(w_shape[0]).astype("float32")
        inputs.append("B")
    node = helper.make_node("Conv", inputs, ["y"], **attrs)
    x = rng.standard_normal(x_shape).astype("float32")
    return make_model([node], {"x": x}, ["y"], weights), {"x": x}


def test_a_long_1d_window_becomes_im2col_and_a_product(rng):  # noqa: ANN001
    model, _ = _model(rng, (2, 1, 301), (12, 1, 80), strides=[16], pads=[3, 5])
    after = run_graph_passes(ember.frontend.from_onnx(model), [conv_as_gemm])
    ops = [(n.op, n.inputs, n.outputs) for n in after.nodes]
    assert ops == [
        ("reshape", ("x",), ("x_h1",)),
        ("im2col", ("x_h1",), ("y_windows",)),
        ("matmul", ("y_windows", "W_kxo"), ("y_gemm",)),
        ("add", ("y_gemm", "B"), ("y_bias",)),
        ("reshape", ("y_bias",), ("y_npo",)),
        ("transpose", ("y_npo",), ("y_nop",)),
        ("reshape", ("y_nop",), ("y",)),
    ]
    frames = (301 + 3 + 5 - 80) // 16 + 1
    window = after.nodes[1].attrs
    assert window == {
        "kernel": (1, 80), "strides": (1, 16), "pads": (0, 3, 0, 5), "dilations": (1, 1),
    }  # fmt: skip
    assert after.values["y_windows"].type.shape == (2 * frames, 80)
    assert after.values["y"].type.shape == (2, 12, frames)
    w = ember.frontend.from_onnx(model).params["W"]
    np.testing.assert_array_equal(after.params["W_kxo"], w.reshape(12, 80).T)
    assert "W" not in after.params and "W" not in after.values


@pytest.mark.parametrize(
    "x_shape, w_shape, attrs",
    [
        ((1, 3, 40, 40), (8, 3, 7, 7), {"strides": [2, 2]}),  # an image stem
        ((1, 16, 40, 40), (8, 16, 5, 5), {}),  # many channels
        ((1, 2, 40, 40), (8, 1, 9, 9), {"group": 2}),  # grouped
        ((1, 1, 40, 40), (8, 1, 7, 7), {}),  # 49 taps: a short window
        ((1, 1, 300, 300), (8, 1, 9, 9), {}),  # windows past MAX_WINDOWS_BYTES
    ],
    ids=["stem", "channels", "grouped", "short", "large"],
)
def test_other_convs_are_left_alone(x_shape, w_shape, attrs, rng):  # noqa: ANN001
    assert 7 * 7 < MIN_TAPS and 292 * 292 * 81 * 4 > MAX_WINDOWS_BYTES
    model, _ = _model(rng, x_shape, w_shape, **attrs)
    before = ember.frontend.from_onnx(model)
    assert run_graph_passes(before, [conv_as_gemm]).nodes == before.nodes


def _ops_run(lib, feeds) -> str:  # noqa: ANN001
    return str(lib.profile(feeds, number=1))


@pytest.mark.parametrize(
    "x_shape, w_shape, attrs",
    [
        ((2, 1, 401), (21, 1, 100), {"strides": [37], "pads": [11, 4]}),
        ((1, 2, 263), (9, 2, 40), {"strides": [5], "dilations": [3], "bias": False}),
        ((2, 1, 29, 31), (7, 1, 9, 8), {"strides": [2, 3], "pads": [4, 1, 0, 2]}),
        ((1, 2, 17, 15), (5, 2, 5, 7), {"dilations": [2, 1], "pads": [2, 2, 2, 2]}),
    ],
    ids=["1d-stft-like", "1d-dilated", "2d-strided", "2d-dilated-2ch"],
)
def test_compiled_convs_as_gemms_match_onnxruntime(x_shape, w_shape, attrs, rng):  # noqa: ANN001
    bias = attrs.pop("bias", True)
    model, feeds = _model(rng, x_shape, w_shape, bias=bias, **attrs)
    lib = ember.compile(model, target="llvm")
    assert "im2col" in _ops_run(lib, feeds)
    np.testing.assert_allclose(lib.run(feeds)[0], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)


def test_the_mel_spectrogram_runs_its_stft_as_a_gemm(rng):  # noqa: ANN001
    from ember.frontend.testing.zoo_audio import mel_spectrogram_sized

    model, feeds = mel_spectrogram_sized(rng, samples=2000, n_fft=128, hop=48, n_mels=16)
    lib = ember.compile(model, target="llvm")
    assert "im2col" in _ops_run(lib, feeds)
    np.testing.assert_allclose(lib.run(feeds)[0], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)


@settings(max_examples=examples(8), deadline=None)
@given(
    data=st.data(),
    spatial=st.sampled_from([1, 2]),
    channels=st.integers(1, MAX_CHANNELS),
    out_channels=st.integers(1, 20),
)
def test_random_convs_as_gemms_match_onnxruntime(data, spatial, channels, out_channels):  # noqa: ANN001
    """Random geometries the pass takes (at least MIN_TAPS taps), against onnxruntime."""
    draw = data.draw
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    if spatial == 1:
        k = draw(st.integers(-(-MIN_TAPS // channels), 120))
        kernel, size = (k,), (draw(st.integers(k, 3 * k)),)
    else:
        kh = draw(st.integers(6, 11))
        kw = draw(st.integers(-(-MIN_TAPS // (channels * kh)), 11))
        kernel, size = (kh, kw), (draw(st.integers(kh, 30)), draw(st.integers(kw, 30)))
    strides = [draw(st.integers(1, 5)) for _ in kernel]
    pads = [draw(st.integers(0, min(k - 1, 4))) for k in kernel * 2]
    model, feeds = _model(
        rng, (draw(st.integers(1, 2)), channels, *size), (out_channels, channels, *kernel),
        bias=draw(st.booleans()), strides=strides, pads=pads,
    )  # fmt: skip
    lib = ember.compile(model, target="llvm")
    np.testing.assert_allclose(lib.run(feeds)[0], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)
