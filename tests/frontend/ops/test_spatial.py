"""ConvTranspose, LpPool and GlobalLpPool through Ember vs onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import ember
from tests.frontend.onnx_models import check_against_ort, single_node
from tests.nightly import examples, sample_in_ci


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype("float32")


CT_CASES = [
    # (x shape, w shape, attrs, bias)
    ((1, 3, 5, 4), (3, 2, 3, 3), {}, True),
    ((2, 2, 4, 5), (2, 3, 3, 2), {"strides": [2, 3], "pads": [1, 0, 1, 1]}, False),
    ((1, 4, 3, 3), (4, 1, 3, 3), {"group": 2, "strides": [2, 2], "dilations": [2, 1]}, True),
    ((1, 2, 5, 5), (2, 2, 3, 3), {"strides": [2, 2], "output_padding": [1, 0]}, True),
    ((1, 1, 3, 4), (1, 2, 3, 3), {"strides": [3, 2], "output_shape": [10, 9]}, False),
    ((1, 2, 4, 3), (2, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}, True),
    ((2, 3, 7), (3, 4, 3), {"strides": [2], "pads": [1, 2]}, True),
    ((1, 2, 3, 4, 2), (2, 3, 2, 3, 2), {"strides": [1, 2, 2]}, True),
    ((1, 6, 3, 3), (6, 1, 2, 2), {"group": 6, "strides": [2, 2]}, False),
]


@pytest.mark.parametrize("xs,ws,attrs,bias", CT_CASES)
def test_conv_transpose(rng, xs, ws, attrs, bias):
    sample_in_ci(xs, ws, attrs, bias)
    x = _f32(rng, *xs)
    consts = {"w": _f32(rng, *ws)}
    if bias:
        consts["b"] = _f32(rng, ws[1] * attrs.get("group", 1))
    model = single_node("ConvTranspose", {"x": x}, consts, **attrs)
    check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-4)


def test_conv_transpose_weights_as_input(rng):
    x, w = _f32(rng, 1, 2, 4, 3), _f32(rng, 2, 3, 2, 2)
    model = single_node("ConvTranspose", {"x": x, "w": w}, strides=[2, 2])
    check_against_ort(model, {"x": x, "w": w}, rtol=1e-4, atol=1e-5)


def test_conv_transpose_bad_group_names_the_node(rng):
    x = _f32(rng, 1, 3, 4, 4)
    model = single_node("ConvTranspose", {"x": x}, {"w": _f32(rng, 3, 2, 3, 3)}, group=2)
    with pytest.raises(ember.EmberError, match="convtranspose_node"):
        ember.compile(model, target="llvm")


@st.composite
def ct_case(draw):
    groups = draw(st.sampled_from([1, 2]))
    cin, og = groups * draw(st.integers(1, 2)), draw(st.integers(1, 2))
    k = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    d = [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    s = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    pads = [draw(st.integers(0, (k[i % 2] - 1) * d[i % 2])) for i in range(4)]
    out_pad = [draw(st.integers(0, s[i] - 1)) for i in range(2)]  # onnxruntime: < stride
    hw = [draw(st.integers(1, 5)), draw(st.integers(1, 5))]
    seed = draw(st.integers(0, 99))
    return groups, cin, og, k, d, s, pads, out_pad, hw, seed


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ct_case())
def test_conv_transpose_property(case):
    groups, cin, og, k, d, s, pads, out_pad, hw, seed = case
    for i in range(2):  # the pads must leave an output
        assume(s[i] * (hw[i] - 1) + out_pad[i] + (k[i] - 1) * d[i] + 1 - pads[i] - pads[i + 2] > 0)
    rng = np.random.default_rng(seed)
    x = _f32(rng, 2, cin, *hw)
    consts = {"w": _f32(rng, cin, og, *k), "b": _f32(rng, og * groups)}
    model = single_node(
        "ConvTranspose",
        {"x": x},
        consts,
        group=groups,
        dilations=d,
        strides=s,
        pads=pads,
        output_padding=out_pad,
    )
    check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-4)


LP_CASES = [
    ({"kernel_shape": [2, 2]}, (1, 3, 5, 6)),
    ({"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1]}, (2, 2, 7, 5)),
    ({"kernel_shape": [3], "strides": [2]}, (1, 2, 9)),
    ({"kernel_shape": [2, 2, 2]}, (1, 1, 3, 4, 3)),
    ({"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}, (1, 2, 6, 7)),
]


@pytest.mark.parametrize("attrs,shape", LP_CASES)
@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool(rng, attrs, shape, p):
    x = _f32(rng, *shape)
    model = single_node("LpPool", {"x": x}, opset=11, p=p, **attrs)
    check_against_ort(model, {"x": x}, rtol=1e-4, atol=1e-5)


def test_lp_pool_18_dilations_ceil_mode_against_numpy(rng):
    """Opset 18 adds dilations and ceil_mode (onnxruntime's LpPool kernel lacks them)."""
    x = _f32(rng, 1, 1, 7, 6)
    model = single_node(
        "LpPool",
        {"x": x},
        opset=18,
        p=2,
        kernel_shape=[2, 2],
        dilations=[2, 1],
        strides=[2, 2],
        ceil_mode=1,
    )
    got = ember.compile(model, target="llvm").run({"x": x})[0]
    want = np.zeros((1, 1, 3, 3), dtype=np.float64)
    for i in range(3):
        for j in range(3):
            rows = [r for r in (2 * i, 2 * i + 2) if r < 7]
            cols = [c for c in (2 * j, 2 * j + 1) if c < 6]
            want[0, 0, i, j] = np.sqrt(sum(x[0, 0, r, c] ** 2 for r in rows for c in cols))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (1, 2, 7)])
@pytest.mark.parametrize("p", [1, 2])
def test_global_lp_pool(rng, shape, p):
    x = _f32(rng, *shape)
    check_against_ort(single_node("GlobalLpPool", {"x": x}, p=p), {"x": x}, rtol=1e-4, atol=1e-5)


INDICES_CASES = [
    ({"kernel_shape": [2, 2], "strides": [2, 2]}, (2, 3, 6, 5)),
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, (1, 2, 5, 7)),
    ({"kernel_shape": [3, 2], "strides": [2, 1], "storage_order": 1}, (1, 2, 7, 5)),
    (
        {"kernel_shape": [2, 2], "dilations": [2, 1], "ceil_mode": 1, "strides": [2, 2]},
        (1, 1, 7, 6),
    ),
    ({"kernel_shape": [3], "strides": [2], "pads": [1, 1]}, (2, 2, 9)),
    ({"kernel_shape": [2, 2, 2], "strides": [1, 2, 2]}, (1, 2, 3, 4, 5)),
]


@pytest.mark.parametrize("attrs,shape", INDICES_CASES)
def test_max_pool_indices(rng, attrs, shape):
    x = _f32(rng, *shape)
    model = single_node("MaxPool", {"x": x}, n_outputs=2, opset=12, **attrs)
    check_against_ort(model, {"x": x})


def test_max_pool_int8_and_storage_order_without_indices(rng):
    from onnx import TensorProto

    x = rng.integers(-128, 127, size=(1, 2, 5, 6)).astype("int8")
    model = single_node(
        "MaxPool", {"x": x.astype("float32")}, opset=12, kernel_shape=[2, 3], storage_order=1
    )
    for vi in (model.graph.input[0], model.graph.output[0]):
        vi.type.tensor_type.elem_type = TensorProto.INT8
    check_against_ort(model, {"x": x})


@pytest.mark.parametrize(
    "shape,k,s", [((1, 2, 6, 4), 2, 2), ((2, 1, 7, 5), 3, 2), ((1, 3, 8), 2, 2)]
)
def test_max_unpool_inverts_max_pool(rng, shape, k, s):
    """MaxPool's values and indices fed to MaxUnpool, against onnxruntime."""
    from onnx import helper

    from tests.frontend.onnx_models import make_model

    x = _f32(rng, *shape)
    nsp = len(shape) - 2
    pool = helper.make_node("MaxPool", ["x"], ["v", "i"], kernel_shape=[k] * nsp, strides=[s] * nsp)
    unpool = helper.make_node(
        "MaxUnpool", ["v", "i"], ["y"], kernel_shape=[k] * nsp, strides=[s] * nsp
    )
    check_against_ort(make_model([pool, unpool], {"x": x}, ["y"], opset=12), {"x": x})


def test_max_unpool_output_shape_pads_with_zeros(rng):
    x = _f32(rng, 1, 1, 2, 3)
    # flat in the implied 4 x 4, each inside its own 2 x 2 window (as MaxPool gives them)
    idx = np.array([[[[0, 6, 3], [9, 14, 15]]]], dtype=np.int64)
    shape = np.array([1, 1, 5, 6], dtype=np.int64)
    model = single_node(
        "MaxUnpool",
        {"x": x},
        {"i": idx, "shape": shape},
        opset=11,
        kernel_shape=[2, 2],
        strides=[2, 1],
    )
    from onnx import TensorProto, helper

    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("y0", TensorProto.FLOAT, [1, 1, 5, 6]))
    got = ember.compile(model, target="llvm").run({"x": x})[0]
    want = np.zeros((1, 1, 5, 6), dtype=np.float32)
    implied = np.zeros(16, dtype=np.float32)
    implied[idx.ravel()] = x.ravel()
    want[0, 0, :4, :4] = implied.reshape(4, 4)
    np.testing.assert_array_equal(got, want)


@st.composite
def window_case(draw):
    nsp = draw(st.integers(1, 2))
    k = [draw(st.integers(1, 3)) for _ in range(nsp)]
    s = [draw(st.integers(1, 3)) for _ in range(nsp)]
    pads = [draw(st.integers(0, k[i % nsp] // 2)) for i in range(2 * nsp)]
    size = [draw(st.integers(k[i], k[i] + 5)) for i in range(nsp)]
    return nsp, k, s, pads, size, draw(st.integers(0, 99))


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(window_case(), st.sampled_from([1, 2, 3]), st.integers(0, 1))
def test_window_ops_property(case, p, storage_order):
    """LpPool and MaxPool-with-Indices over random windows, against onnxruntime."""
    nsp, k, s, pads, size, seed = case
    rng = np.random.default_rng(seed)
    x = _f32(rng, 2, 3, *size)
    attrs = {"kernel_shape": k, "strides": s, "pads": pads}
    check_against_ort(
        single_node("LpPool", {"x": x}, opset=11, p=p, **attrs), {"x": x}, rtol=1e-4, atol=1e-5
    )
    order = storage_order if nsp == 2 else 0
    model = single_node("MaxPool", {"x": x}, n_outputs=2, opset=12, storage_order=order, **attrs)
    check_against_ort(model, {"x": x})
